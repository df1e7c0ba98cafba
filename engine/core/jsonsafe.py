"""JSON has no NaN or infinity: the one place a result becomes JSON-safe (dataclasses to dicts, tuples to lists,
non-finite floats to null, meaning "not defined", e.g. the TPOT of a one-token run). Standard library only."""

from __future__ import annotations

import dataclasses
import math
from typing import Any


def to_jsonable(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_jsonable(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def is_number(value: Any) -> bool:
    """A finite int or float (not a bool, not None, not NaN)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
