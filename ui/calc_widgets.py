"""The Memory & cost page's inputs (one call: `calc_inputs`) and the widgets and cached measurements it shares
with the Roofline page.

Each picker returns engine types (ModelSpec, GPUSpec, Inputs) built from the widgets; defaults and bounds come from
the engine's own data (engine/data/*.toml, the estimate's spec engine.calc.report.Inputs, a GPU's editable figures
engine.calc.specs.GPUFigures), every number through ui.widgets.spec_input, so the CLI and the pages agree. This
machine's calibration is read once per render and handed to everything that needs it.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, replace

import streamlit as st

from engine import calibration
from engine.calc import format as fmt
from engine.calc import quant
from engine.calc.plan import served_layout
from engine.calc.quant import WEIGHT_FORMATS, quant_format_name
from engine.calc.report import CALIBRATED_MODE, Inputs, default_precision
from engine.calc.serving_memory import VLLM_UTILIZATION, is_cpu, sglang_fraction
from engine.calc.specs import (
    THIS_MACHINE,
    GPUFigures,
    GPUSpec,
    ModelSpec,
    custom_gpu,
    load_gpu_catalog,
)
from engine.calc.timing import context_refusal
from engine.core.errors import InvalidParameterError
from ui.machine_view import (
    _UNREAD,
    cached_machine,
    calibrate_button,
    load_runs,
    machine_known,
    machine_matmul,
    machine_panel,
    machine_provenance,
    measured_here_line,
    measured_roofline_points,
)
from ui.model_inputs import model_input
from ui.widgets import RADIO, SLIDER, refuse, refused, spec_input, upper_first

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
    """Every input of the calculator, as widgets; None (with the reason on the page) while the model is missing
    or a number is refused (its field says why). Every widget is drawn either way, so none loses its value; each
    keeps it for the browser session (persist_state), so a visit to another page does not reset the inputs."""
    cal = calibration.load_calibration()  # the one read of this render
    spec = model_input(key)
    model_id = model_id_input(key, spec)
    base_gpu = gpu_choice(key, cal=cal)
    weights = precision_inputs(key, base_gpu, spec)
    # a refused group size is int8/int4's, whose math runs in fp16
    edited = gpu_figures(key, base_gpu, dtype=weights.dtype if weights else "fp16")
    gpu = edited or base_gpu  # the widgets below start from the GPU's own figures while an edit is refused
    # one field a row, the column's whole width (at 1280 px two a row left 113 px each: 'Batch (concurrent users)'
    # on three lines beside 'GPUs' on one, the rows out of step); only the two lengths share a row
    batch = spec_input(
        st, Inputs, "batch", key=f"{key}.batch", persist_state="session", label="Batch (concurrent users)"
    )
    cpu = is_cpu(gpu)
    n_gpus = spec_input(
        st,
        Inputs,
        "n_gpus",
        key=f"{key}.gpus",
        persist_state="session",
        label="GPUs (none: this machine's CPU)" if cpu else "GPUs",
        disabled=cpu,  # drawn, so the count comes back with a GPU
    )
    if cpu:
        n_gpus = 1  # the one CPU
    elif n_gpus is not None and spec is not None and not gpu_count_fits(st, spec, int(n_gpus)):
        n_gpus = None  # refused under its field: nothing runs with the old count
    c1, c2 = st.columns(2)
    prompt = spec_input(
        c1, Inputs, "prompt_tokens", key=f"{key}.prompt", persist_state="session", label="Prompt tokens"
    )
    output = spec_input(
        c2, Inputs, "output_tokens", key=f"{key}.output", persist_state="session", label="Output tokens"
    )
    if (
        spec is not None
        and prompt is not None
        and output is not None
        and prompt + output > spec.context_length
    ):
        # under the lengths, where the value to change is (it was said at the top of the inputs, out of view)
        refuse(st, upper_first(context_refusal(spec, int(prompt), int(output))))
        output = None
    serving, serving_ok = engine_inputs(key, gpu, None if n_gpus is None else int(n_gpus))
    overhead = DEFAULTS.overhead
    if serving.get("engine") not in ("vllm", "sglang"):  # a serving engine's own allocation replaces the x1.2
        overhead = spec_input(
            st,
            Inputs,
            "overhead",
            key=f"{key}.overhead",
            persist_state="session",
            label="Overhead (%)",
            widget=SLIDER,
            hi=1.0,  # the page offers up to 100%; the command line allows more
            step=0.01,
            format="percent",  # the fraction, shown as 20%
            help="Activations, allocator fragmentation, CUDA context: the chapter's x1.2.",
        )
    price, price_ok = price_input(st, key, gpu)
    calibrated = calibrated_mode(key, gpu, cal)
    if (
        spec is None
        or weights is None
        or edited is None
        or not serving_ok
        or not price_ok
        or refused(overhead, batch, n_gpus, prompt, output)
    ):
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
        mode=CALIBRATED_MODE if calibrated else DEFAULTS.mode,
        **serving,
    )
    return CalcRequest(spec, gpu, inputs, cal, calibrated)


def gpu_count_fits(container, spec: ModelSpec, n_gpus: int) -> bool:
    """Whether the estimate can lay `spec` out on `n_gpus` GPUs (engine.calc.plan.served_layout: no more pipeline
    stages than layers); where not, its sentence goes under the GPUs field, as a number out of range does, rather
    than at the top of the inputs once the answer is asked."""
    try:
        served_layout(spec, n_gpus)
    except InvalidParameterError as exc:
        refuse(container, upper_first(str(exc)))
        return False
    return True


def calibrated_mode(key: str, gpu: GPUSpec, cal: calibration.Calibration | None) -> bool:
    """On this machine: its roofs, and the datasheet or calibrated mode (calibrated needs a calibration)."""
    if gpu.key != THIS_MACHINE:
        return False
    machine_panel(f"{key}.machine", compact=True, cal=cal)
    mode = spec_input(
        st,
        Inputs,
        "mode",
        key=f"{key}.mode",
        persist_state="session",
        widget=RADIO,
        horizontal=True,
        help="Calibrated: the bandwidth, FLOP/s and per-step cost a real run reached on this machine.",
    )
    if mode == CALIBRATED_MODE and cal is None:
        st.warning("No calibration on this machine yet: showing datasheet mode until it is calibrated.")
        calibrate_button(key)
    return mode == CALIBRATED_MODE and cal is not None


def model_id_input(key: str, spec: ModelSpec | None) -> str | None:
    """The Hugging Face id the launch command serves: the preset's or the config's own, editable."""
    known = spec.hub_id if spec is not None else ""
    typed = st.text_input(
        "Model id for the launch command",
        value=known,
        key=f"{key}.model_id.{known}",  # a new model starts from its own id
        persist_state="session",
        placeholder="ORG/NAME, e.g. meta-llama/Llama-3.1-8B-Instruct",
        help="What `vllm serve` loads. Presets and configs that name themselves fill it in.",
    ).strip()
    return typed or None


KV_AUTO = "auto"
PLAIN = ("fp32", "fp16", "bf16")


def cpu_precision_note(gpu: GPUSpec) -> str:
    """Why the weights start at fp32 when this machine's CPU is picked (the box is a new one, so the precision
    chosen for a GPU does not carry over): from the CPU's own measured matmul rates."""
    fp32, bf16 = gpu.flops_for("fp32"), gpu.flops_for("bf16")
    ratio = (
        f" (its bf16 matmul measured at 1/{fp32 / bf16:.0f} of its fp32 rate)"
        if fp32 and bf16 and fp32 >= 1.5 * bf16
        else ""
    )
    return (
        f"This machine's CPU runs fp32, so the weights switched to fp32 when it was picked{ratio}; the lab loads "
        "models on a CPU in fp32. Pick another precision to estimate it anyway."
    )


