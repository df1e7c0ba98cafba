"""The Serving page: runs with nothing started, drives a real sweep against an in-process server through its
widgets, and its knee sentence follows the numbers."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from engine.calc.capacity import CapacityPrediction
from engine.serving.runner import ServerThread, ServeSpec, build
from ui.serving_widgets import answer_sentence, knee_sentence

ROOT = Path(__file__).resolve().parents[1]
PAGE = str(ROOT / "pages/8_Serving.py")


def _pred(users: int) -> CapacityPrediction:
    return CapacityPrediction(users, ((1, 0.01),), 1e9, "TPOT objective")


def test_knee_sentence_follows_the_numbers():
    assert "optimistic" in knee_sentence(4, "users", _pred(8), False)
    assert "pessimistic" in knee_sentence(8, "users", _pred(4), False)
    assert "the same as measured" in knee_sentence(4, "users", _pred(4), False)
    assert "**2 users**" in knee_sentence(2, "users", None, True) and "stopped" in knee_sentence(
        2, "users", None, True
    )
    assert "No level" in knee_sentence(None, "users", None, False)
    assert "**1 user**" in knee_sentence(1, "users", None, False)


def test_page_runs_a_sweep_against_a_url(tiny_lm):
    app, sched = build(ServeSpec(model=tiny_lm.name), tiny_lm)
    with ServerThread(app, scheduler=sched) as srv:
        at = AppTest.from_file(PAGE, default_timeout=180).run()
        assert not at.exception
        at.radio(key="serving.target").set_value("Any OpenAI-compatible URL").run()
        at.text_input(key="serving.url").set_value(srv.base_url).run()
        at.button(key="serving.list").click().run()
        assert at.selectbox(key="serving.model_pick").value == tiny_lm.name
        at.text_input(key="serving.levels.concurrency").set_value("1,2").run()
        at.number_input(key="serving.requests").set_value(2).run()
        at.number_input(key="serving.out_tokens").set_value(4).run()
        at.number_input(key="serving.slo_ttft").set_value(600.0).run()
        at.number_input(key="serving.slo_tpot").set_value(60000.0).run()
        at.button(key="serving.go").click().run()
        assert not at.exception and not at.error
        sweep = at.session_state["serving.sweep"]
        assert [p.level for p in sweep.points] == [1.0, 2.0] and sweep.knee == 2.0
        text = " ".join(m.value for m in at.markdown)
        assert "Measured knee: **2 users**" in text and "calculator" in text.lower()


def test_page_shows_a_bad_url_as_an_error():
    at = AppTest.from_file(PAGE, default_timeout=180).run()
    at.radio(key="serving.target").set_value("Any OpenAI-compatible URL").run()
    at.text_input(key="serving.url").set_value("http://127.0.0.1:9/v1").run()
    at.button(key="serving.list").click().run()
    assert not at.exception and at.error and "cannot reach" in at.error[0].value


def _records(n: int, ttft: float, ok: bool = True):
    from engine.loadgen.client import RequestRecord

    out = []
    for i in range(n):
        r = RequestRecord(
            i, 0.0, 4, ok=ok, error=None if ok else "connect", detail="" if ok else "ConnectError: refused"
        )
        if ok:
            r.ttft_s, r.e2e_s, r.chunk_times = ttft, ttft + 0.3, [ttft + 0.1 * k for k in range(4)]
            r.output_tokens, r.tokens_from_usage, r.request_id = 4, True, f"cmpl-{i}"
        out.append(r)
    return out


def _sweep(points_records, levels, slo):
    from engine.loadgen.metrics import summarize
    from engine.loadgen.sweep import SweepResult
    from engine.loadgen.workload import LoadSpec

    spec = LoadSpec(
        base_url="http://127.0.0.1:8000/v1", model="m", mode="concurrency", n_requests=4, output_tokens=4
    )
    pts = tuple(
        summarize(
            recs,
            level=lvl,
            mode="concurrency",
            slo=slo,
            timings={
                f"cmpl-{i}": {"id": f"cmpl-{i}", "queue_s": 0.01 * lvl, "prefill_s": 0.02} for i in range(4)
            },
        )
        for lvl, recs in zip(levels, points_records, strict=False)
    )
    knee = next((p.level for p in reversed(pts) if p.meets_slo), None)
    return SweepResult(
        spec, slo, tuple(levels), pts, knee, len(pts) < len(levels), "2026-12-01T00:00:00+00:00"
    )


def _page_with(sweep) -> AppTest:
    at = AppTest.from_file(PAGE, default_timeout=180)
    at.session_state["serving.sweep"] = sweep
    return at.run()


def test_a_sweep_that_stopped_early_names_the_skipped_levels_and_why():
    from engine.loadgen.workload import SLO

    slo = SLO(ttft_s=1.0, tpot_s=None)
    sweep = _sweep([_records(4, 0.2), _records(4, 3.0)], [1, 2, 4, 8], slo)  # level 2 misses the TTFT SLO
    assert sweep.skipped == (4.0, 8.0)
    at = _page_with(sweep)
    assert not at.exception
    warning = " ".join(w.value for w in at.warning)
    assert "Skipped 4, 8 users" in warning and "at 2 users only 0% of requests met the SLOs" in warning
    assert "TTFT p90 3 s > SLO 1 s" in warning


def test_the_ttft_breakdown_is_shown_and_adds_up():
    from engine.loadgen.workload import SLO

    sweep = _sweep([_records(4, 0.2), _records(4, 0.5)], [1, 2], SLO(ttft_s=None, tpot_s=None))
    at = _page_with(sweep)
    assert not at.exception
    text = " ".join(m.value for m in at.markdown)
    assert "TTFT = queue + prefill + transport" in text and "**transport**: " in text
    b = sweep.points[1].ttft_breakdown
    assert b.queue_s + b.prefill_s + b.transport_s == pytest.approx(b.ttft_s)


def test_a_sweep_where_nothing_completed_shows_one_error_and_no_charts_or_advice():
    from engine.loadgen.workload import SLO

    sweep = _sweep([_records(4, 0, ok=False)], [1, 2], SLO())
    at = _page_with(sweep)
    assert not at.exception and at.error and "No request completed" in at.error[0].value
    assert not at.get("plotly_chart")
    assert not any("No level" in m.value or "knee" in m.value.lower() for m in at.markdown)


def _sweep_a_dead_url(levels: str) -> AppTest:
    """The page pointed at a URL where nothing listens, a model typed, `levels` to sweep, and Run sweep pressed."""
    at = AppTest.from_file(PAGE, default_timeout=180).run()
    at.radio(key="serving.target").set_value("Any OpenAI-compatible URL").run()
    at.text_input(key="serving.url").set_value("http://127.0.0.1:9/v1").run()
    at.text_input(key="serving.model_text").set_value("m").run()
    at.text_input(key="serving.levels.concurrency").set_value(levels).run()
    at.button(key="serving.go").click().run()
    return at


def test_a_sweep_against_a_dead_url_is_one_clear_error():
    at = _sweep_a_dead_url("1,2")
    assert not at.exception and at.error and "cannot reach" in at.error[0].value
    assert at.session_state["serving.sweep"] is None
    assert not at.get("plotly_chart")
    assert not any("No level" in m.value for m in at.markdown)


def test_levels_that_are_not_numbers_and_failed_requests_are_said_in_words():
    """'abc' as a load level gets what to type, not Python's "could not convert string to float"; failed requests
    are counted in words, not shown as a dict."""
    at = AppTest.from_file(PAGE, default_timeout=180).run()
    at.text_input(key="serving.levels.concurrency").set_value("1,abc").run()
    assert not at.exception and at.error
    assert "'abc' is not a number" in at.error[0].value and "could not convert" not in at.error[0].value
    assert at.button(key="serving.go").disabled  # and the button says why beside it
    assert any("not positive numbers" in c.value for c in at.caption)

    from engine.loadgen.workload import SLO

    sweep = _sweep([_records(4, 0.2), _records(4, 0.2, ok=False)], [1, 2], SLO(ttft_s=None, tpot_s=None))
    at = _page_with(sweep)
    warned = " ".join(w.value for w in at.warning)
    assert "Failed requests: " in warned and "{" not in warned, warned


def test_letters_in_the_levels_are_said_as_typed_even_before_a_server_is_there():
    """'1, two, 8' with no server started got no sentence: the levels were read only when a sweep was sent, and
    the button waited for a server. They are now read as typed, and the button says why it waits."""
    at = AppTest.from_file(PAGE, default_timeout=180).run()
    at.text_input(key="serving.levels.concurrency").set_value("1, two, 8").run()
    assert not at.exception
    assert any("'two' is not a number" in e.value for e in at.error)
    at.text_input(key="serving.levels.concurrency").set_value("1, 4, 8").run()
    assert not any("not a number" in e.value for e in at.error)


def test_per_user_chart_says_what_its_points_are():
    """The chart's title read "labels: users" (a raw key); its legend now names the series and its points read
    "1 user", "2 users"."""
    import json

    from engine.loadgen.workload import SLO

    sweep = _sweep([_records(4, 0.2), _records(4, 0.5)], [1, 2], SLO(ttft_s=None, tpot_s=None))
    at = _page_with(sweep)
    assert not at.exception
    specs = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    fig = next(
        f
        for f in specs
        if f["layout"].get("yaxis", {}).get("title", {}).get("text", "").startswith("tokens/s per user")
    )
    assert "labels:" not in json.dumps(fig["layout"])
    trace = fig["data"][0]
    assert trace["name"] == "measured: one point per sweep level (concurrent users)"
    assert trace["text"] == ["1 user", "2 users"]


def test_page_runs_multi_turn_and_shared_prefix_workloads(tiny_lm):
    """The form's workload choice reaches the spec: multi-turn sessions on the chat endpoint (TTFT by turn shown),
    shared-prefix prompts; multi-turn on the completions endpoint is one clear error."""
    app, sched = build(ServeSpec(model=tiny_lm.name), tiny_lm)
    with ServerThread(app, scheduler=sched) as srv:
        at = AppTest.from_file(PAGE, default_timeout=180).run()
        at.radio(key="serving.target").set_value("Any OpenAI-compatible URL").run()
        at.text_input(key="serving.url").set_value(srv.base_url).run()
        at.button(key="serving.list").click().run()
        at.text_input(key="serving.levels.concurrency").set_value("2").run()
        at.number_input(key="serving.requests").set_value(4).run()
        at.number_input(key="serving.out_tokens").set_value(3).run()
        at.number_input(key="serving.slo_ttft").set_value(600.0).run()
        at.number_input(key="serving.slo_tpot").set_value(60000.0).run()
        at.selectbox(key="serving.workload").set_value("multi-turn").run()
        at.number_input(key="serving.turns").set_value(2).run()
        at.button(key="serving.go").click().run()
        assert len(at.error) == 1 and "chat endpoint" in at.error[0].value and not at.exception
        at.selectbox(key="serving.endpoint").set_value("chat").run()
        at.button(key="serving.go").click().run()
        assert not at.exception and not at.error
        sweep = at.session_state["serving.sweep"]
        assert sweep.spec.turns == 2 and [d.n for d in sweep.points[0].ttft_by_turn] == [2, 2]
        assert any("TTFT by turn" in c.value for c in at.caption)
        at.selectbox(key="serving.workload").set_value("shared-prefix").run()
        at.number_input(key="serving.prefix_tokens").set_value(32).run()
        at.button(key="serving.go").click().run()
        assert not at.exception and not at.error
        sweep = at.session_state["serving.sweep"]
        assert (sweep.spec.prefix_tokens, sweep.spec.turns) == (32, 1)
        assert sweep.points[0].prompt_tokens_median >= 32


def test_the_ttft_split_chart_has_one_tick_per_level_measured():
    """The walkthrough: bars for 1, 4 and 8 users under ticks reading 1, 4, 7 (plotly took the levels as numbers)."""
    from types import SimpleNamespace as NS

    from engine.loadgen.server_side import TTFTBreakdown
    from ui.serving_widgets import breakdown_figure

    parts = TTFTBreakdown(joined=4, completed=4, ttft_s=0.3, queue_s=0.1, prefill_s=0.15, transport_s=0.05)
    sweep = NS(
        spec=NS(mode="concurrency"), points=[NS(level=lvl, ttft_breakdown=parts) for lvl in (1.0, 4.0, 8.0)]
    )
    fig = breakdown_figure(sweep)
    assert fig.layout.xaxis.type == "category"
    assert all(list(bar.x) == ["1", "4", "8"] for bar in fig.data)


def test_a_measured_sweep_survives_a_reload_and_opens_presenter_mode():
    """A presenter reloaded the Serving page and read 'No measured sweep yet'; in presenter mode too: the sweep was
    kept in the session alone. It is now stored with the session's key (ui.pace), like the race's."""
    from engine.core.jsonsafe import to_jsonable
    from engine.loadgen.workload import SLO
    from engine.runtime import runlog

    sweep = _sweep([_records(4, 0.2), _records(4, 0.3)], [1, 2], SLO(ttft_s=1.0, tpot_s=None))
    first = AppTest.from_file(PAGE, default_timeout=180).run()
    sid = first.session_state["lab.session"]
    runlog.save_result("serving-sweep", to_jsonable(sweep), wall_s=21.0, session=sid)
    reloaded = AppTest.from_file(PAGE, default_timeout=180)
    reloaded.query_params["session"] = sid
    reloaded.run()
    assert not reloaded.exception
    assert any("kept across the page reload" in i.value for i in reloaded.info)
    assert any(h.value == "3 · Results (measured)" for h in reloaded.header)
    presenter = AppTest.from_file(PAGE, default_timeout=180)
    presenter.query_params["presenter"] = "1"
    presenter.run()
    assert any(i.value.startswith("Presenter mode") for i in presenter.info)
    assert any(h.value == "3 · Results (measured)" for h in presenter.header)


def test_the_answer_comes_first_and_follows_the_knee():
    """The page's question ("how many users within the SLOs?") is answered above the table and charts, from the
    same knee the section at the bottom names; a sweep where no level met them says so, and so does one that
    never reached a level that missed them."""
    from engine.loadgen.workload import SLO

    slo = SLO(ttft_s=1.0, tpot_s=None)
    missed = _sweep([_records(4, 0.2), _records(4, 3.0)], [1, 2, 4], slo)
    words = answer_sentence(missed)
    assert "held 1 user within TTFT <= 1 s for 90% of requests" in words and "at 2 users it missed" in words
    held = _sweep([_records(4, 0.2), _records(4, 0.3)], [1, 2], slo)
    assert "held 2 users" in answer_sentence(held) and "may hold more" in answer_sentence(held)
    none = _sweep([_records(4, 3.0)], [1, 2], slo)
    assert "no level of this sweep held TTFT <= 1 s" in answer_sentence(none)

    at = _page_with(missed)
    assert not at.exception
    answers = [i.value for i in at.info if i.value.startswith("**Answer (measured)")]
    # at the top of the page (in view without scrolling) and again at the head of its results
    assert len(answers) == 2 and all("held 1 user" in a for a in answers)
    assert "**3 · Results** below" in answers[0]
    assert "Measured knee: **1 user**" in " ".join(m.value for m in at.markdown)  # the same knee below


def _legend_outside(legend: dict) -> bool:
    """A horizontal legend that grows away from the plot as it wraps: anchored at its bottom above the plot, or at its
    top below it (plotly's "auto" anchors at the bottom for y <= 1/3, at the top for y >= 2/3)."""
    y = legend.get("y", 1.0)
    anchor = legend.get("yanchor", "auto")
    if anchor == "auto":
        anchor = "bottom" if y <= 1 / 3 else "top" if y >= 2 / 3 else "middle"
    return legend.get("yref", "paper") == "paper" and (
        (anchor == "bottom" and y >= 1) or (anchor == "top" and y <= 0)
    )


def test_serving_chart_legends_sit_outside_the_plot():
    """The presenter saw a Serving chart's legend over its lines: anchored at y = -0.3 (plotly then anchors it at its
    bottom), a legend that wrapped onto a second row grew up over the axis title and the data. Every chart on the
    page (and the side-by-side one) now puts it above the plot, where it grows upwards, away from the lines."""
    import json

    from engine.loadgen.workload import SLO
    from ui.serving_vllm_view import side_by_side_figure

    sweep = _sweep([_records(4, 0.2), _records(4, 0.5)], [1, 2], SLO(ttft_s=1.0, tpot_s=0.5))
    at = _page_with(sweep)
    assert not at.exception
    charts = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    assert len(charts) >= 4  # latency, throughput, per user, TTFT breakdown

    class SideBySide:
        levels = (1, 2)

        def median_of(self, name, level, key):
            return 1.0 * level

    charts.append(side_by_side_figure(SideBySide()).to_plotly_json())
    for chart in charts:
        legend = chart["layout"].get("legend", {})
        assert legend.get("orientation") == "h" and _legend_outside(legend), legend
        titles = [
            a for a in chart["layout"].get("annotations", []) if a.get("yref") == "paper" and a["y"] >= 1
        ]
        assert not titles, "a subplot title would sit where the legend goes"


def test_the_sweep_table_fits_the_page_without_losing_a_column():
    """At 1280 px the sweep's one table of twenty columns scrolled sideways past the eighth; it is now three tables of
    at most eight columns, each led by the level, which together hold every column of the CSV."""
    from engine.loadgen.workload import SLO
    from ui.serving_widgets import table_rows

    sweep = _sweep([_records(4, 0.2), _records(4, 0.5)], [1, 2], SLO(ttft_s=1.0, tpot_s=0.5))
    at = _page_with(sweep)
    assert not at.exception
    tables = [df.value for df in at.dataframe if "users" in df.value.columns]
    sweep_tables = [t for t in tables if not {"queue", "joined"} & set(t.columns)]
    assert sweep_tables and all(len(t.columns) <= 8 for t in sweep_tables)
    shown = {c for t in sweep_tables for c in t.columns}
    assert shown == set(table_rows(sweep)[0])


def test_the_ttft_breakdown_table_fits_the_page_with_its_unit_said_once():
    """At 1280 px the TTFT breakdown's nine headers, each with its unit and 'mean', scrolled sideways (945 px in an
    818 px column); the headers are now the parts' names, the caption above says every figure is a mean in ms."""
    import dataclasses

    from engine.loadgen.server_side import ServerMetricsDelta
    from engine.loadgen.workload import SLO

    sweep = _sweep([_records(4, 0.2), _records(4, 0.5)], [1, 2], SLO(ttft_s=None, tpot_s=None))
    server = ServerMetricsDelta({"ttft_s": 0.1, "queue_s": 0.01, "decode_s": 0.2}, {}, {})
    sweep = dataclasses.replace(
        sweep, points=tuple(dataclasses.replace(p, server=server) for p in sweep.points)
    )
    at = _page_with(sweep)
    assert not at.exception
    [table] = [df.value for df in at.dataframe if "joined" in df.value.columns]
    assert list(table.columns) == [
        "users",
        "joined",
        "TTFT",
        "queue",
        "prefill",
        "transport",
        "server TTFT",
        "server queue",
        "server decode",
    ]
    assert sum(len(c) for c in table.columns) <= 80  # the 945 px table's headers held 133 characters
    assert list(table["server decode"]) == [200.0, 200.0]
    captions = [c.value for c in at.caption]
    assert any(c.startswith("Means over each level's requests, in ms") for c in captions)


def test_the_sweeps_answer_is_under_the_run_button():
    """At 1280 x 900, with 'Run sweep' in view, the answer at the top of the page was above the viewport and the
    results' answer below it; the same answer now sits right under the button."""
    from engine.loadgen.workload import SLO
    from ui.serving_widgets import answer_sentence

    sweep = _sweep([_records(4, 0.2), _records(4, 0.5)], [1, 2], SLO(ttft_s=1.0, tpot_s=0.5))
    at = _page_with(sweep)
    assert not at.exception
    elements = list(at.main)
    at_button = next(i for i, e in enumerate(elements) if e.type == "button" and e.key == "serving.go")
    under = [e for e in elements[at_button + 1 : at_button + 3] if e.type == "markdown"]
    assert under and under[0].value.startswith(answer_sentence(sweep, "").rstrip())
    assert "held 2 users within" in under[0].value


def test_a_sweep_measured_on_a_busy_machine_says_so_in_its_headline_too():
    """The presenter's walk: the results said 'Measured on a busy machine: other programs took 1.1 cores' worth'
    while the headline above, 'Answer (measured): ... held 8 users', carried no caveat. Every headline of a busy
    sweep now says so; a quiet sweep's says 'measured' alone."""
    from engine.loadgen.workload import SLO

    sweep = _sweep([_records(4, 0.2), _records(4, 0.5)], [1, 2], SLO(ttft_s=1.0, tpot_s=0.5))

    def headlines(others: float) -> list[str]:
        at = AppTest.from_file(PAGE, default_timeout=180)
        at.session_state["serving.sweep"] = sweep
        at.session_state["pace.serving-sweep.load"] = {
            "before": 0.4,
            "after": 1.2,
            "cores": 2,
            "others": others,
        }
        at.run()
        assert not at.exception
        return [e.value for e in [*at.info, *at.markdown] if e.value.startswith("**Answer (")]

    busy = headlines(1.1)
    assert len(busy) == 3, busy  # the page's top, under the button, the results' head
    assert all(h.startswith("**Answer (measured on a busy machine") and "held 2 users" in h for h in busy)
    quiet = headlines(0.05)
    assert len(quiet) == 3 and all(
        h.startswith("**Answer (measured): this deployment held 2 users") for h in quiet
    )
