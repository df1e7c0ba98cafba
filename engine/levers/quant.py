"""Weight quantization, applied to a loaded model and measured against fp32 in one run.

NVIDIA's "Mastering LLM Techniques: Inference Optimization" names quantization as a main lever: fewer bytes
per weight means less memory and, when decode is memory-bound, fewer bytes read per token. Whether that turns
into speed depends on the kernel: a weight-only int8 matmul that dequantizes in a slow path reads fewer bytes
and still loses. So every scheme is measured, not assumed:

- weights_bytes: the bytes of the quantized tensors themselves (torchao tensor subclasses are flattened into
  their inner tensors: data, scales, zero points; bitsandbytes adds its per-row SCB or per-block absmax),
  each tied tensor counted once; beside it the calculator's bytes (engine.calc.quant) from the same shapes.
- speed: TTFT, TPOT, tok/s over `runs` greedy runs of the race's first prompt; speedup = median fp32 TPOT /
  median scheme TPOT (per-token time, so an earlier EOS does not count as speed) with a bootstrap 95% interval
  (engine.core.stats).
- quality: bits per byte on the shipped `pydoc_topics` documents with the engine's own rolling log-likelihood
  (engine.lab.evaluation.engine_perplexity, the harness's cross-check: same metric, without lm-eval's overhead),
  and greedy exact match / first divergent token against fp32 over the race's prompts.

Which layers: every nn.Linear except the output layer (lm_head), which stays in the model's precision and
tied to the embeddings, as transformers' bitsandbytes integration does by default.
Schemes that cannot run on this stack fail with their own reason in `status`; the run goes on.
"""

from __future__ import annotations

import copy
import gc
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from engine.calc import quant as qcalc
from engine.calc.format import gb
from engine.core import stats
from engine.core.errors import EngineError, InvalidParameterError
from engine.core.interval import Interval
from engine.core.paths import scrub
from engine.core.spec import option
from engine.core.verdict import direction, interval_cell, ratio_cell, speed_verdict
from engine.lab import evaluation
from engine.levers import runs as R
from engine.race import quality
from engine.runtime.hardware import current_rss_bytes
from engine.runtime.models import LoadedModel, ModelArgs


@dataclass(frozen=True)
class Scheme:
    name: str
    description: str
    library: str  # "torch" | "torchao" | "bitsandbytes" | "optimum-quanto"
    calc_format: str  # key of engine.calc.quant.FORMATS for the quantized linears ("" = no quantization)
    cuda_only: bool = False


SCHEMES: dict[str, Scheme] = {
    s.name: s
    for s in (
        Scheme("fp32", "fp32, the reference every other scheme is compared with", "torch", ""),
        Scheme("bf16", "bfloat16 weights and activations", "torch", ""),
        Scheme(
            "fp16",
            "float16 weights and activations (CUDA only: CPU fp16 uses slow reference kernels)",
            "torch",
            "",
            cuda_only=True,
        ),
        Scheme(
            "int8",
            "torchao Int8WeightOnlyConfig: int8 weights, one scale per output channel",
            "torchao",
            "int8-per-channel",
        ),
        Scheme(
            "int4",
            "torchao int4 weight-only, groups of 128 (64/32 when the layer widths need it)",
            "torchao",
            "int4-g128",
        ),
        Scheme(
            "bnb-int8", "bitsandbytes LLM.int8 (8-bit weights, outliers in fp16)", "bitsandbytes", "bnb-int8"
        ),
        Scheme("bnb-nf4", "bitsandbytes 4-bit NormalFloat, blocks of 64", "bitsandbytes", "bnb-nf4"),
        Scheme("quanto-int4", "optimum-quanto qint4 weights", "optimum-quanto", "int4-g128"),
    )
}
DEFAULT_SCHEMES: tuple[str, ...] = ("fp32", "bf16", "int8", "int4", "bnb-int8", "bnb-nf4")
INT4_GROUPS = (128, 64, 32)  # what the int4 kernels accept, largest first