def precision_inputs(key: str, gpu: GPUSpec, spec: ModelSpec | None = None) -> Inputs | None:
    """Weights (a precision, or a quantized format with its scales: torchao int8/int4 with a group size, fp8,
    AWQ/GPTQ, NVFP4/MXFP4, bitsandbytes, GGUF blocks), which modules the format covers, and the KV cache's
    precision. The default follows the device and the model (fp32 on a CPU; the checkpoint's bf16 on a GPU with a
    bf16 peak, else fp16); KV "auto" is the weights' precision, 16-bit for
    quantized weights. None while the group size is refused (its field says why)."""
    choices = [*PLAIN, *WEIGHT_FORMATS]
    default = default_precision(gpu, spec)
    kind = {"fp16": "gpu", "fp32": "cpu"}.get(default, default)  # "bf16": a GPU with a bf16 model
    weights = st.selectbox(
        "Weights",
        choices,
        index=choices.index(default),
        key=f"{key}.dtype.{kind}",  # a new default when the device kind or the model's own precision changes
        persist_state="session",
        format_func=lambda w: w if w in PLAIN else f"{w}: {quant.weight_format(w).description}",
        help="A precision, or a quantized format with its scales counted (the format's own layout).",
    )
    kv = st.selectbox(
        "KV cache",
        [KV_AUTO, "fp16", "bf16", "fp8", "int8", "fp32"],
        key=f"{key}.kv_dtype",
        persist_state="session",
        help="auto: the weights' precision, 16-bit when the weights are quantized. fp8: --kv-cache-dtype fp8.",
    )
    fmt = group = scope = None
    if weights in WEIGHT_FORMATS:
        fmt = weights
        default_scope = quant.weight_format(fmt).scope
        scope = st.selectbox(
            "Quantized modules",
            list(quant.SCOPES),
            index=list(quant.SCOPES).index(default_scope),
            key=f"{key}.scope.{fmt}",
            persist_state="session",
            help="linear: every decoder linear (head and embeddings 16-bit); mlp: FFN only; experts: MoE experts "
            "only; all: everything (GGUF).",
        )
    if weights in ("int8", "int4"):
        own = quant_format_name(weights, None)[1]  # the format's own: per output channel (None) / 128
        group = spec_input(
            st,
            Inputs,
            "group_size",
            key=f"{key}.group.{weights}",
            persist_state="session",
            label="Group size (weights per scale; 0 = per output channel)" if own is None else "Group size",
            value=own or 0,
            lo=None if own is None else 1,  # 0 means per channel, which int4's groups of 128 are not
        )
        if group is None:
            return None
        group = group or None
    if kind == "cpu":
        st.caption(cpu_precision_note(gpu))
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
        persist_state="session",
        format_func=lambda k: catalog[k].name if k in catalog else this_machine_label(),
    )
    return cached_machine(cal) if choice == THIS_MACHINE else catalog[choice]


