"""The Batching page through Streamlit's AppTest: it renders, and a small widget-driven run on tiny-gpt-neo
shows both policies, their timelines and the live scheduler."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

PAGE = str(Path(__file__).resolve().parents[1] / "pages" / "6_Batching.py")


def _page() -> AppTest:
    at = AppTest.from_file(PAGE, default_timeout=120)
    at.run()
    at.sidebar.selectbox(key="batching.model").select("tiny-gpt-neo").run()
    return at


def test_page_renders_without_errors():
    at = _page()
    assert not at.exception and not at.error
    assert any(t.value == "Batching" for t in at.title)


@pytest.mark.slow
def test_compare_policies_on_a_small_workload():
    at = _page()
    at.number_input(key="batching.n").set_value(5)
    at.number_input(key="batching.max_batch").set_value(2)
    at.number_input(key="batching.out_max").set_value(24)
    submit = [b for b in at.button if "Run both policies" in str(b.label)]
    submit[0].click().run()
    assert not at.exception and not at.error
    table = at.dataframe[0].value
    assert list(table["policy"]) == ["static", "inflight"]
    assert any("In-flight / static throughput" in m.label for m in at.metric)
    assert any("The trade-off" in s.value for s in at.subheader)
    # every request waits at the start (rate 0): the page states what batching can give the workload
    assert any("What batching can give this workload" in m.value for m in at.markdown)
    assert any("replayed 2 times, interleaved" in c.value for c in at.caption)
    # the p95 metric's arrow follows the sign of the difference (Streamlit reads a leading ASCII "-")
    s, i = at.session_state["batching.compare"]["static"], at.session_state["batching.compare"]["inflight"]
    p95 = next(m for m in at.metric if "p95 latency" in m.label)
    assert p95.delta.startswith("-" if i.latency_s_p95 < s.latency_s_p95 else "+")
    # how busy the machine was, beside a measurement taken once per policy
    load = at.session_state["batching.load"]
    assert any(f"Load average {load[0]:.2f} at the start" in c.value for c in at.caption)


@pytest.mark.slow
def test_static_sweep_and_shared_scheduler():
    at = _page()
    at.multiselect(key="batching.sizes").set_value([1, 2])
    at.number_input(key="batching.sweep_tokens").set_value(4)
    at.button(key="batching.sweep_go").click().run()
    assert not at.exception and not at.error
    assert any("Largest batch that fits" in i.value for i in at.info)
    # the student read "8.4 GB/s" and "35.8 GB/s" with no word on which is which: each is now named
    said = next(m.value for m in at.markdown if "GB/s effective" in m.value)
    assert "divided by its measured time" in said
    from ui.machine_view import machine_known

    if machine_known():
        assert "read bandwidth roof is" in said and "of its roof" in said
    send = [b for b in at.button if str(b.label) == "Send"]
    send[0].click().run()
    assert not at.exception and not at.error
    # a request sent on its own says so; one that met others in the batch says how many
    said = [c.value for c in at.caption if "ran alone" in c.value or "shared the batch with up to" in c.value]
    assert said and "up to 0 other" not in said[0]


def _inject_compare(at: AppTest, inflight_throughput: float, inflight_p95: float) -> AppTest:
    from engine.batching.workload import PolicyResult

    def result(policy: str, tps: float, p95: float) -> PolicyResult:
        return PolicyResult(
            policy, "tiny-gpt-neo", 4, 12, 100, 2.0, tps, 6.0, 0.3, 0.6, 1.0, p95, 0.1, 0.7, ()
        )

    at.session_state["batching.compare"] = {
        "static": result("static", 100.0, 2.0),
        "inflight": result("inflight", inflight_throughput, inflight_p95),
    }
    return at.run()


def test_the_replays_are_said_with_their_times_and_a_policys_disagreeing_replays_are_flagged():
    """Each policy replays twice, interleaved; the caption says so with every replay's time, and where one policy's
    two replays differ by more than a fifth it says the machine was not steady (the ratio is then rough)."""
    from dataclasses import replace

    at = _page()
    at = _inject_compare(at, 120.0, 1.5)
    said = " ".join(c.value for c in at.caption)
    assert "One replay per policy" in said  # a run recorded before the replays were repeated
    pair = at.session_state["batching.compare"]
    for walls, shaky in (((2.0, 2.1), False), ((2.0, 3.0), True)):
        at.session_state["batching.compare"] = {
            "static": replace(pair["static"], replay_walls=walls),
            "inflight": replace(pair["inflight"], replay_walls=(1.6, 1.7)),
        }
        at = at.run()
        said = " ".join(c.value for c in at.caption)
        assert "replayed 2 times, interleaved (static, in-flight, in-flight, static)" in said
        from engine.calc import format as fmt

        each = f"static {fmt.seconds(walls[0])}, {fmt.seconds(walls[1])}; in-flight {fmt.seconds(1.6)}, {fmt.seconds(1.7)}"
        assert f"the faster replay of each is shown ({each})" in said
        assert ("**Static's replays differ by 50%**" in said) == shaky


def test_tradeoff_text_follows_the_measurement():
    """A measured ratio of 0.91 with a worse p95 must not argue that in-flight wins."""
    at = _page()
    lost = " ".join(m.value for m in _inject_compare(at, 91.0, 2.6).markdown)
    assert "Static batching won on throughput" in lost and "In-flight batching won" not in lost
    won = " ".join(m.value for m in _inject_compare(at, 150.0, 1.5).markdown)
    assert "In-flight batching won on throughput" in won and "Static batching won" not in won
    report = [b for b in at.get("download_button") if "batching.html" in b.proto.id]
    assert report and not report[0].proto.disabled  # the results export as one HTML report


@pytest.mark.slow
def test_simulate_users_through_the_shared_scheduler():
    at = _page()
    at.number_input(key="batching.users_n").set_value(3)
    at.number_input(key="batching.users_tokens").set_value(4)
    next(b for b in at.button if "Simulate" in str(b.label)).click().run()
    assert not at.exception and not at.error
    rows = at.session_state["batching.users"]["rows"]
    assert len(rows) == 3 and all(r["tokens"] >= 1 for r in rows)
    assert any("decode step" in m.value for m in at.markdown)
    # one panel for the shared batch, where the simulation drew its queue: under the form, above what each
    # request got (the live view used to sit last on the page, its last run's "idle" faded beside the simulation)
    order = [_text(e) for e in _walk(at.main)]
    idle = next(k for k, v in enumerate(order) if "The shared batch is idle" in v)
    got = max(k for k, v in enumerate(order) if "decode step" in v)  # the users' sentence, not the intro
    toggle = order.index("Refresh every 2 s")
    assert toggle < idle < got


def test_simulated_users_on_a_busy_machine_say_so_and_number_requests_as_the_live_table(monkeypatch):
    """A student simulated 6 users on a busy machine: the result carried no 'measured on a busy machine' note (only
    the generic banner at the top), and its table numbered users 1-6 while the live table numbered requests 2-7."""
    from engine.core import load
    from ui import batching_widgets, pace

    seen: list[int] = []
    submit = batching_widgets.Scheduler.submit

    def spy(self, *a, **k):
        handle = submit(self, *a, **k)
        seen.append(handle.id)
        return handle

    monkeypatch.setattr(batching_widgets.Scheduler, "submit", spy)
    monkeypatch.setattr(load, "loadavg_1m", lambda: 9.0)
    monkeypatch.setattr(pace, "loadavg_1m", lambda: 9.0)
    # the load average's rule, as where other processes' CPU cannot be read
    monkeypatch.setattr(load, "others_during", lambda *a: float("nan"))
    at = _page()
    at.number_input(key="batching.users_n").set_value(2)
    at.number_input(key="batching.users_tokens").set_value(4)
    next(b for b in at.button if "Simulate" in str(b.label)).click().run()
    assert not at.exception and not at.error
    assert any(w.value.startswith("Measured on a busy machine (load average 9.0") for w in at.warning)
    rows = at.session_state["batching.users"]["rows"]
    # the run's users from 1 and the scheduler's own request ids beside them, as the live table shows both (the
    # first sent may not be request 1; a student read "requests 2-7" as numbered from the scheduler's start)
    assert [r["request"] for r in rows] == seen and [r["user"] for r in rows] == [1, 2]
    assert list(at.table[0].value.columns[:2]) == ["user", "request"]


def test_the_live_table_numbers_this_runs_users_from_one_and_counts_this_runs_steps():
    """A student: the live table numbered the simulated requests from the shared scheduler's start, and the counter
    tile gave the server's totals (the Playground's runs included). While users run, both are this run's now, the
    scheduler's numbers and totals beside them."""

    def script():
        from engine.batching.handle import RowView, SchedulerSnapshot
        from ui.batching_widgets import show_snapshot

        rows = tuple(RowView(5 + i, "running", 30, 12, 24, 0.0, 3.2, "text") for i in range(3))
        start = SchedulerSnapshot("m", True, 8, 10**9, 9216, 5 * 10**6, 64, (), (), 80, 300, 1, ())
        now = SchedulerSnapshot("m", True, 8, 10**9, 9216, 5 * 10**6, 64, rows, (), 92, 330, 1, ())
        show_snapshot(now, start, {5: 1, 6: 2})

    at = AppTest.from_function(script, default_timeout=60).run()
    assert not at.exception
    table = at.table[0].value
    assert list(table["user"]) == ["1", "2", "other"] and list(table["request"]) == [5, 6, 7]
    tile = next(m for m in at.metric if m.label.startswith("Decode steps"))
    assert tile.label == "Decode steps / tokens, this run" and tile.value == "12 / 30"
    assert "totals since it started are 92 / 330" in tile.help


