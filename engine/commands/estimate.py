"""`python -m engine estimate`: will it fit, how fast, how much (the Memory & cost page's numbers).

With `--engine`, every GPU time and rate is that class of engine's estimate fitted on published measurements,
with its interval and the physical bound ({"low", "central", "high", "bound"}); with `--engine vllm|sglang` memory
is what the server allocates (the one memory answer: fit, max batch, KV tokens, GPUs needed) and the launch
command comes with it, for the GPUs asked when the load fits there, else for the GPUs it needs.

`run` reads as the request's steps: the model and GPU by name (engine.arch.resolve), the inputs (`inputs_from`),
the calibration when asked (read once), then one `estimate`."""

from __future__ import annotations

import os

from engine.arch.resolve import resolve_gpu, resolve_model_spec
from engine.calc import format as fmt
from engine.calc.efficiency import INTERVAL_LEVEL, INTERVAL_METHOD
from engine.calc.hf_config import read_config_file
from engine.calc.launch import CAP_FLAG
from engine.calc.plan import held_at
from engine.calc.prices import price_for
from engine.calc.report import Estimate, Inputs, default_precision, estimate, split_prompt_output
from engine.calc.serving_memory import VLLM_CPU_KV_ENV, cpu_kv_space_bytes
from engine.calc.specs import GIB, THIS_MACHINE, custom_gpu_from_figures
from engine.commands import simulate
from engine.core.errors import InvalidParameterError
from engine.core.interval import Interval

HELP = "estimate memory, fit, decode/prefill time and cost for a model on a GPU"
CUSTOM = "custom"


JSON_MEMORY = (
    "--json memory keys: weights_bytes, and kv_cache_bytes / kv_bytes_per_token (the KV cache of the load asked: "
    "batch x tokens). Without a serving engine, overhead_bytes, total_bytes and per_gpu_bytes are the overhead "
    "model's: (weights + KV) x (1 + --overhead). With --engine vllm or sglang they are the engine's allocation on "
    "the GPUs asked (per GPU: weights + its profile run's activations and runtime, the overhead_bytes, + its KV pool, "
    "kv_pool_bytes_per_gpu); the overhead model's figures move under overhead_model, a comparison only; "
    "memory_figures says which model the keys hold, serving_memory has every figure of the allocation, and "
    "max_batch_limited_by says whether the KV cache or --max-num-seqs sets max_batch."
)


def add_arguments(parser) -> None:
    parser.epilog = JSON_MEMORY
    src = parser.add_mutually_exclusive_group(required=True)
    src.add_argument(
        "--model", help="a calculator preset (see `python -m engine gpus --models`) or an engine preset"
    )
    src.add_argument("--config", help="path of a Hugging Face config.json (or its folder)")
    parser.add_argument(
        "--gpu",
        required=True,
        help=f"a catalog key (python -m engine gpus), {THIS_MACHINE}, or {CUSTOM} with the --gpu-* figures",
    )
    # without --dtype, the checkpoint's own precision where the GPU runs it (default_precision), as the page starts
    Inputs.add_arguments(parser, defaults={"dtype": None})
    # with --seq-len alone, prompt and output split it (split_prompt_output); without it, the spec's defaults
    parser.set_defaults(prompt_tokens=None, output_tokens=None)
    custom = parser.add_argument_group(f"--gpu {CUSTOM}: a GPU outside the catalogue")
    custom.add_argument(
        "--gpu-memory-gib", type=float, help="memory per GPU in GiB, as nvidia-smi reports it"
    )
    custom.add_argument("--gpu-bandwidth-gbs", type=float, help="memory bandwidth in GB/s (datasheet)")
    custom.add_argument(
        "--gpu-tflops", type=float, help="dense fp16/bf16 tensor TFLOPS (datasheet, not sparse)"
    )
    custom.add_argument(
        "--interconnect",
        help="GPU-to-GPU link: nvlink or pcie, optionally with its GB/s both ways (nvlink:900, pcie:64)",
    )
    parser.add_argument(
        "--calibrated", action="store_true", help=f"apply this machine's calibration ({THIS_MACHINE} only)"
    )
    simulate.add_solve_arguments(parser)  # --solve max-context|max-users|cheapest (engine.simulate.solve)


