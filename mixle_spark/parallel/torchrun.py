"""The reference's ``mixle.utils.parallel.torchrun`` path; the code lives in
:mod:`mixle_spark.parallel.backends.torchrun`.
Importing this path gives that module itself (the same object, not a copy).
"""

import sys
from typing import TYPE_CHECKING

from mixle_spark.parallel.backends import torchrun

if TYPE_CHECKING:  # what a type checker sees at this path: the real module's public names
    from mixle_spark.parallel.backends.torchrun import *  # noqa: F403

sys.modules[__name__] = torchrun
