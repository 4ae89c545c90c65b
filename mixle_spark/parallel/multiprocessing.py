"""The reference's ``mixle.utils.parallel.multiprocessing`` path; the code lives in
:mod:`mixle_spark.parallel.backends.multiprocessing`.
Importing this path gives that module itself (the same object, not a copy).
"""

import sys
from typing import TYPE_CHECKING

from mixle_spark.parallel.backends import multiprocessing

if TYPE_CHECKING:  # what a type checker sees at this path: the real module's public names
    from mixle_spark.parallel.backends.multiprocessing import *  # noqa: F403

sys.modules[__name__] = multiprocessing