def _this_machine():
    from engine.calibration import this_machine_gpu

    return this_machine_gpu()


def gpu_from_args(args):
    if args.gpu != CUSTOM:
        if any(
            getattr(args, k, None) is not None for k in ("gpu_memory_gib", "gpu_bandwidth_gbs", "gpu_tflops")
        ):
            raise InvalidParameterError(
                f"--gpu-memory-gib / --gpu-bandwidth-gbs / --gpu-tflops go with --gpu {CUSTOM}"
            )
        return resolve_gpu(args.gpu, this_machine=_this_machine)
    missing = [f for f in ("gpu_memory_gib", "gpu_bandwidth_gbs", "gpu_tflops") if getattr(args, f) is None]
    if missing:
        raise InvalidParameterError(
            f"--gpu {CUSTOM} needs {', '.join('--' + m.replace('_', '-') for m in missing)}"
        )
    return custom_gpu_from_figures(
        memory_gib=args.gpu_memory_gib,
        bandwidth_gb_s=args.gpu_bandwidth_gbs,
        tflops=args.gpu_tflops,
        interconnect=args.interconnect or "pcie",
    )


def spec_from_args(args):
    if args.config:
        from engine.arch.meta import (
            exact_spec,  # the real class on the meta device; the formula where it cannot
        )

        return exact_spec(read_config_file(args.config))
    return resolve_model_spec(args.model)


def inputs_from(args, gpu, spec=None) -> tuple[Inputs, str | None]:
    """The spec's inputs from the flags: prompt and output split a --seq-len, and the GPU's listed price where
    none is given (with where it was listed)."""
    if args.seq_len is not None:
        seq = args.seq_len
        p, o = split_prompt_output(seq, args.prompt_tokens, args.output_tokens)
    else:
        # 0 is a number to refuse (Inputs says the range), not a missing flag to replace with the default
        p = Inputs.default("prompt_tokens") if args.prompt_tokens is None else args.prompt_tokens
        o = Inputs.default("output_tokens") if args.output_tokens is None else args.output_tokens
        seq = p + o
    price, price_note = args.usd_per_gpu_hour, None
    if price is None and (listed := price_for(gpu.key)) is not None:
        price, price_note = listed.usd_per_gpu_hour, listed.label
    space = args.cpu_kvcache_space
    if space is None and (env := cpu_kv_space_bytes(os.environ.get(VLLM_CPU_KV_ENV))) is not None:
        space = env // GIB  # vLLM on a CPU reads its pool from the environment, as it will at start-up
    inputs = Inputs.from_args(
        args,
        seq_len=seq,
        prompt_tokens=p,
        output_tokens=o,
        usd_per_gpu_hour=price,
        cpu_kvcache_space=space,
        dtype=args.dtype or default_precision(gpu, spec),
    )
    return inputs, price_note


def calibration_from(args):
    """This machine's calibration as the estimate takes it, read once; None unless --calibrated."""
    if not args.calibrated:
        return None
    if args.gpu != THIS_MACHINE:
        raise InvalidParameterError(
            f"a calibration describes this machine; use --gpu {THIS_MACHINE} with --calibrated, "
            "or drop --calibrated for the datasheet estimate of another GPU"
        )
    from engine.calibration import Calibrated, require_calibration

    return Calibrated(require_calibration())  # before measuring: a missing one fails fast


def run(args) -> dict:
    if args.solve:
        return simulate.solve(args)  # the inverse questions (engine.simulate.solve)
    spec = spec_from_args(args)
    calibration = calibration_from(args)
    gpu = gpu_from_args(args)
    inputs, price_note = inputs_from(args, gpu, spec)
    est = estimate(spec, gpu, inputs, calibration)
    out = flatten(est)
    if price_note:
        out["price_source"] = price_note
    if est.calibrated is not None and est.calibrated.ttft is not None and est.calibrated.tpot is not None:
        out["calibrated_interval_95"] = {
            "ttft_s": [est.calibrated.ttft.low, est.calibrated.ttft.high],
            "tpot_s": [est.calibrated.tpot.low, est.calibrated.tpot.high],
        }
    return out


