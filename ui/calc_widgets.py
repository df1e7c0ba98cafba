"""Widgets and cached measurements shared by the Memory & cost and Roofline pages.

Each picker returns engine types (ModelSpec, GPUSpec) built from the widgets; defaults come from the
engine's own data (engine/data/*.toml, engine.calc.report.Inputs), so the CLI and the pages agree.
"""

from __future__ import annotations

import math
from dataclasses import replace

import streamlit as st

from engine import calibration
from engine.calc import format as fmt
from engine.calc import quant
from engine.calc.memory import WEIGHT_FORMATS, formula_of, param_count
from engine.calc.report import Inputs, default_precision
from engine.calc.roofline import measured_point
from engine.calc.specs import (
    ARCH_TRAITS,
    THIS_MACHINE,
    GPUSpec,
    ModelSpec,
    custom_gpu,
    load_gpu_catalog,
    load_model_presets,
    spec_from_numbers,
)
from engine.core.errors import EngineError

DEFAULTS = Inputs()


def _measured_machine() -> GPUSpec:
    from ui.common import cached_machine_measurement  # the one cached measurement of this machine

    return cached_machine_measurement().gpu_spec()


def cached_machine() -> GPUSpec:
    """This machine's roofs: the stored calibration's (its efficiencies were fitted against them), else the stored
    measurement (engine.calibration.machine), else measured now."""
    return _roof(calibration.load_calibration())


def _roof(cal: calibration.Calibration | None) -> GPUSpec:
    return cal.machine_gpu() if cal is not None else _measured_machine()


def machine_known() -> bool:
    """Whether this machine's roofs are stored (a calibration or a measurement): reading them costs nothing."""
    return _known(calibration.load_calibration())


def _known(cal: calibration.Calibration | None) -> bool:
    from engine.calibration import machine

    return cal is not None or machine.latest() is not None


def machine_provenance() -> str:
    """Where 'this machine' figures come from, with the date and the load they were measured under: the line every
    page shows beside this machine's bandwidth and FLOP/s (the same source as cached_machine)."""
    return _provenance(calibration.load_calibration())


def _provenance(cal: calibration.Calibration | None) -> str:
    from engine.core.load import cores, is_busy
    from ui.common import cached_machine_measurement

    if cal is not None:
        load = f"; {cal.load.describe()}" if cal.load is not None else ""
        return f"This machine's roofs: from its calibration of {cal.created_at[:16].replace('T', ' ')} UTC{load}."
    m = cached_machine_measurement()
    n = cores()
    quiet = "busy: roofs lower than when quiet" if is_busy(m.loadavg_1m, n) else "quiet"
    return (
        f"This machine's roofs: measured {m.measured_at[:16].replace('T', ' ')} UTC on {m.device}, load average "
        f"{m.loadavg_1m:.2f} on {n} cores ({quiet})."
    )


def measured_here_line(spec: ModelSpec, dtype: str, batch: int) -> str:
    """One line: the TPOT the engine measured on this machine for this model, precision and batch (the median of
    its recent runs, with where and when), to set beside a bound or an estimate of the same quantity; '' when
    nothing was measured."""
    from engine.calibration import check as estimate_check

    runs = [r for r in load_runs() if r.use_cache and r.batch_size == batch and r.dtype == dtype]
    if not runs:
        return ""
    same = [
        c
        for c in estimate_check.summarize(runs, cached_machine(), cached_calibration())
        if (s := calibration.spec_for_run_model(c.model)) is not None and s.name == spec.name
    ]
    if not same:
        return ""
    c = max(same, key=lambda c: c.n)
    return (
        f"Measured on this machine: TPOT **{fmt.seconds(c.tpot.median)}** ({c.model}, median of {c.n} runs: "
        f"{c.source_text}; newest {c.newest[:16].replace('T', ' ')} UTC), in *Estimate vs measurement* below."
    )


