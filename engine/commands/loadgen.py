"""`python -m engine loadgen`: load-test any OpenAI-compatible endpoint; one run or a sweep with its SLO knee."""

from __future__ import annotations

import json
import os
from pathlib import Path

from engine.core.errors import InvalidParameterError
from engine.loadgen.sweep import check_server, run_sweep, to_json
from engine.loadgen.workload import SLO, LoadSpec, LoadSpecError, parse_levels

HELP = "load-test an OpenAI-compatible URL: throughput, TTFT/TPOT/ITL/E2E p50-p99, errors, goodput, SLO knee"
KEY_ENVS = ("INFERENCE_LAB_API_KEY", "OPENAI_API_KEY")


def add_arguments(parser) -> None:
    LoadSpec.add_arguments(parser)  # the workload's flags, defaults, bounds and help, from the spec
    parser.add_argument(
        "--api-key-env",
        default=None,
        help=f"environment variable holding the key (default: {' or '.join(KEY_ENVS)})",
    )
    parser.add_argument("--sweep", default=None, help="comma-separated rates or user counts, e.g. 0.5,1,2,4")
    parser.add_argument(
        "--keep-going", action="store_true", help="sweep every level even after one misses the SLOs"
    )
    SLO.add_arguments(parser)
    parser.add_argument("--out", default=None, help="also write the JSON result to this file")


def api_key(env_name: str | None) -> str | None:
    names = (env_name,) if env_name else KEY_ENVS
    return next((os.environ[n] for n in names if os.environ.get(n)), None)


def run(args) -> dict:
    key = api_key(args.api_key_env)
    try:
        model = args.model or next(iter(check_server(args.base_url, key)), None)
        if not model:
            raise LoadSpecError(f"{args.base_url}/models lists no model; pass --model")
        spec = LoadSpec.from_args(args, model=model, api_key=key)
        slo = SLO.from_args(args)
        levels = list(parse_levels(args.sweep)) if args.sweep else [spec.level]
        result = run_sweep(spec, slo, levels, keep_going=args.keep_going)
    except (LoadSpecError, ValueError) as exc:
        raise InvalidParameterError(str(exc)) from None
    out = to_json(result)
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=2))
    return out


def format_text(out: dict) -> str:
    s = out["spec"]
    unit = "req/s" if s["mode"] == "poisson" else "users"
    lines = [
        f"{s['base_url']}  model {s['model']}  {s['endpoint']}  {s['n_requests']} requests per level, "
        f"{s['output_tokens']} output tokens",
        f"{unit:>6} {'ok':>4} {'req/s':>6} {'tok/s':>7} {'TTFT p50/p90/p99 (s)':>22} {'TPOT p50/p90 ms':>15} "
        f"{'ITL p50 ms':>10} {'E2E p50 s':>9} {'goodput':>7} {'SLO':>4}",
    ]

    def f(x, scale=1.0, fmt=".2f"):
        return "-" if x is None else format(x * scale, fmt)

    for p in out["points"]:
        t = p["ttft_s"]
        lines.append(
            f"{p['level']:>6g} {p['completed']:>4} {f(p['request_throughput']):>6} {f(p['output_tokens_per_s'], fmt='.1f'):>7} "
            f"{f(t['p50']) + '/' + f(t['p90']) + '/' + f(t['p99']):>22} "
            f"{f(p['tpot_s']['p50'], 1e3, '.1f') + '/' + f(p['tpot_s']['p90'], 1e3, '.1f'):>15} "
            f"{f(p['itl_s']['p50'], 1e3, '.1f'):>10} {f(p['e2e_s']['p50']):>9} {f(p['goodput_rps']):>7} "
            f"{'yes' if p['meets_slo'] else 'no':>4}" + (f"  errors {p['errors']}" if p["errors"] else "")
        )
    lines += ttft_split_lines(out["points"], unit)
    for p in out["points"]:
        if p.get("ttft_by_turn"):
            turns = ", ".join(f"{i} {f(d['p50'])}" for i, d in enumerate(p["ttft_by_turn"], 1))
            lines.append(f"{p['level']:>6g} {unit}: TTFT p50 by turn (s): {turns}")
    knee = out["knee"]
    slo = slo_words(out.get("slo"))
    lines.append(
        f"knee: {knee:g} {unit} meets the SLOs{slo}"
        if knee is not None
        else f"knee: none of the levels met the SLOs{slo}"
    )
    return "\n".join(lines)


def slo_words(slo: dict | None) -> str:
    """' (TTFT <= 2 s and TPOT <= 200 ms for 90% of requests)': the objectives with their units, as the result's
    JSON holds them (in seconds); '' where none was set."""
    if not slo:
        return ""
    fields = {k: slo.get(k) for k in ("ttft_s", "tpot_s", "e2e_s")}
    words = SLO(**fields).words()
    share = slo.get("min_attainment")
    return f" ({words} for {share:.0%} of requests)" if words and share else f" ({words})" if words else ""


def ttft_split_lines(points: list[dict], unit: str) -> list[str]:
    """Where each level's TTFT went, from the server's per-request timings joined by request id (this engine's
    server keeps them; vLLM does not, and then nothing is printed): queue + prefill + transport = TTFT, means."""
    lines = []
    for p in points:
        b = p.get("ttft_breakdown")
        if not b:
            continue
        if not lines:
            lines.append("TTFT split (server timings joined by request id; means, seconds):")
        lines.append(
            f"{p['level']:>6g} {unit}: queue {b['queue_s']:.3f} + prefill {b['prefill_s']:.3f} + transport "
            f"{b['transport_s']:.3f} = {b['ttft_s']:.3f}  ({b['joined']} of {b['completed']} requests joined)"
        )
    return lines