def _interval(i: Interval) -> dict:
    return i.to_json()


def flatten(est: Estimate) -> dict:
    """The issue's keys at the top level, the full breakdown beside them."""
    m, t, fit = est.memory, est.timing, est.fit
    layout = fit.layout
    out = {
        "model": est.model,
        "model_id": est.model_id,
        "gpu": est.gpu,
        "mode": t.mode,
        "engine": est.inputs.engine,
        "params": m.params,
        "weights_bytes": m.weights_bytes,
        "weights_bytes_per_gpu": (
            est.serving.weights_bytes if est.serving else m.weights_bytes / max(1, fit.asked.tensor_parallel)
        ),
        "kv_bytes_per_token": m.kv_bytes_per_token,
        "kv_cache_bytes": m.kv_cache_bytes,
        "overhead_bytes": m.overhead_bytes,
        "total_bytes": m.total_bytes,
        "per_gpu_bytes": m.per_gpu_bytes,
        "gpu_memory_bytes": m.gpu_memory_bytes,
        "memory_model": fit.model,
        "fits": est.fits,
        "fit_refusal": fit.refusal or None,
        "gpus_needed_sentence": fit.sentence,
        "max_batch": est.max_batch,
        "max_seq_len": est.max_seq_len.tokens,
        "max_seq_len_limited_by": est.max_seq_len.limited_by,
        "gpus_needed": est.gpus_needed,
        # what the times, the price and the launch command are for: the GPUs asked when it fits, else the plan's
        "priced_gpus": est.priced_gpus,
        "tensor_parallel": layout.tensor_parallel if layout else None,
        "pipeline_parallel": layout.pipeline_parallel if layout else None,
        "replicas": est.replicas,
        "decode_s_per_token": t.decode_s_per_token,
        "decode_bound": t.decode_step.bound,
        "prefill_s": t.prefill_s,
        "prefill_bound": t.prefill.bound,
        "ttft_s": t.ttft_s,
        "prefill_batch_s": t.prefill_s,  # the whole batch's prefill (the times are one replica's)
        "generation_s": t.generation_s,
        "tpot_at_load_s": est.tpot_at_load_s,
        "tpot_at_load_interval_s": list(est.tpot_at_load_interval) if est.tpot_at_load_interval else None,
        "tokens_per_s": est.tokens_per_s,
        "usd_per_hour": est.cost.usd_per_hour,
        "usd_per_million_tokens": est.cost.usd_per_million_tokens,
        "usd_per_million_tokens_in_and_out": est.usd_per_million_tokens_in_and_out,
        "paged_extra_sequences": est.paged.extra_seqs if est.paged else 0,
        "active_params": est.params.active,
        "params_source": est.params.source,
        "params_breakdown": {name: n for name, n in est.params.rows() if n},
        "gpu_plan": est.plan,
        "tp_comm_share_prefill": t.prefill.comm_share,
        "tp_comm_share_decode": t.decode_step.comm_share,
        "warnings": list(est.warnings),
        "inputs": est.inputs,
    }
    if est.speed is not None:
        s = est.speed
        out |= {
            "decode_tokens_per_s": _interval(s.decode_tokens_per_s),
            # one request's first token with `batch` users in flight, in parts (engine.calc.serving_time)
            "ttft_s": _interval(s.ttft_s) | {"parts": dict(s.ttft_parts)},
            "prefill_batch_s": _interval(s.prefill_batch_s),
            "tpot_s": _interval(s.tpot_s),
            "output_tokens_per_s": _interval(s.output_tokens_per_s),
            "efficiency": {
                "engine_class": s.engine_class,
                "decode_bandwidth_utilisation": s.fit.bandwidth,
                "prefill_compute_utilisation": s.fit.flops,
                "overhead_s_per_layer": s.fit.overhead_s_per_layer,
                "request_fixed_s": s.fit.request_fixed_s,
                "gpu_family_time_factors": {
                    f"{kind} on {fam}": f for (kind, fam), f in s.fit.family_factors.items()
                },
                "decode_rows": s.fit.decode_rows,
                "prefill_rows": s.fit.prefill_rows,
                "throughput_rows": s.fit.throughput_rows,
                "interval": INTERVAL_METHOD,
                "interval_from": {
                    name: {"level": b.level, "rows": b.rows, "sources": b.sources}
                    for name, b in s.bands.items()
                },
            },
        }
        if est.cost_interval is not None:
            out["usd_per_million_tokens_interval"] = list(est.cost_interval)
        out["published_runs"] = [
            {"tpot_s": r.tpot_s, "load": r.load, "engine": r.engine, "source": r.source, "id": r.row_id}
            for r in est.seen
        ]
        out["published_below_estimate"] = est.seen_below is not None
        out["fixed_costs_anchored"] = est.anchor.to_json() if est.anchor is not None else None
    if est.serving is not None:
        sm = est.serving
        out |= {
            "kv_cache_tokens": sm.kv_cache_tokens,
            "max_concurrency": sm.max_concurrency,
            "serving_memory": sm,
        }
        out |= allocated(est, sm)
    else:
        out["memory_figures"] = (
            f"the overhead model: (weights + the load's KV cache) x (1 + {est.inputs.overhead:g}), split over the "
            "GPUs; max_batch is limited by memory"
        )
        out["max_batch_limited_by"] = "memory"
    if est.inputs.engine in ("vllm", "sglang"):
        launch = est.launch
        out["launch_command"] = (
            None if launch is None else launch.vllm if est.inputs.engine == "vllm" else launch.sglang
        )
        out["launch"] = launch
        out["launch_note"] = (
            launch.note
            if launch is not None
            else f"No command: {fit.sentence}"  # no layout holds even one request
        )
    return out