def machine_matmul(lm) -> float | None:
    """This machine's matmul FLOP/s at a loaded model's precision from the one source (cached_machine), where the
    model runs on the device that source measured (the GPU when torch sees one, else the CPU); else None."""
    import torch

    measured_on = "cuda" if torch.cuda.is_available() else "cpu"
    return cached_machine().flops_for(lm.dtype) if str(lm.device).startswith(measured_on) else None


def machine_panel(key: str, *, compact: bool = False) -> None:
    """This machine's roofs (read bandwidth, matmul FLOP/s) from the one source, with its date and load, and a
    button that measures it (again): the same panel on Home and the calculator (`compact`: one line of text, for
    a narrow column where metric tiles would cut their numbers)."""
    from ui.common import remeasure_machine

    # read once: the roofs, their provenance and the button all follow this calibration
    cal = calibration.load_calibration()
    known = _known(cal)
    if known:
        roof = _roof(cal)
        figures = [("Read bandwidth (measured)", f"{roof.bandwidth_bytes_per_s / 1e9:.1f} GB/s")] + [
            (f"Matmul {dt} (measured)", fmt.flops(roof.flops_for(dt), "FLOP/s")) for dt in ("fp32", "bf16")
        ]
        if compact:
            st.markdown(" · ".join(f"{label}: **{value}**" for label, value in figures))
        else:
            for col, (label, value) in zip(st.columns(len(figures)), figures, strict=True):
                col.metric(label, value)
        st.caption(_provenance(cal))
    else:
        st.info(
            "This machine is not measured yet: its read bandwidth and matmul FLOP/s are the roofs of the "
            "calculator's and the roofline's 'this machine'. Measuring takes a few seconds.",
            icon=":material/speed:",
        )
    if cal is not None:
        st.caption("Its calibration fixes these roofs; `python -m engine calibrate` measures them again.")
    elif st.button(
        "Measure this machine again" if known else "Measure this machine",
        key=f"{key}.measure",
        icon=":material/speed:",
        help="A read (sum) and a copy over a 268 MB buffer and a 1024³ matmul per precision, best of 5; stored "
        "with its date and load, and read by every page.",
    ):
        remeasure_machine()
        st.rerun()


@st.cache_data(show_spinner="Fetching config.json…", max_entries=32)
def cached_hub_spec(repo_id: str) -> ModelSpec:
    from engine.arch.hub import spec_from_hub

    return spec_from_hub(repo_id)


@st.cache_data(
    show_spinner="Building the model class on the meta device to count its parameters…", max_entries=32
)
def cached_config_spec(content: bytes) -> ModelSpec:
    """An uploaded config.json's spec, counted with the real class on the meta device (engine.arch.meta)."""
    from engine.arch.meta import exact_spec
    from engine.calc.hf_config import parse_config_json

    return exact_spec(parse_config_json(content))


def _count_caption(spec: ModelSpec) -> str:
    pc = param_count(spec)
    active = f" ({pc.active:,} active per token)" if pc.active != pc.total else ""
    how = pc.source
    if (
        pc.source == "formula"
        and spec.source not in ("config.json", "raw numbers")
        and spec.params_override is None
    ):
        how = "formula (for every preset it equals the real class's count on the meta device, checked by the tests)"
    return f"{spec.attention_kind}; {pc.total:,} parameters{active}, counted by the {how}"


def cached_calibration() -> calibration.Calibration | None:
    # a small JSON read; not cached so a fresh `python -m engine calibrate` shows up at once
    return calibration.load_calibration()


def load_runs() -> list:
    """The engine's measured runs on this machine (engine.runtime.runlog); empty when there are none."""
    try:
        from engine.runtime import runlog
    except ImportError:
        return []
    return runlog.load()