@dataclass(frozen=True)
class QuantSpec(ModelArgs):
    """Weight quantization measured against fp32: which schemes, and how long to measure each. The CLI
    (`python -m engine quant`), bench/quant.py and the page read their defaults and bounds here."""

    dtype: str = option("fp32", "the reference precision every scheme is compared with", cli=False)
    schemes: tuple[str, ...] = option(
        DEFAULT_SCHEMES,
        "schemes (fp32 is always measured: the baseline)",
        choices=lambda: tuple(SCHEMES),
        label="scheme",
    )
    max_new_tokens: int = option(32, "new tokens per timed run", lo=4, hi=512, label="new tokens")
    runs: int = option(3, "timed runs per scheme (3+ gives a 95% interval)", lo=1, hi=50)
    eval_docs: int = option(
        4, "pydoc_topics documents for bits per byte", lo=1, hi=48, label="documents for bits per byte"
    )

    def validate(self) -> QuantSpec:
        if self.dtype != "fp32":
            raise InvalidParameterError(
                f"the reference is fp32: every scheme is compared with it, got {self.dtype}"
            )
        super().validate()
        return replace(self, schemes=tuple(check_schemes(self.schemes)))


def check_schemes(names: Sequence[str]) -> list[str]:
    out = []
    for n in names:
        key = n.strip().lower()
        if key not in SCHEMES:
            raise InvalidParameterError(f"unknown scheme {n!r}; choose from {', '.join(SCHEMES)}")
        if key not in out:
            out.append(key)
    if not out:
        raise InvalidParameterError(f"no scheme given; choose from {', '.join(SCHEMES)}")
    if "fp32" not in out:
        out.insert(0, "fp32")  # the baseline of every ratio is measured in the same run
    return out


# --- bytes ------------------------------------------------------------------------------------------------


def storage_bytes(t) -> int:
    """Bytes a (possibly quantized) parameter really stores: tensor subclasses flattened into their inner
    tensors; bitsandbytes' per-row SCB (8-bit) or quant_state absmax (4-bit) added."""
    if hasattr(t, "__tensor_flatten__") and type(t).__name__ not in ("Parameter", "Tensor"):
        names, _ = t.__tensor_flatten__()
        return sum(storage_bytes(getattr(t, n)) for n in names)
    total = t.numel() * t.element_size()
    scb = getattr(t, "SCB", None)
    if scb is not None:
        total += scb.numel() * scb.element_size()
    state = getattr(t, "quant_state", None)
    if state is not None and getattr(state, "absmax", None) is not None:
        total += state.absmax.numel() * state.absmax.element_size()
        nested = getattr(state, "state2", None)  # double quantization: absmax of the absmax
        if nested is not None:
            total += nested.absmax.numel() * nested.absmax.element_size()
    return int(total)


def model_storage_bytes(model) -> int:
    """Sum over unique parameters (model.parameters() yields a tied tensor once), plus the row scales that
    bitsandbytes 8-bit moves from the weight into its module's `state` after the first matmul."""
    total = sum(storage_bytes(p) for p in model.parameters())
    for module in model.modules():
        scb = getattr(getattr(module, "state", None), "SCB", None)
        if scb is not None and getattr(getattr(module, "weight", None), "SCB", None) is None:
            total += scb.numel() * scb.element_size()
    return int(total)


def _quantized_linears(model) -> dict[str, object]:
    import torch

    return {
        n: m
        for n, m in model.named_modules()
        if isinstance(m, torch.nn.Linear) and n.split(".")[-1] != "lm_head"
    }


def int4_group(model) -> int:
    """The largest int4 group size that divides every quantized layer's input width."""
    widths = {m.in_features for m in _quantized_linears(model).values()}
    for g in INT4_GROUPS:
        if all(w % g == 0 for w in widths):
            return g
    raise InvalidParameterError(
        f"no int4 group size in {INT4_GROUPS} divides the layer widths {sorted(widths)}"
    )


def predicted_bytes(reference, fmt: str, elem_bytes: float, group: int | None) -> int:
    """The calculator's bytes for `reference` (an unquantized model) with its linears in `fmt`: the same
    shapes, each tied tensor once, everything else at `elem_bytes`."""
    linear_weights = {id(m.weight) for m in _quantized_linears(reference).values()}
    tensors = [
        (tuple(p.shape), bool(fmt) and id(p) in linear_weights, elem_bytes) for p in reference.parameters()
    ]
    return qcalc.model_bytes(tensors, fmt or "F32", group)


# --- applying a scheme ----------------------------------------------------------------------------------------


@dataclass
class Applied:
    lm: LoadedModel
    quantize_s: float
    calc_format: str
    group_size: int | None
    elem_bytes: float  # bytes per element of what stays unquantized
    notes: list[str] = field(default_factory=list)


