"""The Memory & cost page's inputs (one call: `calc_inputs`) and the widgets and cached measurements it shares
with the Roofline page.

Each picker returns engine types (ModelSpec, GPUSpec, Inputs) built from the widgets; defaults and bounds come from
the engine's own data (engine/data/*.toml, the estimate's spec engine.calc.report.Inputs), so the CLI and the pages
agree. This machine's calibration is read once per render and handed to everything that needs it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import streamlit as st

from engine import calibration
from engine.calc import format as fmt
from engine.calc import quant
from engine.calc.memory import WEIGHT_FORMATS
from engine.calc.report import Inputs, default_precision
from engine.calc.serving_memory import VLLM_UTILIZATION, sglang_fraction
from engine.calc.specs import (
    THIS_MACHINE,
    GPUSpec,
    ModelSpec,
    custom_gpu,
    load_gpu_catalog,
)
from ui.machine_view import (
    _UNREAD,
    cached_machine,
    load_runs,
    machine_known,
    machine_matmul,
    machine_panel,
    machine_provenance,
    measured_here_line,
    measured_roofline_points,
)
from ui.model_inputs import model_input
from ui.widgets import spec_number

# the pages that import these from here (Roofline, Batching, Home) keep working
__all__ = [
    "CalcRequest",
    "cached_machine",
    "calc_inputs",
    "load_runs",
    "machine_known",
    "machine_matmul",
    "machine_panel",
    "machine_provenance",
    "measured_here_line",
    "measured_roofline_points",
    "model_input",
]

DEFAULTS = Inputs()


@dataclass(frozen=True)
class CalcRequest:
    """Everything the page asks the calculator, with this machine's calibration read once."""

    spec: ModelSpec
    gpu: GPUSpec
    inputs: Inputs
    cal: calibration.Calibration | None  # this machine's stored calibration (None: none)
    calibrated: bool  # calibrated mode: this machine, with a calibration

    @property
    def calibration(self) -> calibration.Calibrated | None:
        """What the estimate takes (engine.calc.report.Calibrated), in calibrated mode only."""
        return calibration.Calibrated(self.cal) if self.calibrated and self.cal is not None else None


def calc_inputs(key: str) -> CalcRequest | None:
    """Every input of the calculator, as widgets; None (with the reason on the page) while the model is missing."""
    cal = calibration.load_calibration()  # the one read of this render
    spec = model_input(key)
    model_id = model_id_input(key, spec)
    base_gpu = gpu_choice(key, cal=cal)
    weights = precision_inputs(key, base_gpu)
    gpu = gpu_figures(key, base_gpu, dtype=weights.dtype)
    c1, c2 = st.columns(2)
    batch = spec_number(c1, Inputs, "batch", "Batch (concurrent users)", f"{key}.batch")
    n_gpus = spec_number(c2, Inputs, "n_gpus", "GPUs", f"{key}.gpus")
    prompt = spec_number(c1, Inputs, "prompt_tokens", "Prompt tokens", f"{key}.prompt")
    output = spec_number(c2, Inputs, "output_tokens", "Output tokens", f"{key}.output")
    serving = engine_inputs(key, gpu, int(n_gpus))
    overhead = DEFAULTS.overhead
    if serving.get("engine") not in ("vllm", "sglang"):  # a serving engine's own allocation replaces the x1.2
        overhead = (
            c1.slider(
                "Overhead (%)",
                0,
                100,
                round(DEFAULTS.overhead * 100),
                key=f"{key}.overhead",
                help="Activations, allocator fragmentation, CUDA context: the chapter's x1.2.",
            )
            / 100
        )
    price = price_input(c2, key, gpu)
    calibrated = calibrated_mode(key, gpu, cal)
    if spec is None:
        return None
    inputs = replace(
        weights,
        batch=int(batch),
        seq_len=int(prompt + output),
        prompt_tokens=int(prompt),
        output_tokens=int(output),
        overhead=overhead,
        n_gpus=int(n_gpus),
        usd_per_gpu_hour=price,
        model_id=model_id,
        **serving,
    )
    return CalcRequest(spec, gpu, inputs, cal, calibrated)