def model_input(key: str, *, default: str = "gpt-neo-2.7b") -> ModelSpec | None:
    """A preset, an uploaded config.json (parsed with json only), a hub id or raw numbers. None (with st.error) on bad input."""
    presets = load_model_presets()
    source = st.radio(
        "Model from", ["preset", "config.json", "hub id", "raw numbers"], horizontal=True, key=f"{key}.source"
    )
    try:
        if source == "preset":
            names = list(presets)
            name = st.selectbox(
                "Model",
                names,
                index=names.index(default) if default in names else 0,
                key=f"{key}.preset",
                help="Shapes from each model's config.json; sources in `python -m engine gpus --models`.",
            )
            spec = presets[name]
            st.caption(f"{_count_caption(spec)}. Source: {spec.source}")
            return spec
        if source == "config.json":
            up = st.file_uploader(
                "A Hugging Face config.json (≤ 5 MB; read as JSON, nothing executed)",
                type=["json"],
                key=f"{key}.upload",
            )
            if up is None:
                st.info("Upload a config.json, e.g. from a model's 'Files' tab on the hub.")
                return None
            spec = cached_config_spec(up.getvalue())
            st.caption(_count_caption(spec))
            for note in spec.notes:
                st.caption(note)
            return spec
        if source == "hub id":
            repo = st.text_input(
                "Hub id (config.json only)", placeholder="EleutherAI/gpt-neo-125m", key=f"{key}.hub"
            ).strip()
            if not repo:
                st.info("Type a hub id; only its config.json is fetched (or read from the local cache).")
                return None
            spec = cached_hub_spec(repo)
            st.caption(_count_caption(spec))
            return spec
        c1, c2, c3 = st.columns(3)
        n_layer = c1.number_input("layers", 1, 1000, 32, key=f"{key}.L")
        hidden = c2.number_input("hidden size", 1, 100_000, 4096, key=f"{key}.h")
        heads = c3.number_input("heads", 1, 1000, 32, key=f"{key}.H")
        kv = c1.number_input("KV heads", 1, 1000, 8, key=f"{key}.kv", help="= heads for MHA, 1 for MQA")
        head_dim = c2.number_input("head dim (0 = hidden/heads)", 0, 4096, 0, key=f"{key}.d")
        vocab = c3.number_input("vocabulary", 1, 2_000_000, 32000, key=f"{key}.V")
        ctx = c1.number_input("context length", 1, 10_000_000, 8192, key=f"{key}.ctx")
        window = c2.number_input(
            "sliding window (0 = none)",
            0,
            10_000_000,
            0,
            key=f"{key}.w",
            help="A window that evicts (rolling cache, as Mistral's) caps the KV cache.",
        )
        params = c3.number_input("parameters (0 = from shape)", 0, 10**13, 0, key=f"{key}.P")
        inter = c1.number_input("MLP intermediate size (0 = 4 x hidden)", 0, 1_000_000, 14336, key=f"{key}.I")
        layouts = list(ARCH_TRAITS)
        arch = c2.selectbox(
            "layer layout",
            layouts,
            index=layouts.index("llama"),
            key=f"{key}.arch",
            help="Whose layer: biases, LayerNorm or RMSNorm, gated MLP or not, parallel block (each family's modelling code).",
        )
        experts = c3.number_input("MLP experts (1 = dense)", 1, 1024, 1, key=f"{key}.E")
        per_token = c3.number_input("experts per token", 1, 1024, 1, key=f"{key}.k") if experts > 1 else 1
        spec = spec_from_numbers(
            arch=arch,
            n_experts=experts,
            experts_per_token=per_token,
            name="custom",
            n_layer=n_layer,
            hidden=hidden,
            n_head=heads,
            n_kv_head=kv,
            head_dim=head_dim or None,
            intermediate=inter or None,
            vocab=vocab,
            context_length=ctx,
            sliding_window=window or None,
            params=params or None,
        )
        st.caption(_count_caption(spec))
        return spec
    except EngineError as exc:
        from ui.common import show_error  # the one scrubbed error path

        show_error(exc)
        return None


KV_AUTO = "auto"
PLAIN = ("fp32", "fp16", "bf16")


