"""`python -m engine estimate`: will it fit, how fast, how much (the Memory & cost page's numbers)."""

from __future__ import annotations

from engine.calc import format as fmt
from engine.calc.hf_config import read_config_file
from engine.calc.memory import DEFAULT_OVERHEAD, WEIGHT_FORMATS
from engine.calc.report import Estimate, Inputs, estimate, split_prompt_output
from engine.calc.specs import PRECISIONS, THIS_MACHINE
from engine.calc.timing import DATASHEET
from engine.calibration import efficiency_at, require_calibration, resolve_gpu, resolve_model_spec
from engine.core.errors import InvalidParameterError

HELP = "estimate memory, fit, decode/prefill time and cost for a model on a GPU"
_DEFAULTS = Inputs()


def add_arguments(parser) -> None:
    src = parser.add_mutually_exclusive_group(required=True)
    src.add_argument(
        "--model", help="a calculator preset (see `python -m engine gpus --models`) or an engine preset"
    )
    src.add_argument("--config", help="path of a Hugging Face config.json (or its folder)")
    parser.add_argument("--dtype", required=True, choices=PRECISIONS, help="weight precision")
    parser.add_argument(
        "--kv-dtype",
        choices=PRECISIONS,
        help="KV cache precision (default: --dtype; fp16 for int8/int4 weights)",
    )
    parser.add_argument(
        "--weight-format",
        choices=WEIGHT_FORMATS,
        help="quantized weights with their scales: int8 (per channel), int4 (groups), or a GGUF block format",
    )
    parser.add_argument(
        "--group-size", type=int, help="weights per scale for int8/int4 (default: per channel / 128)"
    )
    parser.add_argument(
        "--gpu", required=True, help=f"a catalog key (python -m engine gpus) or {THIS_MACHINE}"
    )
    parser.add_argument(
        "--batch", type=int, default=_DEFAULTS.batch, help=f"concurrent sequences (default {_DEFAULTS.batch})"
    )
    parser.add_argument("--seq-len", type=int, required=True, help="tokens per sequence the KV cache holds")
    parser.add_argument("--prompt-tokens", type=int, help="default: half of --seq-len")
    parser.add_argument("--output-tokens", type=int, help="default: --seq-len minus the prompt")
    parser.add_argument(
        "--overhead", type=float, default=DEFAULT_OVERHEAD, help="fraction added for activations etc."
    )
    parser.add_argument(
        "--usd-per-hour",
        type=float,
        default=_DEFAULTS.usd_per_gpu_hour,
        help="price per GPU-hour in USD (omit: no cost figures)",
    )
    parser.add_argument("--gpus", type=int, default=_DEFAULTS.n_gpus, help="GPUs in tensor parallel")
    parser.add_argument(
        "--calibrated", action="store_true", help=f"apply this machine's calibration ({THIS_MACHINE} only)"
    )


def run(args) -> dict:
    if args.config:
        from engine.arch.meta import (
            exact_spec,  # the real class on the meta device; the formula where it cannot
        )

        spec = exact_spec(read_config_file(args.config))
    else:
        spec = resolve_model_spec(args.model)
    if args.calibrated and args.gpu != THIS_MACHINE:
        raise InvalidParameterError(
            f"a calibration describes this machine; use --gpu {THIS_MACHINE} with --calibrated, "
            "or drop --calibrated for the datasheet estimate of another GPU"
        )
    cal = require_calibration() if args.calibrated else None  # before measuring: a missing one fails fast
    gpu = resolve_gpu(args.gpu)
    p, o = split_prompt_output(args.seq_len, args.prompt_tokens, args.output_tokens)
    inputs = Inputs(
        dtype=args.dtype,
        kv_dtype=args.kv_dtype,
        batch=args.batch,
        seq_len=args.seq_len,
        prompt_tokens=p,
        output_tokens=o,
        overhead=args.overhead,
        n_gpus=args.gpus,
        usd_per_gpu_hour=args.usd_per_hour,
        weight_format=args.weight_format,
        group_size=args.group_size,
    )
    eff, interval = DATASHEET, None
    if cal is not None:  # the fit's own TTFT and TPOT at this shape, and their interval
        eff, interval = efficiency_at(
            cal,
            spec,
            gpu,
            dtype=args.dtype,
            prompt_tokens=p,
            output_tokens=o,
            batch=args.batch,
            n_gpus=args.gpus,
        )
    out = flatten(estimate(spec, gpu, inputs, eff))
    if interval is not None:
        out["calibrated_interval_95"] = {
            "ttft_s": [interval.ttft.low, interval.ttft.high],
            "tpot_s": [interval.tpot.low, interval.tpot.high],
        }
    return out


