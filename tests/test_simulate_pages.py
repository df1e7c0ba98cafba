"""The simulator on the pages: the Serving page simulates a sweep for a GPU with the page's own table, and says a
bad input in one sentence; the Memory-and-cost page answers the inverse questions."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parents[1]
SERVING = str(ROOT / "pages/8_Serving.py")
MEMORY = str(ROOT / "pages/2_Memory_and_cost.py")


def _serving() -> AppTest:
    at = AppTest.from_file(SERVING, default_timeout=300).run()
    assert not at.exception
    at.selectbox(key="simulate.model").set_value("smollm2-135m")
    at.selectbox(key="simulate.gpu").set_value("l4")
    at.number_input(key="simulate.requests").set_value(16)
    at.number_input(key="simulate.prompt").set_value(64)
    at.number_input(key="simulate.output").set_value(8)
    return at


def test_serving_page_simulates_a_sweep_for_a_gpu():
    at = _serving()
    at.text_input(key="simulate.levels").set_value("1,4").run()
    at.button(key="simulate.go").click().run()
    assert not at.exception and not at.error
    sim = at.session_state["simulate.result"]
    assert [p.level for p in sim.result.points] == [1.0, 4.0]
    assert any(s.value == "simulated for L4 x 1, vllm" for s in at.subheader)
    text = " ".join(m.value for m in at.markdown)
    assert "simulated knee" in text.lower()
    assert any("TTFT p50 (s)" in df.value.columns for df in at.dataframe)
    from tests.test_pages_plain_words import internals, on_screen

    # the step model's words name no module (they named engine.calc.step_model)
    assert internals(on_screen(at)) == []


@pytest.mark.parametrize(
    ("widget", "value", "words"),
    [
        ("simulate.levels", "a,b", "not a number"),
        ("simulate.gpus", 93, "more stages than the model's 30 layers"),  # 3-way tensor parallel x 31 stages
        ("simulate.slo_ttft", -1.0, "positive number of seconds"),  # 0 turns it off, as on the CLI
    ],
)
def test_serving_page_says_a_bad_input_in_one_sentence(widget, value, words):
    at = _serving()
    if widget == "simulate.levels":
        at.text_input(key=widget).set_value(value)
    else:
        at.number_input(key=widget).set_value(value)
    at.run()
    if not at.error:  # some inputs are only refused when the run resolves the deployment
        at.button(key="simulate.go").click().run()
    assert not at.exception
    errors = [e.value for e in at.error]
    assert len(errors) == 1 and words in errors[0] and "Traceback" not in errors[0] and "\n" not in errors[0]


def test_memory_page_answers_the_longest_context_that_fits():
    at = AppTest.from_file(MEMORY, default_timeout=300).run()
    assert not at.exception
    at.selectbox(key="calc.preset").set_value("mistral-7b").run()
    at.selectbox(key="calc.gpu").set_value("l4").run()
    at.radio(key="calc.solve.q").set_value("max-context").run()
    at.button(key="calc.solve.go").click().run()
    assert not at.exception and not at.error
    answer = at.session_state["calc.solve.answer"]
    assert answer.question == "max-context" and answer.value.central > 0
    assert any(answer.sentence == m.value for m in at.markdown)
    # by its label, not its place: the page may draw more tiles below it (this machine's runs beside the estimate,
    # when the run log holds one); not "the longest context that fits", "1.311e+05 to 1.311e+05 tokens, 1.00x wide"
    tiles = [m for m in at.metric if m.label == "The longest context that fits"]
    assert len(tiles) == 1, [m.label for m in at.metric]
    tile = tiles[0]
    assert tile.value == f"{answer.value.central:,.0f} tokens" and "e+" not in tile.value
    assert "e+" not in str(tile.proto.delta) and "1.00x wide" not in str(tile.proto.delta)


def test_an_slo_that_cannot_be_met_is_said_at_once_and_hides_the_last_answer():
    """A TTFT SLO of -1 got Streamlit's 'Number is outside the allowed range' (its literal bounds) and the last
    answer ('at most 28 concurrent users') stayed on screen under it. The longest context that fits is a memory
    question: its answer neither uses nor waits on the objectives (an SLO of 0 blocked it)."""
    at = AppTest.from_file(MEMORY, default_timeout=300).run()
    at.radio(key="calc.solve.q").set_value("max-context").run()
    at.button(key="calc.solve.go").click().run()
    assert any(m.label == "The longest context that fits" for m in at.metric)
    at.radio(key="calc.solve.q").set_value("max-users").run()
    at.number_input(key="calc.solve.ttft").set_value(-1.0).run()
    assert not at.exception
    assert any("TTFT SLO must be a positive number" in e.value for e in at.error)
    assert not any(m.label == "The longest context that fits" for m in at.metric)
    at.number_input(key="calc.solve.ttft").set_value(0.0).run()
    at.radio(key="calc.solve.q").set_value("max-context").run()  # back: the objectives are not asked for it
    assert at.number_input(key="calc.solve.ttft").disabled and not at.error
    at.button(key="calc.solve.go").click().run()
    assert not at.exception and not at.error
    assert any(m.label == "The longest context that fits" for m in at.metric)


def test_solver_answers_show_dollars_counts_and_plain_headers():
    """'0.46' with no $, '1.311e+05 to 1.311e+05 tokens, 1.00x wide', snake_case table headers and 'slos'."""
    from engine.core.interval import Interval
    from engine.simulate.solve import Answer
    from ui.simulate_widgets import QUESTIONS, answer_figures, options_table
    from ui.widgets import upper_first

    cheap = Answer("cheapest", Interval(0.4, 0.46, 0.61), "USD per hour", "", {})
    assert answer_figures(cheap) == ("$0.46 per hour", "$0.40 to $0.61, 1.52x wide")
    ctx = Answer("max-context", Interval(131072, 131072, 131072), "tokens", "", {})
    assert answer_figures(ctx) == ("131,072 tokens", "exact: memory arithmetic, no interval")
    assert upper_first(QUESTIONS["max-users"]) == "The most users at my SLOs on the GPUs above"
    row = {"gpu": "l4", "name": "NVIDIA L4", "gpus": 1, "replicas": 2, "usd_per_gpu_hour": 0.8,
           "users_per_replica": 4, "usd_per_hour": 1.6}  # fmt: skip
    table = options_table([row])
    assert "usd_per_gpu_hour" not in table.columns and table["$ per hour"][0] == "$1.60"


def test_knee_words_follow_the_numbers():
    from ui.simulate_widgets import knee_words

    assert (
        knee_words({"low": None, "central": None, "high": None}, "users")
        == "No simulated level met the SLOs."
    )
    same = knee_words({"low": 16.0, "central": 16.0, "high": 16.0}, "users")
    assert "**16 users**" in same and "the same" in same
    spread = knee_words({"low": None, "central": 4.0, "high": 16.0}, "users")
    assert "**4 users**" in spread and "no level to 16 users" in spread


def test_a_lock_step_workload_says_why_its_first_tokens_wait_alike():
    """An engineer read TTFT p50 = p90 = p99 = 0.167 s at 8 simulated users beside the calculator's 66.9 ms for one
    request at that load, unexplained: with every length the same, the users run in lock step."""
    from engine.simulate.spec import SimulateSpec

    fixed = SimulateSpec(model="llama-3-8b", gpu="h100-sxm", start="together")
    assert fixed.lock_step and not replace(fixed, start=None).lock_step  # spread: a GPU's default
    assert not replace(fixed, output_tokens_max=256).lock_step and not replace(fixed, mode="rate").lock_step


def test_serving_page_simulates_a_model_named_by_its_hugging_face_id():
    """The engineer's walk: the simulated section offered the nine calculator presets only, where the calculator
    takes every published config by its hub id."""
    at = _serving()
    assert (
        "Qwen2.5-7B-Instruct" in at.selectbox(key="simulate.model").options
    )  # shown without its organisation
    at.selectbox(key="simulate.model").set_value("Qwen/Qwen2.5-7B-Instruct")
    at.text_input(key="simulate.levels").set_value("1,4").run()
    at.button(key="simulate.go").click().run()
    assert not at.exception and not at.error
    assert [p.level for p in at.session_state["simulate.result"].result.points] == [1.0, 4.0]


def test_the_cheapest_answer_searches_the_gpus_picked_and_names_its_plan_in_the_tile():
    """The engineer's walk: the tile read only '$1.59 per hour' (the GPU was in the sentence below), and the
    search could not be kept to the GPU types a team can rent."""
    at = AppTest.from_file(MEMORY, default_timeout=300).run()
    at.selectbox(key="calc.preset").set_value("smollm2-135m").run()
    at.radio(key="calc.solve.q").set_value("cheapest").run()
    at.multiselect(key="calc.solve.gpus").set_value(["h100-sxm", "a100-80gb"]).run()
    at.button(key="calc.solve.go").click().run()
    assert not at.exception and not at.error
    best = at.session_state["calc.solve.answer"].details["best"]
    assert best["gpu"] in ("h100-sxm", "a100-80gb")
    assert [m.label for m in at.metric if m.label.startswith("Cheapest: ")] == [
        f"Cheapest: {best['gpus']} x {best['name']}"
    ]
    # the runner-up and why it lost, in one line under the answer (the JSON had it, the page did not)
    runner = at.session_state["calc.solve.answer"].details["runner_up"]
    assert runner is not None and runner["sentence"].startswith("Runner-up: ")
    assert runner["sentence"] in [m.value for m in at.markdown]
    # the plan with margin, searched again at the slow step times, in its own line under the tile
    margin = at.session_state["calc.solve.answer"].details["margin_plan"]
    assert margin["sentence"].startswith("A plan with margin") and margin["sentence"] in [
        m.value for m in at.markdown
    ]
    # the answer in a paragraph of its own, how it was found and what it rests on as a list under it (the
    # engineer's walk: one paragraph of ten sentences)
    parts = at.session_state["calc.solve.answer"].parts
    shown = [m.value for m in at.markdown]
    assert parts[0].startswith("Cheapest for ") and parts[0] in shown
    assert "\n".join(f"- {p.strip()}" for p in parts[1:]) in shown
    at.multiselect(key="calc.solve.gpus").set_value([]).run()
    assert any("Pick at least one GPU" in i.value for i in at.info)


def test_an_slo_of_zero_turns_that_objective_off_as_on_the_command_line():
    """The engineer's walk: `--slo-ttft 0` turned the objective off on the CLI while the page refused 0 with 'must be
    a positive number'. One rule now: 0 is off on both, and with both off the solver asks for an objective."""
    from engine.loadgen.workload import SLO

    assert SLO.given(0.0, 0.05) == SLO(ttft_s=None, tpot_s=0.05)  # the page's boxes, read as the CLI reads 0
    assert SLO.given(0.0, 0.05).words() == "TPOT <= 50 ms"
    at = AppTest.from_file(MEMORY, default_timeout=300).run()
    at.radio(key="calc.solve.q").set_value("max-users").run()
    at.number_input(key="calc.solve.ttft").set_value(0.0).run()
    assert not at.exception and not at.error  # not refused (it said 'must be a positive number')
    at.number_input(key="calc.solve.tpot").set_value(0.0).run()
    at.button(key="calc.solve.go").click().run()
    assert any("give an objective to meet" in e.value for e in at.error)


