"""AppTest smoke and a widget-driven run of the latency race page (real worker processes, tiny-gpt-neo)."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parents[1]
PAGE = "pages/5_Latency_race.py"


def _open() -> AppTest:
    """The page on its own (app.py's st.navigation router builds the menu; a page script runs alone too)."""
    return AppTest.from_file(str(ROOT / PAGE), default_timeout=120).run()


def _text(at: AppTest) -> str:
    parts = [m.value for m in at.markdown] + [i.value for i in at.info] + [w.value for w in at.warning]
    return "\n".join(str(p) for p in parts)


@pytest.mark.slow
def test_race_page_renders_without_running():
    at = _open()
    assert not at.exception, at.exception
    assert at.title[0].value.endswith("Latency race")
    text = _text(at)
    assert "deepspeed.init_inference" in text
    assert (
        "No recorded GPU results exist yet" in text or at.expander
    )  # recorded results, when present, are labelled
    assert "notebook" in text.lower()


@pytest.mark.slow
def test_race_page_runs_a_small_race_from_the_widgets():
    at = _open()
    at.selectbox(key="race.model").set_value("tiny-gpt-neo")
    at.multiselect(key="race.engines").set_value(["vanilla", "deepspeed"])
    at.multiselect(key="race.levers").set_value(["no-kv-cache", "static-compile"])
    at.slider(key="race.runs").set_value(2)
    at.slider(key="race.max_new").set_value(8)
    at.button[0].click()
    at.run(timeout=600)
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]
    result = at.session_state["race.result"]
    status = {c["name"]: c for c in result["contenders"]}
    assert status["vanilla"]["status"] == "ran" and status["no-kv-cache"]["status"] == "ran"
    assert status["static-compile"]["status"] == "skipped"
    assert status["deepspeed"]["status"] == "ran" and status["deepspeed"]["kernel_inject"] is False
    assert len(at.table) >= 4  # verdicts, statuses, speed, quality
    assert any("Live run" in s.value for s in at.subheader)
    assert any(
        "no interval" in i.value for i in at.info
    )  # 2 runs: the speedups are points, said before the race


def test_recorded_gpu_results_are_shown_labelled(tmp_path, monkeypatch):
    from engine.race import runner

    rows = [
        runner.ContenderResult(
            "vanilla",
            "Vanilla",
            "",
            "ran",
            latencies_s=[1.0, 1.1, 0.9],
            tokens_per_s=[64, 58, 71],
            ttfts_s=[0.02] * 3,
            tpots_s=[0.015] * 3,
            output_tokens=[64] * 3,
            token_ids=[[1, 2, 3]],
        ),
        runner.ContenderResult(
            "deepspeed",
            "DeepSpeed",
            "",
            "failed",
            reason="deepspeed.init_inference failed: boom",
            deepspeed_mode="kernel injection",
        ),
    ]
    rec = runner.RaceResult(
        model="gpt-neo-125m-random",
        dtype="auto",
        device="cuda",
        runs=3,
        warmup=1,
        max_new_tokens=64,
        prompts=["p"],
        started_at="2026-12-01T10:00:00+00:00",
        hardware={"gpu": "NVIDIA H200 (test fixture)", "accelerator": "cuda"},
        contenders=rows,
    )
    runner.compare(rec.contenders)
    runner.save(rec, tmp_path)
    from engine.race import serialise

    monkeypatch.setattr(serialise, "RESULTS_DIR", tmp_path)
    at = _open()
    assert not at.exception, at.exception
    labels = [e.label for e in at.expander]
    assert any(
        label.startswith("Recorded, not live: gpt-neo-125m-random on NVIDIA H200 (test fixture) · 2026-12-01")
        for label in labels
    ), labels
    assert "No recorded GPU results exist yet" not in _text(at)
    # the start time as a person reads it (it was '2026-12-01T10:00:00+00:00')
    assert any("started 2026-12-01 10:00 UTC" in c.value for c in at.caption)
    # the presenter's walk: "races on this kind of CPU machine" stood above H200 entries; the caption counts both
    assert any(
        c.value.startswith("1 recorded race, none of them live: 1 by the repository's GPU check on NVIDIA H200 "
                           "(test fixture), and 0 by the race benchmark") for c in at.caption
    )  # fmt: skip


def test_an_empty_contender_list_shows_a_clear_error():
    at = _open()
    at.multiselect(key="race.engines").set_value([])
    at.multiselect(key="race.levers").set_value([])
    at.button[0].click()
    at.run()
    assert not at.exception, at.exception
    assert any("no contenders chosen" in e.value for e in at.error), [e.value for e in at.error]


