"""The latency race (engine/race): real worker processes on tiny-gpt-neo, plus the pure statistics."""

from __future__ import annotations

import json
import math
import os
import stat
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from engine.core import stats
from engine.core.errors import InvalidParameterError
from engine.race import contenders, quality, runner, serialise, verdict
from engine.race.contenders import CONTENDERS, Contender
from engine.race.record import ContenderResult

# one process runs the module, so its race fixture runs once (scripts/test.sh: --dist loadgroup)
pytestmark = pytest.mark.xdist_group("race")

ROOT = Path(__file__).resolve().parents[1]


def _script(path: Path, body: str) -> str:
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


# ---- pure parts -------------------------------------------------------------------------------------


def test_empty_contender_list_raises_a_clear_error():
    with pytest.raises(InvalidParameterError, match="no contenders chosen"):
        contenders.resolve([])
    with pytest.raises(InvalidParameterError, match="no contenders chosen"):
        runner.RaceSpec(model="tiny-gpt-neo", contenders=()).validate()


def test_unknown_contender_and_bad_spec_are_rejected():
    with pytest.raises(InvalidParameterError, match="unknown contender"):
        contenders.resolve(["vanilla", "warp-drive"])
    vanilla = (CONTENDERS["vanilla"],)
    with pytest.raises(InvalidParameterError, match="runs"):
        runner.RaceSpec(model="tiny-gpt-neo", contenders=vanilla, runs=0).validate()
    with pytest.raises(InvalidParameterError, match="max new tokens must be from 2 to 2048"):
        runner.RaceSpec(model="tiny-gpt-neo", contenders=vanilla, max_new_tokens=1).validate()


def test_resolve_puts_the_baseline_first_and_skips_a_missing_pinned_env(monkeypatch, tmp_path):
    monkeypatch.setenv(contenders.DS_PYTHON_ENV, str(tmp_path / "missing-python"))
    chosen = contenders.resolve(["no-kv-cache", "deepspeed-pinned"])
    assert [c.name for c in chosen] == ["vanilla", "no-kv-cache", "deepspeed-pinned"]
    pinned = chosen[-1]
    assert pinned.python == ""
    r = runner.run_worker(pinned, {}, timeout_s=5)
    assert r.status == "skipped" and "not an executable file" in r.reason


def test_divergence_and_exact_match():
    assert quality.first_divergence([1, 2, 3], [1, 2, 3]) is None
    assert quality.first_divergence([1, 2, 3], [1, 9, 3]) == 1
    assert quality.first_divergence([1, 2, 3], [1, 2]) == 2  # stopped early (EOS)
    assert quality.exact_match_rate([[1], [2], [3], [4]], [[1], [2], [0], [4]]) == 0.75


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the inherited peak is a Linux behaviour")
def test_a_workers_peak_rss_is_its_own_not_the_parents():
    """The presenter saw every race lane with the same peak RSS: getrusage's ru_maxrss survives fork and exec,
    so each worker reported the dashboard's own peak. A child of a process that touched 600 MB reports its own."""
    ballast = b"\x01" * 600_000_000  # written, so resident (not merely reserved)
    assert quality.peak_rss_bytes() > 600_000_000
    code = "from engine.race import quality; print(quality.peak_rss_bytes())"
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    del ballast
    assert 0 < int(child.stdout.split()[-1]) < 300_000_000


def test_speedup_is_a_ratio_of_medians_with_a_bootstrap_interval():
    base = [1.0, 1.1, 0.9, 1.05, 0.95]
    fast = [0.5, 0.55, 0.45, 0.52, 0.48]
    s = stats.speedup(base, fast)
    assert s.central == pytest.approx(1.0 / 0.5)
    assert s.low <= s.central <= s.high and s.rows == min(len(base), len(fast))
    same = stats.speedup(base, base)
    assert same.central == 1.0 and same.low <= 1.0 <= same.high
    assert math.isnan(stats.speedup([], fast).central)
    sp = stats.spread([1.0, 2.0, 3.0, 4.0])
    assert (sp.median, sp.q1, sp.q3) == (2.5, 1.75, 3.25)


def test_engine_race_never_imports_streamlit():
    for path in (ROOT / "engine" / "race").glob("*.py"):
        assert "streamlit" not in path.read_text(), path


