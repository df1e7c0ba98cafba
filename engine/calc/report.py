"""The calculator in one call: `estimate` reads as its steps, resolve -> memory -> speed -> cost -> serving.

- resolve: the inputs validated and filled (`Inputs.resolved`), one `Setup` to time;
- memory: one memory answer (engine.calc.plan): the serving engine's allocation with vLLM/SGLang, the overhead
  model otherwise; it settles the layout (the GPUs asked when the load fits, else the GPUs needed);
- speed: the times at that layout: this machine's calibration when one is passed (the `Calibrated` protocol,
  implemented by engine.calibration), else the engine class's estimate fitted on published runs, else the bound;
- cost: the price at that layout's GPUs;
- serving: the launch command for that layout, naming the model by its hub id.

The CLI (`python -m engine estimate`) and the Memory & cost page both call `estimate`, so they show the
same numbers. Every field is in base units (bytes, seconds, dollars).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Protocol

from engine.calc import quant
from engine.calc.anchor import Anchor, anchor_for, fixed_factor, other_layouts
from engine.calc.cost import CostEstimate, estimate_cost
from engine.calc.efficiency import ENGINES, SpeedEstimate, class_efficiency, estimate_speed
from engine.calc.efficiency import timing as timing_of
from engine.calc.explain import ENGINE_WORDS, assumptions, launch_note
from engine.calc.fitting import engine_name
from engine.calc.launch import (
    CAP_FLAG,
    LaunchPlan,
    multi_node_steps,
    sglang_command,
    vllm_command,
    vllm_cpu_command,
)
from engine.calc.memory import DEFAULT_OVERHEAD, GpuPlan, MaxSeqLen, MemoryEstimate, param_count
from engine.calc.observations import LAYER_SPLIT, parallel
from engine.calc.paged import PagedComparison, compare_paged
from engine.calc.plan import (
    MemoryAnswer,
    Server,
    allocation,
    held_at,
    memory_answer,
    served_layout,
    setup_for,
)
from engine.calc.quant import WEIGHT_FORMATS, format_scope, quant_format_name
from engine.calc.seen import Seen, below_estimate, seen_runs
from engine.calc.serving_memory import SERVING_ENGINES, ServingMemory, utilization_option
from engine.calc.specs import (
    GIB,
    PRECISIONS,
    THIS_MACHINE,
    GPUSpec,
    ModelSpec,
    ParamCount,
    check_precision,
    positive_int,
)
from engine.calc.timing import DATASHEET, Efficiency, Setup, TimingEstimate
from engine.core.errors import InvalidParameterError
from engine.core.interval import Interval
from engine.core.spec import Spec, option

ENGINE_CHOICES = tuple(ENGINES)  # every engine the efficiency fit names (engine.calc.efficiency)
DATASHEET_MODE, CALIBRATED_MODE = "datasheet", "calibrated"
MODES = (DATASHEET_MODE, CALIBRATED_MODE)  # calibrated: this machine only, with a stored calibration
# what the command lines take without --dtype (default_precision), as the Memory-and-cost page starts
DTYPE_DEFAULT_WORDS = (
    "the checkpoint's own 16-bit precision where the GPU has a peak for it (a bf16 model runs in bf16 on an H100, in "
    "fp16 on a T4), else fp16; fp32 on a CPU"
)


@dataclass(frozen=True)
class Inputs(Spec):
    """Everything the calculator is asked: the one source of defaults and bounds for `python -m engine estimate`
    and the Memory-and-cost page (engine.core.spec)."""

    dtype: str = option(
        "fp16",
        "weight precision",
        kind=str,
        choices=PRECISIONS,
        cli_help=f"weight precision (default: {DTYPE_DEFAULT_WORDS})",
    )
    kv_dtype: str | None = option(
        None,
        "KV cache precision (default: the weights'; fp16 under a quantized format)",
        kind=str,
        choices=PRECISIONS,
    )
    batch: int = option(8, "concurrent sequences", lo=1, hi=1_000_000)  # the chapter's T4 question: 8 users
    seq_len: int | None = option(
        None, "tokens per sequence the KV cache holds (default: prompt + output)", kind=int, lo=1
    )
    prompt_tokens: int = option(512, "prompt tokens per request", lo=1)
    output_tokens: int = option(512, "output tokens per request", lo=1)
    overhead: float = option(
        DEFAULT_OVERHEAD,
        "fraction added for activations etc. (the chapter's 20%; the hf memory mode)",
        lo=0,
        hi=10,
    )
    n_gpus: int = option(
        1,
        "GPUs (tensor parallel; pipeline stages where the count does not split the heads)",
        lo=1,
        hi=1024,
        flag="--gpus",
        label="GPUs",
    )
    usd_per_gpu_hour: float | None = option(
        None,
        "price per GPU-hour in USD (default: the GPU's list price, as `python -m engine gpus` lists it)",
        kind=float,
        lo=0,
        flag="--usd-per-hour",
        label="price per GPU-hour",
    )
    weight_format: str | None = option(
        None,
        "quantized weights with their scales (int8, int4, fp8, awq, gptq, bnb-nf4, GGUF ...)",
        kind=str,
        choices=WEIGHT_FORMATS,
    )
    group_size: int | None = option(
        None,
        "weights per scale for int8/int4 (default or 0: the format's own, per output channel / 128)",
        kind=int,
        lo=0,  # 0 is the format's own, as quant_format_name reads it (the page's "0 = per output channel")
        hi=65536,
    )
    scope: str | None = option(
        None,
        "modules the format covers (default: the format's own)",
        kind=str,
        choices=quant.SCOPES,
        label="module scope",
    )
    engine: str | None = option(
        None,
        "the engine that will serve it: times become estimates with an interval fitted on published runs of "
        "that class of engine, and vllm/sglang size the KV cache as they allocate it (default: the physical "
        "bound, every roof reached; the page's default is transformers, hf)",
        kind=str,
        choices=ENGINE_CHOICES,
        parse=engine_name,  # the pages' names too: transformers is hf
    )
    gpu_memory_utilization: float | None = utilization_option(
        "vLLM's --gpu-memory-utilization / SGLang's --mem-fraction-static (default: theirs)"
    )
    max_model_len: int | None = option(
        None,
        "the server's --max-model-len (default or 0: prompt + output)",
        kind=int,
        lo=0,  # 0 is prompt + output, as the server plan reads it (`i.max_model_len or i.seq_len`)
        hi=10_000_000,
    )
    max_num_seqs: int | None = option(
        None,
        "the requests the server runs at once, its --max-num-seqs (default: vLLM's own for the GPU, 1024 on GPUs of "
        "70 GiB or more other than A100s and 256 on the rest; SGLang's own)",
        kind=int,
        lo=1,
    )
    model_id: str | None = option(
        None,
        "the Hugging Face id the launch command serves (default: the preset's id or the config's _name_or_path)",
        kind=str,
        flag="--model-id",
        label="model id",
    )
    cpu_kvcache_space: int | None = option(
        None,
        "vLLM on this machine's CPU: its KV pool in GiB, VLLM_CPU_KVCACHE_SPACE (default: that variable, else "
        "vLLM's own default)",
        kind=int,
        lo=0,
        label="VLLM_CPU_KVCACHE_SPACE",
    )
    mode: str = option(
        DATASHEET_MODE,
        "the roofs the times come from: the datasheet's, or this machine's calibration (the CLI's --calibrated; "
        "the estimate takes the calibration itself, as `calibration`)",
        choices=MODES,
        cli=False,
    )

    def resolved(self) -> Inputs:
        """Validate and fill seq_len; prompt + output must fit in seq_len."""
        dtype = check_precision("weight precision", self.dtype)
        # int8/int4 are weight-only: the cache stays 16-bit unless a KV precision is asked for
        kv = check_precision(
            "KV precision", self.kv_dtype or ("fp16" if dtype in ("int8", "int4") else dtype)
        )
        p = positive_int("prompt tokens", self.prompt_tokens)
        o = positive_int("output tokens", self.output_tokens)
        s = positive_int("sequence length", self.seq_len) if self.seq_len is not None else p + o
        if p + o > s:
            raise InvalidParameterError(
                f"prompt ({p}) + output ({o}) tokens exceed the sequence length {s}; raise the sequence length "
                "or shorten the prompt or output"
            )
        if self.max_model_len and self.max_model_len < p + o:
            raise InvalidParameterError(
                f"max model length {self.max_model_len:,} is shorter than one request ({p:,} prompt + {o:,} output "
                f"= {p + o:,} tokens): the server would refuse every request of this load; give at least {p + o:,}, "
                "or 0 for prompt + output"
            )
        positive_int("batch", self.batch)
        positive_int("GPUs", self.n_gpus)
        fmt = self.weight_format or None
        if fmt is not None:
            dtype = quant.weight_format(fmt).compute  # an unknown name is refused with the choices
            if self.group_size:  # 0 or None: the format's own
                positive_int("group size", self.group_size)
            format_scope(fmt, self.scope)
            # weight-only: the cache stays 16-bit
            kv = check_precision("KV precision", self.kv_dtype or "fp16")
        self.validate()
        return replace(
            self,
            dtype=dtype,
            kv_dtype=kv,
            seq_len=s,
            prompt_tokens=p,
            output_tokens=o,
            weight_format=fmt,
            group_size=(self.group_size or None) if fmt in ("int8", "int4") else None,
            scope=format_scope(fmt, self.scope) if fmt else None,
            max_model_len=self.max_model_len or None,  # 0: prompt + output, as unset
        )

    @property
    def weights_label(self) -> str:
        """The weight precision as the user chose it: a format name (with its group size) or the dtype."""
        if self.weight_format in ("int8", "int4"):
            g = quant_format_name(self.weight_format, self.group_size)[1]
            return f"{self.weight_format} ({'g' + str(g) if g else 'per channel'})"
        return self.weight_format or self.dtype


def default_precision(gpu: GPUSpec, spec: ModelSpec | None = None) -> str:
    """The weight precision to start from on `gpu`: the checkpoint's own 16-bit precision where the GPU has a
    peak for it (a bf16 Llama on an A100 is served in bf16, as vLLM's dtype "auto" does; a T4 has no bf16 peak, so
    fp16 there), else fp16 where it has an fp16 peak (a GPU), else fp32 (a CPU, where fp16 runs through slow
    reference kernels and the engine loads fp32 by default)."""
    if "fp16" not in gpu.peak_flops:
        return "fp32"
    own = spec.checkpoint_dtype if spec is not None else ""
    return own if own in ("fp16", "bf16") and own in gpu.peak_flops else "fp16"


# ---------------------------------------------------------------- this machine's calibration, as the estimate asks it


@dataclass(frozen=True)
class CalibratedSpeed:
    """A calibration's answer for one setup: the Efficiency whose calculator times equal the fit's points, and the
    fit's own 95% intervals (None where the fit describes another shape, e.g. several GPUs)."""

    efficiency: Efficiency
    ttft: Interval | None
    tpot: Interval | None
    basis: str  # what it was calibrated on, and when
    notes: tuple[str, ...] = ()


