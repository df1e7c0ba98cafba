"""The engine's OpenAI-compatible server under load: start it as a subprocess, sweep the number of users with the
load generator, find the knee under the SLOs, put the calculator's max-users prediction beside it, and
cross-check the load generator against GuideLLM (vLLM project) and AIPerf (NVIDIA) on the same server and workload.

    .venv/bin/python -m bench.serving [--model smollm2-135m-instruct] [--levels 1,2,4,8] [--requests 16]
                                      [--output-tokens 32] [--slo-ttft 2] [--slo-tpot 0.2]
                                      [--peer guidellm,aiperf|none] [--peer-concurrency 4] [--peer-requests 32]
                                      [--peer-repeats 2] [--no-sweep] [--label NAME]

    .venv/bin/python -m bench.serving --vllm [--levels 1,4,8] [--rounds 2] [--dtype fp32] [--threads 1]

The sweep and the prediction are here; the cross-check with its protocol (and --third-party, Hugging Face's
`transformers serve` under the same load generator) is bench/serving_peers.py; --vllm, the engine's server
against vLLM's, interleaved, is bench/serving_vllm.py (bench/results/serving-vllm-<machine>.json). Writes
bench/results/serving[-label]-<machine>.json; prints loadavg beside every figure.
"""

from __future__ import annotations

import argparse
import time
from datetime import UTC, datetime

from bench.common import write_result
from bench.serving_common import loadavg, warm_up
from bench.serving_peers import (
    choose_peers,
    cross_check,
    print_cross_check,
    print_third_party,
    third_party,
    tokenizer_dir,
)
from bench.serving_vllm import versus_vllm
from engine.calc import capacity
from engine.calc.specs import model_preset
from engine.core import paths
from engine.loadgen.sweep import run_sweep, to_json
from engine.loadgen.workload import SLO, LoadSpec
from engine.runtime.models import PRESETS
from engine.serving.process import ServerProcess
from engine.serving.runner import ServeSpec


def prediction(model: str, dtype: str, sweep, slo: SLO, slots: int) -> dict | None:
    """The calculator's max users within the TPOT objective, bandwidth calibrated at the lowest level."""
    preset = PRESETS.get(model)  # the one model -> calculator table (engine/data/presets.toml)
    key = preset.calculator if preset is not None else None
    first = sweep.points[0] if sweep.points else None
    if key is None or first is None or not first.tpot_s.p50 or slo.tpot_s is None:
        return None
    # the lowest level's TPOT calibrates the bandwidth (the rule's only free number): the page's prediction
    run = capacity.predict_from_run(
        model_preset(key),
        dtype,
        first.prompt_tokens_median,
        sweep.spec.output_tokens,
        first.tpot_s.p50,
        slo.tpot_s,
        slots,
    )
    pred = run.prediction
    return {
        "calc_spec": key,
        "dtype": dtype,
        "context_tokens": run.context_tokens,
        "calibrated_at_users": first.level,
        "bandwidth_bytes_per_s": pred.bandwidth_bytes_per_s,
        "max_users": pred.max_users,
        "limited_by": pred.limited_by,
        "tpot_s_by_users": pred.tpot_s_by_users,
    }