# ---- real worker processes ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def race(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("interp")
    killed = _script(tmp / "killed-python", "kill -9 $$")
    chosen = [
        CONTENDERS["vanilla"],
        replace(CONTENDERS["vanilla"], name="vanilla-again", label="vanilla again"),
        CONTENDERS["no-kv-cache"],
        CONTENDERS["deepspeed"],
        CONTENDERS["sdpa"],
        CONTENDERS["static-compile"],
        replace(CONTENDERS["half"], name="bogus-python", python="/nonexistent/bin/python"),
        replace(CONTENDERS["fp32"], name="killed-worker", python=killed),
    ]
    spec = runner.RaceSpec(
        model="tiny-gpt-neo", contenders=tuple(chosen), runs=2, warmup=1, max_new_tokens=8, timeout_s=300
    )
    seen = []
    result = runner.run_race(spec, progress=lambda done, total, msg: seen.append((done, total)))
    assert seen[-1] == (len(chosen) + 1, len(chosen) + 1)  # + vanilla re-run at the end
    return {c.name: c for c in result.contenders}, result


@pytest.mark.slow
def test_race_completes_and_vanilla_matches_itself(race):
    by_name, _ = race
    for name in ("vanilla", "vanilla-again"):
        r = by_name[name]
        assert r.status == "ran", r.reason
        assert len(r.latencies_s) == 2 and all(x > 0 for x in r.latencies_s)
        assert r.first_divergence_token is None and r.exact_match_rate == 1.0
        assert r.quality_note == "identical greedy tokens"
        assert r.perplexity is not None and r.perplexity > 1
    assert by_name["vanilla"].speedup_vs_vanilla == 1.0
    assert by_name["vanilla-again"].perplexity == pytest.approx(by_name["vanilla"].perplexity)
    assert math.isfinite(by_name["vanilla-again"].speedup_low)


@pytest.mark.slow
def test_kv_cache_off_is_measured(race):
    r = race[0]["no-kv-cache"]
    assert r.status == "ran", r.reason
    assert r.use_cache is False and len(r.latencies_s) == 2
    assert math.isfinite(r.tpot_s_median) and math.isfinite(r.speedup_vs_vanilla)


@pytest.mark.slow
def test_deepspeed_on_cpu_is_labelled_pass_through_with_the_reason(race):
    pytest.importorskip("deepspeed")
    r = race[0]["deepspeed"]
    assert r.status == "ran", r.reason + r.traceback
    assert r.kernel_inject is False
    assert r.deepspeed_mode == "pass-through (CPU)"
    assert "no CUDA GPU" in r.reason and "replace_with_kernel_inject=False" in r.reason
    assert r.first_divergence_token is None  # pass-through computes exactly what vanilla does


@pytest.mark.slow
def test_unsupported_features_are_skipped_with_the_reason(race):
    by_name, _ = race
    assert by_name["static-compile"].status == "skipped"
    assert "_can_compile_fullgraph = False" in by_name["static-compile"].reason
    assert by_name["sdpa"].status == "skipped" and "_supports_sdpa" in by_name["sdpa"].reason


@pytest.mark.slow
def test_bogus_interpreter_and_killed_worker_are_reported_and_the_race_goes_on(race):
    by_name, result = race
    bogus = by_name["bogus-python"]
    assert bogus.status == "failed" and "could not start the worker" in bogus.reason
    assert result.baseline_recheck is not None and result.baseline_recheck.ran
    assert any(n.startswith("baseline") for n in result.notes)
    killed = by_name["killed-worker"]
    assert killed.status == "crashed" and killed.exit_code == -9 and "SIGKILL" in killed.reason
    assert [c.name for c in result.contenders][-1] == "killed-worker"  # the race reached the end


@pytest.mark.slow
def test_exports_round_trip(race, tmp_path):
    _, result = race
    data = json.loads(serialise.to_json(result))
    assert data["kind"] == "race" and len(data["contenders"]) == 8
    rows = serialise.to_csv(result).strip().splitlines()
    assert rows[0].startswith("name,label,group,status") and len(rows) == 9
    assert len(serialise.runs_csv(result).strip().splitlines()) == 1 + sum(
        len(c.latencies_s) for c in result.contenders
    )
    path = runner.save(result, tmp_path)
    (tmp_path / "not-a-race.json").write_text('{"kind": "other"}')
    (tmp_path / "broken.json").write_text("{")
    loaded = runner.load_recorded(tmp_path)
    assert [p for p, _ in loaded] == [path]
    assert loaded[0][1].summary_rows() == serialise.from_dict(data).summary_rows()
    assert loaded[0][1].baseline_recheck.name == "vanilla"