def precision_inputs(key: str, gpu: GPUSpec) -> Inputs:
    """Weights (a precision, or a quantized format with its scales: torchao int8/int4 with a group size, fp8,
    AWQ/GPTQ, NVFP4/MXFP4, bitsandbytes, GGUF blocks), which modules the format covers, and the KV cache's
    precision. The default follows the device (fp32 on a CPU); KV "auto" is the weights' precision, 16-bit for
    quantized weights."""
    choices = [*PLAIN, *WEIGHT_FORMATS]
    default = default_precision(gpu)
    device = "gpu" if default == "fp16" else "cpu"
    c1, c2 = st.columns(2)
    weights = c1.selectbox(
        "Weights",
        choices,
        index=choices.index(default),
        key=f"{key}.dtype.{device}",  # a new default when the device kind changes
        format_func=lambda w: w if w in PLAIN else f"{w}: {quant.weight_format(w).description}",
        help="A precision, or a quantized format with its scales counted (the format's own layout).",
    )
    kv = c2.selectbox(
        "KV cache",
        [KV_AUTO, "fp16", "bf16", "fp8", "int8", "fp32"],
        key=f"{key}.kv_dtype",
        help="auto: the weights' precision, 16-bit when the weights are quantized. fp8: --kv-cache-dtype fp8.",
    )
    fmt = group = scope = None
    if weights in WEIGHT_FORMATS:
        fmt = weights
        default_scope = quant.weight_format(fmt).scope
        scope = c2.selectbox(
            "Quantized modules",
            list(quant.SCOPES),
            index=list(quant.SCOPES).index(default_scope),
            key=f"{key}.scope.{fmt}",
            help="linear: every decoder linear (head and embeddings 16-bit); mlp: FFN only; experts: MoE experts "
            "only; all: everything (GGUF).",
        )
    if weights in ("int8", "int4"):
        group = (
            c1.number_input(
                "Group size (weights per scale; 0 = per output channel)"
                if weights == "int8"
                else "Group size",
                0 if weights == "int8" else 1,
                65536,
                0 if weights == "int8" else 128,
                key=f"{key}.group.{weights}",
            )
            or None
        )
    dtype = weights if weights in PLAIN else "fp16"
    return Inputs(
        dtype=dtype, kv_dtype=None if kv == KV_AUTO else kv, weight_format=fmt, group_size=group, scope=scope
    )


def gpu_choice(key: str, *, default: str = "t4") -> GPUSpec:
    """A catalog GPU or this machine (measured), before its figures are edited."""
    catalog = load_gpu_catalog()
    keys = [*catalog, THIS_MACHINE]
    choice = st.selectbox(
        "GPU",
        keys,
        index=keys.index(default),
        key=f"{key}.gpu",
        format_func=lambda k: catalog[k].name if k in catalog else "this machine (measured)",
    )
    return cached_machine() if choice == THIS_MACHINE else catalog[choice]


