"""`python -m engine batch`: static against in-flight batching on a generated workload, measured."""

from __future__ import annotations

from engine.batching.spec import BatchSpec, WorkloadSpec
from engine.core.threads import run_in_thread

HELP = "replay a generated workload under static and/or in-flight batching: throughput, TTFT, latency p50/p95"


def add_arguments(parser) -> None:
    BatchSpec.add_arguments(parser)
    WorkloadSpec.add_arguments(parser)
    for what in ("prompt", "output"):  # a range is one flag of two numbers; its ends are the spec's
        parser.add_argument(
            f"--{what}-tokens",
            type=int,
            nargs=2,
            default=(WorkloadSpec.default(f"{what}_tokens_min"), WorkloadSpec.default(f"{what}_tokens_max")),
            metavar=("MIN", "MAX"),
            help=f"{what} lengths, drawn between MIN and MAX",
        )


def workload_spec(args) -> WorkloadSpec:
    return WorkloadSpec.from_args(
        args,
        prompt_tokens_min=args.prompt_tokens[0],
        prompt_tokens_max=args.prompt_tokens[1],
        output_tokens_min=args.output_tokens[0],
        output_tokens_max=args.output_tokens[1],
    )


def run(args) -> dict:
    spec = workload_spec(args)  # reject bad values before spending seconds on importing torch and loading
    batch = BatchSpec.from_args(args)
    from engine.batching.workload import generate_workload, replay, warm_up

    # no model work on the main thread: an OpenMP team left there slows both policies (engine.core.threads)
    lm = run_in_thread(batch.load)
    workload = generate_workload(spec, lm.tokenizer)
    policies = ("static", "inflight") if batch.policy == "both" else (batch.policy,)
    warm_up(lm, workload, batch.max_batch)  # both policies' first forward passes, not counted
    out: dict = {
        "model": lm.name,
        "dtype": lm.dtype,
        "device": lm.device,
        "max_batch": batch.max_batch,
        "workload": spec,
        "policies": {},
    }
    for p in policies:
        out["policies"][p] = replay(lm, workload, p, batch.max_batch).summary()
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
