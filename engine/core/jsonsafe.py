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


def from_jsonable(kind: Any, value: Any) -> Any:
    """The inverse of to_jsonable for a type: a dataclass from its dict (nested dataclasses, tuples, optionals
    and null floats, which come back as NaN, restored from the type hints); unknown keys are dropped, missing
    ones take the field's default. Used to reopen a stored result (engine.runtime.runlog.last_result)."""
    import types
    import typing

    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if kind is Any or kind is object:
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        rest = [a for a in args if a is not type(None)]
        return from_jsonable(rest[0], value) if len(rest) == 1 else value
    if value is None:
        return math.nan if kind is float else None
    if dataclasses.is_dataclass(kind) and isinstance(kind, type):
        hints = typing.get_type_hints(kind)
        given = {
            f.name: from_jsonable(hints.get(f.name, Any), value[f.name])
            for f in dataclasses.fields(kind)
            if f.init and f.name in value
        }
        return kind(**given)
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(from_jsonable(args[0], v) for v in value)
        return tuple(from_jsonable(a, v) for a, v in zip(args, value, strict=False)) if args else tuple(value)
    if origin is list:
        return [from_jsonable(args[0] if args else Any, v) for v in value]
    if origin is dict:
        return {k: from_jsonable(args[1] if args else Any, v) for k, v in value.items()}
    if kind is float and isinstance(value, int | float):
        return float(value)
    return value