def this_machine_label() -> str:
    """The picker's name for this machine: its CPU, or its GPU where torch sees one (what engine.calibration.machine
    measures), so a CPU is never offered as a GPU."""
    import torch

    return "this machine's GPU (measured)" if torch.cuda.is_available() else "this machine's CPU (measured)"


GB, TFLOPS = 1e9, 1e12
LINK = 1e9 / 2  # the page asks the link in GB/s both ways; GPUSpec keeps one direction


def figure_input(container, name: str, base: float, unit: float, *, key: str, label: str, **kwargs):
    """One GPUFigures field asked in `unit`s, from the GPU's own figure, within the field's bounds (in those units);
    None when refused (the field says why)."""
    lo, hi = GPUFigures.bounds(name)
    return spec_input(
        container,
        GPUFigures,
        name,
        key=key,
        persist_state="session",
        label=label,
        unit=unit,
        value=base / unit,
        lo=lo / unit,
        hi=hi / unit,
        **kwargs,
    )


def figures_key(key: str, base: GPUSpec) -> str:
    """Where a GPU's editable figures live: under its key; for this machine, under the figures measured too, so a
    new measurement (or calibration) starts its boxes from the new figures. Streamlit keeps a box's value whatever
    value it is drawn with: after 'Measure this machine again' the boxes kept the old bandwidth, and every estimate
    below them used it."""
    if base.key != THIS_MACHINE:
        return f"{key}.{base.key}"
    figures = (base.memory_bytes, base.bandwidth_bytes_per_s, sorted(base.peak_flops.items()))
    return f"{key}.{base.key}.{zlib.crc32(repr(figures).encode()):08x}"


