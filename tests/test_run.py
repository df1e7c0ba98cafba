"""The one run call (engine.runtime.run): every route gives the old paths' greedy tokens, events carry the engine's
own token count, a cancel keeps the text, the run is logged once with its source, a compile stays out of the
per-token figures, and an empty completion says why."""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
from pathlib import Path

import pytest

from engine.batching.scheduler import Scheduler
from engine.runtime import generation, run, runlog
from engine.runtime.metrics import without_compile
from engine.runtime.sampling import eos_ids
from engine.runtime.settings import GenerationConfig

ROOT = Path(__file__).resolve().parents[1]
# Greedy token ids of generate, the shared scheduler and a padded batch at commit 776c069 (the old paths, before
# the run call), made by running the old tree on the same prompts.
REFERENCE = json.loads((ROOT / "tests/data/greedy_reference.json").read_text())


def _routes(lm, prompts, cfg):
    """The run call's tokens per route: direct (run.run), streamed, through a scheduler, as one batch."""
    out = {"direct": [list(run.run(lm, p, cfg, record=False).completion.token_ids) for p in prompts]}
    out["stream"] = []
    for p in prompts:
        r = run.start(lm, p, cfg, record=False)
        text = "".join(e.text for e in r.events())
        report = r.report()
        assert report.route == "stream" and text == report.completion.text
        out["stream"].append(list(report.completion.token_ids))
    sched = Scheduler(lm, max_batch=8, record=False)
    try:
        live = [run.start(lm, p, cfg, scheduler=sched, record=False) for p in prompts]
        assert {r.route for r in live} == {"scheduler"}
        out["scheduler"] = [list(r.report().completion.token_ids) for r in live]
    finally:
        sched.close()
    batch = run.start(lm, prompts, cfg, record=False).report()
    assert batch.route == "batch"
    out["batch"] = [list(c.token_ids) for c in batch.completions]
    return out


def _check_against_reference(lm, model: str) -> None:
    ref = REFERENCE["models"][model]
    for key in ("raw", "chat"):
        if f"generate_{key}" not in ref:
            continue
        cfg = GenerationConfig(max_new_tokens=ref["max_new_tokens"], chat_template=key == "chat")
        got = _routes(lm, REFERENCE["prompts"], cfg)
        for route, tokens in got.items():
            old = ref["batch_" + key] if route == "batch" else ref["generate_" + key]
            assert tokens == old, f"{model} {key} {route}: greedy tokens differ from the old path's"
        assert ref["scheduler_" + key] == ref["generate_" + key]  # the old paths agreed among themselves


def test_every_route_gives_the_old_paths_greedy_tokens(tiny_lm):
    _check_against_reference(tiny_lm, "tiny-gpt-neo")


@pytest.mark.slow
def test_every_route_gives_the_old_paths_greedy_tokens_on_the_bundled_model(smol_lm):
    _check_against_reference(smol_lm, "smollm2-135m-instruct")


def test_choose_route():
    cfg, off = GenerationConfig(), GenerationConfig(use_cache=False)
    shared = object()
    assert run.choose_route(["a", "b"], cfg, shared) == "batch"
    assert run.choose_route(["a"], cfg, shared) == "scheduler"
    assert run.choose_route(["a"], off, shared) == "stream"  # the scheduler always keeps a KV cache
    assert run.choose_route(["a"], cfg, None) == "stream"


def test_events_count_tokens_without_retokenizing(tiny_lm):
    r = run.start(tiny_lm, "Count my tokens", GenerationConfig(max_new_tokens=12), record=False)
    events = list(r.events(every_s=0.05))
    report = r.report()
    counts = [e.tokens for e in events]
    assert counts == sorted(counts) and counts[-1] <= report.completion.measurement.output_tokens
    assert all(b.elapsed_s >= a.elapsed_s for a, b in itertools.pairwise(events))
    assert report.latencies[0] == report.completion.measurement.ttft_s
    assert len(report.latencies) == report.completion.measurement.output_tokens


def test_cancel_keeps_the_text_so_far(tiny_lm):
    sched = Scheduler(tiny_lm, max_batch=2, record=False)
    try:
        r = run.start(
            tiny_lm, "cancel me", GenerationConfig(max_new_tokens=2000), scheduler=sched, record=False
        )
        for e in r.events(every_s=0.05):
            if e.tokens >= 3:
                r.cancel()
        report = r.report()
    finally:
        sched.close()
    assert report.stop_reason == "cancelled" and 3 <= report.completion.measurement.output_tokens < 2000


def test_a_run_is_logged_once_with_its_source(tiny_lm):
    before = len(runlog.load("tiny-gpt-neo"))
    run.run(tiny_lm, "log me", GenerationConfig(max_new_tokens=3), source="playground")
    logging_scheduler = Scheduler(tiny_lm, max_batch=2, record=True)  # it logs its own requests ...
    try:
        run.start(tiny_lm, "log me", GenerationConfig(max_new_tokens=3), scheduler=logging_scheduler).report()
    finally:
        logging_scheduler.close()
    logged = runlog.load("tiny-gpt-neo")[before:]
    assert len(logged) == 2  # ... so the run call does not log it again
    assert logged[0].source == "playground" and logged[0].stop_reason in ("eos", "length")


