"""The serving simulator checked, in one run:

(a) this machine: the lab's own server (`python -m engine serve`, smollm2-135m-instruct fp32) swept by the load
    generator at 1, 4 and 8 users, and the simulator on the same workload (the same seeded plan, each prompt's
    tokens counted by the server's own tokenizer) with this machine's step times, two ways: measured (the
    in-flight Scheduler's own steps, timed in this process before the server starts, one torch thread as the server
    runs, fitted t = a + b x rows + c x context + d x prompt tokens) and calibrated (the stored calibration,
    engine.calibration). The per-request cost outside the steps (HTTP, tokenizing) is the transport the server's
    timings show on a warm-up run that is not scored. Target (issue 31): TTFT p50 and output throughput within 20%
    at 1, 4 and 8 users.
(b) published sweeps (engine/data/published/serving_sweeps.toml): output throughput at a concurrency, simulated;
    target median |error| <= 20%.
(c) speed: a 500-request sweep at 1, 4, 16 and 64 users for a GPU (three runs over the step interval), timed.

    flock -x /tmp/cpu.lock .venv/bin/python bench/simulate.py [--parts this-machine,published,speed]
        [--levels 1,4,8] [--requests 24] [--output-tokens 32]

Writes bench/results/simulate-<machine>.json and bench/results/simulate.md; reports the load average before and
after every part.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bench.common import write_result  # noqa: E402
from engine.core import load  # noqa: E402
from engine.loadgen.workload import SLO, LoadSpec, plan  # noqa: E402

MODEL = "smollm2-135m-instruct"
TARGET = 0.20


def loadavg() -> list[float]:
    return [round(x, 2) for x in load.loadavg()]


# ---------------------------------------------------------------- (a) this machine


def probe_steps(lm, prompts: list[list[int]], output_tokens: int) -> list[tuple[int, int, int, float]]:
    """The real Scheduler's steps on closed batches of 1, 2, 4 and 8 requests (all queued before its thread looks):
    one batched prefill, then decode steps of every row. Observations (rows, context tokens, prompt tokens, s)."""
    from engine.batching.scheduler import Scheduler
    from engine.runtime.generation import GenerationConfig

    obs: list[tuple[int, int, int, float]] = []
    for b in (1, 2, 4, 8, 1, 4):
        sched = Scheduler(lm, max_batch=8, record=False)
        batch = prompts[:b]
        with sched._cond:
            handles = [
                sched.submit(
                    "x", GenerationConfig(max_new_tokens=output_tokens), ignore_eos=True, prompt_ids=p
                )
                for p in batch
            ]
        done = [h.result(timeout=600) for h in handles]
        sched.close()
        admitted = min(h.times.admitted for h in handles)
        first = done[0].token_times[0]
        obs.append((0, 0, b * max(len(p) for p in batch), first - admitted))
        times = done[0].token_times
        for j in range(1, len(times)):
            context = sum(len(p) + j - 1 for p in batch)
            obs.append((b, context, 0, times[j] - times[j - 1]))
    return obs


def transport_s(base_url: str, model: str) -> float:
    """Mean client TTFT minus the server's queue and prefill on a warm-up run (4 requests, 2 users; not scored)."""
    from engine.loadgen.sweep import run_once

    warm = LoadSpec(
        base_url=base_url, model=model, mode="concurrency", concurrency=2, n_requests=4, output_tokens=8
    )
    m = run_once(warm, SLO(ttft_s=None, tpot_s=None))
    b = m.ttft_breakdown
    return 0.0 if b is None else max(0.0, b.transport_s)


