"""The reference's ``mixle.utils.parallel.training_launchers`` path; the code lives in
:mod:`mixle_spark.parallel.training.launchers`.
Importing this path gives that module itself (the same object, not a copy).
"""

import sys
from typing import TYPE_CHECKING

from mixle_spark.parallel.training import launchers as training_launchers

if TYPE_CHECKING:  # what a type checker sees at this path: the real module's public names
    from mixle_spark.parallel.training.launchers import *  # noqa: F403

sys.modules[__name__] = training_launchers
