"""engine.core.spec: an experiment declares each option once; the CLI, the benchmarks and the pages read it."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

import pytest

from engine.core.errors import InvalidParameterError
from engine.core.spec import Spec, option


@dataclass(frozen=True)
class Toy(Spec):
    runs: int = option(3, "timed runs", lo=1, hi=50)
    rate: float = option(0.5, "a fraction", lo=0, hi=1)
    schemes: tuple[str, ...] = option(("a", "b"), "schemes", choices=("a", "b", "c"), label="scheme")
    fast: bool = option(False, "go fast")
    name: str | None = option(None, "an optional name", kind=str)
    hidden: int = option(7, "set by code", cli=False)


def _parse(argv):
    p = argparse.ArgumentParser()
    Toy.add_arguments(p)
    return Toy.from_args(p.parse_args(argv))


def test_flags_and_defaults_come_from_the_fields():
    t = _parse([])
    assert t == Toy()
    t = _parse(["--runs", "5", "--rate", "0.25", "--schemes", "c,a", "--fast", "--name", "x"])
    assert (t.runs, t.rate, t.schemes, t.fast, t.name) == (5, 0.25, ("c", "a"), True, "x")
    assert (
        Toy.default("runs") == 3
        and Toy.bounds("runs") == (1, 50)
        and Toy.choices("schemes") == ("a", "b", "c")
    )
    with pytest.raises(SystemExit):
        _parse(["--hidden", "3"])  # not a command-line option


def test_a_benchmark_takes_some_flags_with_its_own_defaults_and_the_specs_bounds():
    p = argparse.ArgumentParser()
    Toy.add_arguments(p, only=("runs", "fast"), defaults={"runs": 2})
    args = p.parse_args([])
    assert (args.runs, args.fast) == (2, False) and not hasattr(args, "rate")
    assert "1 to 50" in p.format_help()  # the bounds stay the spec's
    assert Toy.default("runs") == 3  # the spec keeps its own default
    with pytest.raises(SystemExit):
        p.parse_args(["--rate", "0.1"])
    with pytest.raises(KeyError, match="no option"):
        Toy.add_arguments(argparse.ArgumentParser(), only=("runz",))


def test_every_benchmark_parser_reads_the_shared_options_from_their_specs():
    """The max batch, request count and SLO flags of the serving benchmarks are the specs' (bounds in the help)."""
    import contextlib
    import io

    from bench import serving, serving_itl, simulate
    from engine.serving.runner import ServeSpec

    for mod, flags in ((serving, ("--max-batch", "--requests", "--slo-ttft")), (serving_itl, ("--max-batch",)),
                       (simulate, ("--requests", "--endpoint"))):  # fmt: skip
        out = io.StringIO()
        with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
            mod.main(["--help"])
        for flag in flags:
            assert flag in out.getvalue(), (mod.__name__, flag)
        if "--max-batch" in flags:  # the server's bound, not a number restated in the benchmark
            lo, hi = ServeSpec.bounds("max_batch")
            assert f"{lo} to {hi}" in " ".join(out.getvalue().split()), mod.__name__


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"runs": 0}, "runs must be a positive whole number up to 50, got 0"),
        ({"runs": True}, "runs must be a whole number"),
        ({"rate": 2.0}, "rate must be from 0 to 1"),
        ({"rate": float("nan")}, "rate must be a finite number"),
        ({"schemes": ("a", "z")}, "unknown scheme 'z'; choose from a, b, c"),
    ],
)
def test_validation_names_the_option_and_what_is_allowed(kwargs, message):
    with pytest.raises(InvalidParameterError, match=message.replace("(", r"\(")):
        Toy(**kwargs).validate()


def test_defaults_must_be_immutable():
    with pytest.raises(TypeError, match="immutable"):
        option([1], "a list")


def test_a_field_may_not_hide_a_spec_method():
    with pytest.raises(TypeError, match="kind would hide"):

        @dataclass(frozen=True)
        class Bad(Spec):
            kind: str = option("a", "which kind", choices=("a", "b"))