def _recorded_race(fast_latency: float, diverge_at: int | None):
    """A finished race as the page keeps it: vanilla and one peer lane, 3 runs after 1 warm-up."""
    from engine.race import runner, serialise, verdict

    ids = [1, 2, 3, 4] if diverge_at is None else [1, 2, 3, 4][:diverge_at] + [9] * (4 - diverge_at)

    def lane(name, label, latencies, token_ids, **kw):
        return runner.ContenderResult(
            name,
            label,
            "",
            "ran",
            group="engines",
            latencies_s=latencies,
            warmup_s=[1.0],
            token_ids=[token_ids, [5], [6]],
            texts=["t"],
            output_tokens=[4] * 3,
            tokens_per_s=[4.0] * 3,
            ttfts_s=[0.1] * 3,
            tpots_s=[0.1] * 3,
            **kw,
        )

    rows = [
        lane("vanilla", "Vanilla", [1.0, 1.02, 0.98], [1, 2, 3, 4]),
        lane(
            "ctranslate2",
            "CTranslate2 float32",
            [fast_latency * f for f in (1.0, 1.01, 0.99)],
            ids,
            engine="ctranslate2",
            engine_version="4.8.5",
            precision="fp32",
            conversion_s=14.0,
            converted_now=False,
            peak_rss_bytes=600_000_000,
        ),
    ]
    rec = runner.RaceResult(
        model="smollm2-135m-instruct",
        dtype="auto",
        device="cpu",
        runs=3,
        warmup=1,
        max_new_tokens=4,
        prompts=["p", "q", "r"],
        started_at="2026-11-30T06:00:00+00:00",
        hardware={"cpu": "test CPU", "cpu_cores_logical": 2, "accelerator": "cpu"},
        contenders=rows,
        load_avg_start=(0.5, 0.5, 0.5),
    )
    runner.compare(rec.contenders)
    rec.winner = verdict.winner_line(rec.contenders)
    return serialise.to_dict(rec)


def _verdicts(at: AppTest) -> dict[str, str]:
    frame = next(d.value for d in at.table if "verdict" in d.value.columns)
    return dict(zip(frame["lane"], frame["verdict"], strict=True))


@pytest.mark.parametrize(
    ("latency", "diverge_at", "speed", "quality"),
    [
        (0.5, 2, "2.00× faster", "output diverges at token 2"),
        (2.0, None, "2.00× slower", "same output as vanilla on all 3 prompts"),
    ],
)
def test_the_verdict_and_winner_lines_follow_the_numbers(latency, diverge_at, speed, quality):
    at = AppTest.from_file(str(ROOT / PAGE), default_timeout=120)
    at.session_state["race.result"] = _recorded_race(latency, diverge_at)
    at.run()
    assert not at.exception, at.exception
    line = _verdicts(at)["CTranslate2 float32"]
    assert line.startswith(speed) and quality in line
    winner = next(m.value for m in at.markdown if m.value.startswith("**Winner.**"))
    assert ("Fastest: CTranslate2 float32" in winner) == (latency < 1)
    assert ("No lane beat vanilla" in winner) == (latency > 1)


def _all_text(at: AppTest) -> str:
    """Everything the page puts on screen as text: markdown, captions, alerts, code, expander labels, tables."""
    parts = [m.value for m in at.markdown] + [c.value for c in at.caption]
    parts += [x.value for kind in (at.info, at.warning, at.error, at.success, at.code) for x in kind]
    parts += [e.label for e in at.expander]
    parts += [d.value.to_csv() for d in [*at.dataframe, *at.table]]
    return "\n".join(str(p) for p in parts)