def gpu_figures(key: str, base: GPUSpec, *, dtype: str) -> GPUSpec:
    """Every figure of `base` editable, its source beside it."""
    math_dtype = "fp16" if dtype in ("int8", "int4") else dtype
    with st.expander(f"{base.name}: figures and sources (editable: any GPU from its datasheet)"):
        c1, c2, c3 = st.columns(3)
        mem = c1.number_input(
            "memory (GB)",
            0.1,
            10_000.0,
            base.memory_bytes / 1e9,
            key=f"{key}.{base.key}.mem",
            help="What the driver reports (nvidia-smi's figure x 1,048,576 bytes), in GB of 10^9 bytes: an '80 GB' "
            "H100 reports 85.52 GB.",
        )
        bw = c2.number_input(
            "bandwidth (GB/s)", 0.1, 100_000.0, base.bandwidth_bytes_per_s / 1e9, key=f"{key}.{base.key}.bw"
        )
        tf = c3.number_input(
            f"{math_dtype} peak (TFLOP/s)",
            0.0001,
            100_000.0,
            base.flops_for(math_dtype) / 1e12,
            format="%.4g",
            key=f"{key}.{base.key}.{math_dtype}",
        )
        st.caption(f"memory: {base.sources.get('memory', '')}")
        st.caption(f"bandwidth: {base.sources.get('bandwidth', '')}")
        st.caption(f"{math_dtype}: {base.flops_source(math_dtype)}")
        link = c1.number_input(
            "GPU-to-GPU link (GB/s, both ways)",
            0.0,
            100_000.0,
            base.interconnect_bytes_per_s * 2 / 1e9,
            key=f"{key}.{base.key}.link",
            help="NVLink 4: 900; PCIe Gen4 x16: 64; Gen5: 128. Tensor parallel needs it.",
        )
        if base.interconnect:
            st.caption(
                f"interconnect: {base.interconnect}, {fmt.gb(base.interconnect_bytes_per_s)}/s each way "
                f"({base.sources.get('interconnect', '')})"
            )
        if base.notes:
            st.caption(base.notes)
    edited = custom_gpu(
        base, memory_bytes=mem * 1e9, bandwidth_bytes_per_s=bw * 1e9, flops={math_dtype: tf * 1e12}
    )
    if link * 1e9 / 2 != base.interconnect_bytes_per_s:
        edited = replace(
            edited,
            interconnect=base.interconnect or "edited",
            interconnect_bytes_per_s=link * 1e9 / 2,
            sources={**edited.sources, "interconnect": "edited by the user"},
        )
    return edited


ENGINE_LABELS = {
    "": "none: the physical bound (every roof reached)",
    "hf": "Hugging Face transformers (eager)",
    "hf-compiled": "transformers compiled / gpt-fast (CUDA graphs)",
    "vllm": "vLLM",
    "sglang": "SGLang",
    "tensorrt-llm": "TensorRT-LLM",
    "tgi": "TGI",
    "mlc": "MLC LLM",
    "llama.cpp": "llama.cpp",
    "exllamav2": "ExLlamaV2",
    "deepspeed-mii": "DeepSpeed-MII / FastGen",
}


def engine_inputs(key: str, gpu: GPUSpec) -> dict:
    """The engine that will serve it (GPUs only: the efficiencies were fitted on GPU runs) and, for vLLM/SGLang,
    the server's memory knobs. Returns Inputs fields."""
    if gpu.key == THIS_MACHINE:
        return {"engine": None}
    engine = st.selectbox(
        "Engine",
        list(ENGINE_LABELS),
        index=list(ENGINE_LABELS).index("hf"),  # the chapter runs GPT-Neo with transformers
        format_func=ENGINE_LABELS.get,
        key=f"{key}.engine",
        help="Times become that class of engine's estimate, fitted on published measurements, with an interval; "
        "vLLM and SGLang size the KV cache as they allocate it and give the launch command.",
    )
    out: dict = {"engine": engine or None}
    if engine in ("vllm", "sglang"):
        c1, c2 = st.columns(2)
        util = c1.number_input(
            "GPU memory utilization" if engine == "vllm" else "mem fraction static",
            0.05,
            1.0,
            Inputs.default("gpu_memory_utilization") or (0.9 if engine == "vllm" else 0.88),
            step=0.01,
            key=f"{key}.util.{engine}",
            help="vLLM's --gpu-memory-utilization (0.9) / SGLang's --mem-fraction-static (0.88 on one GPU).",
        )
        out["gpu_memory_utilization"] = util
        mml = c2.number_input(
            "max model len (0 = prompt + output)",
            0,
            10_000_000,
            0,
            key=f"{key}.mml",
            help="The server's --max-model-len: 'Maximum concurrency' is for requests of this length.",
        )
        out["max_model_len"] = mml or None
    return out