def allocated(est: Estimate, sm) -> dict:
    """A serving engine's memory as the top-level figures: what it allocates on each of the GPUs asked (weights,
    its profile run's activations, its runtime, the KV pool) and over all of them. The overhead model's figures,
    which those keys hold without a serving engine, move under "overhead_model" as a comparison; kv_cache_bytes
    and kv_bytes_per_token stay the load's (batch x tokens), as both models count them."""
    m, fit = est.memory, est.fit
    gpus = max(1, fit.asked.gpus)
    runtime = sm.activation_bytes + sm.non_torch_bytes
    per_gpu = (
        sm.weights_bytes + runtime + max(0.0, sm.kv_bytes)
    )  # past the budget when the weights leave no cache
    cap, held = sm.max_num_seqs, held_at(sm, est.inputs.seq_len or sm.max_model_len)
    return {
        "overhead_bytes": runtime * gpus,
        "total_bytes": per_gpu * gpus,
        "per_gpu_bytes": per_gpu,
        "kv_pool_bytes_per_gpu": max(0.0, sm.kv_bytes),
        "memory_figures": (
            f"{sm.engine}'s allocation on the {gpus} GPU(s) asked: per_gpu_bytes = weights + profile-run activations "
            "+ runtime (overhead_bytes, over all GPUs) + KV pool (kv_pool_bytes_per_gpu), total_bytes over all "
            "GPUs; kv_cache_bytes is the load's own KV (batch x tokens); overhead_model holds the generic "
            "(weights + KV) x (1 + overhead) figures, for comparison only"
        ),
        "overhead_model": {
            "overhead_fraction": est.inputs.overhead,
            "overhead_bytes": m.overhead_bytes,
            "total_bytes": m.total_bytes,
            "per_gpu_bytes": m.per_gpu_bytes,
            "fits": m.fits,
        },
        # what caps max_batch: the requests the server runs at once (--max-num-seqs) or the full-length requests
        # its KV cache holds
        "max_batch_limited_by": "max_num_seqs" if cap and held >= cap else "kv_cache",
    }


