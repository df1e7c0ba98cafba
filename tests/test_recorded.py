"""Recorded decode evidence (engine.runtime.recorded) and the words beside it (ui.narrative): rows carry their
machine and date, compiled decode's default follows the recorded numbers, and the sentences flip with them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.runtime import recorded
from ui import narrative

ROOT = Path(__file__).resolve().parents[1]


def decode_file(
    folder: Path, device: str, eager: float, compiled: float, compile_s: float, *, date: str, name: str = "a"
) -> Path:
    """A bench/decode.py result with one model, batch 1: the scheduler eager and compiled."""
    lanes = [
        {"lane": "plain generate", "batch": 1, "decode": "eager", "tokens_per_s": eager * 0.98},
        {
            "lane": "engine scheduler",
            "batch": 1,
            "decode": "eager",
            "tokens_per_s": eager,
            "fraction_of_read_bandwidth": 0.3,
        },
        {
            "lane": "engine scheduler, compiled",
            "batch": 1,
            "decode": "compiled",
            "tokens_per_s": compiled,
            "fraction_of_read_bandwidth": 0.3 * compiled / eager,
            "x_eager": compiled / eager,
            "greedy_equal_plain": True,
        },
    ]
    data = {
        "benchmark": "decode",
        "date": date,
        "machine": "box",
        "device": device,
        "hardware": {"cpu": "Some CPU", "gpu": "Some GPU" if device == "cuda" else None},
        "read_bandwidth_bytes_per_s": 40e9,
        "rows": [
            {
                "model": "m",
                "dtype": "fp32",
                "lanes": lanes,
                "compile_s": {"engine scheduler, compiled": 0.5},  # its graph was compiled by an earlier lane
                "compile_status": {"compile_s": {recorded.playground_shape(): compile_s}},
            }
        ],
    }
    path = folder / f"decode-{name}.json"
    path.write_text(json.dumps(data))
    return path


def test_the_default_follows_the_recorded_payback(tmp_path):
    # 20 -> 24 tok/s saves 1/120 s a token: a 25 s compile pays back after 3,000 tokens: off
    decode_file(tmp_path, "cpu", 20.0, 24.0, 25.0, date="2026-12-01T00:00:00+00:00")
    slow = recorded.compile_advice("cpu", "m", tmp_path)
    assert not slow.on and slow.payback_tokens == pytest.approx(3000)
    # a newer run where the compile is 5 s: 600 tokens, within the session's 1,024: on
    decode_file(tmp_path, "cpu", 20.0, 24.0, 5.0, date="2026-12-02T00:00:00+00:00", name="b")
    fast = recorded.compile_advice("cpu", "m", tmp_path)
    assert fast.on and fast.payback_tokens == pytest.approx(600)
    # compiled slower: never on, however cheap the compile
    decode_file(tmp_path, "cpu", 20.0, 19.0, 1.0, date="2026-12-03T00:00:00+00:00", name="c")
    assert not recorded.compile_advice("cpu", "m", tmp_path).on
    # another device kind has no evidence: off
    assert recorded.compile_advice("cuda", "m", tmp_path) == recorded.CompileAdvice(on=False)


def test_the_advice_sentence_flips_with_the_numbers(tmp_path):
    decode_file(tmp_path, "cpu", 20.0, 24.0, 25.0, date="2026-12-01T00:00:00+00:00")
    off = narrative.compile_advice_sentence(recorded.compile_advice("cpu", "m", tmp_path), 64, 1024)
    assert "1.20×" in off and "3,000 tokens" in off and "starts **off**" in off and "starts **on**" not in off
    decode_file(tmp_path, "cpu", 20.0, 24.0, 5.0, date="2026-12-02T00:00:00+00:00", name="b")
    on = narrative.compile_advice_sentence(recorded.compile_advice("cpu", "m", tmp_path), 64, 1024)
    assert "600 tokens" in on and "starts **on**" in on
    decode_file(tmp_path, "cpu", 20.0, 19.0, 1.0, date="2026-12-03T00:00:00+00:00", name="c")
    slower = narrative.compile_advice_sentence(recorded.compile_advice("cpu", "m", tmp_path), 64, 1024)
    assert "not faster" in slower and "0.95×" in slower
    none = narrative.compile_advice_sentence(recorded.CompileAdvice(on=False), 64, 1024)
    assert "No compiled-decode measurement" in none


def test_gpu_sentences_are_built_from_the_rows(tmp_path):
    decode_file(tmp_path, "cuda", 75.0, 600.0, 40.0, date="2026-12-01T00:00:00+00:00")
    rows = recorded.newest_run(recorded.load_decode_rows(tmp_path, "cuda"))
    assert {r.machine for r in rows} == {"Some GPU"} and rows[0].date.startswith("2026-12-01")
    [faster] = narrative.gpu_decode_sentences(rows)
    assert "30.0%" in faster and "240.0%" in faster and "faster (8.00× eager)" in faster
    decode_file(tmp_path, "cuda", 75.0, 70.0, 40.0, date="2026-12-02T00:00:00+00:00", name="b")
    [slower] = narrative.gpu_decode_sentences(
        recorded.newest_run(recorded.load_decode_rows(tmp_path, "cuda"))
    )
    assert "slower (0.93× eager)" in slower


def test_a_gpu_run_whose_compile_failed_says_so():
    """The lent H200 of 2026-12-04: bench.decode's compiled lanes fell back to eager (a CUDA graph replayed from a
    second thread); the sentence said "compiled decode was not recorded" and counted a fallen-back lane as eager."""
    path = ROOT / "bench" / "results" / "decode-cuda-gpt-neo-125m-random-20261204T181527Z.json"
    rows = [r for r in recorded.load_decode_rows(path.parent, "cuda") if r.source == path.name]
    assert rows and not any(r.decode == "compiled" for r in rows)
    sentences = narrative.gpu_decode_sentences(rows)
    assert len(sentences) == 2 and all("did not compile in this run" in s for s in sentences)
    eager = max(
        r.tokens_per_s for r in rows if r.batch == 1 and r.lane in ("engine generate", "engine scheduler")
    )
    assert f"({eager:,.0f} tokens/s)" in sentences[0]


def test_the_first_gpu_check_is_recorded_evidence_with_machine_and_date():
    """The committed scheduler file of the first lent H200 run: eager only, named by its gpu_check file."""
    rows = [
        r
        for r in recorded.load_decode_rows(ROOT / "bench" / "results", "cuda")
        if r.source.startswith("sched")
    ]
    assert rows, "bench/results/scheduler-gpu-*.json is the fixture"
    one = next(r for r in rows if r.batch == 1)
    assert "H200" in one.machine and one.date.startswith("2026-11-30")
    assert "MiB" not in one.machine and "GB, driver" in one.machine  # the app's byte unit (GB = 10^9 B)
    assert one.fraction_of_read_bandwidth == pytest.approx(0.0645, abs=1e-3) and one.decode == "eager"
    sentences = narrative.gpu_decode_sentences([r for r in rows if r.source == one.source])
    assert any("6.4%" in s and "compiled decode was not recorded" in s for s in sentences)