def this_machine(args) -> dict:
    import torch

    from engine.calibration import load_calibration, spec_for_run_model
    from engine.loadgen.sweep import run_sweep, to_json
    from engine.runtime.generation import GenerationConfig
    from engine.runtime.models import load_model
    from engine.serving.process import ServerProcess
    from engine.simulate.spec import SimulateSpec
    from engine.simulate.steps import CalibratedSteps, fit_linear
    from engine.simulate.sweep import deployment, simulate, with_steps

    out: dict = {"loadavg_before": loadavg()}
    levels = [int(x) for x in args.levels.split(",")]
    slo = SLO(ttft_s=None, tpot_s=None)
    spec_load = LoadSpec(
        base_url="http://x/v1",
        model=MODEL,
        mode="concurrency",
        n_requests=args.requests,
        output_tokens=args.output_tokens,
    )
    torch.set_num_threads(1)  # the server's torch threads on 2 cores (engine.serving.runner.server_threads)
    lm = load_model(MODEL, dtype="fp32", device="cpu")
    from engine.batching.scheduler import encode_prompt

    cfg = GenerationConfig(max_new_tokens=args.output_tokens)
    lengths = [len(encode_prompt(lm, r.prompt, cfg)[1]) for r in plan(spec_load)]
    prompt_ids = [encode_prompt(lm, r.prompt, cfg)[1] for r in plan(spec_load)][:8]
    t0 = time.perf_counter()
    obs = probe_steps(lm, prompt_ids, args.output_tokens)
    measured = fit_linear(
        obs, name="measured", source="engine.batching.scheduler.Scheduler steps on this machine"
    )
    out["probe"] = {"steps": len(obs), "seconds": time.perf_counter() - t0, "fit": measured.describe()}
    del lm
    out["loadavg_after_probe"] = loadavg()

    with ServerProcess(MODEL, max_batch=8) as srv:
        fixed = transport_s(srv.base_url, MODEL)
        real = run_sweep(replace(spec_load, base_url=srv.base_url), slo, levels, keep_going=True)
    out["transport_s"] = fixed
    out["real"] = to_json(real)
    out["loadavg_after_server"] = loadavg()

    from engine.core.interval import Interval

    sim_spec = SimulateSpec(
        model=MODEL,
        gpu="this-machine",
        dtype="fp32",
        engine="hf",
        sweep=args.levels,
        n_requests=args.requests,
        output_tokens=args.output_tokens,
        prompt_tokens=max(1, round(sum(lengths) / len(lengths))),
        keep_going=True,
    ).validate()
    base = deployment(sim_spec)
    models = {"measured": replace(measured, fixed_s=Interval.exact(fixed))}
    cal = load_calibration()
    if cal is not None:
        models["calibrated"] = CalibratedSteps(
            cal, spec_for_run_model(MODEL), "fp32", fixed_s=Interval.exact(fixed)
        )
    out["simulated"] = {}
    rows = []
    for name, steps in models.items():
        sim = simulate(sim_spec, slo, lengths=lengths, deploy=with_steps(base, steps))
        out["simulated"][name] = sim.to_json()
        for p_real, p_sim, iv in zip(real.points, sim.result.points, sim.intervals(), strict=True):
            rows.append(
                {
                    "step_model": name,
                    "users": p_real.level,
                    "ttft_p50_real_s": p_real.ttft_s.p50,
                    "ttft_p50_sim_s": p_sim.ttft_s.p50,
                    "ttft_p50_sim_interval": [iv["ttft_s"]["p50"].low, iv["ttft_s"]["p50"].high],
                    "ttft_error": p_sim.ttft_s.p50 / p_real.ttft_s.p50 - 1,
                    "tput_real": p_real.output_tokens_per_s,
                    "tput_sim": p_sim.output_tokens_per_s,
                    "tput_sim_interval": [iv["output_tokens_per_s"].low, iv["output_tokens_per_s"].high],
                    "tput_error": p_sim.output_tokens_per_s / p_real.output_tokens_per_s - 1,
                    "itl_p50_real_s": p_real.itl_s.p50,
                    "itl_p50_sim_s": p_sim.itl_s.p50,
                }
            )
    out["rows"] = rows
    for name in models:
        mine = [r for r in rows if r["step_model"] == name]
        out.setdefault("targets", {})[name] = all(
            abs(r["ttft_error"]) <= TARGET and abs(r["tput_error"]) <= TARGET for r in mine
        )
    out["loadavg_after"] = loadavg()
    return out


# ---------------------------------------------------------------- (b) published sweeps, (c) speed


def published() -> dict:
    from engine.simulate.published import check_all

    before = loadavg()
    checks, summary = check_all()
    rows = [
        {
            "id": c.row.id,
            "published": c.row.value,
            "simulated": c.predicted.central,
            "interval": [c.predicted.low, c.predicted.high],
            "error": c.error,
            "inside": c.inside,
            "source": c.row.source,
        }
        for c in checks
    ]
    return {"loadavg_before": before, "rows": rows, "summary": summary, "loadavg_after": loadavg()}


