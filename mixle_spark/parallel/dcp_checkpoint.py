"""The reference's ``mixle.utils.parallel.dcp_checkpoint`` path; the code lives in
:mod:`mixle_spark.parallel.training.dcp_checkpoint`.
Importing this path gives that module itself (the same object, not a copy).
"""

import sys
from typing import TYPE_CHECKING

from mixle_spark.parallel.training import dcp_checkpoint

if TYPE_CHECKING:  # what a type checker sees at this path: the real module's public names
    from mixle_spark.parallel.training.dcp_checkpoint import *  # noqa: F403

sys.modules[__name__] = dcp_checkpoint