def _text(element) -> str:
    for attr in ("label", "value"):
        v = getattr(element, attr, None)
        if isinstance(v, str) and v:
            return v
    return ""


def _walk(node):
    children = getattr(node, "children", {})
    for key in sorted(children):
        child = children[key]
        yield child
        yield from _walk(child)


def test_a_headline_above_what_the_workload_allows_is_marked_with_why():
    """A measured 4.95x beside the workload's own bound of 1.26x was shown as the headline, unmarked."""
    from engine.batching.workload import PolicyBound

    at = _page()
    at.session_state["batching.bound"] = PolicyBound(
        static_steps=126,
        inflight_steps=100,
        full_slots_steps=90,
        static_row_steps=480,
        inflight_row_steps=400,
    )
    at = _inject_compare(at, 495.0, 1.5)  # 4.95x static's 100 tok/s
    assert not at.exception
    headline = next(m for m in at.metric if m.label == "In-flight / static throughput")
    assert headline.value == "4.95× (over the 1.26× possible)"
    why = " ".join(w.value for w in at.warning)
    assert "More than batching can give" in why and "1.26× if every step costs the same" in why
    assert "1.20× if every row costs the same" in why and "126 steps" in why and "480 row-steps" in why
    text = " ".join(m.value for m in at.markdown)
    assert "No throughput verdict from this run" in text and "In-flight batching won" not in text
    at = _inject_compare(at, 120.0, 1.5)  # 1.20x: within the bound, a plain headline
    headline = next(m for m in at.metric if m.label == "In-flight / static throughput")
    assert headline.value == "1.20×" and not any("More than batching" in w.value for w in at.warning)


