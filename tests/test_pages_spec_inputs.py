"""Spec-driven inputs (ui.widgets.spec_input): a page's numbers, sliders, selects and toggles take their default,
bounds, choices, label and help from an experiment's spec; a number out of range is refused in one sentence and
nothing runs with it; a button that cannot be pressed says why. And a count: the widgets that still write their
own bounds for a field a spec owns (issue 34, 'specs behind every widget')."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parents[1]
NUMERIC = {"number_input", "slider", "select_slider"}
CHOICE = {"selectbox", "multiselect", "radio", "select_slider", "pills", "segmented_control"}


def _literal(node: ast.AST) -> bool:
    """A number, or a list/tuple written out in the call: a bound or a choice list the page wrote itself."""
    if isinstance(node, ast.UnaryOp):
        return _literal(node.operand)
    if isinstance(node, ast.Constant):
        return isinstance(node.value, int | float) and not isinstance(node.value, bool)
    if isinstance(node, ast.BinOp):
        return _literal(node.left) and _literal(node.right)
    if isinstance(node, ast.List | ast.Tuple):  # written out: every element a constant (not [*catalog, x])
        return bool(node.elts) and all(isinstance(e, ast.Constant) for e in node.elts)
    return False


def literal_bound_widgets(path: Path) -> list[str]:
    """Streamlit widgets called directly with bounds or choices written in the call (not through spec_input):
    'file:line widget label' each."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        name = node.func.attr
        if name not in NUMERIC | CHOICE:
            continue
        args = list(node.args[1:3] if name in NUMERIC - {"select_slider"} else node.args[1:2])
        kws = {"min_value", "max_value"} if name in NUMERIC - {"select_slider"} else {"options"}
        args += [k.value for k in node.keywords if k.arg in kws]
        if any(_literal(a) for a in args):
            label = ast.unparse(node.args[0])[:50] if node.args else "?"
            found.append(f"{path.relative_to(ROOT)}:{node.lineno} {name} {label}")
    return found


# Pages and ui modules whose every widget for a spec's field goes through spec_input.
OWN = [
    "pages/1_Playground.py",
    "pages/2_Memory_and_cost.py",
    "pages/3_Roofline.py",
    "pages/4_Few-shot_code_and_eval.py",
    "pages/5_Latency_race.py",
    "pages/6_Batching.py",
    "pages/7_Quantization_and_speculative_decoding.py",
    "pages/8_Serving.py",
    "ui/widgets.py",
    "ui/home.py",
    "ui/race_widgets.py",
    "ui/batching_widgets.py",
    "ui/levers_widgets.py",
    "ui/roofline_view.py",
    "ui/playground_widgets.py",
    "ui/serving_widgets.py",
    "ui/serving_server.py",
    "ui/serving_vllm_view.py",
    "ui/calc_widgets.py",
]
# Every page and widget module is in OWN (issue 34: literal-bound widgets 18 -> 0); a file added to pages/ must be
# too (test_every_page_is_counted).


@pytest.mark.parametrize("path", OWN)
def test_no_widget_writes_its_own_bounds(path):
    assert literal_bound_widgets(ROOT / path) == []


def test_every_page_is_counted():
    """A page outside OWN would escape the check."""
    pages = {str(p.relative_to(ROOT)) for p in (ROOT / "pages").glob("*.py")}
    assert pages <= set(OWN)


def test_the_count_sees_a_widget_with_its_own_bounds(tmp_path):
    f = ROOT / "tests" / "_count_probe.py"
    f.write_text(
        'st.number_input("Batch", 1, 64, 4)\nst.selectbox("Bits", [4, 2, 8])\nspec_input(st, S, "x")\n'
    )
    try:
        assert len(literal_bound_widgets(f)) == 2
    finally:
        f.unlink()