def _batch_limit(r: dict) -> str:
    """' (its KV cache binds; --max-num-seqs 1024)': which limit sets a serving engine's max batch."""
    if "serving_memory" not in r:
        return ""
    sm = r["serving_memory"]
    cap = f"{CAP_FLAG[sm.engine]} {sm.max_num_seqs}" if sm.max_num_seqs else ""
    if r["max_batch_limited_by"] == "max_num_seqs":
        return f" ({cap} binds before the KV cache)"
    return f" (its KV cache binds{f', below {cap}' if cap else ''})"


def _rate(r: dict | float, unit: str) -> str:
    if isinstance(r, dict):
        return f"{r['central']:,.1f} {unit} ({INTERVAL_LEVEL} interval {r['low']:,.1f}-{r['high']:,.1f}; at most {r['bound']:,.1f}: physics)"
    return f"{r:,.1f} {unit}"


def _mode(r: dict) -> str:
    """'fitted: sglang (on vllm-class runs)' where the engine borrows its class's fit, else the timing's mode."""
    cls = r.get("efficiency", {}).get("engine_class")
    if r["engine"] and cls and cls != r["engine"]:
        return f"fitted: {r['engine']} (on {cls}-class runs)"
    return r["mode"]


def _throughput(r: dict) -> str:
    """Output tokens per second over every replica (the JSON's interval is one replica's), as the price counts."""
    n, t = r["replicas"], r["output_tokens_per_s"]
    if n <= 1:
        return _rate(t, "output tok/s")
    every = {k: t[k] * n for k in ("central", "low", "high", "bound")}
    return f"{_rate(every, 'output tok/s')} over {n:,} replicas ({t['central']:,.1f} each)"