def test_a_recorded_failed_lane_shows_one_line_and_no_traceback_or_server_path():
    """The recorded H200 race: its DeepSpeed lanes failed with a traceback through /work/main, /opt/torch and
    /tmp/ds-site. The page says "failed" and why in one line, explains the missing winner, and shows no path."""
    from engine.race import serialise

    files = [p for p, r in serialise.load_recorded() if any(c.traceback for c in r.contenders)]
    assert files, "the recorded GPU race with a failed DeepSpeed lane is part of bench/results"
    at = _open()
    assert not at.exception, at.exception
    text = _all_text(at)
    for raw in ("Traceback", "/work/", "/opt/", "/tmp/", ".venv/bin", 'File "', "(? for vanilla)"):
        assert raw not in text, raw
    assert (
        "failed: deepspeed could not be imported in the lane's Python environment (versions disagree: "
        in text
    )
    assert "AttributeError" not in text, "words, not an exception's repr"
    assert "INFERENCE_LAB_TOKENIZER" not in text, "words, not a variable's name"
    from engine.race.compat import TOKENIZER_NOTE  # every lane of the GPU races carries it: said once a race

    assert text.count(TOKENIZER_NOTE) == sum(1 for _, r in serialise.load_recorded() if r.contenders[0].notes)
    assert (
        "No winner: every other lane (DeepSpeed, DeepSpeed (pinned env)) failed, so there is nothing" in text
    )


@pytest.mark.parametrize(
    ("latencies", "way", "words"),
    [
        ((0.5, 0.505, 0.495), "faster", "faster"),
        ((2.0, 2.02, 1.98), "slower", "slower"),
        ((0.3, 1.6, 0.9), "same", "no measurable difference"),
    ],
)
def test_the_speedup_bars_carry_the_verdicts_colour_and_interval(latencies, way, words):
    """The recorded CPU race drew DeepSpeed pass-through as a 2.04x bar beside 'no measurable difference
    (0.71x-2.69x)'. Each bar now takes the verdict's own direction (colour and words) and its interval."""
    from engine.race import serialise, verdict
    from ui.race_widgets import VERDICT_COLOURS, speedup_figure

    race = serialise.from_dict(_recorded_race(1.0, None))
    lane = next(c for c in race.contenders if c.name == "ctranslate2")
    lane.latencies_s = list(latencies)
    from engine.race import runner

    runner.compare(race.contenders)
    fig = speedup_figure(race)
    bar, said = fig.data[0], _bar_words(fig, "CTranslate2 float32")
    assert list(bar.x) == ["CTranslate2 float32"]  # vanilla is the dotted 1x line, not a bar
    assert bar.marker.color[0] == VERDICT_COLOURS[way]
    assert words in said and words in verdict.lane_verdict(lane)
    assert f"({lane.speedup_low:.2f}–{lane.speedup_high:.2f})" in said
    assert bar.error_y.array[0] > 0 and bar.error_y.arrayminus[0] > 0


def test_a_pass_through_bar_is_never_drawn_as_a_win():
    from engine.race import runner, serialise, verdict
    from ui.race_widgets import VERDICT_COLOURS, speedup_figure

    race = serialise.from_dict(_recorded_race(0.5, None))
    lane = next(c for c in race.contenders if c.name == "ctranslate2")
    lane.deepspeed_mode = "pass-through (no CUDA)"
    runner.compare(race.contenders)
    fig = speedup_figure(race)
    assert "noise" in verdict.lane_verdict(lane)
    assert fig.data[0].marker.color[0] == VERDICT_COLOURS["same"]
    assert "no measurable difference" in _bar_words(fig, "CTranslate2 float32")


def test_a_bar_whose_ratio_is_unreliable_is_not_drawn_as_a_win():
    """The student's race drew a lane green beside its verdict's "not a reliable ratio" (vanilla's re-run at the
    end had drifted): the bar now takes the verdict's neutral colour and words."""
    from engine.race import runner, serialise, verdict
    from ui.race_widgets import VERDICT_COLOURS, speedup_figure

    race = serialise.from_dict(_recorded_race(0.5, None))
    runner.compare(race.contenders)
    lane = next(c for c in race.contenders if c.name == "ctranslate2")
    lane.baseline_drift = 1.3  # vanilla 30% slower at the end than at the start
    assert "not a reliable ratio" in verdict.lane_verdict(lane)
    fig = speedup_figure(race)
    assert fig.data[0].marker.color[0] == VERDICT_COLOURS["same"]
    assert fig.data[0].marker.color[0] != VERDICT_COLOURS["faster"]
    assert "not a reliable ratio" in _bar_words(fig, "CTranslate2 float32")


def _bar_words(fig, label: str) -> str:
    """The words drawn above a bar (an annotation over its whisker)."""
    return next(a.text for a in fig.layout.annotations if a.x == label)