def test_report_says_busy_by_the_one_rule(tiny_lm, monkeypatch):
    # what other processes took while it ran decides where it was measured
    monkeypatch.setattr(run, "others_during", lambda *a: 1.6)
    assert run.run(tiny_lm, "busy?", GenerationConfig(max_new_tokens=2), record=False).busy
    monkeypatch.setattr(run, "others_during", lambda *a: 0.1)
    assert not run.run(tiny_lm, "busy?", GenerationConfig(max_new_tokens=2), record=False).busy
    # else the load-average rule
    monkeypatch.setattr(run, "others_during", lambda *a: float("nan"))
    monkeypatch.setattr(run, "loadavg_1m", lambda: 9.0)
    monkeypatch.setattr(run, "cores", lambda: 2)
    assert run.run(tiny_lm, "busy?", GenerationConfig(max_new_tokens=2), record=False).busy
    monkeypatch.setattr(run, "loadavg_1m", lambda: 0.5)
    assert not run.run(tiny_lm, "busy?", GenerationConfig(max_new_tokens=2), record=False).busy


# ----------------------------------------------------------------------------- an empty completion says why
def _empty_report(lm, monkeypatch, chat: bool):
    """A run whose model emits its end-of-sequence token first (what an instruct model does to a bare question)."""
    eos = min(eos_ids(lm))
    real = generation.generate

    def ends_at_once(lm_, prompt, cfg, **kw):
        c = real(lm_, prompt, GenerationConfig(max_new_tokens=1), **kw)
        return dataclasses.replace(c, text="", token_ids=(eos,), stop_reason="eos")

    monkeypatch.setattr(generation, "generate", ends_at_once)
    cfg = GenerationConfig(max_new_tokens=8, chat_template=chat)
    return run.run(lm, "What is the capital of France?", cfg, record=False), cfg


def test_an_empty_completion_points_to_the_chat_template(tiny_lm, monkeypatch):
    monkeypatch.setattr(type(tiny_lm), "has_chat_template", property(lambda self: True))
    report, cfg = _empty_report(tiny_lm, monkeypatch, chat=False)
    assert report.ended_at_once
    note = run.ended_at_once_note(report, tiny_lm, cfg, "--chat")
    assert "ended at once" in note and "first token" in note and "--chat" in note
    report, cfg = _empty_report(tiny_lm, monkeypatch, chat=True)  # already a chat turn: no pointer to it
    assert "--chat" not in run.ended_at_once_note(report, tiny_lm, cfg, "--chat")


def test_a_completion_with_text_has_no_note(tiny_lm):
    cfg = GenerationConfig(max_new_tokens=4)
    report = run.run(tiny_lm, "The capital of France is", cfg, record=False)
    assert report.completion.text and not report.ended_at_once
    assert run.ended_at_once_note(report, tiny_lm, cfg, "--chat") == ""


# ----------------------------------------------------------------------------- a compile stays out of the figures
def test_without_compile_cuts_the_compiling_gap_to_an_ordinary_step():
    times = [0.0, 0.1, 21.2, 21.3, 21.4]  # token 2's step compiled for 21 s
    fixed, cut = without_compile(times, [2])
    assert fixed == pytest.approx([0.0, 0.1, 0.2, 0.3, 0.4]) and cut == pytest.approx(21.0)
    assert without_compile(times, []) == (times, 0.0)
    assert without_compile([0.0, 5.0], [1]) == ([0.0, 5.0], 0.0)  # no ordinary step to compare with


def test_a_compiled_runs_tpot_excludes_its_compile(tiny_lm, monkeypatch):
    """A first compiled run reported its compile inside every per-token figure (`generate --compile` on the bundled
    model: tpot_s 0.380 s against 0.058 s eager, the 21 s compile spread over its steps). A compile made slow on
    purpose (1 s) must show up once, as compile_s, with the run's wall beside it, and not in TPOT."""
    import time
    import weakref

    from engine.runtime import compiled

    def slow_compile(fn, mode):
        first = [True]

        def step(*args):
            if first[0]:
                first[0] = False
                time.sleep(1.0)
            return fn(*args)

        return step

    monkeypatch.setattr(compiled, "_DECODERS", weakref.WeakKeyDictionary())  # a fresh, uncompiled step
    monkeypatch.setattr(compiled, "_compile", slow_compile)
    monkeypatch.setattr(compiled.shutil, "which", lambda name: "/usr/bin/c++")
    cfg = GenerationConfig(max_new_tokens=12, compile=True)
    report = run.run(tiny_lm, "The history of the printing press", cfg, record=False)
    c, m = report.completion, report.measurement
    assert c.decode == "compiled" and c.compile_s is not None and c.compile_s >= 0.9
    assert c.wall_s == pytest.approx(m.latency_s + c.compile_s, abs=1e-6)
    steps = [b - a for a, b in zip(c.token_times, c.token_times[1:], strict=False)]
    assert max(steps) < 0.9 and m.tpot_s < 0.9  # no step, and so no TPOT, holds the compile
    assert math.isclose(m.tpot_s, (m.latency_s - m.ttft_s) / (m.output_tokens - 1), rel_tol=1e-9)


def test_a_run_is_busy_by_the_others_load_not_its_own_threads():
    """The presenter's cache-off run (a minute on both cores, nothing else running) ended at load average 2.1 on 2
    cores and read 'busy, so slower than it runs when quiet': its own threads were counted as other work."""
    from engine.runtime.run import RunReport

    def report(before: float, after: float) -> RunReport:
        return RunReport(
            completions=(), measurement=None, route="stream", source=None, load=after, cores=2,
            ended_at_once=False, load_before=before, own_threads=2,
        )  # fmt: skip

    assert not report(0.9, 2.1).busy  # 2.1 less its own 2 threads
    assert report(2.5, 2.1).busy  # busy when it started
    assert report(0.9, 4.5).busy  # others' 2.5 at its end
