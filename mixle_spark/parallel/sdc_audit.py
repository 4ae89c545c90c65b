"""The reference's ``mixle.utils.parallel.sdc_audit`` path; the code lives in
:mod:`mixle_spark.em.sdc_audit`.
Importing this path gives that module itself (the same object, not a copy).
"""

import sys
from typing import TYPE_CHECKING

from mixle_spark.em import sdc_audit

if TYPE_CHECKING:  # what a type checker sees at this path: the real module's public names
    from mixle_spark.em.sdc_audit import *  # noqa: F403

sys.modules[__name__] = sdc_audit