def flatten(est: Estimate) -> dict:
    """The issue's keys at the top level, the full breakdown beside them."""
    m, t = est.memory, est.timing
    return {
        "model": est.model,
        "gpu": est.gpu,
        "mode": t.mode,
        "params": m.params,
        "weights_bytes": m.weights_bytes,
        "kv_bytes_per_token": m.kv_bytes_per_token,
        "kv_cache_bytes": m.kv_cache_bytes,
        "overhead_bytes": m.overhead_bytes,
        "total_bytes": m.total_bytes,
        "per_gpu_bytes": m.per_gpu_bytes,
        "gpu_memory_bytes": m.gpu_memory_bytes,
        "fits": m.fits,
        "max_batch": est.max_batch,
        "max_seq_len": est.max_seq_len.tokens,
        "max_seq_len_limited_by": est.max_seq_len.limited_by,
        "gpus_needed": est.gpus_needed,
        "decode_s_per_token": t.decode_s_per_token,
        "decode_bound": t.decode_step.bound,
        "prefill_s": t.prefill_s,
        "prefill_bound": t.prefill.bound,
        "ttft_s": t.ttft_s,
        "generation_s": t.generation_s,
        "tokens_per_s": t.tokens_per_s,
        "usd_per_hour": est.cost.usd_per_hour,
        "usd_per_million_tokens": est.cost.usd_per_million_tokens,
        "paged_extra_sequences": est.paged.extra_seqs if est.paged else 0,
        "active_params": est.params.active,
        "params_source": est.params.source,
        "params_breakdown": {name: n for name, n in est.params.rows() if n},
        "gpu_plan": est.plan,
        "usd_per_million_tokens_at_plan": est.cost_at_plan.usd_per_million_tokens
        if est.cost_at_plan
        else None,
        "tp_comm_share_prefill": t.prefill.comm_share,
        "tp_comm_share_decode": t.decode_step.comm_share,
        "warnings": list(est.warnings),
        "inputs": est.inputs,
    }


def format_text(r: dict) -> str:
    i: Inputs = r["inputs"]
    verdict = "FITS" if r["fits"] else "DOES NOT FIT"
    return "\n".join(
        [
            f"{r['model']} in {i.weights_label} (KV {i.kv_dtype}) on {r.get('n_gpus', i.n_gpus)} x {r['gpu']}, "
            f"batch {i.batch}, {i.seq_len} tokens ({i.prompt_tokens} prompt + {i.output_tokens} output) [{r['mode']}]",
            f"  parameters        {r['params']:,}",
            f"  weights           {fmt.gb(r['weights_bytes'])}",
            f"  KV cache          {fmt.gb(r['kv_cache_bytes'])} ({r['kv_bytes_per_token']:,.0f} B/token)",
            f"  overhead          {fmt.gb(r['overhead_bytes'])} ({i.overhead:.0%})",
            f"  total             {fmt.gb(r['total_bytes'])} -> {fmt.gb(r['per_gpu_bytes'])} per GPU of "
            f"{fmt.gb(r['gpu_memory_bytes'])}: {verdict}",
            f"  max batch at {i.seq_len} tokens: {r['max_batch']}; max tokens at batch {i.batch}: {r['max_seq_len']} "
            f"({r['max_seq_len_limited_by']}); GPUs needed: {r['gpus_needed']}",
            f"  prefill (TTFT)    {fmt.seconds(r['prefill_s'])} ({r['prefill_bound']}-bound)",
            f"  decode            {fmt.seconds(r['decode_s_per_token'])}/token ({r['decode_bound']}-bound)",
            f"  generation        {fmt.seconds(r['generation_s'])}; throughput {r['tokens_per_s']:,.1f} tokens/s",
            f"  cost              {fmt.usd(r['usd_per_hour'])}/hour, {fmt.usd(r['usd_per_million_tokens'])} per million output tokens"
            if r["usd_per_hour"] == r["usd_per_hour"]
            else "  cost              pass --usd-per-hour for dollars per hour and per million tokens",
            *(f"  WARNING           {w}" for w in r["warnings"]),
        ]
    )
