"""`python -m engine batch`: static against in-flight batching on a generated workload, measured."""

from __future__ import annotations

from engine.batching.workload import OUTPUT_DISTRIBUTIONS, WorkloadSpec, generate_workload, replay, warm_up
from engine.core.errors import InvalidParameterError
from engine.core.threads import run_in_thread
from engine.runtime import models

HELP = "replay a generated workload under static and/or in-flight batching: throughput, TTFT, latency p50/p95"
_W = WorkloadSpec()  # one source of defaults, shared with the Batching page and bench/batching.py


def add_arguments(parser) -> None:
    parser.add_argument(
        "--model",
        default=models.DEFAULT_MODEL,
        help=f"preset, hub id or local folder (default {models.DEFAULT_MODEL})",
    )
    parser.add_argument("--dtype", default="auto", help="auto, fp32, bf16 or fp16 (fp16 on CUDA only)")
    parser.add_argument("--device", default="auto", help="auto, cpu or cuda")
    parser.add_argument("--policy", choices=("static", "inflight", "both"), default="both")
    parser.add_argument("--requests", type=int, default=_W.n_requests, help="requests in the workload")
    parser.add_argument(
        "--max-batch", type=int, default=8, help="most sequences decoded together (both policies)"
    )
    parser.add_argument("--seed", type=int, default=_W.seed)
    parser.add_argument(
        "--rate",
        type=float,
        default=_W.arrival_rate_per_s,
        help="Poisson arrivals per second; 0 = all at once",
    )
    parser.add_argument(
        "--prompt-tokens",
        type=int,
        nargs=2,
        default=(_W.prompt_tokens_min, _W.prompt_tokens_max),
        metavar=("MIN", "MAX"),
    )
    parser.add_argument(
        "--output-tokens",
        type=int,
        nargs=2,
        default=(_W.output_tokens_min, _W.output_tokens_max),
        metavar=("MIN", "MAX"),
    )
    parser.add_argument("--output-distribution", choices=OUTPUT_DISTRIBUTIONS, default=_W.output_distribution)


def workload_spec(args) -> WorkloadSpec:
    return WorkloadSpec(
        n_requests=args.requests,
        arrival_rate_per_s=args.rate,
        prompt_tokens_min=args.prompt_tokens[0],
        prompt_tokens_max=args.prompt_tokens[1],
        output_tokens_min=args.output_tokens[0],
        output_tokens_max=args.output_tokens[1],
        output_distribution=args.output_distribution,
        seed=args.seed,
    ).validate()


def run(args) -> dict:
    spec = workload_spec(args)  # reject bad values before spending seconds on loading
    if args.max_batch < 1:
        raise InvalidParameterError(f"--max-batch must be >= 1, got {args.max_batch}")
    # no model work on the main thread: an OpenMP team left there slows both policies (engine.core.threads)
    lm = run_in_thread(lambda: models.load_model(args.model, dtype=args.dtype, device=args.device))
    workload = generate_workload(spec, lm.tokenizer)
    policies = ("static", "inflight") if args.policy == "both" else (args.policy,)
    warm_up(lm, workload, args.max_batch)  # both policies' first forward passes, not counted
    out: dict = {
        "model": lm.name,
        "dtype": lm.dtype,
        "device": lm.device,
        "max_batch": args.max_batch,
        "workload": spec,
        "policies": {},
    }
    for p in policies:
        out["policies"][p] = replay(lm, workload, p, args.max_batch).summary()
    if len(policies) == 2:
        s, i = out["policies"]["static"], out["policies"]["inflight"]
        out["throughput_ratio"] = i["throughput_tokens_per_s"] / s["throughput_tokens_per_s"]
        out["latency_p95_ratio"] = i["latency_s_p95"] / s["latency_s_p95"]
    return out


def format_text(result: dict) -> str:
    lines = [
        f"{result['model']} ({result['dtype']}, {result['device']}), max batch {result['max_batch']}",
        f"{'policy':<9} {'tok/s':>8} {'TTFT p50':>9} {'lat p50':>8} {'lat p95':>8} {'slots used':>10}",
    ]
    for name, r in result["policies"].items():
        lines.append(
            f"{name:<9} {r['throughput_tokens_per_s']:>8.1f} {r['ttft_s_p50']:>8.2f}s {r['latency_s_p50']:>7.2f}s "
            f"{r['latency_s_p95']:>7.2f}s {r['slot_utilization']:>10.0%}"
        )
    if "throughput_ratio" in result:
        lines.append(
            f"in-flight / static throughput: {result['throughput_ratio']:.2f}x; "
            f"p95 latency ratio {result['latency_p95_ratio']:.2f}"
        )
    return "\n".join(lines)