def test_a_hung_worker_is_killed_at_the_timeout(tmp_path):
    hung = _script(tmp_path / "hung-python", "sleep 60")
    c = Contender("hung", "hung", "sleeps", python=hung)
    r = runner.run_worker(c, {"contender": c.to_dict()}, timeout_s=1)
    assert r.status == "timeout" and "killed" in r.reason


@pytest.mark.slow
def test_cli_race_json_has_the_promised_fields():
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "engine",
            "race",
            "--model",
            "tiny-gpt-neo",
            "--contenders",
            "vanilla,ctranslate2",
            "--runs",
            "2",
            "--max-new-tokens",
            "4",
            "--no-baseline-recheck",
            "--json",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        check=True,
    )
    data = json.loads(out.stdout)
    for entry in data[
        "contenders"
    ]:  # the keys the --json contract promises, for a torch lane and a peer lane alike
        for key in (
            "name",
            "status",
            "engine_version",
            "latency_s_median",
            "ttft_s_median",
            "tpot_s_median",
            "tokens_per_s_median",
            "speedup_vs_vanilla",
            "exact_match_rate",
            "first_divergence_token",
            "peak_rss_bytes",
            "kernel_inject",
        ):
            assert key in entry, key
    entry = data["contenders"][0]
    assert entry["name"] == "vanilla" and entry["status"] == "ran" and entry["speedup_vs_vanilla"] == 1.0
    assert entry["peak_rss_bytes"] > 0 and entry["engine_version"]
    peer = data["contenders"][1]
    assert (
        peer["name"] == "ctranslate2" and peer["status"] != "ran" and peer["reason"]
    )  # GPT-Neo: not converted


@pytest.mark.slow
def test_pinned_environment_gives_vanilla_tokens():
    """The .venv-ds side environment (transformers 4.42.4) must compute the same greedy tokens as the
    main one: same seeded random weights, same token ids through the converted tokenizer."""
    path, why = contenders.ds_python()
    if path is None:
        pytest.skip(f"no pinned environment: {why}")
    pinned = replace(CONTENDERS["vanilla"], name="vanilla-pinned", python=path)
    spec = runner.RaceSpec(
        model="tiny-gpt-neo",
        contenders=(CONTENDERS["vanilla"], pinned),
        runs=1,
        max_new_tokens=8,
        timeout_s=300,
        recheck_baseline=False,
    )
    by_name = {c.name: c for c in runner.run_race(spec).contenders}
    r = by_name["vanilla-pinned"]
    assert r.status == "ran", r.reason + r.traceback
    assert r.versions["transformers"] == "4.42.4"
    assert r.first_divergence_token is None and r.exact_match_rate == 1.0


@pytest.mark.gpu
def test_kernel_injection_on_a_gpu_runs_or_explains_itself():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU (kernel injection is CUDA-only); scripts/gpu_check.sh runs this on one")
    pytest.importorskip("deepspeed")
    spec = runner.RaceSpec(
        model="gpt-neo-125m-random",
        contenders=(CONTENDERS["vanilla"], CONTENDERS["deepspeed"]),
        runs=3,
        max_new_tokens=16,
        timeout_s=600,
        recheck_baseline=False,
    )
    by_name = {c.name: c for c in runner.run_race(spec).contenders}
    ds = by_name["deepspeed"]
    assert by_name["vanilla"].status == "ran"
    if ds.status == "ran":
        assert ds.kernel_inject is True and ds.deepspeed_mode == "kernel injection"
    else:
        assert ds.reason  # a failure is explained, e.g. the transformers version mismatch


def test_fp16_on_a_cpu_is_rejected_before_any_worker_starts():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("fp16 is allowed on a GPU")
    spec = runner.RaceSpec(model="tiny-gpt-neo", contenders=(CONTENDERS["vanilla"],), dtype="fp16")
    with pytest.raises(InvalidParameterError, match="fp16 is offered on CUDA GPUs only"):
        runner.run_race(spec)