def _spec_script():
    import streamlit as st

    from engine.batching.spec import BatchSpec
    from ui.widgets import refused, spec_input

    got = spec_input(st, BatchSpec, "max_batch", key="b", hi=64, value=4)
    if not refused(got):
        st.session_state["ran_with"] = got


def test_an_out_of_range_number_is_refused_with_the_range_and_nothing_runs_with_it():
    at = AppTest.from_function(_spec_script).run()
    assert at.session_state["ran_with"] == 4 and not at.error
    box = at.number_input(key="b")
    assert box.label == "Max batch" and box.help.endswith("(a positive whole number up to 64)")
    # letters typed into a number box never reach the page (the browser drops them and, on Enter, puts the last
    # number back): the engineer saw the field reset without a word; the empty box now says what it takes
    assert box.proto.placeholder == "digits only: a positive whole number up to 64"
    for bad in (100_000, -5):
        if "ran_with" in at.session_state:
            del at.session_state["ran_with"]
        at.number_input(key="b").set_value(bad).run()
        assert not at.exception
        assert [e.value for e in at.error] == [
            f"Max batch must be a positive whole number up to 64, got {bad}: nothing runs with it until it is "
            "changed."
        ]
        assert "ran_with" not in at.session_state  # not the old value either
    at.number_input(key="b").set_value(8).run()
    assert at.session_state["ran_with"] == 8 and not at.error


def test_a_page_may_narrow_a_field_but_never_widen_it():
    from engine.batching.spec import BatchSpec

    assert BatchSpec.span("max_batch", hi=64) == "a positive whole number up to 64"
    with pytest.raises(ValueError, match="wider"):
        BatchSpec.span("max_batch", hi=10_000)


def _page(path: str, model_key: str) -> AppTest:
    at = AppTest.from_file(str(ROOT / path), default_timeout=300).run()
    at.sidebar.selectbox(key=model_key).select("tiny-gpt-neo").run()
    return at


def test_batching_refuses_a_batch_of_100000_and_does_not_replay():
    at = _page("pages/6_Batching.py", "batching.model")
    at.number_input(key="batching.max_batch").set_value(100_000)
    next(b for b in at.button if "Run both policies" in str(b.label)).click().run()
    assert not at.exception
    errors = [e.value for e in at.error]
    assert any(
        e.startswith("Max batch (both policies) must be a positive whole number up to 64") for e in errors
    )
    assert any(e.startswith("Nothing ran") for e in errors)
    assert at.session_state["batching.compare"] is None


def test_batching_measure_button_says_why_it_is_disabled():
    at = _page("pages/6_Batching.py", "batching.model")
    at.multiselect(key="batching.sizes").set_value([]).run()
    button = at.button(key="batching.sweep_go")
    assert button.disabled and "choose at least one batch size" in (button.help or "")
    assert any("Measure: choose at least one batch size" in c.value for c in at.caption)
    at.multiselect(key="batching.sizes").set_value([1]).run()
    at.number_input(key="batching.sweep_tokens").set_value(-5).run()
    assert at.button(key="batching.sweep_go").disabled
    assert any("New tokens each must be from 4 to 256, got -5" in e.value for e in at.error)


def test_levers_refuse_minus_five_tokens():
    at = _page("pages/7_Quantization_and_speculative_decoding.py", "levers.model")
    at.number_input(key="levers.qtok").set_value(-5)
    next(b for b in at.button if "Quantize" in str(b.label)).click().run()
    assert not at.exception
    errors = [e.value for e in at.error]
    assert any(e.startswith("New tokens must be from 4 to 512, got -5") for e in errors), errors
    assert at.session_state["levers.quant"] is None


