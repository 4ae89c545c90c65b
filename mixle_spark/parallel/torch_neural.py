"""The reference's ``mixle.utils.parallel.torch_neural`` path; the code lives in
:mod:`mixle_spark.parallel.training.torch_neural`.
Importing this path gives that module itself (the same object, not a copy).
"""

import sys
from typing import TYPE_CHECKING

from mixle_spark.parallel.training import torch_neural

if TYPE_CHECKING:  # what a type checker sees at this path: the real module's public names
    from mixle_spark.parallel.training.torch_neural import *  # noqa: F403

sys.modules[__name__] = torch_neural
