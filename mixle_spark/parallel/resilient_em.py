"""The reference's ``mixle.utils.parallel.resilient_em`` path; the code lives in
:mod:`mixle_spark.em.resilient`.
Importing this path gives that module itself (the same object, not a copy).
"""

import sys
from typing import TYPE_CHECKING

from mixle_spark.em import resilient as resilient_em

if TYPE_CHECKING:  # what a type checker sees at this path: the real module's public names
    from mixle_spark.em.resilient import *  # noqa: F403

sys.modules[__name__] = resilient_em