def gpu_figures(key: str, base: GPUSpec, *, dtype: str) -> GPUSpec | None:
    """Every figure of `base` editable, its source beside it; None while a figure is refused (it says why)."""
    math_dtype = "fp16" if dtype in ("int8", "int4") else dtype
    box = figures_key(key, base)
    with st.expander(f"{base.name}: figures and sources (editable: any GPU from its datasheet)"):
        # one figure a row, its source under it (three a row left 60 px each in the inputs column)
        mem = figure_input(
            st,
            "memory_bytes",
            base.memory_bytes,
            GB,
            key=f"{box}.mem",
            label="memory (GB)",
            help="What the driver reports (nvidia-smi's figure x 1,048,576 bytes), in GB of 10^9 bytes: an H100 sold "
            "as 80 GB reports 85.52 GB. CUDA, which a serving engine budgets from, reports a little less (the "
            "driver keeps some for itself): the serving sentences say that figure.",
        )
        st.caption(f"memory: {base.sources.get('memory', '')}")
        bw = figure_input(
            st,
            "bandwidth_bytes_per_s",
            base.bandwidth_bytes_per_s,
            GB,
            key=f"{box}.bw",
            label="bandwidth (GB/s)",
        )
        st.caption(f"bandwidth: {base.sources.get('bandwidth', '')}")
        tf = figure_input(
            st,
            "peak_flops",
            base.flops_for(math_dtype),
            TFLOPS,
            key=f"{box}.{math_dtype}",
            label=f"{math_dtype} peak (TFLOP/s)",
            format="%.4g",
        )
        st.caption(f"{math_dtype}: {base.flops_source(math_dtype)}")
        link = figure_input(
            st,
            "interconnect_bytes_per_s",
            base.interconnect_bytes_per_s,
            LINK,
            key=f"{box}.link",
            label="GPU-to-GPU link (GB/s, both ways)",
            help="NVLink 4: 900; PCIe Gen4 x16: 64; Gen5: 128. Tensor parallel needs it.",
        )
        if base.interconnect:
            st.caption(
                f"interconnect: {base.interconnect}, {fmt.gb(base.interconnect_bytes_per_s)}/s each way "
                f"({base.sources.get('interconnect', '')})"
            )
        if base.notes:
            st.caption(base.notes)
    if refused(mem, bw, tf, link):
        return None
    edited = custom_gpu(
        base, memory_bytes=mem * GB, bandwidth_bytes_per_s=bw * GB, flops={math_dtype: tf * TFLOPS}
    )
    if link * LINK != base.interconnect_bytes_per_s:
        edited = replace(
            edited,
            interconnect=base.interconnect or "edited",
            interconnect_bytes_per_s=link * LINK,
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


def engine_inputs(key: str, gpu: GPUSpec, n_gpus: int | None) -> tuple[dict, bool]:
    """The engine that will serve it (GPUs only: the efficiencies were fitted on GPU runs) and, for vLLM/SGLang,
    the server's memory knobs, starting from the engine's own rule for this GPU and count (left to it unless
    changed). `n_gpus` None: the count is refused, and the knobs stay as they are. Returns Inputs fields, and False
    while a knob is refused (it says why)."""
    if gpu.key == THIS_MACHINE:
        return {"engine": None}, True
    engine = st.selectbox(
        "Engine",
        list(ENGINE_LABELS),
        index=list(ENGINE_LABELS).index("hf"),  # the chapter runs GPT-Neo with transformers
        format_func=ENGINE_LABELS.get,
        key=f"{key}.engine",
        persist_state="session",
        help="transformers is Hugging Face's eager generate; transformers compiled is torch.compile with CUDA graphs "
        "(gpt-fast's recipe); none is the physical bound (every roof reached). "
        "Times become that class of engine's estimate, fitted on published measurements, with an interval; "
        "vLLM and SGLang size the KV cache as they allocate it and give the launch command.",
    )
    out: dict = {"engine": engine or None}
    if engine in ("vllm", "sglang"):
        rule = default_utilization(engine, gpu, n_gpus or 1)
        box = f"{key}.util.{engine}"  # one box whatever the GPU and count: a value typed stays (follow_rule)
        if n_gpus is not None:
            follow_rule(box, rule)
        util = spec_input(
            st,
            Inputs,
            "gpu_memory_utilization",
            key=box,
            label="GPU memory utilization" if engine == "vllm" else "mem fraction static",
            value=rule,  # bounds: the spec's, as on the command line
            step=0.01,
            help="vLLM's --gpu-memory-utilization (0.9) / SGLang's --mem-fraction-static (0.88 on one GPU, lower on "
            "more: its own rule).",
            persist_state="page",  # a look at another engine does not forget it
        )
        mml = spec_input(
            st,
            Inputs,
            "max_model_len",
            key=f"{key}.mml",
            label="max model len (0 = prompt + output)",
            value=0,
            help="The server's --max-model-len: 'Maximum concurrency' is for requests of this length.",
            persist_state="page",
        )
        if refused(util, mml):
            return out, False
        out["gpu_memory_utilization"] = None if util == rule else util
        out["max_model_len"] = mml or None
    return out, True


def follow_rule(box: str, rule: float) -> None:
    """A knob that starts from the engine's rule for the GPU and count: while it holds the rule's last value it
    takes the new rule's (SGLang's fraction on 4 GPUs), and a value the user typed stays through any change of
    GPU or count. Its key never names the count: a key per count (the box before) made a new, empty box whenever
    the count changed or was refused, and the value typed in the old one was forgotten."""
    ruled = f"{box}.rule"
    last = st.session_state.get(ruled)
    if last is not None and last != rule and st.session_state.get(box) == last:
        st.session_state[box] = rule  # before the box is drawn in this run, so Streamlit takes it
    st.session_state[ruled] = rule


def price_input(container, key: str, gpu: GPUSpec) -> tuple[float | None, bool]:
    """The price per GPU-hour and whether it may be used: the selected GPU's published on-demand price (with where
    and when), editable; where no price is published (this machine, a GPU off the price list) the field starts
    empty and the answer has no cost until the user enters their own: never an invented figure. (None, True):
    no price; (None, False): refused (the field says why)."""
    from engine.calc.prices import price_for

    listed = price_for(gpu.key)
    if listed is None:
        cpu = is_cpu(gpu)
        label = "$ per hour of this machine" if cpu else "$ per GPU-hour"
        value = container.number_input(
            label,
            value=None,  # empty until the user prices it (bounds: Inputs.problem below, in one sentence)
            step=0.05,
            key=f"{key}.price.{gpu.key}",
            persist_state="session",
            placeholder="no published price: yours",
            help=f"No published price for {'this machine' if cpu else 'this GPU'}: enter yours to see a cost per "
            "token.",
        )
        if value is None:
            container.caption(
                f"no published price for {'this machine' if cpu else 'this GPU'}: no cost per token until you "
                "enter yours"
            )
            return None, True
        why = Inputs.problem("usd_per_gpu_hour", value, label=label, hi=1000.0)
        if why:
            container.error(f"{why}: nothing runs with it until it is changed.")
            return None, False
        container.caption("your price")
        return value, True
    value = spec_input(
        container,
        Inputs,
        "usd_per_gpu_hour",
        key=f"{key}.price.{gpu.key}",  # a new GPU starts from its own price
        persist_state="session",
        label="$ per GPU-hour",
        value=listed.usd_per_gpu_hour,
        hi=1000.0,  # the page's own ceiling; the command line refuses only absurd prices (engine.calc.cost)
        step=0.05,
        help=listed.label,
    )
    if value is None:
        return None, False
    container.caption(
        f"{listed.provider}, {listed.date}" if value == listed.usd_per_gpu_hour else "your price"
    )
    return value, True
