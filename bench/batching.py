"""Static against in-flight batching on a workload whose output lengths vary widely (8..256 tokens), at the
same max batch, measured in the same run and interleaved (static, in-flight, static, in-flight ...) so machine
noise hits both alike; the median repeat of each policy is reported.

    .venv/bin/python -m bench.batching [--model smollm2-135m-instruct] [--requests 24] [--max-batch 8]
                                       [--repeats 1] [--hf-check]

Prints a table, the step-time breakdown of each policy (prefill, decode forward, sampling, cache surgery,
other) and writes bench/results/batching-<machine>.json. Target on the 2-core CPU with the bundled model:
in-flight >= 1.5x static's throughput and p95 latency <= 0.8x static's, both ratios from the same run. --hf-check also times transformers'
own continuous batching (`model.generate_batch`) on 4 x 32 tokens against the engine's scheduler.
"""

from __future__ import annotations

import argparse
import json
import time
from datetime import UTC, datetime

from bench.common import write_result
from engine.batching.scheduler import Scheduler
from engine.batching.spec import BatchSpec
from engine.batching.workload import (
    WorkloadSpec,
    generate_workload,
    policy_bound,
    replay,
    warm_up,
)
from engine.cli import to_jsonable
from engine.core import paths
from engine.core.load import loadavg, loadavg_1m
from engine.core.threads import run_in_thread
from engine.runtime import models
from engine.runtime.settings import GenerationConfig