@pytest.mark.parametrize(("tps", "where"), [
    (100.0, "at the memory-bound end"),
    (140.0, "57% of the way from the memory-bound end to the compute-bound end"),
    (170.0, "at the compute-bound end"),
    (190.0, "more than either allows"),
])  # fmt: skip
def test_static_computing_finished_rows_counts_as_batchings_own(tps, where):
    """One batch of four (max batch 4): the same 34 steps under both policies, so the step count allowed in-flight
    1.00x and a measured 1.70x was called "not batching's", though it is the rows static batching computes for
    requests already finished (136 row-steps against 80). Now the two regimes bound it, and the page says where the
    measurement lands between them."""
    from engine.batching.workload import PolicyBound

    at = _page()
    at.session_state["batching.bound"] = PolicyBound(34, 34, 20, 136, 80)
    at = _inject_compare(at, tps, 1.5)
    assert not at.exception
    text = " ".join(m.value for m in at.markdown)
    assert f"Measured **{tps / 100:.2f}×**: {where}" in text
    assert (
        "**1.00×** static's throughput; if every row costs the same, as when compute binds, **1.70×**" in text
    )
    headline = next(m for m in at.metric if m.label == "In-flight / static throughput")
    marked = any("More than batching" in w.value for w in at.warning)  # not the page's busy-machine banner
    assert (headline.value == f"{tps / 100:.2f}×") == (tps <= 170) and marked == (tps > 170)