def test_the_serving_page_chooses_how_simulated_users_start():
    """Spread users (steady state) by default, as the estimate and the most-users answer take them; 'together' for
    the load generator's way, with the lock-step caption."""
    at = _serving()
    at.text_input(key="simulate.levels").set_value("8").run()
    at.number_input(key="simulate.requests").set_value(32).run()
    at.button(key="simulate.go").click().run()
    assert not at.exception and not at.error
    assert not at.session_state["simulate.result"].spec.starts_together
    assert any("start spread over one round" in c.value for c in at.caption)
    at.radio(key="simulate.start").set_value("together").run()
    at.button(key="simulate.go").click().run()
    assert at.session_state["simulate.result"].spec.lock_step
    assert any("lock step" in c.value for c in at.caption)


def test_a_knee_at_the_highest_level_tried_is_said_as_such():
    """The engineer's walk: 'The simulated knee is 100 users' where 100 was only the highest level tried (every level
    met the SLOs) and the most-users answer said 130; the command line printed Python's None for a missing end."""
    import io
    from contextlib import redirect_stdout

    from engine.cli import main
    from ui.simulate_widgets import knee_words

    words = knee_words({"low": 100.0, "central": 100.0, "high": 100.0}, "users", every_level_met=True)
    assert "Every simulated level met the SLOs" in words and "highest tried" in words
    buf = io.StringIO()
    with redirect_stdout(buf):
        assert (
            main(
                [
                    "simulate",
                    "--model",
                    "llama-3-8b",
                    "--gpu",
                    "h100-sxm",
                    "--sweep",
                    "1,2",
                    "--requests",
                    "8",
                ]
            )
            == 0
        )
    text = buf.getvalue()
    assert "None" not in text and "the knee is the highest level tried (2)" in text