def hf_continuous_batching(lm, n: int = 4, tokens: int = 32) -> dict:
    """transformers' ContinuousBatchingManager via model.generate_batch, against our scheduler, same inputs."""
    from transformers import GenerationConfig as HFConfig

    ids = [lm.tokenizer(f"Request {i}: tell me about batching")["input_ids"] for i in range(n)]
    out: dict = {"requests": n, "tokens_each": tokens}
    try:
        cfg = HFConfig(
            max_new_tokens=tokens, do_sample=False, eos_token_id=-1, pad_token_id=lm.tokenizer.pad_token_id
        )
        t = time.perf_counter()
        with lm.lock:
            lm.model.generate_batch(inputs=ids, generation_config=cfg, progress_bar=False)
        out["transformers_s"] = time.perf_counter() - t
        out["transformers_tokens_per_s"] = n * tokens / out["transformers_s"]
    except Exception as exc:  # record the failure: that is the finding
        out["transformers_error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
    sched = Scheduler(lm, max_batch=n, record=False)
    try:
        t = time.perf_counter()
        hs = [
            sched.submit("x", GenerationConfig(max_new_tokens=tokens), ignore_eos=True, prompt_ids=i)
            for i in ids
        ]
        [h.result() for h in hs]
        out["engine_s"] = time.perf_counter() - t
        out["engine_tokens_per_s"] = n * tokens / out["engine_s"]
    finally:
        sched.close()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    BatchSpec.add_arguments(ap, only=("model", "max_batch"))
    WorkloadSpec.add_arguments(ap, only=("n_requests", "seed"), defaults={"n_requests": 24})
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--hf-check", action="store_true")
    args = ap.parse_args(argv)
    # no torch work on the main thread: an OpenMP team left there would slow both policies (engine.core.threads)
    lm = run_in_thread(lambda: models.load_model(args.model))
    spec = WorkloadSpec(
        n_requests=args.n_requests, output_tokens_min=8, output_tokens_max=256, seed=args.seed
    )
    workload = generate_workload(spec, lm.tokenizer)
    warm_up(lm, workload, args.max_batch)  # not counted
    runs: dict[str, list] = {"static": [], "inflight": []}
    for _ in range(args.repeats):
        for policy in runs:
            runs[policy].append(replay(lm, workload, policy, args.max_batch))
    med = {p: sorted(rs, key=lambda r: r.throughput_tokens_per_s)[len(rs) // 2] for p, rs in runs.items()}
    s, i = med["static"], med["inflight"]
    bound = policy_bound(workload, args.max_batch)
    result = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": paths.machine_id(),
        "load_average": loadavg(),
        "model": lm.name,
        "dtype": lm.dtype,
        "device": lm.device,
        "workload": spec,
        "max_batch": args.max_batch,
        "repeats": args.repeats,
        "static": s.summary(),
        "inflight": i.summary(),
        "all_throughputs": {p: [r.throughput_tokens_per_s for r in rs] for p, rs in runs.items()},
        "throughput_ratio": i.throughput_tokens_per_s / s.throughput_tokens_per_s,
        "latency_p95_ratio": i.latency_s_p95 / s.latency_s_p95,
        "policy_bound": {
            "static_steps": bound.static_steps,
            "inflight_steps": bound.inflight_steps,
            "full_slots_steps": bound.full_slots_steps,
            "throughput_ratio": bound.throughput_ratio,
            "full_slots_ratio": bound.full_slots_ratio,
            "measured_fraction_of_bound": (i.throughput_tokens_per_s / s.throughput_tokens_per_s)
            / bound.throughput_ratio,
        },
        "target_met": i.throughput_tokens_per_s >= 1.5 * s.throughput_tokens_per_s
        and i.latency_s_p95 <= 0.8 * s.latency_s_p95,
        "load_average_after": loadavg(),
    }
    if args.hf_check:
        result["transformers_continuous_batching"] = hf_continuous_batching(lm)
    print(
        f"{lm.name} ({lm.dtype}, {lm.device}); {args.n_requests} requests, output 8..256 tokens, max batch "
        f"{args.max_batch}; median of {args.repeats}; load average {loadavg_1m():.1f}"
    )
    print(
        f"{'policy':<9} {'tok/s':>8} {'TTFT p50':>9} {'lat p50':>8} {'lat p95':>8} {'wall':>7} {'slots used':>10}"
    )
    for r in (s, i):
        print(
            f"{r.policy:<9} {r.throughput_tokens_per_s:>8.1f} {r.ttft_s_p50:>8.2f}s {r.latency_s_p50:>7.2f}s "
            f"{r.latency_s_p95:>7.2f}s {r.wall_s:>6.1f}s {r.slot_utilization:>10.0%}"
        )
    print(
        f"in-flight / static: throughput {result['throughput_ratio']:.2f}x, p95 latency "
        f"{result['latency_p95_ratio']:.2f}x; target (>= 1.5x, p95 <= 0.8x) met: {result['target_met']}"
    )
    print(
        f"the workload's bound (equal step costs, first come first served): static needs {bound.static_steps} steps, "
        f"in-flight {bound.inflight_steps}, so at most {bound.throughput_ratio:.2f}x; measured "
        f"{result['policy_bound']['measured_fraction_of_bound']:.0%} of it. Every slot busy every step would take "
        f"{bound.full_slots_steps} steps ({bound.full_slots_ratio:.2f}x): the long requests admitted last decode "
        f"alone at the end"
    )
    print("step-time breakdown (seconds of the model thread; share of its busy time):")
    for r in (s, i):
        parts = dict(r.breakdown)
        busy = sum(parts.values()) or 1.0
        print(f"  {r.policy:<9} " + "  ".join(f"{k} {v:.1f}s ({v / busy:.0%})" for k, v in parts.items()))
        if r.decode_steps:
            print(
                f"  {'':<9} {r.decode_steps} decode steps, {1e3 * parts.get('decode_forward', 0.0) / r.decode_steps:.1f} "
                f"ms of forward each, {r.output_tokens / r.decode_steps:.2f} useful tokens per step"
            )
    print(f"load average after: {loadavg_1m():.1f}")
    if args.hf_check:
        print(
            "transformers continuous batching:",
            json.dumps(to_jsonable(result["transformers_continuous_batching"])),
        )
    write_result("batching", result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