def test_serving_refuses_out_of_range_start_and_sweep_settings_and_says_why_on_the_buttons():
    at = AppTest.from_file(str(ROOT / "pages/8_Serving.py"), default_timeout=300).run()
    assert not at.exception and not at.error
    at.number_input(key="serving.kv_gb").set_value(100.0).run()  # GB, a field in bytes (spec_input's unit)
    assert any(e.value.startswith("KV space (GB) must be from 0.1 to 64.0, got 100:") for e in at.error)
    assert at.button(key="serving.start").disabled
    assert "out of range" in (at.button(key="serving.start").help or "")
    assert any(
        c.value == "Start server: a setting above is out of range (the refused one says why)"
        for c in at.caption
    )
    at.number_input(key="serving.kv_gb").set_value(2.0).run()
    assert not at.button(key="serving.start").disabled
    assert not any(c.value.startswith("Start server:") for c in at.caption)
    at.number_input(key="serving.slo_tpot").set_value(0.5).run()  # ms, a field in seconds
    assert any(e.value.startswith("TPOT SLO (ms) must be from 1.0 to 60000.0, got 0.5:") for e in at.error)
    go = at.button(key="serving.go")
    assert go.disabled and "out of range" in (go.help or "")
    at.number_input(key="serving.slo_tpot").set_value(200.0).run()
    assert not at.error


def test_playground_refuses_a_seed_past_its_range_and_does_not_run():
    at = _page("pages/1_Playground.py", "playground.model")
    at.sidebar.toggle(key="playground.sample").set_value(True).run()
    at.sidebar.number_input(key="playground.seed").set_value(2**31).run()
    assert not at.exception
    assert any(
        e.value.startswith("Seed must be") and "nothing runs with it" in e.value for e in at.sidebar.error
    )
    assert at.button(key="playground.go").disabled


def test_memory_and_cost_refuses_a_negative_price_in_one_sentence_and_estimates_nothing():
    at = AppTest.from_file(str(ROOT / "pages/2_Memory_and_cost.py"), default_timeout=300).run()
    assert not at.exception and not at.error and at.metric
    at.number_input(key="calc.price.t4").set_value(-1.0).run()
    assert not at.exception
    assert [e.value for e in at.error] == [
        "$ per GPU-hour must be from 0 to 1000.0, got -1.0: nothing runs with it until it is changed."
    ]
    assert not at.metric and not at.success  # no estimate made with it
    # the engineer's walk: the sentence sat only in the narrow input column; the answer's column repeats it
    assert [i.value for i in at.info if i.value.startswith("Nothing to answer yet")] == [
        "Nothing to answer yet: $ per GPU-hour must be from 0 to 1000.0, got -1.0. The answer comes back once it "
        "is changed."
    ]
    at.number_input(key="calc.price.t4").set_value(0.35).run()
    at.number_input(key="calc.t4.mem").set_value(0.0).run()  # GB, a field in bytes (spec_input's unit)
    assert [e.value for e in at.error] == [
        "memory (GB) must be from 0.1 to 10000.0, got 0: nothing runs with it until it is changed."
    ]
    assert not at.metric
    at.number_input(key="calc.t4.mem").set_value(16.0).run()
    assert not at.exception and not at.error and at.metric


def test_lab_refuses_a_document_limit_past_the_task_and_evaluates_nothing():
    from engine.lab import evaluation

    if not evaluation.harness_status()[0]:
        pytest.skip("lm-eval is not installed: the Evaluation tab draws no inputs")
    at = _page("pages/4_Few-shot_code_and_eval.py", "lab.model")
    assert not at.exception and not at.error
    at.number_input(key="lab.eval_limit").set_value(100).run()  # the shipped task has 48 documents
    assert not at.exception
    assert [e.value for e in at.error] == [
        "Documents (limit) must be a positive whole number up to 48, got 100: nothing runs with it until it is "
        "changed."
    ]
    go = at.button(key="lab.eval_go")
    assert go.disabled and "out of range" in (go.help or "")
    assert at.session_state["lab.last_eval"] is None and at.session_state["lab.eval_runs"] == []
    at.number_input(key="lab.eval_limit").set_value(8).run()
    assert not at.error and not at.button(key="lab.eval_go").disabled
