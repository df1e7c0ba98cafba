"""An experiment is a spec: one frozen dataclass declares each option once (type, default, bounds, help), as
vLLM's `EngineArgs` does, and the command line, the benchmarks and the pages all read it.

    @dataclass(frozen=True)
    class QuantSpec(ModelArgs, Spec):
        runs: int = option(3, "timed runs per scheme (3+ gives a 95% interval)", lo=1, hi=20)

    QuantSpec.add_arguments(parser)           # --model, --dtype, --device, --runs (defaults from the fields)
    spec = QuantSpec.from_args(args)          # typed, validated: InvalidParameterError names the flag
    QuantSpec.default("runs"), QuantSpec.bounds("runs")   # what a page's widget starts at and allows

A field's type comes from its default (bool -> a switch, tuple -> a comma-separated list) or from `kind=` when
the default is None. Standard library only: the pure calculators use it too.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import inspect
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import MISSING, field
from typing import Any, Self

from engine.core.errors import InvalidParameterError


def option(
    default: Any,
    help: str,
    *,
    lo: float | None = None,
    hi: float | None = None,
    choices: Sequence[Any] | Callable[[], Sequence[Any]] | None = None,
    kind: type | None = None,
    label: str | None = None,
    flag: str | None = None,
    cli: bool = True,
    parse: Callable[[str], Any] | None = None,
    cli_help: str = "",
) -> Any:
    """A spec field: its default, a one-line help, and what a valid value is (bounds, choices). `label` is the
    words an error uses ("max new tokens"); `flag` overrides the command-line name; `cli=False` keeps it off
    the command line (set by code, e.g. a page's progress callback). `parse` reads the flag's text where the
    kind alone cannot (a duration with its unit: `parse_seconds`); `cli_help` is the flag's help in place of `help`
    where the command line says more (the unit and an example of the text it takes) than a page, which may ask
    the field in units of its own, can show beside its box."""
    meta = {
        "help": help,
        "lo": lo,
        "hi": hi,
        "choices": choices,
        "kind": kind,
        "label": label,
        "flag": flag,
        "cli": cli,
        "parse": parse,
        "cli_help": cli_help,
    }
    if isinstance(default, list | dict | set):
        raise TypeError("spec defaults must be immutable: use a tuple")
    return field(default=default, metadata=meta)


def _kind(f: dataclasses.Field) -> type:
    if f.metadata.get("kind") is not None:
        return f.metadata["kind"]
    if f.default is None or f.default is MISSING:
        raise TypeError(f"spec field {f.name} needs kind= (its default does not say its type)")
    return type(f.default)


def _choices(f: dataclasses.Field) -> tuple[Any, ...] | None:
    c = f.metadata.get("choices")
    if c is None:
        return None
    return tuple(c() if callable(c) else c)


class Spec:
    """Mix into a frozen dataclass whose fields are made with `option`."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        clash = sorted(set(inspect.get_annotations(cls)) & _SPEC_METHODS)
        if clash:  # a field named `kind` would hide Spec.kind(name), and every page reading it would fail
            raise TypeError(f"{cls.__name__}: field(s) {', '.join(clash)} would hide Spec's own method(s)")

    @classmethod
    def _options(cls) -> list[dataclasses.Field]:
        return [f for f in dataclasses.fields(cls) if "help" in f.metadata]  # type: ignore[arg-type]

    @classmethod
    def _field(cls, name: str) -> dataclasses.Field:
        for f in cls._options():
            if f.name == name:
                return f
        raise KeyError(f"{cls.__name__} has no option {name!r}")

    @classmethod
    def default(cls, name: str) -> Any:
        return cls._field(name).default

    @classmethod
    def bounds(cls, name: str) -> tuple[Any, Any]:
        f = cls._field(name)
        return f.metadata["lo"], f.metadata["hi"]

    @classmethod
    def choices(cls, name: str) -> tuple[Any, ...] | None:
        return _choices(cls._field(name))

    @classmethod
    def help(cls, name: str) -> str:
        return cls._field(name).metadata["help"]

    @classmethod
    def label(cls, name: str) -> str:
        """The words a message or a widget uses for the option ("max new tokens")."""
        f = cls._field(name)
        return f.metadata["label"] or f.name.replace("_", " ")

    @classmethod
    def kind(cls, name: str) -> type:
        return _kind(cls._field(name))

    @classmethod
    def span(cls, name: str, lo: float | None = None, hi: float | None = None) -> str:
        """What a valid number is, in words ("from 1 to 20", "a positive whole number up to 64"); `lo`/`hi`
        narrow the field's own bounds (a page that allows less than the command line)."""
        f = cls._field(name)
        return span_words(_kind(f), *_narrowed(f, lo, hi))

    @classmethod
    def problem(
        cls,
        name: str,
        value: Any,
        *,
        label: str | None = None,
        lo: float | None = None,
        hi: float | None = None,
    ) -> str:
        """'' when `value` is valid for the option (its kind, its bounds narrowed by lo/hi, its choices); else the
        one sentence that says what is allowed. validate() and the pages' inputs use this one rule."""
        f = cls._field(name)
        return _problem(f, value, label or cls.label(name), *_narrowed(f, lo, hi))

    @classmethod
    def flag(cls, name: str) -> str:
        f = cls._field(name)
        return f.metadata["flag"] or "--" + name.replace("_", "-")

    @classmethod
    def add_arguments(
        cls,
        parser: argparse.ArgumentParser,
        *,
        skip: Sequence[str] = (),
        only: Sequence[str] | None = None,
        defaults: Mapping[str, Any] | None = None,
    ) -> None:
        """One flag per option, its default and help from the field. `only` keeps the named options (a benchmark
        that takes a few of a command's flags); `defaults` replaces a default where a caller starts smaller (the
        bounds and help stay the spec's)."""
        defaults = dict(defaults or {})
        unknown = sorted((set(only or ()) | set(defaults)) - {f.name for f in cls._options()})
        if unknown:
            raise KeyError(f"{cls.__name__} has no option(s) {', '.join(unknown)}")
        for f in cls._options():
            if not f.metadata["cli"] or f.name in skip or (only is not None and f.name not in only):
                continue
            if f.name in defaults:
                f = _with_default(f, defaults[f.name])
            kind, flag, dest = _kind(f), cls.flag(f.name), f.name
            help_text = (f.metadata.get("cli_help") or f.metadata["help"]).replace("%", "%%")
            read = f.metadata.get("parse") or kind  # the flag's text to a value
            if kind is bool:
                parser.add_argument(
                    flag,
                    dest=dest,
                    action=argparse.BooleanOptionalAction,
                    default=f.default,
                    help=f"{help_text} (default: {'on' if f.default else 'off'})",
                )
                continue
            shown = ",".join(map(str, f.default)) if isinstance(f.default, tuple) else f.default
            lo, hi = f.metadata["lo"], f.metadata["hi"]
            if lo is not None or hi is not None:
                shown = f"{shown}; " + (
                    f"at least {lo}" if hi is None else f"at most {hi}" if lo is None else f"{lo} to {hi}"
                )
            choices = _choices(f)
            metavar = flag.lstrip("-").upper().replace("-", "_")
            if f.default is None:  # the help says what None means ("default: the context window")
                listed = f" (one of {', '.join(map(str, choices))})" if choices and kind is str else ""
                parser.add_argument(
                    flag, dest=dest, default=None, type=read, metavar=metavar, help=help_text + listed
                )
                continue
            if kind is tuple:
                listed = f"; from: {', '.join(map(str, choices))}" if choices else ""
                parser.add_argument(
                    flag,
                    dest=dest,
                    default=f.default,
                    type=_comma_list,
                    help=f"{help_text}, comma-separated (default: {shown}{listed})",
                )
                continue
            parser.add_argument(
                flag,
                dest=dest,
                default=f.default,
                type=read,
                metavar=metavar,
                help=f"{help_text} (default: {shown}"
                + (f"; one of {', '.join(map(str, choices))})" if choices and kind is str else ")"),
            )  # choices are checked by validate(), whose message says what to do

    @classmethod
    def from_args(cls, args: argparse.Namespace, **overrides: Any) -> Self:
        """The spec from parsed flags (fields without a flag keep their defaults), validated."""
        given = {f.name: getattr(args, f.name) for f in cls._options() if hasattr(args, f.name)}
        return cls(**{**given, **overrides}).validate()  # type: ignore[call-arg]

    def validate(self) -> Self:
        """Every option against its kind, bounds and choices; subclasses add cross-field rules and call this."""
        for f in self._options():
            why = _problem(f, getattr(self, f.name), self.label(f.name), f.metadata["lo"], f.metadata["hi"])
            if why:
                raise InvalidParameterError(why)
        return self


_SPEC_METHODS = frozenset(n for n in vars(Spec) if not n.startswith("_"))


def _with_default(f: dataclasses.Field, default: Any) -> dataclasses.Field:
    """A copy of the field with another default (for a parser only: the dataclass keeps its own)."""
    g = copy.copy(f)
    g.default = default
    return g


def _narrowed(f: dataclasses.Field, lo: float | None, hi: float | None) -> tuple[Any, Any]:
    """The field's bounds, narrowed (never widened: a page may allow less than the spec, not more)."""
    flo, fhi = f.metadata["lo"], f.metadata["hi"]
    wider_lo = lo is not None and flo is not None and lo < flo
    wider_hi = hi is not None and fhi is not None and hi > fhi
    if wider_lo or wider_hi:
        raise ValueError(f"{f.name}: {lo}..{hi} is wider than the spec's {flo}..{fhi}")
    return (flo if lo is None else lo), (fhi if hi is None else hi)


def span_words(kind: type, lo: Any, hi: Any) -> str:
    """What a valid number of `kind` between `lo` and `hi` is, in words (either bound may be None): the one
    phrasing of every refusal, also for a page that asks a field in other units (ui.widgets.spec_input's unit)."""
    if kind is int and lo == 1:
        return "a positive whole number" + (f" up to {hi:,}" if hi is not None else "")
    if lo is not None and hi is not None:
        return f"from {lo} to {hi}"
    if lo is None and hi is None:
        return "a whole number" if kind is int else "a finite number"
    return f"at least {lo}" if lo is not None else f"at most {hi}"


def _problem(f: dataclasses.Field, value: Any, label: str, lo: Any, hi: Any) -> str:
    if value is None and f.default is None:
        return ""
    kind = _kind(f)
    if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
        return f"{label} must be a whole number, got {value!r}"
    if kind is float and (
        isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value)
    ):
        return f"{label} must be a finite number, got {value!r}"
    if kind in (int, float) and ((lo is not None and value < lo) or (hi is not None and value > hi)):
        return f"{label} must be {span_words(kind, lo, hi)}, got {value!r}"
    choices = _choices(f)
    if choices:
        bad = [v for v in (value if isinstance(value, tuple) else (value,)) if v not in choices]
        if bad:
            return f"unknown {label} {bad[0]!r}; choose from {', '.join(map(str, choices))}"
    return ""