def test_the_cheapest_answer_shows_why_a_larger_split_holds_fewer_users():
    """The engineer's walk: 8 x A100 at 10 users per replica beside 4 x A100 at 13, unexplained on the page. The
    engine's sentence (engine.simulate.solve.split_words) is shown under the options."""
    from engine.core.interval import Interval
    from engine.simulate.solve import Answer

    why = "Why 8 x A100 80GB SXM holds fewer users per replica than 4 x A100 80GB SXM (10 against 13): test words."
    row = {"gpu": "a100-80gb", "name": "A100 80GB SXM", "gpus": 4, "replicas": 4, "usd_per_gpu_hour": 1.59,
           "users_per_replica": 13, "usd_per_hour": 25.44}  # fmt: skip
    answer = Answer("cheapest", Interval(25.44, 25.44, 25.44), "USD per hour", "Cheapest: words.", {
        "best": row, "simulated": [row, {**row, "gpus": 8, "replicas": 5, "users_per_replica": 10,
                                         "usd_per_hour": 63.6}],
        "runner_up": {"sentence": "Runner-up: words."}, "price_source": "list price", "launch_command": None,
        "larger_split_holds_fewer": [{"gpu": "a100-80gb", "smaller": 4, "larger": 8, "sentence": why}],
    })  # fmt: skip
    at = AppTest.from_file(MEMORY, default_timeout=300).run()
    at.radio(key="calc.solve.q").set_value("cheapest").run()
    at.session_state["calc.solve.answer"] = answer
    at.run()
    assert not at.exception
    shown = [m.value for m in at.markdown]
    assert why in shown and "Runner-up: words." in shown
    assert shown.index("Runner-up: words.") < shown.index("Cheapest: words.") < shown.index(why)