def format_text(r: dict) -> str:
    if "solve" in r:
        return simulate.solve_text(r)
    i: Inputs = r["inputs"]
    verdict = "FITS" if r["fits"] else "DOES NOT FIT"
    lines = [
        f"{r['model']} in {i.weights_label} (KV {i.kv_dtype}) on {i.n_gpus} x {r['gpu']}, "
        f"batch {i.batch}, {i.seq_len} tokens ({i.prompt_tokens} prompt + {i.output_tokens} output) [{_mode(r)}]",
        f"  parameters        {r['params']:,}",
        f"  weights           {fmt.gb(r['weights_bytes'])} ({fmt.gb(r['weights_bytes_per_gpu'])} per GPU)",
        f"  KV cache          {fmt.gb(r['kv_cache_bytes'])} ({r['kv_bytes_per_token']:,.0f} B/token)",
    ]
    if "kv_cache_tokens" in r:
        sm = r["serving_memory"]
        where = "on this CPU (VLLM_CPU_KVCACHE_SPACE)" if sm.device == "cpu" else "per GPU"
        if sm.kv_bytes <= 0:  # the budget is gone before the cache: no negative gigabytes
            lines.append(
                f"  {i.engine} has no room for a cache {where}: the weights and its runtime exceed its budget by "
                f"{fmt.gb(-sm.kv_bytes)}: {verdict}"
            )
        else:
            lines.append(
                f"  {i.engine} allocates {fmt.gb(sm.kv_bytes)} {where} for the cache: {r['kv_cache_tokens']:,} tokens "
                f"({sm.blocks:,} blocks of {sm.block_size}); "
                f"maximum concurrency for {sm.max_model_len:,} tokens per request: {r['max_concurrency']:.2f}x: {verdict}"
            )
    else:
        lines += [
            f"  overhead          {fmt.gb(r['overhead_bytes'])} ({i.overhead:.0%})",
            f"  total             {fmt.gb(r['total_bytes'])} -> {fmt.gb(r['per_gpu_bytes'])} per GPU of "
            f"{fmt.gb(r['gpu_memory_bytes'])}: {verdict}",
        ]
    lines.append(
        f"  max batch at {i.seq_len} tokens: {r['max_batch']}{_batch_limit(r)}; max tokens at batch {i.batch}: "
        f"{r['max_seq_len']} "
        f"({r['max_seq_len_limited_by']}); GPUs needed: {r['gpus_needed']}"
    )
    lines.append(f"  GPUs needed       {r['gpus_needed_sentence']}")
    if r["priced_gpus"] != i.n_gpus:
        lines.append(f"  times and cost    at the {r['priced_gpus']:,} GPUs it needs")
    if isinstance(r["ttft_s"], dict):
        t = r["ttft_s"]
        parts = t.get("parts", {})
        lines += [
            f"  first token       {fmt.seconds(t['central'])} ({INTERVAL_LEVEL} interval {fmt.seconds(t['low'])}-{fmt.seconds(t['high'])}; "
            f"at least {fmt.seconds(t['bound'])}: physics) = "
            + " + ".join(f"{fmt.seconds(v)} {k}" for k, v in parts.items()),
            f"  batch prefill     {fmt.seconds(r['prefill_batch_s']['central'])} for all {i.batch} prompts at once",
            f"  decode            {_rate(r['decode_tokens_per_s'], 'tok/s per sequence')}",
            f"  at this load      {fmt.seconds(r['tpot_at_load_s'])} per output token"
            + (
                f" ({INTERVAL_LEVEL} interval {fmt.seconds(r['tpot_at_load_interval_s'][0])}-"
                f"{fmt.seconds(r['tpot_at_load_interval_s'][1])})"
                if r.get("tpot_at_load_interval_s")
                else ""
            )
            + f" with the other users' prompts counted; {fmt.seconds(r['generation_s'])} per request",
            f"  throughput        {_throughput(r)}",
        ]
        lines += [
            f"  published         {p['tpot_s'] * 1e3:.1f} ms per output token ({p['load']}; {p['engine']}; {p['source']})"
            for p in r.get("published_runs", [])
        ]
    else:
        if r.get("mode") == "datasheet":
            lines.append(
                "  times             physical bounds: every roof reached, no engine's costs (no --engine; the page's "
                "default is transformers: --engine hf)"
            )
        lines += [
            # the batch's prompts together, the page's 'TTFT, all N arrive together' (it read as one request's TTFT
            # beside the page's transformers estimate of one request: a student's walk)
            f"  prefill           {fmt.seconds(r['prefill_s'])} ({r['prefill_bound']}-bound): the first token when "
            f"all {r['inputs'].batch} prompts arrive together",
            f"  decode            {fmt.seconds(r['decode_s_per_token'])}/token ({r['decode_bound']}-bound)",
            f"  generation        {fmt.seconds(r['generation_s'])}; throughput {r['tokens_per_s']:,.1f} tokens/s",
        ]
    lines.append(
        f"  cost              {fmt.usd(r['usd_per_hour'])}/hour, {fmt.usd(r['usd_per_million_tokens'])} per million output tokens"
        + (
            f" ({INTERVAL_LEVEL} interval {fmt.usd(r['usd_per_million_tokens_interval'][0])}-{fmt.usd(r['usd_per_million_tokens_interval'][1])})"
            if r.get("usd_per_million_tokens_interval")
            else ""
        )
        + f"; {fmt.usd(r['usd_per_million_tokens_in_and_out'])} per million tokens in and out (prompts counted)"
        + (f" [{r['price_source']}]" if r.get("price_source") else "")
        if r["usd_per_hour"] == r["usd_per_hour"]
        else "  cost              pass --usd-per-hour for dollars per hour and per million tokens"
    )
    if r.get("launch_command"):
        lines.append(f"  launch            {r['launch_command']}")
        lines += [f"                    {step}" for step in r["launch"].multi_node]
    if r.get("launch_note"):
        lines.append(f"                    {r['launch_note']}")
    lines += [f"  ASSUMPTION        {w}" for w in r["warnings"]]
    return "\n".join(lines)
