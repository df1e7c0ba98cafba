"""Peer engines as race lanes: each lane's greedy output for the bundled SmolLM2 against vanilla
(exact for the fp32 lanes, reported for the quantized ones), a peer that fails to import or cannot convert
a model family gives a lane with a clear reason, and a conversion is cached (the second run does not
convert). One race converts once per session (module fixture); scripts/install_peers.sh installs the peers."""

from __future__ import annotations

import math
import os
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from engine.race import runner
from engine.race.contenders import CONTENDERS
from engine.race.peers import base, cache

# one process runs the module, so its race fixture runs once (scripts/test.sh: --dist loadgroup)
pytestmark = pytest.mark.xdist_group("peer-race")

FP32 = ("openvino", "onnxruntime-genai", "ctranslate2")
QUANTIZED = ("openvino-int8", "onnxruntime-genai-int4", "ctranslate2-int8")


def _need(*engines: str) -> None:
    for name in engines:
        ok, _, why = base.availability(name)
        if not ok:
            pytest.skip(why)


@pytest.fixture(scope="module")
def peer_race():
    _need("openvino", "onnxruntime-genai", "ctranslate2")
    chosen = (CONTENDERS["vanilla"], *(CONTENDERS[n] for n in FP32 + QUANTIZED))
    spec = runner.RaceSpec(
        model="smollm2-135m-instruct",
        contenders=chosen,
        runs=1,
        warmup=0,
        max_new_tokens=16,
        recheck_baseline=False,
        timeout_s=900,
    )
    result = runner.run_race(spec)
    return {c.name: c for c in result.contenders}, result


@pytest.mark.slow
@pytest.mark.parametrize("name", FP32)
def test_fp32_peer_lanes_give_vanillas_greedy_tokens(peer_race, name):
    r = peer_race[0][name]
    assert r.status == "ran", r.reason + r.traceback
    assert (
        r.group == "engines"
        and r.engine == name
        and r.engine_version == base.version(base.backend(name).dist)
    )
    assert r.exact_match_rate == 1.0 and r.first_divergence_token is None, r.texts
    assert len(r.token_ids) == 3 and r.peak_rss_bytes > 0
    assert r.conversion_s is not None and r.conversion_s > 0 and r.conversion_dir
    assert math.isfinite(r.speedup_vs_vanilla) and not r.interval_shown  # 1 run: a point, no interval
    assert "same output as vanilla on all 3 prompts" in r.verdict


@pytest.mark.slow
@pytest.mark.parametrize("name", QUANTIZED)
def test_quantized_peer_lanes_are_measured_and_their_quality_reported(peer_race, name):
    r = peer_race[0][name]
    assert r.status == "ran", r.reason + r.traceback
    assert r.precision in ("int8", "int4")
    assert 0.0 <= r.exact_match_rate <= 1.0
    assert ("same output as vanilla" in r.verdict) == (r.exact_match_rate == 1.0)  # reported either way


@pytest.mark.slow
def test_bits_per_byte_where_log_probabilities_are_exposed(peer_race):
    by_name = peer_race[0]
    vanilla = by_name["vanilla"].bits_per_byte
    assert vanilla is not None and 0.3 < vanilla < 3
    for name in ("ctranslate2", "onnxruntime-genai"):  # fp32 engines: the same model, the same bits per byte
        assert by_name[name].bits_per_byte == pytest.approx(vanilla, rel=0.01), name
    assert by_name["openvino"].bits_per_byte is None
    assert by_name["openvino"].bits_per_byte_note.startswith("not exposed")


@pytest.mark.slow
def test_a_second_race_takes_the_conversion_from_the_cache(peer_race):
    first = peer_race[0]["ctranslate2"]
    spec = runner.RaceSpec(
        model="smollm2-135m-instruct",
        contenders=(CONTENDERS["ctranslate2"],),
        runs=1,
        warmup=0,
        max_new_tokens=4,
        prompts=("Hi",),
        recheck_baseline=False,
    )
    again = next(c for c in runner.run_race(spec).contenders if c.name == "ctranslate2")
    assert again.status == "ran", again.reason
    assert again.converted_now is False and again.conversion_dir == first.conversion_dir
    assert again.conversion_s == pytest.approx(first.conversion_s)  # the recorded time, not a new conversion