class Calibrated(Protocol):
    """This machine's calibration (engine.calibration.prediction.Calibrated implements it): the calculator stays
    pure, the calibration is passed in."""

    def speed_at(self, setup: Setup) -> CalibratedSpeed: ...


# ---------------------------------------------------------------- the answer


@dataclass(frozen=True)
class Launch:
    vllm: str
    sglang: str
    multi_node: tuple[str, ...]
    gpus: int  # tensor x pipeline x replicas: the GPUs the commands run on
    note: str  # which GPUs the command is for, and the model id's origin


@dataclass(frozen=True)
class Estimate:
    model: str  # the model as people name it (its hub id when known)
    model_id: str | None  # what the launch command serves; None: a <model-id> placeholder
    gpu: str
    inputs: Inputs
    params: ParamCount  # per component; source "meta device" or "formula"
    fit: MemoryAnswer  # the one memory answer: fit, max batch, KV, GPUs needed, the layout
    timing: TimingEstimate  # one replica at fit.layout (the GPUs asked, as if it fitted, when there is none)
    replicas: int  # copies of the model the price and throughput count
    cost: CostEstimate  # at fit.layout's GPUs; NaN without a price or a layout
    paged: PagedComparison | None  # None when the weights alone leave no room for a cache
    warnings: tuple[str, ...]  # every assumption a figure rests on
    speed: SpeedEstimate | None = None  # with an engine: central, interval and bound of every rate and time
    calibrated: CalibratedSpeed | None = None  # this machine's calibration, when one was passed
    launch: Launch | None = None  # serving engines: the commands for fit.layout
    cost_interval: tuple[float, float] | None = None  # $/M output tokens at the throughput interval's ends
    seen: tuple[Seen, ...] = ()  # published TPOTs of this setup (engine.calc.seen), quickest first
    seen_below: Seen | None = None  # the quickest, when below the estimate's one-user interval
    anchor: Anchor | None = None  # the published run its fixed costs are anchored to (engine.calc.anchor)

    @property
    def fits(self) -> bool:
        return self.fit.fits

    @property
    def usd_per_million_tokens_in_and_out(self) -> float:
        """$ per million tokens counting each request's prompt with its output (what a provider's blended price is
        set against): the same $/hour over (prompt + output) tokens a request, not its output alone, so the output
        price x output / (prompt + output)."""
        p, o = self.inputs.prompt_tokens, self.inputs.output_tokens
        return self.cost.usd_per_million_tokens * o / (p + o)

    @property
    def seen_note(self) -> str:
        """What a published run below the one-user interval means for the estimate (also its first warning): the
        anchor that took it in, or, without one, the figure to budget from."""
        if self.anchor is not None:
            return anchor_sentence(self.anchor)
        return below_sentence(self.seen_below, self.fit) if self.seen_below is not None else ""

    @property
    def tpot_at_load_s(self) -> float:
        """The time per output token a user sees at the load asked: with a serving engine's estimate, each round
        of a steady load also carries every user's prompt, so a request's later tokens share the batch's prefill
        with the decode steps: (request time - its own first token) / (output - 1). Without one (the batch
        arrives together), the decode step."""
        t, sp, o = self.timing, self.speed, self.inputs.output_tokens
        if sp is None or o is None or o < 2:
            return t.decode_s_per_token
        return (t.generation_s - sp.ttft_s.central) / (o - 1)

    @property
    def tpot_at_load_interval(self) -> tuple[float, float] | None:
        """The interval of `tpot_at_load_s`: the throughput's, read as a time (a request's later tokens come at
        the batch's output rate), so the two intervals say the same doubt. None without an engine's estimate."""
        sp = self.speed
        if sp is None:
            return None
        rate = sp.output_tokens_per_s
        if not (rate.low > 0 and rate.high > 0):
            return None
        x = self.tpot_at_load_s
        return x * rate.central / rate.high, x * rate.central / rate.low

    @property
    def gpus_needed(self) -> int:
        return self.fit.gpus_needed

    @property
    def plan(self) -> GpuPlan:
        return self.fit.plan

    @property
    def max_batch(self) -> int:
        return self.fit.max_batch

    @property
    def max_seq_len(self) -> MaxSeqLen:
        return self.fit.max_seq_len

    @property
    def memory(self) -> MemoryEstimate:
        """The load's bytes (weights, its KV cache) and the overhead model's totals (a comparison beside a
        serving engine's allocation)."""
        return self.fit.overhead

    @property
    def serving(self) -> ServingMemory | None:
        return self.fit.serving

    @property
    def priced_gpus(self) -> int:
        """The GPUs the times, the price and the launch command are for."""
        layout = self.fit.layout
        return layout.gpus if layout is not None else self.inputs.n_gpus

    @property
    def tokens_per_s(self) -> float:
        """Output tokens per second over every replica."""
        return self.timing.tokens_per_s * self.replicas


