"""The serving simulator checked, in one run:

(a) this machine: the lab's own server (`python -m engine serve`, smollm2-135m-instruct fp32) swept by the load
    generator at 1, 4 and 8 users, and the simulator on the same workload (the same seeded plan, each prompt's
    tokens counted by the server's own tokenizer) with this machine's step times, two ways: measured (the same
    server's steps on probe runs before the scored sweep: closed batches of 1, 2, 4 and 8 requests, fitted
    t = a + b x rows + c x context + d x prompt tokens (+ e alone, + g x rows in a step carrying a prompt: each
    closed batch's later requests ride mixed steps beside the rows admitted before them)) and calibrated (the stored calibration, engine.calibration).
    The per-request cost outside the steps (HTTP, tokenizing) is the transport the server's own timings show on
    the one-request probes, of which the part before the scheduler (the server's handling, one request at a time)
    delays arrivals and the rest each token's way back. The workload is the chat endpoint's by default (--endpoint):
    on a completions prompt this instruct model ends its turn at once about half the time, and with ignore_eos that
    textless first token makes the client's first-token time a step later than the token made. The probes run
    before and after the scored sweep (the machine is shared; its speed drifts). Target (issue 31): TTFT p50 and
    output throughput within 20% at 1, 4 and 8 users.
(b) published sweeps (engine/data/published/serving_sweeps.toml): output throughput at a concurrency, simulated;
    target median |error| <= 20%.
(c) speed: a 500-request sweep at 1, 4, 16 and 64 users for a GPU (three runs over the step interval), timed.

    flock -x /tmp/cpu.lock .venv/bin/python -m bench.simulate [--parts this-machine,published,speed]
        [--levels 1,4,8] [--requests 24] [--output-tokens 32] [--endpoint chat|completions]

Writes bench/results/simulate-<machine>.json and bench/results/simulate.md; reports the load average before and
after every part.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import replace
from datetime import UTC, datetime

from bench.common import ROOT, write_result
from engine.core import load
from engine.loadgen.workload import SLO, LoadSpec, plan

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before anything loads a tokenizer

MODEL = "smollm2-135m-instruct"
TARGET = 0.20
PROBE_BATCHES = (1, 2, 4, 8, 1)  # a 1 is one user's 4 requests in turn
PROBE_REQUESTS = sum(4 if b == 1 else b for b in PROBE_BATCHES)
QUEUED_TOGETHER_S = 0.005  # two requests each queued less than this were admitted in one go


def loadavg() -> list[float]:
    return [round(x, 2) for x in load.loadavg()]


# ---------------------------------------------------------------- (a) this machine


def probe(
    base_url: str, output_tokens: int, endpoint: str
) -> tuple[list[tuple[int, int, int, float]], float, dict]:
    """The server's own step times, measured on runs of their own: a closed batch of b requests sent together
    (b = 2, 4, 8; the plan's first prompts): its decode steps have b rows, so the median gap between a request's
    chunks is a b-row step; one user's 4 requests in turn give the 1-row step, the prefill of a prompt alone and the
    transport (client TTFT minus the server's queue and prefill: HTTP, tokenizing) from the server's own timings.
    Returns (rows, context, prompt tokens, seconds) observations, the transport, and the runs' figures."""
    from engine.loadgen.server_side import fetch_timings
    from engine.loadgen.sweep import run_once

    obs: list[tuple[int, int, int, float]] = []
    runs: dict = {}
    transports: list[float] = []
    prompts: dict[int, int] = {}
    together: dict[int, list[dict]] = {}
    for b in PROBE_BATCHES:
        # one user sends 4 requests in turn: the first after a pause pays a cold start (a new connection, the
        # scheduler's thread started again after its idle exit) that back-to-back requests do not
        n = 4 if b == 1 else b
        spec = LoadSpec(base_url=base_url, model=MODEL, mode="concurrency", concurrency=b, n_requests=n,
                        output_tokens=output_tokens, endpoint=endpoint)  # fmt: skip
        m = run_once(spec, SLO(ttft_s=None, tpot_s=None))
        prompt = int(m.prompt_tokens_median)
        # the context term is left out (0): at ~10-token prompts and 32 outputs it moves with the rows, and the fit
        # cannot tell the two apart
        obs.append((b, 0, 0, m.itl_s.p50))
        split = m.ttft_breakdown
        if split is not None:
            prompts[b] = prompt
        if b >= 2:  # the server's timings of its last b requests: this closed batch's
            together[b] = list(fetch_timings(base_url).values())[-b:]
        if b == 1 and split is not None:
            obs.append((0, 0, prompt, split.prefill_s))
            transports.append(split.transport_s)
        runs[str(b) if str(b) not in runs else f"{b}-again"] = {
            "itl_p50_s": m.itl_s.p50,
            "prompt_tokens_median": prompt,
            "ttft_breakdown": split,
        }
    # b requests sent together reach the scheduler a millisecond or two apart (the server tokenizes in a thread
    # pool): its thread takes those already queued into one batched prefill (each queued under QUEUED_TOGETHER_S),
    # then each later one rides the next decode step of the rows running by then (a mixed step of those rows and its
    # prompt, one prompt a step: its admitted-to-first-token is that step). The server's own per-request timings say
    # which, in the order they were admitted (by their wait).
    admitted = {b: _admissions(group) for b, group in together.items()}
    for b, forwards in admitted.items():
        obs.extend(forwards)
        if b == 2:
            runs["pair"] = (
                "one batched prefill" if len(forwards) == 1 else "prefilled alone, then one mixed step"
            )
            if len(forwards) == 2:
                runs["mixed_step_s"] = forwards[1][3]
    runs["mixed_steps"] = {b: [list(o) for o in forwards] for b, forwards in admitted.items()}
    # what the server spent on each probe request before its scheduler saw it (reading, validating, tokenizing under
    # one lock): the part of the transport spent one request at a time
    handled = [t["handling_s"] for t in list(fetch_timings(base_url).values())[-PROBE_REQUESTS:]]
    runs["handling_s"] = sum(handled) / len(handled) if handled else 0.0
    return obs, sum(transports) / len(transports) if transports else 0.0, runs


def _admissions(group: list[dict]) -> list[tuple[int, int, int, float]]:
    """The forwards that took a closed batch's requests in: those queued under QUEUED_TOGETHER_S as one prefill
    (0 rows, their prompt tokens, its mean admitted-to-first-token), then each later one, by its wait, as a mixed
    step carrying its prompt beside the rows admitted before it (all still running: b <= 8 requests of 32 tokens)."""
    order = sorted(group, key=lambda t: t["queue_s"])
    first = [t for t in order if t["queue_s"] < QUEUED_TOGETHER_S] or order[:1]
    out = [(0, 0, sum(t["prompt_tokens"] for t in first), sum(t["prefill_s"] for t in first) / len(first))]
    for k, t in enumerate(order[len(first) :]):
        out.append((len(first) + k, 0, t["prompt_tokens"], t["prefill_s"]))
    return out


def prompt_lengths(spec: LoadSpec) -> list[int]:
    """Each planned prompt's tokens as the server counts them: a chat request's message in the model's chat
    template (engine.serving.routes._submit), a completions prompt with the tokenizer's special tokens
    (engine.runtime.prompt.encode_prompt)."""
    from transformers import AutoTokenizer

    from bench.serving_peers import tokenizer_dir
    from engine.runtime.chat import chat_prompt_ids, user_turn

    tok = AutoTokenizer.from_pretrained(str(tokenizer_dir(MODEL)))
    if spec.endpoint == "chat":
        return [len(chat_prompt_ids(tok, user_turn(r.prompt))[1]) for r in plan(spec)]
    return [len(tok(r.prompt)["input_ids"]) for r in plan(spec)]


def this_machine(args) -> dict:
    from engine.calibration import load_calibration, spec_for_run_model
    from engine.core.interval import Interval
    from engine.loadgen.sweep import run_once, run_sweep, to_json
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
        n_requests=args.n_requests,
        output_tokens=args.output_tokens,
        endpoint=args.endpoint,
    )
    lengths = prompt_lengths(spec_load)
    with ServerProcess(MODEL, max_batch=8) as srv:
        run = replace(spec_load, base_url=srv.base_url)
        run_once(replace(run, concurrency=2, n_requests=4, output_tokens=8), slo)  # warm-up, not scored
        t0 = time.perf_counter()
        # the probe brackets the scored sweep (before and after), so a machine that got busier or quieter during the
        # sweep is seen by both the step times and the sweep
        obs, fixed, runs = probe(srv.base_url, args.output_tokens, args.endpoint)
        out["loadavg_after_probe"] = loadavg()
        real = run_sweep(run, slo, levels, keep_going=True)
        obs_after, fixed_after, runs_after = probe(srv.base_url, args.output_tokens, args.endpoint)
        obs, fixed = obs + obs_after, (fixed + fixed_after) / 2
        out["probe"] = {"seconds": time.perf_counter() - t0, "runs": [runs, runs_after], "observations": obs}
    measured = fit_linear(obs, name="measured", source="the server's own steps on this machine (probe runs)")
    out["probe"]["fit"] = measured.describe()
    out["transport_s"] = fixed
    out["real"] = to_json(real)
    out["loadavg_after_server"] = loadavg()
    sim_spec = SimulateSpec(
        model=MODEL,
        gpu="this-machine",
        dtype="fp32",
        engine="hf",
        sweep=args.levels,
        n_requests=args.n_requests,
        output_tokens=args.output_tokens,
        prompt_tokens=max(1, round(sum(lengths) / len(lengths))),
        keep_going=True,
    ).validate()
    base = deployment(sim_spec)
    handling = (runs["handling_s"] + runs_after["handling_s"]) / 2
    out["handling_s"] = handling
    models = {"measured": replace(measured, fixed_s=Interval.exact(fixed), handling_s=handling)}
    cal = load_calibration()
    if cal is not None:
        models["calibrated"] = CalibratedSteps(
            cal, spec_for_run_model(MODEL), "fp32", fixed_s=Interval.exact(fixed), handling_s=handling
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
            f"Endpoint: {a.get('endpoint', 'completions')}. Per-request transport from the one-request probes: "
            f"{a['transport_s'] * 1e3:.1f} ms, of which {a.get('handling_s', 0) * 1e3:.1f} ms before the scheduler "
            "(one request at a time). Measured step fit: "
            f"{json.dumps({k: v for k, v in a['probe']['fit'].items() if k.endswith('_s') or k.startswith(('a_', 'b_', 'c_', 'd_', 'e_', 'g_'))})}",
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


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--parts", default="this-machine,published,speed")
    ap.add_argument("--levels", default="1,4,8")
    # chat by default: the instruct model answers in its template. A completions prompt makes it end its turn at
    # once about half the time; with ignore_eos it goes on, but that first token has no text, so the client's
    # first-token time waits a step more than the first token made (what the simulator predicts)
    LoadSpec.add_arguments(
        ap,
        only=("n_requests", "output_tokens", "endpoint"),
        defaults={"n_requests": 24, "output_tokens": 32, "endpoint": "chat"},
    )
    args = ap.parse_args(argv)
    parts = set(args.parts.split(","))
    res: dict = {"date": datetime.now(UTC).isoformat(timespec="seconds")}
    from engine.core import paths

    res["machine"] = paths.machine_id()
    if "this-machine" in parts:
        res["this_machine"] = this_machine(args) | {
            "requests": args.n_requests,
            "output_tokens": args.output_tokens,
            "endpoint": args.endpoint,
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