def test_conversion_runs_once_and_a_failed_one_leaves_nothing(tmp_path):
    calls = []

    def convert(tmp: Path) -> list[str]:
        calls.append(tmp)
        tmp.mkdir()
        (tmp / "weights").write_text("w")
        return ["fake-converter"]

    target = tmp_path / "engine-1" / "model-fp32"
    record, now = cache.ensure_converted(target, convert)
    assert now is True and (target / "weights").is_file() and record["command"] == ["fake-converter"]
    record2, now2 = cache.ensure_converted(target, convert)
    assert now2 is False and record2 == record and len(calls) == 1

    def broken(tmp: Path) -> list[str]:
        tmp.mkdir()
        raise RuntimeError("converter exited with code 1")

    other = tmp_path / "engine-1" / "other-fp32"
    with pytest.raises(RuntimeError):
        cache.ensure_converted(other, broken)
    assert not other.exists() and cache.cached(other) is None


@pytest.mark.slow
def test_a_peer_that_fails_to_import_or_cannot_convert_the_family_is_a_lane_with_its_reason(
    tmp_path, monkeypatch
):
    """A broken install (the module raises on import) and GPT-Neo, which CTranslate2 and ONNX Runtime GenAI's
    builder do not convert: each lane says why, the race goes on."""
    _need("onnxruntime-genai", "ctranslate2")
    broken = tmp_path / "shadow" / "onnxruntime_genai"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text(
        "raise ImportError('simulated broken wheel: libonnxruntime.so missing')\n"
    )
    monkeypatch.setenv("PYTHONPATH", str(broken.parent))  # the worker's path: the shadow before site-packages
    spec = runner.RaceSpec(
        model="tiny-gpt-neo",
        contenders=(CONTENDERS["vanilla"], CONTENDERS["onnxruntime-genai"], CONTENDERS["ctranslate2"]),
        runs=1,
        warmup=0,
        max_new_tokens=4,
        recheck_baseline=False,
        timeout_s=300,
    )
    by_name = {c.name: c for c in runner.run_race(spec).contenders}
    assert by_name["vanilla"].status == "ran"
    ort = by_name["onnxruntime-genai"]
    assert (
        ort.status == "failed" and "failed to import" in ort.reason and "simulated broken wheel" in ort.reason
    )
    assert "Peer engines in the latency race" in ort.reason and ort.verdict.startswith(
        "failed: "
    )  # one line, with what to do: the README's section, no script name on the page
    assert "Peer engines in the latency race" in ort.verdict
    ct2 = by_name["ctranslate2"]
    version = base.version("ctranslate2")
    assert ct2.status == "skipped"
    assert ct2.reason.startswith(f"not supported by CTranslate2 {version}: ") and "GPTNeoConfig" in ct2.reason


def test_a_peer_that_is_not_installed_says_how_to_install_it(monkeypatch):
    monkeypatch.setattr(base, "version", lambda dist: None)
    ok, version, why = base.availability("ctranslate2")
    assert not ok and version is None
    assert why.startswith("CTranslate2 is not installed in the lab's environment: the README's 'Peer engines")
    assert sys.executable not in why and "install_peers.sh" not in why
    rows = {r["lane"]: r for r in base.installed()}
    assert rows["ctranslate2"]["version"] == "not installed"


def test_peer_contenders_are_engines_with_their_precision():
    for name in FP32 + QUANTIZED:
        c = CONTENDERS[name]
        assert c.group == "engines" and c.peer in base.BACKENDS and c.precision in ("fp32", "int8", "int4")
    assert replace(CONTENDERS["ctranslate2"], peer=None).engine_name() == "transformers"
    assert (
        os.path.basename(
            str(cache.target_dir("ctranslate2", "4.8.5", cache.Source(Path("/x"), "m", "A", "a"), "fp32"))
        )
        == "m-fp32"
    )
