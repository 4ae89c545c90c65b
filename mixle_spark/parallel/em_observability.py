"""The reference's ``mixle.utils.parallel.em_observability`` path; the code lives in
:mod:`mixle_spark.em.observability`.
Importing this path gives that module itself (the same object, not a copy).
"""

import sys
from typing import TYPE_CHECKING

from mixle_spark.em import observability as em_observability

if TYPE_CHECKING:  # what a type checker sees at this path: the real module's public names
    from mixle_spark.em.observability import *  # noqa: F403

sys.modules[__name__] = em_observability