@pytest.mark.parametrize(("tps", "verdict", "why"), [
    (81.0, "Static batching won on throughput here", "every request started at once, so it admitted no one later"),
    (154.0, "In-flight batching won on throughput here", "stopped computing them (no request was waiting"),
])  # fmt: skip
def test_with_every_request_started_at_once_the_words_say_no_one_waited(tps, verdict, why):
    """A student's walk, 8 requests at max batch 8 (44 steps under both policies): 0.81x was explained by 'in-flight's
    admissions cost more than its fewer steps saved', 1.54x by 'in-flight gave those slots to waiting requests', and
    both by 'the long requests admitted last', where no one waited, nothing was admitted later and no step was
    saved. The words now follow the workload: what in-flight can skip is the finished rows (184 row-steps against
    static's 352)."""
    from engine.batching.workload import PolicyBound

    at = _page()
    at.session_state["batching.bound"] = PolicyBound(44, 44, 23, 352, 184, 0)
    at = _inject_compare(at, tps, 1.5)
    assert not at.exception
    # the result's words: the bound's sentence and the trade-off list (the page's intro explains batching in general)
    text = " ".join(
        m.value for m in at.markdown if "What batching can give" in m.value or "on throughput" in m.value
    )
    assert verdict in text and why in text
    assert "No request waited: every one started at once" in text
    for wrong in ("waiting requests", "admitted last", "fewer steps saved", "waiting for a static batch"):
        assert wrong not in text


@pytest.mark.parametrize(("tps", "said", "marked"), [
    ((100, 300, 700), "batch 16 **700 tokens/s** (7.0×)", "best: batch 16, 7.0× batch 1"),
    ((100, 98, 97), "did **not** raise throughput", "no batch beat batch 1 by more than 5%"),
])  # fmt: skip
def test_the_sweep_chart_marks_what_its_sentence_says(tps, said, marked):
    """The sweep's sentence and its chart read the same numbers the same way: flip them, both flip."""
    from engine.batching.sweep import Sweep, SweepPoint
    from ui.batching_widgets import sweep_figure
    from ui.narrative import sweep_sentence

    points = tuple(
        SweepPoint(b, float(t), 0.5 * b, 0.01, 0.1, float(t), 0.5 * b, 1)
        for b, t in zip((1, 4, 16), tps, strict=True)
    )
    sweep = Sweep("m", 8, 32, points, 1000, 1e9, False, 1e9, 1e10)
    assert said in sweep_sentence(points)
    notes = [a.text for a in sweep_figure(sweep).layout.annotations]
    assert marked in notes


def test_a_shown_replay_and_users_table_name_no_module_and_keep_each_text_as_text():
    """After a replay the bound's caption named `engine.batching.workload.policy_bound` on the page; a simulated
    user's text that began '1. ' was drawn as a numbered list, and each text was cut at 80 characters."""
    from engine.batching.workload import PolicyBound
    from tests.test_pages_plain_words import internals, on_screen

    at = _page()
    at.session_state["batching.bound"] = PolicyBound(
        static_steps=126, inflight_steps=100, full_slots_steps=90
    )
    long = "1. Supercomputer: a GPU runs high-performance computing tasks, such as weather models and " * 2
    row = {"user": 1, "queued (s)": 0.0, "TTFT (s)": 0.5, "latency (s)": 2.0, "tokens": 24, "tokens/s": 12.0}
    at.session_state["batching.users"] = {
        "n": 1,
        "rows": [{**row, "batch seen": 1, "stop": "length", "text": long.strip()}],
    }
    at = _inject_compare(at, 120.0, 1.5)
    assert not at.exception
    assert internals(on_screen(at)) == []
    assert at.table[0].value["text"][0] == "1\\" + long.strip()[1:]  # its '1.' escaped: text, not a list
    from types import SimpleNamespace

    from tests.factories import synthetic_run
    from ui.batching_widgets import _user_row
    from ui.widgets import word_table

    done = SimpleNamespace(
        text=long, stop_reason="length", measurement=synthetic_run("tiny-gpt-neo", "fp32", 0.1, 0.01)
    )
    assert (
        _user_row(SimpleNamespace(completion=done, id=7), None, 1)["text"] == long.strip()
    )  # whole, not cut at 80

    class Box:
        def table(self, rows, **_):
            self.rows = rows

    box = Box()
    word_table(box, [{"text": "1. Supercomputer", "n": 3}, {"text": "- a dash", "n": 4}])
    assert [r["text"] for r in box.rows] == ["1\\. Supercomputer", "\\- a dash"]  # Markdown marks escaped