def _torchao(lm: LoadedModel, scheme: str) -> Applied:
    import torch
    from torchao.quantization import Int8WeightOnlyConfig, quantize_

    notes: list[str] = []
    t0 = time.perf_counter()
    model = copy.deepcopy(lm.model)
    group = None
    fmt = SCHEMES[scheme].calc_format
    if scheme == "int8":
        cfg = Int8WeightOnlyConfig()
    else:
        group = int4_group(model)
        if group != 128:
            notes.append(f"group size {group}: a layer width is not a multiple of 128")
        if lm.device.startswith("cuda"):
            from torchao.quantization import Int4WeightOnlyConfig

            model = model.to(torch.bfloat16)  # the tinygemm int4 kernel takes bf16 activations
            notes.append("model converted to bf16 for the CUDA int4 kernel")
            cfg = Int4WeightOnlyConfig(group_size=group, int4_packing_format="tile_packed_to_4d")
        else:
            # torchao 0.18: the default (plain) int4 layout needs the CUDA-only mslk kernels; on the CPU the
            # tinygemm CPU kernel runs through Int4OpaqueTensor, whose scales keep the model's dtype.
            from torchao.prototype.quantization.int4 import PrototypeInt4WeightOnlyConfig

            cfg = PrototypeInt4WeightOnlyConfig(group_size=group)
            if next(model.parameters()).dtype == torch.float32:
                fmt = "int4-g128-fp32"
    names = set(_quantized_linears(model))
    quantize_(model, cfg, filter_fn=lambda m, fqn: fqn in names)
    elem = next(p for n, p in model.named_parameters() if "embed" in n or "wte" in n).element_size()
    return Applied(R.derived(lm, model, scheme), time.perf_counter() - t0, fmt, group, elem, notes)


def _bitsandbytes(lm: LoadedModel, scheme: str) -> Applied:
    import torch
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    if scheme == "bnb-int8":
        cfg = BitsAndBytesConfig(load_in_8bit=True)
    else:
        cfg = BitsAndBytesConfig(
            load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=torch.float32
        )
    device_map = "cuda" if lm.device.startswith("cuda") else "cpu"
    with tempfile.TemporaryDirectory(prefix="inference-lab-bnb-") as tmp:
        lm.model.save_pretrained(tmp, safe_serialization=True)
        t0 = time.perf_counter()  # bitsandbytes quantizes while loading: the time includes reading the file
        model = R.quiet(
            AutoModelForCausalLM.from_pretrained,
            tmp,
            quantization_config=cfg,
            device_map=device_map,
            dtype=next(lm.model.parameters()).dtype,
        )
        took = time.perf_counter() - t0
    model.eval()
    notes = ["quantized while loading from a saved copy (the time includes reading it)"]
    fmt = SCHEMES[scheme].calc_format
    if scheme == "bnb-nf4":
        fmt = bnb_nf4_format(model)
        if fmt != "bnb-nf4":
            notes.append("this CPU has AVX-512 BF16: bitsandbytes keeps each block's absmax in bf16")
    elem = next(lm.model.parameters()).element_size()
    return Applied(R.derived(lm, model, scheme), took, fmt, None, elem, notes)


def bnb_nf4_format(model) -> str:
    """The calculator's format for a bitsandbytes nf4 model, as the library stores it on this machine.

    bitsandbytes 0.50's Linear4bit decides per module (`support_avx512bf16_for_cpu`, read from the CPU at
    construction): on a CPU with AVX-512 BF16 its first forward repacks the weight for the fused CPU kernel and
    keeps the absmax in bf16 (2 bytes per block of 64 instead of 4). A module already repacked says so in its
    quant_state. CUDA weights are never repacked."""
    for m in model.modules():
        state = getattr(getattr(m, "weight", None), "quant_state", None)
        if state is None:
            continue
        if getattr(state, "packing_format_for_cpu", False):
            return "bnb-nf4-bf16-absmax"
        if m.weight.device.type == "cpu" and getattr(m, "support_avx512bf16_for_cpu", False):
            return "bnb-nf4-bf16-absmax"
    return "bnb-nf4"


def _quanto(lm: LoadedModel, scheme: str) -> Applied:
    from optimum.quanto import freeze, qint4, quantize

    t0 = time.perf_counter()
    model = copy.deepcopy(lm.model)
    quantize(model, weights=qint4, exclude="lm_head")
    freeze(model)
    elem = next(lm.model.parameters()).element_size()
    return Applied(R.derived(lm, model, scheme), time.perf_counter() - t0, "int4-g128", 128, elem)