@pytest.mark.slow
def test_killing_the_runner_takes_its_worker_down():
    """An outer timeout (scripts/gpu_check.sh) or a closed page must not leave a worker holding the GPU."""
    psutil = pytest.importorskip("psutil")
    code = (
        "from engine.race import runner, contenders as c; runner.run_race(runner.RaceSpec(model='tiny-gpt-neo', "
        "contenders=(c.CONTENDERS['vanilla'],), runs=50, max_new_tokens=512))"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}
    )
    try:
        parent, workers, deadline = psutil.Process(proc.pid), [], time.monotonic() + 60
        while not workers and time.monotonic() < deadline and proc.poll() is None:
            workers = [p for p in parent.children() if "engine.race.worker" in " ".join(p.cmdline())]
            time.sleep(0.1)
        assert workers, "no worker started within 60 s"
        time.sleep(5)  # past the worker's start, where it asks for its parent-death signal
        proc.kill()
        proc.wait(10)
        _, alive = psutil.wait_procs(workers, timeout=15)
        assert not alive, "the worker outlived its runner"
    finally:
        if proc.poll() is None:
            proc.kill()


# ---- verdicts from numbers: flip the numbers, the sentence flips ------------------------


def _lane(name="lane", latencies=(0.5, 0.52, 0.48), warmup=1, ids=None, **kw) -> ContenderResult:
    ids = ids if ids is not None else [[1, 2, 3], [4, 5], [6]]
    return ContenderResult(
        name,
        name.title(),
        "",
        "ran",
        latencies_s=list(latencies),
        warmup_s=[1.0] * warmup,
        token_ids=ids,
        output_tokens=[3] * len(latencies),
        **kw,
    )


def _compare(*lanes: ContenderResult, base_latencies=(1.0, 1.02, 0.98), warmup=1, recheck=None, busy=True):
    base = _lane("vanilla", base_latencies, warmup)
    rows = [base, *lanes]
    notes = runner.compare(rows, recheck, busy=busy)
    return rows, notes


def test_verdict_says_faster_and_where_the_output_diverges_and_flips_with_the_numbers():
    fast = _lane("fast", ids=[[1, 2, 9], [4, 5], [6]])
    (_, r), _ = _compare(fast)
    assert r.interval_shown and r.speedup_low > 1
    assert (
        r.verdict.startswith("2.00× faster")
        and "output diverges at token 2 (2/3 prompts identical)" in r.verdict
    )
    assert "lies above 1×" in verdict.interval_line(r)
    slow = _lane("slow", latencies=(2.0, 2.1, 1.9))
    (_, r), _ = _compare(slow)
    assert r.verdict.startswith("2.00× slower") and "same output as vanilla on all 3 prompts" in r.verdict
    assert "lies below 1×" in verdict.interval_line(r)
    even = _lane("even", latencies=(0.998, 1.0, 1.002))
    (_, r), _ = _compare(even, base_latencies=(0.997, 0.999, 1.001))
    assert (
        r.verdict.startswith("no measurable difference (the 95% interval includes 1×")
        and "slower" not in r.verdict
    )
    same = _lane("same", latencies=(0.9, 1.0, 1.1))
    (_, r), _ = _compare(same, base_latencies=(0.95, 1.05, 1.0))
    assert r.verdict.startswith("no measurable difference") and "includes 1×" in verdict.interval_line(r)


def test_a_drifted_baseline_keeps_the_interval_from_claiming_beyond_noise():
    """The walkthrough: the caution said vanilla moved +18.0% so the ratios are unreliable, while the lane's
    interval line said 'faster than vanilla beyond run-to-run noise'."""
    fast = _lane("fast", ids=[[1, 2, 9], [4, 5], [6]])
    (_, r), _ = _compare(fast)
    r.baseline_drift = 1.18
    line = verdict.interval_line(r)
    assert "lies above 1×" in line and "18.0% slower" in line and "not a reliable ratio" in line
    assert "beyond run-to-run noise" not in line
    r.baseline_drift = 1.05  # within the tolerance: the plain sentence
    assert "faster than vanilla beyond run-to-run noise" in verdict.interval_line(r)