def split_prompt_output(
    seq_len: int, prompt_tokens: int | None, output_tokens: int | None
) -> tuple[int, int]:
    """Defaults when only a sequence length is given: half prompt, half output; one given, the other fills s."""
    s = positive_int("sequence length", seq_len)
    if prompt_tokens is None and output_tokens is None:
        return max(1, s // 2), max(1, s - s // 2)
    if prompt_tokens is None:
        return max(1, s - int(output_tokens or 0)), int(output_tokens or 0)
    if output_tokens is None:
        return int(prompt_tokens), max(1, s - int(prompt_tokens))
    return int(prompt_tokens), int(output_tokens)


def estimate(
    spec: ModelSpec, gpu: GPUSpec, inputs: Inputs, calibration: Calibrated | None = None
) -> Estimate:
    """resolve -> memory -> speed -> cost -> serving (the module's docstring). `calibration` applies to this
    machine only; on a catalogue GPU an engine's fitted estimate (or the bound) gives the times."""
    i, setup = resolve(spec, gpu, inputs)
    fit = memory(setup, i)
    timing, replicas, speed, calibrated = speed_of(setup, fit, i, calibration)
    seen, below = published_beside(setup, fit, i, speed)
    # the layout's GPUs as the engine class uses them, where there is an engine estimate and a layout
    split = (
        parallel(setup_for(setup, fit.layout), speed.engine_class)
        if speed is not None and fit.layout is not None
        else None
    )
    anchor = (
        anchor_for(split, speed.engine_class, i.engine) if split is not None and speed is not None else None
    )
    seen_note = (
        anchor_sentence(anchor)
        if anchor is not None
        else below_sentence(below, fit)
        if below is not None
        else unanchored_sentence(other_layouts(split, speed.engine_class))
        if split is not None and speed is not None
        else ""
    )
    cost, cost_interval = cost_of(i, fit, timing.tokens_per_s * replicas, speed, replicas)
    model_id = i.model_id or spec.hub_id or None
    launch = serving(setup, fit, i, model_id)
    budget = fit.kv_budget_bytes
    paged = (
        compare_paged(
            spec,
            kv_dtype=setup.kv_dtype,
            prompt_tokens=i.prompt_tokens,
            max_output_tokens=i.output_tokens,
            kv_budget_bytes=budget,
        )
        if budget > 0
        else None
    )
    return Estimate(
        model=model_id or spec.name,
        model_id=model_id,
        gpu=gpu.name,
        inputs=i,
        params=param_count(spec),
        fit=fit,
        timing=timing,
        replicas=replicas,
        cost=cost,
        paged=paged,
        warnings=tuple(([seen_note] if seen_note else []) + assumptions(spec, gpu, i, timing, speed, fit)),
        speed=speed,
        calibrated=calibrated,
        launch=launch,
        cost_interval=cost_interval,
        seen=seen,
        seen_below=below,
        anchor=anchor,
    )


def published_beside(
    setup: Setup, fit: MemoryAnswer, i: Inputs, speed: SpeedEstimate | None
) -> tuple[tuple[Seen, ...], Seen | None]:
    """Published TPOTs of the setup the estimate times (engine.calc.seen), and the quickest when it lies below the
    estimate's one-user interval."""
    layout = fit.layout
    if speed is None or layout is None or layout.pipeline_parallel != 1 or i.engine is None:
        return (), None
    runs = tuple(seen_runs(setup.spec, setup.gpu.key, layout.replica_gpus, speed.engine_class, setup.dtype))
    if not runs:
        return (), None
    at = setup_for(setup, layout)
    one = estimate_speed(replace(at, batch=1), i.engine)  # the fit's own, before any anchor
    return runs, below_estimate(list(runs), one.tpot_s.low)


def below_sentence(below: Seen, fit: MemoryAnswer) -> str:
    layout = fit.layout
    assert layout is not None
    why = (
        " (its all-reduce and per-layer costs are fitted on runs of 7B-class models)"
        if layout.tensor_parallel > 1
        else ""
    )
    return (
        f"A published run of this model on these {layout.replica_gpus} GPUs measured {below.tpot_s * 1e3:.1f} ms "
        f"per output token under {below.load} ({below.engine}), below this estimate's interval for one user: "
        f"the estimate counts too much time per step for this setup{why}. Budget from the published figure; "
        "a step carrying more users only takes longer."
    )


def anchor_sentence(a: Anchor) -> str:
    """The anchor in words a budget can act on: every time above already rests on the measurement."""
    return (
        f"Anchored to a measurement: {a.words()}. The times, throughput and price here, and the simulated answers "
        "below, use those costs; a step carrying more users only takes longer than that run's."
    )


def unanchored_sentence(others: tuple[Anchor, ...]) -> str:
    """A tensor-parallel plan with no published run of its own layout, where the engine's runs of other layouts
    found the fit's fixed costs too slow: said, with those runs, so a plan that scales worse than a similar model
    anchored to a run reads as what it is ('' when there are none)."""
    if not others:
        return ""
    runs = "; ".join(f"{a.model} on {a.gpu} ({a.engine}), {a.factor:.2f}x" for a in others)
    return (
        "No published run of this model's layout on several GPUs: its per-layer and all-reduce costs are the fit's. "
        f"The engine's published runs of other layouts took those costs at a fraction of the fit's ({runs}), so this "
        "plan's times on several GPUs are likely pessimistic; a model anchored to a run of its own layout can scale "
        "better than this one."
    )


def resolve(spec: ModelSpec, gpu: GPUSpec, inputs: Inputs) -> tuple[Inputs, Setup]:
    """The inputs validated and filled, and the one Setup (the GPUs asked) every later step starts from."""
    i = inputs.resolved()
    assert i.seq_len is not None and i.kv_dtype is not None
    served_layout(spec, i.n_gpus)  # refuses a count with more stages than layers
    setup = Setup(
        spec,
        gpu,
        i.dtype,
        i.weight_format,
        i.group_size,
        i.scope,
        i.kv_dtype,
        i.n_gpus,
        i.batch,
        i.prompt_tokens,
        i.output_tokens,
    )
    return i, setup


def server_of(i: Inputs) -> Server:
    """The serving engine's own memory options from the inputs."""
    assert i.seq_len is not None and i.engine is not None
    space = None if i.cpu_kvcache_space is None else i.cpu_kvcache_space * GIB
    return Server(i.engine, i.gpu_memory_utilization, i.max_model_len or i.seq_len, i.max_num_seqs, space)


def memory(setup: Setup, i: Inputs) -> MemoryAnswer:
    """The one memory answer: the serving engine's allocation (vllm, sglang) or the overhead model."""
    assert i.seq_len is not None
    server = server_of(i) if i.engine in SERVING_ENGINES else None
    fit = memory_answer(setup, overhead=i.overhead, seq_len=i.seq_len, server=server)
    if i.engine is not None and ENGINES.get(i.engine, i.engine) in LAYER_SPLIT:
        return layer_split_words(fit, i.engine)
    return fit


def layer_split_words(fit: MemoryAnswer, engine: str) -> MemoryAnswer:
    """The plan's sentence for an engine that splits the model by layers (transformers' device_map="auto",
    llama.cpp, ExLlamaV2): its GPUs hold consecutive layers and run one after another, as its times are computed
    (engine.calc.observations.parallel), not in tensor parallel as the layout's words say for a serving engine."""
    said = fit.sentence
    for plan in (fit.plan, fit.asked):
        if plan.pipeline_parallel == 1 and plan.tensor_parallel > 1:
            said = said.replace(
                plan.layout(),
                f"{plan.tensor_parallel} GPUs with the layers split across them ({ENGINE_WORDS.get(engine, engine)} "
                "runs them one after "
                "another, not in tensor parallel)",
            )
    return replace(fit, sentence=said)


def speed_of(
    setup: Setup, fit: MemoryAnswer, i: Inputs, calibration: Calibrated | None
) -> tuple[TimingEstimate, int, SpeedEstimate | None, CalibratedSpeed | None]:
    """One replica's times at the layout the memory answer settled on (the GPUs asked as if it fitted when no
    layout holds the load): this machine's calibration, else the engine class's fitted estimate, else the bound.
    Returns the times, the replicas, the engine estimate (with its interval) and the calibrated figures."""
    layout = fit.layout
    at = setup_for(setup, layout) if layout is not None else setup
    replicas = layout.replicas if layout is not None else 1
    if calibration is not None and setup.gpu.key == THIS_MACHINE:
        cal = calibration.speed_at(at)
        return timing_of(at, cal.efficiency), replicas, None, cal
    if i.engine is not None and setup.gpu.key != THIS_MACHINE:
        cls = ENGINES.get(i.engine, i.engine)
        # the GPUs as the class uses them (layer-split engines: pipeline stages), so the times equal its centrals
        split = parallel(at, cls)
        g = fixed_factor(split, cls, i.engine)  # the anchor's, where a published run of the layout sets one
        s = estimate_speed(at, i.engine, fixed_factor=g)
        return timing_of(split, class_efficiency(s.fit, split, fixed_factor=g)), replicas, s, None
    return timing_of(at, DATASHEET), replicas, None, None


def cost_of(
    i: Inputs, fit: MemoryAnswer, tokens_per_s: float, speed: SpeedEstimate | None, replicas: int
) -> tuple[CostEstimate, tuple[float, float] | None]:
    """$/hour and $/M output tokens at the layout's GPUs, and at the throughput interval's ends; no price (NaN)
    without a price per GPU-hour or when no layout holds the load."""
    layout = fit.layout
    if i.usd_per_gpu_hour is None or layout is None:
        return CostEstimate(math.nan, math.nan, tokens_per_s * 3600.0), None
    cost = estimate_cost(tokens_per_s, i.usd_per_gpu_hour, layout.gpus)
    if speed is None:
        return cost, None
    rate = speed.output_tokens_per_s
    return cost, (
        estimate_cost(rate.high * replicas, i.usd_per_gpu_hour, layout.gpus).usd_per_million_tokens,
        estimate_cost(rate.low * replicas, i.usd_per_gpu_hour, layout.gpus).usd_per_million_tokens,
    )


MODEL_ID_PLACEHOLDER = "<model-id>"


def serving(setup: Setup, fit: MemoryAnswer, i: Inputs, model_id: str | None) -> Launch | None:
    """The vLLM and SGLang commands for the layout the memory answer settled on (serving engines only), with
    the sentence saying which GPUs they are for and where the model id came from."""
    if i.engine not in SERVING_ENGINES or fit.serving is None:
        return None
    layout = fit.layout
    if layout is None:
        return None
    assert i.seq_len is not None
    server = server_of(i)
    vllm = allocation(setup, replace(server, engine="vllm"), layout.tensor_parallel, layout.pipeline_parallel)
    sglang = allocation(
        setup, replace(server, engine="sglang"), layout.tensor_parallel, layout.pipeline_parallel
    )
    plan = LaunchPlan(
        model=model_id or MODEL_ID_PLACEHOLDER,
        tensor_parallel=layout.tensor_parallel,
        pipeline_parallel=layout.pipeline_parallel,
        max_model_len=vllm.max_model_len,
        gpu_memory_utilization=vllm.utilization,
        max_num_seqs=vllm.max_num_seqs,
        dtype=launch_dtype(setup.spec, i),
        weight_format=i.weight_format,
        kv_dtype=i.kv_dtype,
        online_quantization="fp8" if i.weight_format is None and i.dtype == "fp8" else None,
    )
    # the note speaks of the command the engine chosen runs: SGLang's cache and its own cap (none unless asked)
    own, cap = (sglang, i.max_num_seqs or 0) if i.engine == "sglang" else (vllm, plan.max_num_seqs)
    note = launch_note(
        fit, i.n_gpus, model_id, held=held_at(own, i.seq_len), max_num_seqs=cap, cap_flag=CAP_FLAG[own.engine]
    )
    if i.weight_format is None and i.dtype in ("int8", "int4"):
        note += (
            f" vLLM and SGLang do not turn a 16-bit checkpoint into {i.dtype} as they load it: this command serves "
            f"{i.dtype} weights only when the model id names a checkpoint already quantized to {i.dtype} (AWQ or "
            "GPTQ); choose that format under quantized weights to price its scales and add its --quantization flag."
        )
    return Launch(
        vllm_command(plan) if vllm.device != "cpu" else vllm_cpu_command(plan, i.cpu_kvcache_space),
        sglang_command(replace(plan, max_num_seqs=i.max_num_seqs or 0), sglang.utilization),
        tuple(multi_node_steps(plan)),
        layout.gpus,
        note,
    )


def launch_dtype(spec: ModelSpec, i: Inputs) -> str:
    """The activations' precision the server runs: the plain precision asked, else (quantized weights) the
    model's own dtype from its config, else "auto" (vLLM then reads it from the config)."""
    if i.weight_format is None and i.dtype in ("fp16", "bf16", "fp32"):
        return i.dtype
    return spec.checkpoint_dtype or "auto"


@dataclass(frozen=True)
class SplitAgainstOne:
    """A tensor-parallel plan's decode step beside the same step on one GPU, for a model that fits on one: what the
    split saves (each GPU reads 1 / n of the weights) and what it adds (two all-reduces per layer, each paying a
    fixed latency: the engine class's fitted factor x nccl-tests' small-message time on the link)."""

    gpus: int
    step_s: float  # the decode step on `gpus`
    one_gpu_step_s: float  # on one GPU, with the same efficiency
    memory_s: float  # the step's weight and KV reads on `gpus`
    one_gpu_memory_s: float
    allreduces: int  # per step
    comm_s: float  # the step's all-reduces in all (bytes and latency)
    latency_s: float  # the fixed cost of one all-reduce


def split_against_one(
    split: Estimate, spec: ModelSpec, gpu: GPUSpec, calibration: Calibrated | None = None
) -> SplitAgainstOne | None:
    """`split`'s decode step against one GPU's, where its plan splits the model over tensor-parallel GPUs and the
    load also fits on one (else there is no one-GPU plan to compare with: None)."""
    layout = split.fit.layout
    if layout is None or layout.tensor_parallel <= 1:
        return None
    one = estimate(spec, gpu, replace(split.inputs, n_gpus=1), calibration)
    if not one.fits or one.fit.layout is None or one.fit.layout.tensor_parallel != 1:
        return None
    eff = split.speed.fit.efficiency(gpu) if split.speed is not None else DATASHEET
    step, one_step = split.timing.decode_step, one.timing.decode_step
    allreduces = 2 * spec.n_layer
    return SplitAgainstOne(
        gpus=layout.tensor_parallel,
        step_s=step.seconds,
        one_gpu_step_s=one_step.seconds,
        memory_s=step.memory_s,
        one_gpu_memory_s=one_step.memory_s,
        allreduces=allreduces,
        comm_s=step.comm_s,
        latency_s=eff.allreduce_latency_s,
    )
