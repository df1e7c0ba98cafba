"""`python -m engine loadgen`: load-test any OpenAI-compatible endpoint; one run or a sweep with its SLO knee."""

from __future__ import annotations

import json
import os
from pathlib import Path

from engine.core.errors import InvalidParameterError
from engine.loadgen.sweep import check_server, run_sweep, to_json
from engine.loadgen.workload import ENDPOINTS, MODES, SLO, LoadSpec, LoadSpecError, parse_levels

HELP = "load-test an OpenAI-compatible URL: throughput, TTFT/TPOT/ITL/E2E p50-p99, errors, goodput, SLO knee"
KEY_ENVS = ("INFERENCE_LAB_API_KEY", "OPENAI_API_KEY")
_D, _S = LoadSpec(base_url="http://127.0.0.1:8000/v1", model=""), SLO()


def add_arguments(parser) -> None:
    parser.add_argument(
        "--url", default=_D.base_url, help="base URL up to /v1 (vLLM, TGI, SGLang, this engine's server...)"
    )
    parser.add_argument(
        "--model", default=None, help="model id to send (default: the first one GET /v1/models lists)"
    )
    parser.add_argument(
        "--api-key-env",
        default=None,
        help=f"environment variable holding the key (default: {' or '.join(KEY_ENVS)})",
    )
    parser.add_argument("--endpoint", choices=ENDPOINTS, default=_D.endpoint)
    parser.add_argument(
        "--mode", choices=MODES, default=_D.mode, help="Poisson arrivals at --rate, or --concurrency users"
    )
    parser.add_argument("--rate", type=float, default=_D.rate, help="requests per second (poisson)")
    parser.add_argument(
        "--burstiness",
        type=float,
        default=_D.burstiness,
        help="Gamma arrivals as vLLM's bench serve: 1 = Poisson, < 1 burstier, > 1 steadier",
    )
    parser.add_argument(
        "--concurrency",
        type=int,
        default=_D.concurrency,
        help="users, each sending when its last answer ends",
    )
    parser.add_argument("--sweep", default=None, help="comma-separated rates or user counts, e.g. 0.5,1,2,4")
    parser.add_argument(
        "--keep-going", action="store_true", help="sweep every level even after one misses the SLOs"
    )
    parser.add_argument("--requests", type=int, default=_D.n_requests, help="requests per run")
    parser.add_argument("--output-tokens", type=int, default=_D.output_tokens, help="max_tokens per request")
    parser.add_argument(
        "--output-tokens-max", type=int, default=None, help="draw lengths uniformly up to this"
    )
    parser.add_argument(
        "--no-ignore-eos",
        action="store_true",
        help="do not send vLLM's ignore_eos (for servers that refuse it)",
    )
    parser.add_argument(
        "--prompts",
        default=None,
        help='JSONL file with one {"prompt": ...} per line (default: the shipped set)',
    )
    parser.add_argument("--seed", type=int, default=_D.seed)
    parser.add_argument(
        "--slo-ttft", type=float, default=_S.ttft_s, help="TTFT objective, seconds (0 = none)"
    )
    parser.add_argument(
        "--slo-tpot", type=float, default=_S.tpot_s, help="TPOT objective, seconds (0 = none)"
    )
    parser.add_argument("--slo-e2e", type=float, default=0, help="end-to-end objective, seconds (0 = none)")
    parser.add_argument(
        "--slo-attainment",
        type=float,
        default=_S.min_attainment,
        help="share of requests that must meet them",
    )
    parser.add_argument("--out", default=None, help="also write the JSON result to this file")


def api_key(env_name: str | None) -> str | None:
    names = (env_name,) if env_name else KEY_ENVS
    return next((os.environ[n] for n in names if os.environ.get(n)), None)


def run(args) -> dict:
    key = api_key(args.api_key_env)
    try:
        model = args.model or next(iter(check_server(args.url, key)), None)
        if not model:
            raise LoadSpecError(f"{args.url}/models lists no model; pass --model")
        spec = LoadSpec(
            base_url=args.url,
            model=model,
            api_key=key,
            endpoint=args.endpoint,
            mode=args.mode,
            rate=args.rate,
            burstiness=args.burstiness,
            concurrency=args.concurrency,
            n_requests=args.requests,
            output_tokens=args.output_tokens,
            output_tokens_max=args.output_tokens_max,
            prompts_file=args.prompts,
            ignore_eos=not args.no_ignore_eos,
            seed=args.seed,
        ).validate()
        slo = SLO(
            ttft_s=args.slo_ttft or None,
            tpot_s=args.slo_tpot or None,
            e2e_s=args.slo_e2e or None,
            min_attainment=args.slo_attainment,
        ).validate()
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
        f"{unit:>6} {'ok':>4} {'req/s':>6} {'tok/s':>7} {'TTFT p50/p90/p99 (s)':>22} {'TPOT p50 ms':>11} "
        f"{'ITL p50 ms':>10} {'E2E p50 s':>9} {'goodput':>7} {'SLO':>4}",
    ]

    def f(x, scale=1.0, fmt=".2f"):
        return "-" if x is None else format(x * scale, fmt)

    for p in out["points"]:
        t = p["ttft_s"]
        lines.append(
            f"{p['level']:>6g} {p['completed']:>4} {f(p['request_throughput']):>6} {f(p['output_tokens_per_s'], fmt='.1f'):>7} "
            f"{f(t['p50']) + '/' + f(t['p90']) + '/' + f(t['p99']):>22} {f(p['tpot_s']['p50'], 1e3, '.1f'):>11} "
            f"{f(p['itl_s']['p50'], 1e3, '.1f'):>10} {f(p['e2e_s']['p50']):>9} {f(p['goodput_rps']):>7} "
            f"{'yes' if p['meets_slo'] else 'no':>4}" + (f"  errors {p['errors']}" if p["errors"] else "")
        )
    knee = out["knee"]
    lines.append(
        f"knee: {knee:g} {unit} meets the SLOs"
        if knee is not None
        else "knee: none of the levels met the SLOs"
    )
    return "\n".join(lines)