def test_one_cold_run_gives_no_interval_and_a_pass_through_speedup_is_called_noise():
    """The defect: 1 timed run, no warm-up, DeepSpeed pass-through '3.24x faster [3.24-3.24]'."""
    ds = _lane("deepspeed", latencies=(0.31,), warmup=0, deepspeed_mode="pass-through (CPU)")
    (_, r), _ = _compare(ds, base_latencies=(1.0,), warmup=0)
    assert r.speedup_vs_vanilla == pytest.approx(1.0 / 0.31)
    assert (
        not r.interval_shown
        and "no interval" in r.interval_note
        and "at least 3 timed runs" in r.interval_note
    )
    assert "(one point, no interval: not called faster or slower)" in r.verdict
    assert "cannot be faster than vanilla" in r.verdict and "noise" in r.verdict
    assert verdict.interval_line(r) == r.interval_note
    assert "only pass-through lanes ran" in verdict.winner_line([_lane("vanilla"), r])  # it never wins
    enough = _lane("deepspeed", latencies=(0.9, 1.0, 1.1), warmup=1)
    (_, r), _ = _compare(enough)
    assert r.interval_shown and not r.interval_note


def test_the_race_s_own_threads_are_not_other_work():
    """The presenter's walk: a race on a quiet machine said 'busy (load average up to 2.2 on 2 cores)', the load of
    its own lanes. Only the reading before the race and what exceeds a lane's own threads count."""
    from engine.race.record import RaceResult

    def race(start: float, *afters: float) -> RaceResult:
        lanes = [_lane(f"l{i}") for i in range(len(afters))]
        for lane, after in zip(lanes, afters, strict=True):
            lane.load_avg = (1.9, after)
        return RaceResult(
            "m", "auto", "cpu", 1, 0, 4, ["p"], "t", "", {}, lanes, load_avg_start=(start, 0.5, 0.5)
        )

    before, others = runner.other_load(race(0.3, 2.2, 2.1), cores=2)
    assert before == 0.3 and others == pytest.approx(0.2)
    assert not runner.is_busy(before, 2) and not runner.is_busy(others, 2)
    assert runner.is_busy(runner.other_load(race(3.1, 2.0), cores=2)[0], 2)  # busy before it started
    assert runner.is_busy(runner.other_load(race(0.3, 4.5), cores=2)[1], 2)  # 2.5 beyond its own 2 threads


def test_baseline_drift_is_flagged_on_every_lane_and_a_steady_one_is_not():
    drifted = _lane("vanilla", latencies=(1.3, 1.31, 1.29))
    rows, notes = _compare(_lane("a"), _lane("b"), recheck=drifted)
    assert all(r.baseline_drift == pytest.approx(1.3) for r in rows[1:])
    # one word for the move ('30.0% slower'), not a signed latency beside a 'faster' (the presenter's walk)
    assert all("vanilla's re-run at the end was 30.0% slower" in r.verdict for r in rows[1:])
    assert notes and notes[0].startswith("baseline drift:") and "rerun on a quieter machine" in notes[0]
    _, quiet = _compare(_lane("a"), recheck=drifted, busy=False)  # nothing else ran: the start ran cold
    assert "ran cold" in quiet[0] and "quieter machine" not in quiet[0]
    steady = _lane("vanilla", latencies=(1.01, 1.0, 0.99))
    rows, notes = _compare(_lane("a"), recheck=steady)
    assert "drifted" not in rows[1].verdict and notes[0].startswith("baseline steady")


def test_winner_line_follows_the_numbers():
    exact_fast = _lane("exact", latencies=(0.5, 0.5, 0.5))
    diverging_faster = _lane("quant", latencies=(0.25, 0.25, 0.25), ids=[[1, 7], [4, 5], [6]])
    rows, _ = _compare(exact_fast, diverging_faster)
    line = verdict.winner_line(rows)
    assert line.startswith("Fastest: Quant, 4.00× faster, output diverges at token 1")
    assert "Fastest with vanilla's exact output: Exact, 2.00× faster" in line
    flipped_fast = _lane("exact", latencies=(0.2, 0.2, 0.2))
    rows, _ = _compare(flipped_fast, _lane("quant", latencies=(0.25, 0.25, 0.25), ids=[[1, 7], [4, 5], [6]]))
    line = verdict.winner_line(rows)
    assert (
        line.startswith("Fastest: Exact, 5.00× faster, same output as vanilla")
        and "exact output:" not in line
    )
    rows, _ = _compare(_lane("slow", latencies=(2.0, 2.0, 2.0)))
    assert verdict.winner_line(rows).startswith("No lane beat vanilla beyond noise; the closest was Slow")
    assert "spread too widely" not in verdict.winner_line(rows)
    # a median well above 1x beside 'no difference' (a presenter saw 2.36x, 0.17x-2.49x): the spread is said
    rows, _ = _compare(_lane("noisy", latencies=(0.3, 0.4, 6.0)))
    line = verdict.winner_line(rows)
    assert (
        line.startswith("No lane beat vanilla beyond noise") and "spread too widely to call it faster" in line
    )