def test_the_cheapest_answer_shows_its_plan_with_margin():
    """The engineer's walk: '$13.96 to $111.68, 8.00x wide' under the cheapest plan, the same plan with more
    replicas at the slow step times. The tile now says the plan with margin and its price, the line under it says
    what it is."""
    from engine.core.interval import Interval
    from engine.simulate.solve import Answer
    from ui.simulate_widgets import answer_figures

    row = {"gpu": "h100-sxm", "name": "H100 SXM", "gpus": 4, "replicas": 1, "usd_per_gpu_hour": 3.49,
           "users_per_replica": 50, "usd_per_hour": 13.96}  # fmt: skip
    words = "A plan with margin, the cheapest that still meets the objectives with every step at the slow end: words."
    margin = {**row, "gpus": 8, "replicas": 2, "users_per_replica": 25, "usd_per_hour": 55.84, "sentence": words,
              "step_times": "slow end", "launch_command": None, "price_note": ""}  # fmt: skip
    answer = Answer("cheapest", Interval(13.96, 13.96, 55.84), "USD per hour", "Cheapest: words.", {
        "best": row, "simulated": [row], "runner_up": None, "price_source": "list price", "launch_command": None,
        "larger_split_holds_fewer": [], "margin_plan": margin,
    })  # fmt: skip
    assert answer_figures(answer) == ("$13.96 per hour", "with margin: $55.84 (2 replicas of 8 x H100 SXM)")
    same = Answer("cheapest", Interval(13.96, 13.96, 13.96), "USD per hour", "", {
        "best": row, "margin_plan": {**row, "sentence": words}})  # fmt: skip
    assert answer_figures(same)[1] == "with margin: the same plan meets them at the slow step times"
    users = Answer("max-users", Interval(78, 121, 144), "users", "", {"ends": {}})
    assert answer_figures(users) == ("121 users", "78 at the slow step times (margin), 144 at the quick")
    at = AppTest.from_file(MEMORY, default_timeout=300).run()
    at.radio(key="calc.solve.q").set_value("cheapest").run()
    at.session_state["calc.solve.answer"] = answer
    at.run()
    assert not at.exception
    shown = [m.value for m in at.markdown]
    assert words in shown and shown.index(words) < shown.index("Cheapest: words.")
    assert [str(m.proto.delta) for m in at.metric if m.label.startswith("Cheapest: ")] == [
        "with margin: $55.84 (2 replicas of 8 x H100 SXM)"
    ]
