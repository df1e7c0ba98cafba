"""The lab's specs (engine.lab: FewShotSpec, CodeSpec, EvalSpec): the engine functions take their defaults from
them, page 4 its widgets' defaults, bounds and choices, so each number is written once."""

from __future__ import annotations

import inspect

import pytest

from engine.core.errors import InvalidParameterError
from engine.lab import codegen, evaluation, fewshot


def _defaults(fn) -> dict:
    return {n: p.default for n, p in inspect.signature(fn).parameters.items() if p.default is not p.empty}


@pytest.mark.parametrize(
    ("fn", "spec", "names"),
    [
        (
            fewshot.accuracy_by_k,
            fewshot.FewShotSpec,
            {"ks": "ks", "seed": "seed", "max_queries": "max_queries"},
        ),
        (fewshot.select_demonstrations, fewshot.FewShotSpec, {"seed": "seed"}),
        (codegen.code_config, codegen.CodeSpec, {n: n for n in ("max_new_tokens", "mode", "stop")}),
        (codegen.generate_code, codegen.CodeSpec, {n: n for n in ("max_new_tokens", "mode", "stop")}),
        (evaluation.run_eval, evaluation.EvalSpec, {n: n for n in ("task", "limit", "crosscheck")}),
    ],
)
def test_the_engine_functions_default_to_their_spec(fn, spec, names):
    got = _defaults(fn)
    assert {arg: got[arg] for arg in names} == {arg: spec.default(field) for arg, field in names.items()}


def test_the_specs_defaults_are_valid_and_match_the_module_constants():
    for spec in (fewshot.FewShotSpec, codegen.CodeSpec, evaluation.EvalSpec):
        spec().validate()
    assert fewshot.FewShotSpec.default("ks") == fewshot.DEFAULT_KS
    assert set(fewshot.DEFAULT_KS) <= set(fewshot.FewShotSpec.choices("ks"))
    assert codegen.CodeSpec.default("stop") == codegen.DEFAULT_STOP
    assert evaluation.EvalSpec.choices("task") == tuple(evaluation.TASKS)
    assert fewshot.FewShotSpec.bounds("k")[1] <= fewshot.MAX_K  # the page's k never exceeds the engine's


def test_the_shipped_task_says_how_many_documents_it_has():
    assert evaluation.TASKS[evaluation.LOCAL_TASK].documents == len(evaluation.local_documents())


def test_a_limit_out_of_range_is_refused_by_the_specs_sentence():
    for bad in (0, -1, 2.5, True, evaluation.MAX_LIMIT + 1):
        with pytest.raises(InvalidParameterError, match="limit"):
            evaluation._validate_limit(bad)
    assert evaluation._validate_limit(None) is None and evaluation._validate_limit(3) == 3


def test_the_eval_command_takes_its_flags_from_the_spec():
    """`python -m engine eval`'s --task, --limit and --no-crosscheck are EvalSpec's fields, so the command refuses
    what the Evaluation tab refuses, in the same sentence."""
    import argparse

    from engine.commands import eval as cmd

    parser = argparse.ArgumentParser()
    cmd.add_arguments(parser)
    spec = evaluation.EvalSpec.from_args(parser.parse_args(["--limit", "3", "--no-crosscheck"]))
    assert (spec.task, spec.limit, spec.crosscheck) == (evaluation.EvalSpec.default("task"), 3, False)
    with pytest.raises(InvalidParameterError) as err:
        evaluation.EvalSpec.from_args(parser.parse_args(["--limit", "0"]))
    assert str(err.value) == evaluation.EvalSpec.problem("limit", 0)


def test_the_fewshot_command_takes_its_flags_from_the_spec():
    """`python -m engine fewshot`'s --queries and --seed are FewShotSpec's fields and its repeatable --k is checked
    against the spec's k values, so the command refuses what the Few-shot tab refuses, before loading a model."""
    import argparse

    from engine.commands import fewshot as cmd

    parser = argparse.ArgumentParser()
    cmd.add_arguments(parser)
    spec = cmd.spec_of(parser.parse_args(["--k", "0", "--k", "4", "--queries", "3", "--seed", "2"]))
    assert (spec.ks, spec.max_queries, spec.seed) == ((0, 4), 3, 2)
    assert cmd.spec_of(parser.parse_args([])).ks == fewshot.FewShotSpec.default("ks")
    with pytest.raises(InvalidParameterError) as err:
        cmd.spec_of(parser.parse_args(["--queries", "0"]))
    assert str(err.value) == fewshot.FewShotSpec.problem("max_queries", 0)
    with pytest.raises(InvalidParameterError) as err:
        cmd.spec_of(parser.parse_args(["--k", "99"]))
    assert str(err.value) == fewshot.FewShotSpec.problem("ks", (99,))
