"""The reference's ``mixle.utils.parallel.ray_data`` path; the code lives in
:mod:`mixle_spark.parallel.backends.ray`.
Importing this path gives that module itself (the same object, not a copy).
"""

import sys
from typing import TYPE_CHECKING

from mixle_spark.parallel.backends import ray as ray_data

if TYPE_CHECKING:  # what a type checker sees at this path: the real module's public names
    from mixle_spark.parallel.backends.ray import *  # noqa: F403

sys.modules[__name__] = ray_data