def print_sweep(args, slo: SLO, sweep, out: dict) -> None:
    print(
        f"{args.model}, max batch {args.max_batch}, {args.n_requests} requests x {args.output_tokens} tokens per level; "
        f"SLO TTFT <= {slo.ttft_s} s, TPOT <= {slo.tpot_s} s ({slo.min_attainment:.0%} of requests)"
    )
    print(
        f"{'users':>5} {'req/s':>6} {'tok/s':>7} {'tok/s/user':>10} {'TTFT p50':>8} {'p99':>6} {'TPOT p50':>8} "
        f"{'ITL p50':>7} {'E2E p50':>7} {'SLO':>4}  loadavg"
    )
    for p, la in zip(sweep.points, out["loadavg_per_level"], strict=False):
        print(
            f"{p.level:>5g} {p.request_throughput:>6.2f} {p.output_tokens_per_s:>7.1f} {p.per_user_tokens_per_s:>10.1f} "
            f"{p.ttft_s.p50:>7.2f}s {p.ttft_s.p99:>5.2f}s {p.tpot_s.p50 * 1e3:>6.0f}ms {p.itl_s.p50 * 1e3:>5.0f}ms "
            f"{p.e2e_s.p50:>6.2f}s {'yes' if p.meets_slo else 'no':>4}  {la}"
        )
    print(f"measured knee: {sweep.knee:g} users" if sweep.knee else "measured knee: no level met the SLOs")
    pred = out["prediction"]
    if pred:
        print(
            f"calculator: {pred['max_users']} users within TPOT {slo.tpot_s} s (limited by {pred['limited_by']}; "
            f"bandwidth calibrated at {pred['calibrated_at_users']:g} user: {pred['bandwidth_bytes_per_s'] / 1e9:.2f} GB/s)"
        )


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ServeSpec.add_arguments(ap, only=("model", "max_batch"), defaults={"model": "smollm2-135m-instruct"})
    ap.add_argument("--levels", default="1,2,4,8", help="users to sweep")
    LoadSpec.add_arguments(
        ap, only=("n_requests", "output_tokens"), defaults={"n_requests": 16, "output_tokens": 32}
    )
    SLO.add_arguments(ap, only=("ttft_s", "tpot_s"))
    ap.add_argument(
        "--peer",
        default="guidellm,aiperf",
        help="comma-separated peers to cross-check (guidellm, aiperf), or none",
    )
    ap.add_argument(
        "--no-sweep", action="store_true", help="only the cross-check (no user sweep, no prediction)"
    )
    ap.add_argument("--label", default="", help="a name in the result file: serving-<label>-<machine>.json")
    ap.add_argument("--peer-concurrency", type=int, default=4)
    ap.add_argument("--peer-requests", type=int, default=32)
    ap.add_argument(
        "--peer-repeats", type=int, default=2, help="runs of each peer, interleaved with repeats + 1 of ours"
    )
    ap.add_argument(
        "--third-party",
        choices=("transformers-serve", "none"),
        default="none",
        help="also load-test Hugging Face's `transformers serve` on the same model folder",
    )
    ap.add_argument(
        "--vllm",
        action="store_true",
        help="the engine's server against vLLM's, interleaved (needs .venv-vllm: bash scripts/make_vllm_env.sh)",
    )
    ap.add_argument("--rounds", type=int, default=2, help="--vllm: interleaved rounds (medians over them)")
    ap.add_argument("--dtype", default="fp32", help="--vllm: both servers' precision")
    ap.add_argument("--threads", type=int, default=None, help="--vllm: both servers' compute threads")
    ap.add_argument("--kv-gib", type=int, default=2, help="--vllm: both servers' KV space, GiB")
    ap.add_argument("--max-model-len", type=int, default=2048, help="--vllm: vLLM's --max-model-len")
    args = ap.parse_args(argv)
    if args.vllm:
        if args.levels == "1,2,4,8":
            args.levels = "1,4,8"  # issue 32's levels
        versus_vllm(args)
        return

    slo = SLO.from_args(args)
    out: dict = {
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": paths.machine_id(),
        "model": args.model,
        "max_batch": args.max_batch,
        "loadavg_start": loadavg(),
    }
    with ServerProcess(args.model, max_batch=args.max_batch) as srv:
        spec = LoadSpec(
            base_url=srv.base_url,
            model=args.model,
            mode="concurrency",
            n_requests=args.n_requests,
            output_tokens=args.output_tokens,
        )
        warm_up(spec)
        levels = [float(x) for x in args.levels.split(",")]
        sweep = None
        if not args.no_sweep:
            loads: list[str] = []
            t0 = time.perf_counter()
            sweep = run_sweep(
                spec, slo, levels, keep_going=True, progress=lambda f, msg: loads.append(loadavg())
            )
            out["sweep"] = to_json(sweep)
            out["sweep_s"] = time.perf_counter() - t0
            out["loadavg_per_level"] = loads[: len(sweep.points)]
            out["prediction"] = prediction(args.model, "fp32", sweep, slo, args.max_batch)
        present, missing = choose_peers(args.peer)
        if missing:
            out["cross_check_missing"] = missing
        if present:
            out["cross_check"] = cross_check(
                srv,
                args.model,
                present,
                args.peer_concurrency,
                args.peer_requests,
                args.output_tokens,
                args.peer_repeats,
            )
    if args.third_party == "transformers-serve":
        out["third_party"] = third_party(
            tokenizer_dir(args.model), levels[:2], min(args.n_requests, 4), args.output_tokens, slo
        )
    out["loadavg_end"] = loadavg()
    write_result(f"serving-{args.label}" if args.label else "serving", out)
    if sweep is not None:
        print_sweep(args, slo, sweep, out)
    if out.get("cross_check"):
        print_cross_check(out["cross_check"])
    for peer, why in out.get("cross_check_missing", {}).items():
        print(f"cross-check with {peer} skipped: {why}")
    if out.get("third_party"):
        print_third_party(out["third_party"])


if __name__ == "__main__":
    main()