def test_a_recorded_pinned_lane_is_said_to_run_in_its_side_environment():
    """The recorded H200 races ran the pinned lane through a wrapper over the image's Python, so its interpreter
    path looked like the app's own: the page said "this app's Python" for the pinned side environment."""
    from engine.race import serialise
    from ui.race_widgets import SIDE_ENV_LANES, _interpreter

    pinned = [c for _, r in serialise.load_recorded() for c in r.contenders if c.name == "deepspeed-pinned"]
    assert pinned and all(".venv" in Path(c.python).parts for c in pinned)  # the path alone would mislead
    assert {_interpreter(c) for c in pinned} == {SIDE_ENV_LANES["deepspeed-pinned"]}
    vanilla = [c for _, r in serialise.load_recorded() for c in r.contenders if c.name == "vanilla"]
    assert {_interpreter(c) for c in vanilla} == {"this app's Python"}


def test_the_baseline_row_reads_as_the_baseline_not_as_a_ratio_against_itself():
    """A student read 'Vanilla 1.00× [0.33–3.04]': an interval of the baseline against itself, 9x wide. Its row
    now says it is the baseline and that the span is its own runs' spread."""
    from engine.race import serialise
    from ui.race_widgets import _speed_row

    rec = serialise.from_dict(_recorded_race(0.5, None))
    rows = {c.name: _speed_row(c)["speedup vs vanilla [95% CI]"] for c in rec.contenders}
    assert rows["vanilla"].startswith("1× (the baseline; its runs spread ")
    assert rows["ctranslate2"].endswith("]") and "baseline" not in rows["ctranslate2"]


# the button's row: its column, and the clock's place beside it (empty until a race runs)
LAYOUT = ("column", "flex_container", "empty")


def _after_button(at: AppTest):
    """The first thing drawn after the Run button, past its row's layout."""
    elements = list(at.main)
    start = next(i for i, e in enumerate(elements) if e.type == "button") + 1
    return next(e for e in elements[start:] if e.type not in LAYOUT)


def test_the_winner_is_said_right_under_the_run_button():
    """At 1280 x 900, with 'Run the race' in view, the race's winner and verdicts landed below the fold; the winner
    line now sits right under the button, the same line the results carry, and follows the numbers."""
    from engine.race import serialise, verdict

    for latency, words in ((0.5, "Fastest: CTranslate2 float32"), (2.0, "No lane beat vanilla")):
        at = AppTest.from_file(str(ROOT / PAGE), default_timeout=120)
        at.session_state["race.result"] = _recorded_race(latency, None)
        at.run()
        assert not at.exception, at.exception
        after = _after_button(at)
        line = verdict.winner_line(serialise.from_dict(_recorded_race(latency, None)).contenders)
        assert (
            after.type == "markdown"
            and after.value.startswith(f"**Winner.** {line}")
            and words in after.value
        )


def test_the_default_race_never_starts_a_lane_that_is_not_installed(monkeypatch):
    """The presenter's walk: the page preselected CTranslate2 on a machine without it, ran a minute, and showed
    'CTranslate2 is not installed in ~/.pyenv/versions/3.11.7/bin/python3.11: install the peer engines with bash
    scripts/install_peers.sh' (and the baseline's version as its engine's)."""
    from engine.race.peers import base
    from ui.race_widgets import race_defaults

    monkeypatch.setattr(base, "version", lambda dist: None)
    assert race_defaults() == ("vanilla",)
    usable, _, why = base.availability("ctranslate2")
    assert not usable and "README" in why and "/" not in why and "scripts" not in why
    monkeypatch.setattr(base, "version", lambda dist: "1.0" if dist == "onnxruntime-genai" else None)
    assert race_defaults() == ("vanilla", "onnxruntime-genai")


def test_bits_per_byte_says_how_much_text_it_scored_and_why_the_quantization_page_differs():
    """The race read 'bits per byte (Python docs) 1.100' and the Quantization page fp32 '1.1534' for the same model,
    neither saying how much text it scored: they read as a contradiction. The race now names its 8 documents and
    their bytes, gives four decimals as the Quantization page does, and says why the two figures differ."""
    from engine.lab.evaluation import scored_text
    from engine.race.quality import BPB_DOCUMENTS

    race = _recorded_race(0.5, None)
    for lane in race["contenders"]:
        lane["bits_per_byte"] = 1.10037
    at = AppTest.from_file(str(ROOT / PAGE), default_timeout=120)
    at.session_state["race.result"] = race
    at.run()
    assert not at.exception, at.exception
    header = f"bits per byte (first {BPB_DOCUMENTS} Python docs)"
    frame = next(d.value for d in at.table if header in d.value.columns)
    assert set(frame[header]) == {"1.1004"}
    said = _text(at)
    assert f"*Bits per byte* on {scored_text(BPB_DOCUMENTS)}" in said
    assert "the first 8 of the 48 documents of the shipped Python documentation text (4.97 KB)" in said
    assert "The Quantization page scores as many of those documents as its box asks" in said