def test_schema_1_files_from_before_the_peers_still_load():
    old = {
        "model": "m",
        "dtype": "auto",
        "device": "cpu",
        "runs": 3,
        "warmup": 1,
        "max_new_tokens": 8,
        "prompts": ["p"],
        "started_at": "2026-11-01T00:00:00+00:00",
        "kind": "race",
        "schema": 1,
        "contenders": [
            {
                "name": "vanilla",
                "label": "Vanilla",
                "description": "",
                "status": "ran",
                "latencies_s": [1.0],
                "speedup_low": None,
                "peak_memory_bytes": 5,
            }
        ],
    }
    r = serialise.from_dict(old)
    assert r.contenders[0].peak_rss_bytes is None and math.isnan(r.contenders[0].speedup_low)
    assert r.baseline_recheck is None and r.contenders[0].group == "levers"


def test_a_failure_reads_as_one_line_without_server_paths():
    from engine.core.paths import scrub

    tb = (
        "Traceback (most recent call last):\n"
        '  File "/work/main/engine/race/worker.py", line 121, in _deepspeed\n'
        "    import deepspeed\n"
        "AttributeError: module 'x' has no attribute 'Y'\n"
    )
    assert verdict.one_line_reason(tb) == (
        "versions disagree: x has no Y; rebuild the environment from its pins"
    )
    recorded = (  # what the H200's DeepSpeed lane recorded: no exception repr reaches the page
        "deepspeed is not importable in /tmp/ds-site/bin/python: AttributeError: module "
        "'typing_inspection.typing_objects' has no attribute 'DEPRECATED_ALIASES_IDS'"
    )
    assert verdict.one_line_reason(recorded) == (
        "deepspeed could not be imported in the lane's Python environment (versions disagree: "
        "typing_inspection.typing_objects has no DEPRECATED_ALIASES_IDS; rebuild the environment from its pins)"
    )
    wrapped = (
        "deepspeed.init_inference failed: RuntimeError: deepspeed is not importable in /opt/torch/.venv/bin/python3: "
        "AttributeError: boom"
    )
    assert verdict.one_line_reason(wrapped) == (
        "deepspeed could not be imported in the lane's Python environment (AttributeError: boom)"
    )
    assert scrub("worker (/tmp/abc/.venv/bin/python3.11) and https://x.org/a/b") == (
        "worker (python3.11) and https://x.org/a/b"
    )
    failed = _lane("deepspeed")
    failed.status, failed.reason, failed.latencies_s = "failed", wrapped, []
    assert verdict.lane_verdict(failed).startswith("failed: deepspeed could not be imported")
    line = verdict.winner_line([_lane("vanilla"), failed])
    assert line.startswith(
        "No winner: the only other lane (Deepspeed) failed, so there is nothing to compare"
    )
    assert "Why: deepspeed could not be imported" in line


def test_what_a_worker_leaves_in_its_group_is_killed():
    """The race worker ends at once after its result (os._exit), so vLLM's engine core outlived it, orphaned with
    the model in memory (3.7 GB RSS found after a test run). The runner now kills the worker's process group."""
    import os
    import subprocess
    import sys
    import time

    from engine.race.process import _kill_group

    # a 'worker' that leaves a child behind in its session and exits
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import subprocess; p = subprocess.Popen(['sleep', '300'], stdout=subprocess.DEVNULL); print(p.pid)",
        ],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    child = int(proc.communicate()[0])
    os.kill(child, 0)  # alive, orphaned
    _kill_group(proc.pid)
    deadline = time.monotonic() + 60  # a liveness bound, not a speed claim
    while time.monotonic() < deadline:
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        with open(f"/proc/{child}/stat") as f:
            if f.read().split()[2] == "Z":  # killed, waiting for init to reap it
                break
        time.sleep(0.1)
    else:
        raise AssertionError("the worker's child is still running")
    _kill_group(proc.pid)  # nothing left: no error