def speed() -> dict:
    from engine.calc.efficiency import fits
    from engine.simulate.spec import SimulateSpec
    from engine.simulate.sweep import simulate

    before = loadavg()
    t0 = time.perf_counter()
    fits()
    fit_s = time.perf_counter() - t0
    spec = SimulateSpec(
        model="llama-3-8b", gpu="h100-sxm", sweep="1,4,16,64", n_requests=500, keep_going=True
    )
    t0 = time.perf_counter()
    out = simulate(spec, SLO())
    sweep_s = time.perf_counter() - t0
    return {
        "loadavg_before": before,
        "what": "500 requests per level, 512 prompt + 128 output tokens, llama-3-8b on 1 x H100 SXM (vllm), levels "
        "1, 4, 16, 64, each run three times (low / central / high step times)",
        "calculator_fit_s": fit_s,
        "sweep_s": sweep_s,
        "levels": len(out.result.points),
        "loadavg_after": loadavg(),
    }


def markdown(res: dict) -> str:
    lines = [f"# bench/simulate.py ({res['date']}, {res['machine']})", ""]
    a = res.get("this_machine")
    if a:
        lines += [
            f"## (a) this machine: the lab's server vs the simulator ({MODEL} fp32, {a['requests']} requests x "
            f"{a['output_tokens']} tokens per level; load {a['loadavg_before']} -> {a['loadavg_after']})",
            "",
            f"Per-request transport from the warm-up run: {a['transport_s'] * 1e3:.1f} ms. Measured step fit: "
            f"{json.dumps({k: v for k, v in a['probe']['fit'].items() if k.endswith('_s') or k.startswith(('a_', 'b_', 'c_', 'd_'))})}",
            "",
            "| step model | users | TTFT p50 real (s) | sim (s) | error | output tok/s real | sim | error |",
            "|---|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for r in a["rows"]:
            lines.append(
                f"| {r['step_model']} | {r['users']:g} | {r['ttft_p50_real_s']:.3f} | {r['ttft_p50_sim_s']:.3f} | "
                f"{r['ttft_error']:+.0%} | {r['tput_real']:.1f} | {r['tput_sim']:.1f} | {r['tput_error']:+.0%} |"
            )
        lines += ["", f"Target (within 20% at every level): {a['targets']}", ""]
    b = res.get("published")
    if b:
        s = b["summary"]
        lines += [
            f"## (b) published sweeps: {s['rows']} rows from {s['sources']} source(s)",
            "",
            "| row | published tok/s | simulated | interval | error |",
            "|---|---:|---:|---|---:|",
        ]
        for r in b["rows"]:
            lines.append(
                f"| {r['id']} | {r['published']:.1f} | {r['simulated']:.1f} | {r['interval'][0]:.0f}-"
                f"{r['interval'][1]:.0f} | {r['error']:+.1%} |"
            )
        lines += [
            "",
            f"Median |error| {s['median_abs_error']:.1%}, worst {s['worst_abs_error']:.1%}, inside the interval "
            f"{s['inside']:.0%}; target {s['target']}: {'met' if s['met'] else 'not met'}.",
            "",
        ]
    c = res.get("speed")
    if c:
        lines += [
            "## (c) speed",
            "",
            f"{c['what']}: {c['sweep_s']:.2f} s (the calculator's fit, once per process: {c['calculator_fit_s']:.1f} s); "
            f"load {c['loadavg_before']} -> {c['loadavg_after']}.",
        ]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--parts", default="this-machine,published,speed")
    ap.add_argument("--levels", default="1,4,8")
    ap.add_argument("--requests", type=int, default=24)
    ap.add_argument("--output-tokens", type=int, default=32)
    args = ap.parse_args()
    parts = set(args.parts.split(","))
    res: dict = {"date": datetime.now(UTC).isoformat(timespec="seconds")}
    from engine.core import paths

    res["machine"] = paths.machine_id()
    if "this-machine" in parts:
        res["this_machine"] = this_machine(args) | {
            "requests": args.requests,
            "output_tokens": args.output_tokens,
        }
    if "published" in parts:
        res["published"] = published()
    if "speed" in parts:
        res["speed"] = speed()
    write_result("simulate", res)
    md = markdown(res)
    (ROOT / "bench" / "results" / "simulate.md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