def price_input(container, key: str, gpu: GPUSpec) -> float:
    """The price per GPU-hour: the selected GPU's published on-demand price (with where and when), editable."""
    from engine.calc.prices import price_for

    listed = price_for(gpu.key)
    value = container.number_input(
        "$ per GPU-hour",
        0.0,
        1000.0,
        listed.usd_per_gpu_hour if listed else 1.0,
        step=0.05,
        key=f"{key}.price.{gpu.key}",  # a new GPU starts from its own price
        help=(
            listed.label
            if listed
            else "No published price for this GPU in engine/data/prices.toml: enter yours."
        ),
    )
    if listed is None:
        container.caption("no published price for this GPU: yours")
    elif value == listed.usd_per_gpu_hour:
        container.caption(f"{listed.provider}, {listed.date}")
    else:
        container.caption("your price")
    return value


def formula_expander(title: str, *fns: object, extra: str = "") -> None:
    with st.expander(title):
        for fn in fns:
            st.markdown(f"`{getattr(fn, '__name__', '')}`: {formula_of(fn)}")
        if extra:
            st.markdown(extra)


def paged_section(est, tokens: int) -> None:
    """Static against paged KV cache, beside the max batch it changes: per sequence by output length, what each
    reserves and what is used, and how many sequences each fits in the memory left for the cache."""
    from engine.calc import paged
    from ui.plots_calc import paged_chart

    st.subheader("Static vs paged KV cache: how many sequences fit")
    if est.paged is None:
        st.info("The weights alone fill the GPU: no room for a KV cache to compare.")
        return
    p = est.paged
    st.markdown(
        f"Requests stop at different lengths. A static cache reserves {tokens:,} tokens for every sequence: "
        f"**{p.static_waste_fraction:.0%}** of it is never used across this spread of outputs. In the "
        f"{fmt.gb(p.kv_budget_bytes)} left for the cache, static allocation fits **{p.static_max_seqs}** sequences; "
        f"paging (16-token blocks) fits **{p.paged_max_seqs}**: **{p.extra_seqs:+d}** sequences."
    )
    st.plotly_chart(paged_chart(p), width="stretch", key="calc.paged")
    formula_expander("Formula: paged KV", paged.compare_paged, paged.output_spread)


def measured_roofline_points(runs: list) -> list[dict]:
    """Measured runs as roofline points: decode from TPOT (one forward per step for the whole batch),
    prefill from TTFT (one forward over all prompt tokens)."""
    points = []
    for m in runs[-40:]:
        if not m.params or not m.weights_bytes or not m.use_cache:
            continue
        label = f"{m.model} {m.dtype} b={m.batch_size} ({m.started_at[:16]})"
        # decode: one forward per step for the whole batch; prefill: one forward over all prompt tokens
        for phase, tokens, seconds in (
            ("decode", m.batch_size, m.tpot_s),
            ("prefill", m.prompt_tokens, m.ttft_s),
        ):
            if not (math.isfinite(seconds) and seconds > 0 and tokens):
                continue
            p = measured_point(
                phase, params=m.params, weights_bytes=m.weights_bytes, tokens=tokens, seconds=seconds
            )
            points.append(
                {
                    "intensity": p.intensity,
                    "flops_per_s": p.flops_per_s,
                    "hover": f"<b>measured {phase}</b> {label}<br>{fmt.flops(p.flops_per_s, 'FLOP/s')}, "
                    f"{fmt.gb(p.bytes_per_s)}/s of weights, I={p.intensity:.3g}",
                }
            )
    return points


def breakdown_frame(est):
    """Per component: parameters and bytes (at the weight precision; the average bytes per weight for a
    quantized format), skipping empty components, with the total."""
    import pandas as pd

    per = est.memory.weights_bytes / est.params.total
    rows = [
        {"component": name, "parameters": f"{n:,}", "bytes": fmt.gb(n * per)}
        for name, n in est.params.rows()
        if n
    ]
    rows.append(
        {
            "component": "total",
            "parameters": f"{est.params.total:,}",
            "bytes": fmt.gb(est.memory.weights_bytes),
        }
    )
    if est.params.active != est.params.total:
        rows.append(
            {
                "component": "active per token",
                "parameters": f"{est.params.active:,}",
                "bytes": fmt.gb(est.params.active * per),
            }
        )
    return pd.DataFrame(rows)