def test_the_simulated_users_result_is_said_right_under_the_simulate_button():
    """At 1280 x 900 the simulated users' sentence and table landed below the fold after Simulate; the result is now
    one line right under the button, from the same rows."""
    row = {"user": 1, "queued (s)": 0.0, "TTFT (s)": 0.5, "latency (s)": 2.0, "tokens": 24, "tokens/s": 12.0}
    at = _page()
    at.session_state["batching.users"] = {
        "n": 3,
        "rows": [
            {**row, "batch seen": 3, "stop": "length", "text": "a"},
            {**row, "queued (s)": 0.25, "latency (s)": 3.0, "batch seen": 3, "stop": "length", "text": "b"},
            {**row, "batch seen": 1, "stop": "error", "text": ""},
        ],
    }
    at.run()
    assert not at.exception
    elements = list(_walk(at.main))
    at_button = next(i for i, e in enumerate(elements) if e.type == "button" and e.label == "Simulate")
    after = next(e for e in elements[at_button + 1 :] if e.type in ("markdown", "toggle"))
    assert after.type == "markdown" and after.value.startswith(
        "**2 of 3 requests finished, up to 3 in one decode step**; longest wait to be admitted 250 ms, latency 2 s "
        "to 3 s."
    )


def test_the_tours_stop_is_linked_from_the_top_of_the_page():
    """The presenter's quiet walk: the tour's stop, Simulate N users, sat about 4,500 px below the page's top in
    presenter mode; the page's first lines now link to it (its heading's anchor, checked in Chromium)."""
    at = _page()
    assert not at.exception
    first = next(m.value for m in at.markdown if "On the tour?" in m.value)
    assert "[Simulate N users](#simulate-n-users)" in first
    assert any(h.value == "Simulate N users" for h in at.subheader)


def test_presenter_mode_opens_on_the_last_quiet_replay_of_the_pages_model(monkeypatch, tmp_path):
    """The presenter's walk: presenter mode opened sections 1-2 on a replay made on a busy machine although a quiet
    one was in the log (it kept its load in its own result, not in the run's settings, and was not read as
    quiet); it now opens on the newest quiet run of the page's model, dated, and says when only a busy one exists."""
    from engine.batching.workload import PolicyResult
    from engine.core.jsonsafe import to_jsonable
    from engine.runtime import runlog
    from ui import pace

    monkeypatch.setenv("INFERENCE_LAB_RUNS_DIR", str(tmp_path))

    def replay(model: str, tps: float, load: list | None = None) -> dict:
        r = PolicyResult("static", model, 4, 12, 100, 2.0, tps, 6.0, 0.3, 0.6, 1.0, 1.5, 0.1, 0.7, ())
        return to_jsonable({"static": r, "inflight": r, "bound": None, "load": load})

    def save(payload: dict, settings: dict) -> None:
        runlog.save_result("batching-compare", payload, wall_s=20.0, settings=settings)

    # only busy runs of this model: one is shown, and the note says there is no quiet one
    save(replay("tiny-gpt-neo", 11.0, [6.4, 5.5, 2]), {"model": "tiny-gpt-neo"})
    found = pace.presented("batching-compare", {"model": "tiny-gpt-neo"})
    assert found is not None and "no run recorded on a quiet machine" in found[1] and "busy" in found[1]
    # a quiet replay (its load in its result only), then a busy one, then a quiet one of another model
    save(replay("tiny-gpt-neo", 33.0, [1.4, 1.8, 2]), {"model": "tiny-gpt-neo"})
    busy = {"before": 3.4, "after": 4.0, "cores": 2}
    save(replay("tiny-gpt-neo", 22.0, [3.4, 4.0, 2]), {"model": "tiny-gpt-neo", "load": busy})
    quiet = {"before": 0.2, "after": 2.1, "cores": 2}
    save(replay("smollm2-135m-instruct", 44.0), {"model": "smollm2-135m-instruct", "load": quiet})

    at = AppTest.from_file(PAGE, default_timeout=120)
    at.query_params["presenter"] = "1"
    at.run()
    at.sidebar.selectbox(key="batching.model").select("tiny-gpt-neo").run()
    assert not at.exception
    notes = [i.value for i in at.info if i.value.startswith("Presenter mode")]
    assert any(
        "with these settings and no other work at their start or their end" in n and " UTC" in n
        for n in notes
    ), notes
    assert list(at.dataframe[0].value["throughput (tok/s)"]) == [33.0, 33.0]
    assert not any("busy machine" in w.value for w in at.warning)
    # the third walk: a 75 s run passed the load rule (work between its two readings escapes it) and presenter mode
    # showed it as the quiet one, 16x its peers; of the newest quiet runs of the same settings, the quickest
    calm = {"before": 0.3, "after": 2.0, "cores": 2}
    runlog.save_result("batching-compare", replay("tiny-gpt-neo", 9.0), wall_s=75.0,
                       settings={"model": "tiny-gpt-neo", "load": calm})  # fmt: skip
    found = pace.presented("batching-compare", {"model": "tiny-gpt-neo"})
    assert found is not None and found[0].wall_s == 20.0 and "the quickest of the last 2 run(s)" in found[1]