_SECONDS_PER = {"ms": 1e-3, "s": 1.0}


def parse_seconds(text: str) -> float:
    """A duration typed on the command line, in seconds: "0.05", "0.05s" and "50ms" are all 0.05 (a space
    before the unit is allowed). A flag's `parse` (argparse's type): its error names the forms it takes."""
    raw = text.strip().lower()
    unit = next((u for u in ("ms", "s") if raw.endswith(u)), "")
    number = raw.removesuffix(unit).strip()
    try:
        value = float(number)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a duration: give seconds (0.05) or a number with its unit (0.05s, 50ms)"
        ) from None
    return value * _SECONDS_PER.get(unit, 1.0)


def parse_token_seconds(text: str) -> float:
    """A time per output token typed on the command line (parse_seconds), where a bare number of a second or more
    is refused: the page asks for milliseconds, and "--slo-tpot 50" read as 50 seconds a token gave an answer for
    an objective nobody meant (the engineer's walk). "50s" says seconds on purpose."""
    value = parse_seconds(text)
    raw = text.strip().lower()
    if value >= 1 and not raw.endswith("s"):
        raise argparse.ArgumentTypeError(
            f"{text!r} would be {value:g} seconds per output token; write {raw}ms for milliseconds (or {raw}s if "
            "seconds are meant)"
        )
    return value


def _comma_list(text: str) -> tuple[str, ...]:
    return tuple(p.strip() for p in text.split(",") if p.strip())
