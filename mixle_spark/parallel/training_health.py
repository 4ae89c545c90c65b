"""The reference's ``mixle.utils.parallel.training_health`` path; the code lives in
:mod:`mixle_spark.parallel.training.training_health`.
Importing this path gives that module itself (the same object, not a copy).
"""

import sys
from typing import TYPE_CHECKING

from mixle_spark.parallel.training import training_health

if TYPE_CHECKING:  # what a type checker sees at this path: the real module's public names
    from mixle_spark.parallel.training.training_health import *  # noqa: F403

sys.modules[__name__] = training_health