def calibrated_mode(key: str, gpu: GPUSpec, cal: calibration.Calibration | None) -> bool:
    """On this machine: its roofs, and the datasheet or calibrated mode (calibrated needs a calibration)."""
    if gpu.key != THIS_MACHINE:
        return False
    machine_panel(f"{key}.machine", compact=True, cal=cal)
    mode = st.radio(
        "Mode",
        ["datasheet", "calibrated"],
        horizontal=True,
        key=f"{key}.mode",
        help="Calibrated: the bandwidth, FLOP/s and per-step cost a real run reached on this machine.",
    )
    if mode == "calibrated" and cal is None:
        st.warning(
            "No calibration on this machine yet: run `python -m engine calibrate` (about a minute). "
            "Showing datasheet mode."
        )
    return mode == "calibrated" and cal is not None


def model_id_input(key: str, spec: ModelSpec | None) -> str | None:
    """The Hugging Face id the launch command serves: the preset's or the config's own, editable."""
    known = spec.hub_id if spec is not None else ""
    typed = st.text_input(
        "Model id for the launch command",
        value=known,
        key=f"{key}.model_id.{known}",  # a new model starts from its own id
        placeholder="ORG/NAME, e.g. meta-llama/Llama-3.1-8B-Instruct",
        help="What `vllm serve` loads. Presets and configs that name themselves fill it in.",
    ).strip()
    return typed or None


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


def gpu_choice(key: str, *, default: str = "t4", cal=_UNREAD) -> GPUSpec:
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
    return cached_machine(cal) if choice == THIS_MACHINE else catalog[choice]


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
    # short enough for the page's input column at 1280 px (a select's value cannot wrap); the help says the rest
    "": "none: the bound",
    "hf": "transformers",
    "hf-compiled": "transformers compiled",
    "vllm": "vLLM",
    "sglang": "SGLang",
    "tensorrt-llm": "TensorRT-LLM",
    "tgi": "TGI",
    "mlc": "MLC LLM",
    "llama.cpp": "llama.cpp",
    "exllamav2": "ExLlamaV2",
    "deepspeed-mii": "DeepSpeed-MII / FastGen",
}


def default_utilization(engine: str, gpu: GPUSpec, n_gpus: int) -> float:
    """The fraction the server keeps by its own rule: vLLM's 0.9, SGLang's by GPU count and size."""
    return VLLM_UTILIZATION if engine == "vllm" else sglang_fraction(gpu.memory_bytes, n_gpus)


def engine_inputs(key: str, gpu: GPUSpec, n_gpus: int) -> dict:
    """The engine that will serve it (GPUs only: the efficiencies were fitted on GPU runs) and, for vLLM/SGLang,
    the server's memory knobs, starting from the engine's own rule for this GPU and count (left to it unless
    changed). Returns Inputs fields."""
    if gpu.key == THIS_MACHINE:
        return {"engine": None}
    engine = st.selectbox(
        "Engine",
        list(ENGINE_LABELS),
        index=list(ENGINE_LABELS).index("hf"),  # the chapter runs GPT-Neo with transformers
        format_func=ENGINE_LABELS.get,
        key=f"{key}.engine",
        help="transformers is Hugging Face's eager generate; transformers compiled is torch.compile with CUDA graphs "
        "(gpt-fast's recipe); none is the physical bound (every roof reached). "
        "Times become that class of engine's estimate, fitted on published measurements, with an interval; "
        "vLLM and SGLang size the KV cache as they allocate it and give the launch command.",
    )
    out: dict = {"engine": engine or None}
    if engine in ("vllm", "sglang"):
        c1, c2 = st.columns(2)
        rule = default_utilization(engine, gpu, n_gpus)
        util = c1.number_input(
            "GPU memory utilization" if engine == "vllm" else "mem fraction static",
            0.05,
            1.0,
            rule,
            step=0.01,
            key=f"{key}.util.{engine}.{gpu.key}.{n_gpus}",  # the rule's value for each GPU and count
            help="vLLM's --gpu-memory-utilization (0.9) / SGLang's --mem-fraction-static (0.88 on one GPU, lower on "
            "more: its own rule).",
        )
        out["gpu_memory_utilization"] = None if util == rule else util
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
        help=(listed.label if listed else "No published price for this GPU: enter yours."),
    )
    if listed is None:
        container.caption("no published price for this GPU: yours")
    elif value == listed.usd_per_gpu_hour:
        container.caption(f"{listed.provider}, {listed.date}")
    else:
        container.caption("your price")
    return value