def test_a_busy_race_says_in_plain_words_what_the_other_work_was_and_what_it_means():
    """'1-minute load average 4.6 before it and up to 2.1 beyond the race's own threads' was hard to parse. The
    note now says how much other work ran, in cores' worth on this machine, and what that does to the timings; a
    race recorded with the old line is worded again from its readings."""
    from engine.race.runner import busy_note

    race = _recorded_race(0.5, None)
    race["load_avg_start"] = [4.6, 3.0, 2.0]
    for lane, after in zip(race["contenders"], (3.5, 4.1), strict=True):
        lane["load_avg"] = [4.0, after]
    race["notes"] = [
        "the machine was busy during the race (1-minute load average 4.6 before it and up to 2.1 beyond the race's "
        "own threads, on 2 cores): timings include contention from other processes; rerun for cleaner numbers"
    ]
    at = AppTest.from_file(str(ROOT / PAGE), default_timeout=120)
    at.session_state["race.result"] = race
    at.run()
    assert not at.exception, at.exception
    said = _text(at)
    assert "beyond the race's own threads" not in said
    assert (
        "Other work was running on this machine during the race: before the race began, about 4.6 cores' worth "
        "of work was running or waiting on this 2-core machine (its 1-minute load average); while the lanes ran, "
        "other programs added up to 2.1 cores' worth on top of the race's own. Every timing here includes time "
        "the race spent waiting for that work"
    ) in said
    assert busy_note(float("nan"), 0.0, 2).startswith(
        "Other work was running on this machine during the race. "
    )


def test_a_race_measured_busy_calls_no_winner():
    """The presenter's walk: live on a busy machine the race read 'CTranslate2 float32, 21.79× faster' where the quiet
    recorded race says 2.19× faster: no winner is called from a busy race, under the button or in its results."""
    at = AppTest.from_file(str(ROOT / PAGE), default_timeout=120)
    at.session_state["race.result"] = _recorded_race(0.5, None)
    at.session_state["pace.race.load"] = {"before": 4.6, "after": 6.1, "cores": 2}
    at.run()
    assert not at.exception, at.exception
    said = [m.value for m in at.markdown]
    assert sum(v.startswith("**Winner: not called.**") for v in said) == 2  # under the button, in the results
    after = _after_button(at)
    assert after.value.startswith("**Winner: not called.**") and "21" not in after.value
    # the lanes' verdicts and bars say the same (the third walk: 'not called' over '2.51× faster beyond noise')
    lane = _verdicts(at)["CTranslate2 float32"]
    assert lane.startswith("not comparable: measured on a busy machine") and "faster" not in lane
    from engine.race import serialise
    from ui.race_widgets import speedup_figure

    bars = speedup_figure(serialise.from_dict(_recorded_race(0.5, None)), busy=True)
    assert set(bars.data[0].customdata) == {"unreliable"}


def test_the_presenter_note_and_the_clock_are_in_view_by_the_run_button():
    """The presenter's quiet walk at 1280 x 800: the race's progress bar and presenter mode's note sat below the
    fold (under the contenders' list and the results' heading), so Run showed nothing move. The clock's place is
    beside the button now, and the note comes right after the winner line, before anything else."""
    from engine.runtime import runlog

    quiet = {"before": 0.1, "after": 0.3, "cores": 2, "others": 0.05}
    runlog.save_result(
        "race", _recorded_race(0.5, None), wall_s=40.0, session="e" * 12, settings={"load": quiet}
    )
    at = AppTest.from_file(str(ROOT / PAGE), default_timeout=120)
    at.query_params["presenter"] = "1"
    at.run()
    assert not at.exception, at.exception
    elements = list(at.main)
    button = next(i for i, e in enumerate(elements) if e.type == "button")
    # the button's row: its column, then the clock's (an empty place until a race runs)
    assert [e.type for e in elements[button + 1 : button + 3]] == ["column", "empty"]
    shown = [e for e in elements[button + 1 :] if e.type not in LAYOUT and e.type != "vertical"]
    assert shown[0].value.startswith("**Winner.**")
    assert shown[1].type == "info" and shown[1].value.startswith("Presenter mode"), shown[1]