def apply_scheme(lm: LoadedModel, scheme: str) -> Applied:
    """A quantized copy of lm's model; lm itself is left untouched (it stays the fp32 reference)."""
    import torch

    s = SCHEMES[scheme]
    if s.cuda_only and not lm.device.startswith("cuda"):
        raise InvalidParameterError(f"{scheme} is offered on CUDA GPUs only: {s.description}")
    if lm.dtype != "fp32":
        raise InvalidParameterError(
            f"load the reference in fp32 (got {lm.dtype}): every scheme is compared with it"
        )
    if s.library == "torch":
        t0 = time.perf_counter()
        model = (
            lm.model
            if scheme == "fp32"
            else copy.deepcopy(lm.model).to({"bf16": torch.bfloat16, "fp16": torch.float16}[scheme])
        )
        elem = next(model.parameters()).element_size()
        return Applied(
            R.derived(lm, model, scheme) if scheme != "fp32" else lm, time.perf_counter() - t0, "", None, elem
        )
    if s.library == "torchao":
        return _torchao(lm, scheme)
    if s.library == "bitsandbytes":
        return _bitsandbytes(lm, scheme)
    return _quanto(lm, scheme)


# --- one run over the schemes ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class SchemeResult:
    scheme: str
    status: str  # "ok" | "skipped" | "failed"
    reason: str = ""
    description: str = ""
    weights_bytes: int | None = None
    predicted_weights_bytes: int | None = None
    predicted_ratio: float | None = None  # measured / predicted
    calc_format: str = ""
    group_size: int | None = None
    rss_bytes: int | None = (
        None  # peak process RSS while this scheme ran (the fp32 reference is resident too)
    )
    quantize_s: float | None = None
    ttft_s: float | None = None
    tpot_s: float | None = None
    tokens_per_s: float | None = None
    speedup_vs_fp32: float | None = None
    speedup_ci: tuple[float, float] | None = None
    bits_per_byte: float | None = None
    bits_per_byte_delta: float | None = None
    exact_match_rate: float | None = None
    first_divergence_token: int | None = None
    runs: int = 0
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class QuantReport:
    model: str
    device: str
    max_new_tokens: int
    runs: int
    eval_documents: int
    quality_method: str
    rows: tuple[SchemeResult, ...]


QUALITY_METHOD = (
    "bits per byte: the engine's own rolling log-likelihood over the first {n} documents of the shipped Python "
    "documentation text (the lm-eval run cross-checks it within 1%); exact match and first divergence: each "
    "scheme's greedy continuations of the race's prompts compared with fp32's continuations"
)