def test_a_reloaded_sweep_says_what_it_was_run_with(monkeypatch, tmp_path):
    """The student's reload: the kept sweep (batch 1, 2; 4 tokens) sat under inputs reset to their defaults and
    passed for theirs; it says what it was run with now, and which inputs differ."""
    monkeypatch.setenv("INFERENCE_LAB_RUNS_DIR", str(tmp_path))
    from engine.batching.sweep import Sweep, SweepPoint
    from engine.core.jsonsafe import to_jsonable
    from engine.runtime import runlog

    at = _page()
    points = tuple(SweepPoint(b, 10.0 * b, 1.0, 0.02, 0.1, 12.0 * b, 0.9, 10**8) for b in (1, 2))
    sweep = Sweep("tiny-gpt-neo", 13, 4, points, 100, 1e9, False, 1e9, 1e11)
    runlog.save_result(
        "batching-sweep",
        to_jsonable(sweep),
        wall_s=3.0,
        session=at.session_state["lab.session"],
        settings={"model": "tiny-gpt-neo", "sizes": [1, 2], "max_new_tokens": 4},
    )
    reloaded = AppTest.from_file(PAGE, default_timeout=120)
    reloaded.query_params["session"] = at.session_state["lab.session"]
    reloaded.run()
    reloaded.sidebar.selectbox(key="batching.model").select("tiny-gpt-neo").run()
    assert not reloaded.exception
    said = next(i.value for i in reloaded.info if "kept across the page reload" in i.value)
    assert "It was run with model tiny-gpt-neo, sizes 1, 2, max new tokens 4." in said
    assert "**not** these (sizes, max new tokens differ)" in said, said


def test_the_live_table_wraps_its_latest_text_instead_of_cutting_it():
    """At 1280 px the live table's 'latest text' column was cut at the right edge (a dataframe's fixed columns); it
    is a table whose cells wrap now (checked in Chromium at 1280 x 900), numbers as rounded."""

    def script():
        from engine.batching.handle import RowView, SchedulerSnapshot
        from ui.batching_widgets import show_snapshot

        text = " In-flight batching lets new requests join a running batch at"[-60:]
        rows = tuple(RowView(2 + i, "running", 30, 12, 24, 0.01 * i, 3.2, text) for i in range(6))
        show_snapshot(SchedulerSnapshot("m", True, 8, 10**9, 9216, 5 * 10**6, 64, rows, (), 80, 300, 1, ()))

    at = AppTest.from_function(script, default_timeout=60).run()
    assert not at.exception and not at.dataframe
    table = at.table[0].value
    assert list(table["request"]) == [2, 3, 4, 5, 6, 7] and list(table["queued (s)"])[:2] == ["0", "0.01"]
    assert table["latest text"][0] == "In-flight batching lets new requests join a running batch at"[-60:]


