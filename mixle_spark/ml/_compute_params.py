"""The Params ``engine`` and ``precision`` of :class:`~mixle_spark.ml.MixleEstimator` (and its model):
the compute engine of the E-step and the precision the training data is stored and computed in
(:mod:`mixle_spark.engines`), as the fit job's ``--engine`` / ``--precision`` and a spec's fit section
give them.

Each is checked when set (a registered engine name; a precision name or alias, kept canonical:
``"bf16"`` is ``"bfloat16"``); the two together, and whether the engine is installed, when the fit
plans (:func:`checked_compute`), before the data is encoded.
"""

from __future__ import annotations

from typing import Any

from pyspark.ml.param import Param, Params

from mixle_spark.engines import Compute, available_engines, precision_name, resolve_compute
from mixle_spark.errors import SpecError, describe_value

__all__ = ["COMPUTE_PARAMS", "HasCompute", "checked_compute"]

COMPUTE_PARAMS = ("engine", "precision")
"""A spec's fit options that are Params of the same name (``encoded_data``'s controls)."""


def _engine(value: Any) -> str:
    if not isinstance(value, str) or value.strip().lower() not in available_engines():
        raise SpecError(
            f"param 'engine': expected one of {', '.join(map(repr, available_engines()))}, got "
            f"{describe_value(value)}"
        )
    return value.strip().lower()


def _precision(value: Any) -> str:
    try:
        name = precision_name(value) if isinstance(value, str) else None
    except ValueError:
        name = None
    if name is None:
        raise SpecError(
            "param 'precision': expected one of 'float64', 'float32', 'bfloat16' (or 'fp64', 'fp32', "
            f"'bf16'), got {describe_value(value)}"
        )
    return name


class HasCompute(Params):
    """Mixin for the Params ``engine`` (default ``"numpy"``) and ``precision`` (default ``"float64"``)."""

    engine: Param[str] = Param(
        Params._dummy(),
        "engine",
        "compute engine of the E-step: 'numpy' (default) or 'torch' (CPU, or CUDA when available; "
        "pip install 'mixle-spark[torch]').",
        typeConverter=_engine,
    )
    precision: Param[str] = Param(
        Params._dummy(),
        "precision",
        "precision the training data is stored and the E-step computed in: 'float64' (default), "
        "'float32' (numpy or torch: half the bytes, log-likelihood within 1e-5 relative) or 'bfloat16' "
        "('bf16', torch); statistics are summed in float64 either way.",
        typeConverter=_precision,
    )

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self._setDefault(engine="numpy", precision="float64")

    def getEngine(self) -> str:
        """Gets the value of ``engine`` or its default value."""
        return self.getOrDefault(self.engine)

    def getPrecision(self) -> str:
        """Gets the value of ``precision`` or its default value (a canonical name)."""
        return self.getOrDefault(self.precision)

    def setEngine(self, value: str) -> Any:
        """Sets the value of ``engine``."""
        return self._set(engine=value)

    def setPrecision(self, value: str) -> Any:
        """Sets the value of ``precision``."""
        return self._set(precision=value)


def checked_compute(params: HasCompute, fit: dict[str, Any]) -> tuple[Compute, dict[str, Any]]:
    """The :class:`~mixle_spark.engines.Compute` a fit runs: each Param set explicitly, else the spec's
    fit section's ``engine`` / ``precision``, else the default; checked together (an engine not
    installed names its extra, bfloat16 with numpy names the engine that computes it: SpecError or
    the engine's ImportError, one line). Also the Params whose value came from the fit section."""
    values, from_spec = {}, {}
    for name in COMPUTE_PARAMS:
        param = params.getParam(name)
        if fit.get(name) is not None and not params.isSet(param):
            try:
                values[name] = from_spec[name] = param.typeConverter(fit[name])
            except SpecError as err:
                raise SpecError(f"param 'modelSpec': the spec's fit option {name!r}: {err}") from None
        else:
            values[name] = params.getOrDefault(param)
    try:
        compute = resolve_compute(values["engine"], values["precision"])
    except ValueError as err:
        raise SpecError(f"params 'engine' / 'precision': {err}") from None
    except ImportError as err:
        raise type(err)(f"param 'engine': {err}") from None
    return compute, from_spec