def _failure(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return f"{type(exc).__name__}: {text}"[:300]


def _measure_one(
    applied: Applied,
    reference,
    base: dict,
    prompts: Sequence[str],
    cfg,
    runs: int,
    docs: Sequence[str],
) -> SchemeResult:
    lm = applied.lm
    timed = R.timed_runs(lm, prompts[0], cfg, runs)
    tokens = [timed.token_ids, *R.greedy_tokens(lm, prompts[1:], cfg)]
    ppl = R.quiet(evaluation.engine_perplexity, lm, docs)
    m = [r for r in timed.runs]
    weights = model_storage_bytes(lm.model)
    predicted = predicted_bytes(reference, applied.calc_format, applied.elem_bytes, applied.group_size)
    if base:
        sp = stats.speedup(base["tpots"], timed.tpots)
        agree = R.agreement(base["tokens"], tokens)
        delta = ppl.bits_per_byte - base["bpb"]
    else:  # this is fp32: the baseline is 1x by definition, without an interval
        sp, agree, delta = Interval.exact(1.0, rows=0), R.agreement(tokens, tokens), 0.0
        base.update(tpots=timed.tpots, tokens=tokens, bpb=ppl.bits_per_byte)
    return SchemeResult(
        scheme=lm.dtype,
        status="ok",
        description=SCHEMES[lm.dtype].description,
        weights_bytes=weights,
        predicted_weights_bytes=predicted,
        predicted_ratio=weights / predicted if predicted else None,
        calc_format=applied.calc_format,
        group_size=applied.group_size,
        rss_bytes=max(max(r.peak_memory_bytes for r in m), current_rss_bytes()),
        quantize_s=applied.quantize_s,
        ttft_s=stats.median([r.ttft_s for r in m]),
        tpot_s=stats.median(timed.tpots),
        tokens_per_s=stats.median([r.tokens_per_s for r in m]),
        speedup_vs_fp32=sp.central,
        speedup_ci=(sp.low, sp.high) if runs >= 3 and sp.rows else None,
        bits_per_byte=ppl.bits_per_byte,
        bits_per_byte_delta=delta,
        exact_match_rate=agree.exact_match_rate,
        first_divergence_token=agree.first_divergence_token,
        runs=runs,
        notes=tuple(applied.notes),
    )


def run_quant(
    lm: LoadedModel,
    spec: QuantSpec,
    *,
    prompts: Sequence[str] = quality.PROMPTS,
    progress: R.Progress | None = None,
) -> QuantReport:
    """Apply and measure each scheme against the fp32 model `lm`, one after another in this process."""
    spec = spec.validate()
    names, runs, max_new_tokens, eval_documents = spec.schemes, spec.runs, spec.max_new_tokens, spec.eval_docs
    if eval_documents > len(evaluation.local_documents()):
        raise InvalidParameterError(
            f"documents for bits per byte must be at most {len(evaluation.local_documents())}"
        )
    cfg = R.config(lm, max_new_tokens)
    docs = evaluation.local_documents(eval_documents)
    base: dict = {}
    rows: list[SchemeResult] = []
    for i, name in enumerate(names):
        if progress is not None:
            progress(i / len(names), f"{name}: quantizing and measuring ({i + 1}/{len(names)})")
        scheme = SCHEMES[name]
        if scheme.cuda_only and not lm.device.startswith("cuda"):
            rows.append(
                SchemeResult(name, "skipped", f"needs a CUDA GPU: {scheme.description}", scheme.description)
            )
            continue
        applied = None
        try:
            applied = apply_scheme(lm, name)
            rows.append(_measure_one(applied, lm.model, base, prompts, cfg, runs, docs))
        except (
            EngineError,
            ImportError,
            RuntimeError,
            ValueError,
            TypeError,
            AssertionError,
            NotImplementedError,
            AttributeError,
            OSError,
        ) as exc:
            if name == "fp32":
                raise  # without the baseline no ratio means anything
            rows.append(SchemeResult(name, "failed", _failure(exc), scheme.description))
        finally:
            if applied is not None and applied.lm is not lm:
                del applied
            gc.collect()
    if progress is not None:
        progress(1.0, "done")
    return QuantReport(
        lm.name,
        lm.device,
        max_new_tokens,
        runs,
        eval_documents,
        QUALITY_METHOD.format(n=eval_documents),
        tuple(rows),
    )


# --- words from numbers -------------------------------------------------------------------------------------------


BUSY_SPEED = "not comparable (measured on a busy machine: other work shifts each scheme's timing differently)"


def verdict(row: SchemeResult, base: SchemeResult | None = None, *, busy: bool = False) -> str:
    """One sentence from the row's own numbers (and the fp32 row's, for the size ratio); `busy`: the run was
    measured on a busy machine, so its speed is said not comparable instead of faster or slower (a walk read
    int8 1.26x faster live, busy, where the quiet recorded run says 1.58x slower)."""
    if row.status != "ok":
        return f"{row.scheme} did not run here: {scrub(row.reason)}"
    if row.scheme == "fp32":
        return "fp32 is the reference: every ratio and delta is measured against it in the same run."
    sp, bpb, ci = row.speedup_vs_fp32, row.bits_per_byte_delta, row.speedup_ci
    cost = quality_cost(bpb)
    size, bound = "", None
    if base is not None and base.weights_bytes and row.weights_bytes:
        share = row.weights_bytes / base.weights_bytes
        size = f", stores its weights in {share:.0%} of fp32's bytes"
        bound = 1 / share
    match = (
        f"; greedy output equals fp32's on {row.exact_match_rate:.0%} of the prompts"
        if row.exact_match_rate is not None
        else ""
    )
    if sp is None or sp != sp:
        return f"{row.scheme}: no speed figure{size}."
    if busy:
        return f"{row.scheme}, time per token: {BUSY_SPEED}; it {cost}{size}{match}."
    speed = speed_verdict(sp, ci, baseline="fp32", no_interval="fewer than 3 runs, no 95% interval")
    way = direction(sp, ci)
    if way == "faster" or (way != "slower" and (bound is None or bound <= 1)):
        return f"{row.scheme}, time per token: {speed}; it {cost}{size}{match}."
    if bound is not None and bound > 1:
        # not faster though it reads fewer bytes: the Roofline page's bytes argument, and why it did not hold here
        allow = f"were decode set by the bytes it reads, {1 / bound:.0%} of the bytes would allow up to {bound:.2f}×"
        why = (
            f"{allow}; it measured {ratio_cell(sp, ci)}, so the kernels that run this format, not the bytes, set "
            "its speed on this machine"
            if way == "slower"
            else f"{allow}; this run cannot tell it from fp32 (its interval spans 1×), so it cannot say whether the "
            "bytes or the kernels set its speed: time more runs, on a quieter machine"
        )
    else:
        why = "it reads no fewer bytes than fp32 and its kernels are slower here"
    return f"{row.scheme}, time per token: {speed}: {why}; it {cost}{size}{match}."


def headline(rows: Sequence[SchemeResult], *, busy: bool = False) -> str:
    """The run in one line, for under its button (the tables and verdicts land below the fold at 900 px): each
    scheme's speed against fp32 as its table cell says it, with its 95% interval, and its weight bytes as a share of
    fp32's."""
    base = next((r for r in rows if r.scheme == "fp32" and r.status == "ok"), None)
    parts = []
    for r in rows:
        if r.scheme == "fp32":
            continue
        if r.status != "ok":
            parts.append(f"**{r.scheme}** did not run here")
            continue
        speed = (
            "speed not comparable (busy machine)"
            if busy
            else ratio_cell(r.speedup_vs_fp32, r.speedup_ci) or "no speed figure"
        )
        ci = "" if busy else interval_cell(r.speedup_vs_fp32, r.speedup_ci)
        share = (
            f", weights in {r.weights_bytes / base.weights_bytes:.0%} of fp32's bytes"
            if base is not None and base.weights_bytes and r.weights_bytes
            else ""
        )
        parts.append(
            f"**{r.scheme}** against fp32: {speed}" + (f" (95% interval {ci})" if ci else "") + share
        )
    return "; ".join(parts) + "." if parts else ""


def memory_note(rows: Sequence[SchemeResult]) -> str:
    """Why a scheme with fewer weight bytes than fp32 can show a higher peak RSS (a walk read int8 2.34 GB beside
    fp32's 1.54 GB, "weights in 41% of fp32's bytes"): every row is this one process's resident memory, which
    holds the fp32 reference throughout; a scheme is made from a full fp32 copy of it, and the memory that copy
    frees on conversion stays with the process (glibc's allocator keeps it: on SmolLM2-135M int8, malloc_trim
    gave back 0.32 GB of 1.52). "" when no such row."""
    base = next((r for r in rows if r.scheme == "fp32" and r.status == "ok"), None)
    if base is None or not base.rss_bytes or not base.weights_bytes:
        return ""
    above = [
        r
        for r in rows
        if r is not base
        and r.status == "ok"
        and r.rss_bytes
        and r.weights_bytes
        and r.rss_bytes > base.rss_bytes
        and r.weights_bytes < base.weights_bytes
    ]
    if not above:
        return ""
    said = ", ".join(
        f"{r.scheme}'s {gb(r.rss_bytes)} (weights {r.weights_bytes / base.weights_bytes:.0%} of fp32's)"
        for r in above
    )
    return (
        f"Peak RSS above fp32's {gb(base.rss_bytes)} with smaller weights: {said}. Each peak is the whole "
        "measuring process's memory, and that process keeps the fp32 reference loaded throughout; each scheme is "
        "made by converting a full fp32 copy of it, and the memory freed by the conversion stays with the "
        "process. So a row's peak holds the fp32 model and the scheme's weights together (plus its library's own "
        "code): compare the weights columns for what a scheme needs."
    )


def quality_cost(delta: float | None) -> str:
    """A bits-per-byte delta in words: a change under 0.0005 bits/byte is below what the evaluation resolves."""
    if delta is None or delta != delta:
        return "costs an unmeasured amount of quality"
    if abs(delta) < 5e-4:
        return f"costs no measurable quality ({delta:+.4f} bits/byte)"
    if delta < 0:
        return f"scores {-delta:.3f} bits/byte better than fp32"
    return f"costs {delta:+.3f} bits/byte"