def test_the_simulated_users_clock_forecasts_from_quiet_runs_of_the_same_settings(monkeypatch, tmp_path):
    """The presenter's quiet walk: Simulate N users' clock read its forecast off the last replay of any settings,
    a 75 s one made beside other work, where its quiet replays took seconds. It asks for the median of the quiet
    replays of these settings now (ui.pace.expected), and stores the load measured while it ran (other programs'
    CPU, not the load average at its two ends alone), so the next forecast can tell a busy replay."""
    from engine.runtime import runlog
    from ui import batching_widgets, pace

    monkeypatch.setenv("INFERENCE_LAB_RUNS_DIR", str(tmp_path))
    asked: list = []
    real = pace.expected
    monkeypatch.setattr(pace, "expected", lambda *a, **k: asked.append((a, k)) or real(*a, **k))

    def script():
        from types import SimpleNamespace

        import streamlit as st

        from engine.batching.spec import UsersSpec
        from ui.batching_widgets import simulate_users

        class Done:  # a request the scheduler has finished (with an error: no model runs here)
            def __init__(self, k):
                self.id, self.done, self.completion, self.error = k, True, None, "stopped"

            def cancel(self):
                pass

        class Scheduler:
            lm, max_batch, sent = SimpleNamespace(name="m", has_chat_template=False), 4, 0

            def submit(self, prompt, cfg):
                Scheduler.sent += 1
                return Done(Scheduler.sent)

            def snapshot(self):  # the counters at the users' start (the live view counts this run's steps)
                return None

        st.session_state["got"] = simulate_users(Scheduler(), UsersSpec(users=3, max_new_tokens=4))

    at = AppTest.from_function(script, default_timeout=60).run()
    assert not at.exception, at.exception
    [(args, _)] = asked
    assert args[:2] == (batching_widgets.USERS_EXPERIMENT, 12)
    assert args[2] == {"model": "m", "users": 3, "max_new_tokens": 4, "seconds between users": 0.0}
    stored = runlog.last_result(batching_widgets.USERS_EXPERIMENT)
    assert stored is not None and "others" in stored.settings["load"]  # measured while it ran (Linux /proc)


def test_simulated_replies_that_loop_say_why_under_the_table():
    """The presenter's walk: a simulated user's reply read oddly (greedy decoding of a 135M model repeats itself) and
    nothing said so. Under the table, one caption names the model and that the page measures how the requests
    share decode steps, not the text; with no reply looping there is none."""
    loop = "Bonjour! Hello in French is bonjour, said as a greeting. " * 2
    row = {
        "request": 2,
        "queued (s)": 0.0,
        "TTFT (s)": 0.5,
        "latency (s)": 2.0,
        "tokens": 24,
        "tokens/s": 12.0,
    }

    def captions(texts: list[str]) -> list[str]:
        at = _page()
        at.session_state["batching.users"] = {
            "n": len(texts),
            "model": "tiny-gpt-neo",
            "rows": [{**row, "batch seen": 2, "stop": "length", "text": t} for t in texts],
        }
        at.run()
        assert not at.exception
        return [c.value for c in at.caption if "replies repeat" in c.value]

    said = captions([loop, "Bonjour."])
    assert len(said) == 1 and said[0].startswith("1 of these 2 replies repeat: tiny-gpt-neo (")
    assert "how the requests share decode steps, not the quality of the text" in said[0]
    assert captions(["Bonjour.", "Hello."]) == []


def test_the_timelines_number_requests_from_one_as_the_simulated_users_are():
    """A student's walk: the Batching timelines read 'req 0 … req 7' beside simulated users numbered from 1."""
    from engine.batching.workload import PolicyResult, RequestResult
    from ui.batching_widgets import gantt_figure

    reqs = tuple(RequestResult(k, 8, 4, 0.0, 0.0, 0.1, 0.5, 0.5, 0.1, 0.5, 0.0, ()) for k in range(2))
    fig = gantt_figure(
        PolicyResult("static", "m", 2, 2, 8, 0.5, 16, 4, 0.1, 0.1, 0.5, 0.5, 0, 1.0, reqs), "t"
    )
    assert list(fig.layout.yaxis.categoryarray) == ["req 1", "req 2"]
    assert {y for bar in fig.data for y in bar.y} == {"req 1", "req 2"}
