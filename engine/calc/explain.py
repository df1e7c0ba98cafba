"""The estimate in words: its assumptions as sentences a user can act on, the sentence beside the launch
command, and the reasoning bullets. Every sentence is built from the numbers beside it. Standard library only.
"""

from __future__ import annotations

import math
from typing import Any

from engine.calc import format as fmt
from engine.calc.cells import BORROW_WIDENING
from engine.calc.efficiency import ENGINES, SpeedEstimate, scaled_fixed
from engine.calc.memory import param_count
from engine.calc.observations import LAYER_SPLIT
from engine.calc.plan import MemoryAnswer
from engine.calc.quant import weight_storage_note
from engine.calc.specs import THIS_MACHINE, GPUSpec, ModelSpec, count_words
from engine.calc.timing import DATASHEET, Efficiency, TimingEstimate, ramped_flops

ENGINE_WORDS = {
    "hf": "transformers",
    "hf-compiled": "compiled transformers",
}  # an engine key as a sentence says it
TP_DOMINATES = 0.5  # all-reduces above half of a step: tensor parallel costs more than it saves
FP8_DOCS = "vLLM's FP8 guide (docs.vllm.ai, features/quantization/fp8)"

# A serving-memory note's start -> the sentence a user can act on (engine.calc.serving_memory words them for
# the record; here they say what to do).
_SERVING_NOTES = {
    "latent attention": "Latent attention: every tensor-parallel GPU keeps the whole latent cache, so adding GPUs "
    "adds no room for more tokens per GPU.",
    "sliding-window layers": "Sliding-window layers are counted as full attention, as vLLM 0.8 sizes them; vLLM "
    "0.11 and later keep only the window for them and hold more tokens than shown.",
    "no vLLM": "The memory vLLM's profile run takes is fitted on its older startup logs; for the current version the "
    "sampler's logits are counted once in fp32. If the server reports less cache than this, lower "
    "--gpu-memory-utilization a little or shorten --max-model-len.",
}


def _sentence(text: str) -> str:
    text = text.strip()
    if not text:
        return ""
    text = text[0].upper() + text[1:]
    return text if text.endswith((".", "!", "?")) else text + "."


def _serving_note(note: str) -> str:
    for start, sentence in _SERVING_NOTES.items():
        if note.startswith(start):
            return sentence
    if "KV heads over" in note:
        return _sentence(note + ": past that many GPUs the cache per GPU stops shrinking")
    return _sentence(note)


def _speed_notes(speed: SpeedEstimate, tp: int) -> list[str]:
    engine = ENGINES.get(speed.engine, speed.engine)
    out = []
    # the all-reduce factor only matters with tensor parallel
    borrowed = [b for b in speed.fit.borrowed if tp > 1 or "all-reduce" not in b]
    if borrowed:
        out.append(
            f"Few published {engine}-class runs measure its {', '.join(borrowed)}: the estimate borrows "
            "those from every engine's runs together, so read the times that rest on them as rougher than their "
            "interval."
        )
    fam = speed.gpu_family
    if fam in speed.fit.families_borrowed:
        f = speed.fit.factor("decode", fam)
        out.append(
            f"None of the published {engine}-class runs the fit rests on used this GPU family: its time per token "
            f"here is {f:.2f} times its own fit's, the ratio the engines that ran on both this family and "
            f"{engine}'s GPUs show between them."
        )
    wider = {1: f"{engine}-class runs on any GPU of this family", 2: f"{engine}-class runs on any GPU"}
    what = {"decode": "time per token", "ttft": "first-token", "throughput": "throughput"}
    for name, b in speed.bands.items():
        if b.levels_up:
            out.append(
                f"Few published runs are like this one (same engine class, GPU family and load), so the "
                f"{what.get(name, name)} interval comes from {b.rows} {wider.get(b.levels_up, 'runs of every engine')} "
                f"and its spread is made {BORROW_WIDENING * b.levels_up:.0%} wider for that: read it as rough."
            )
    return out


def fp8_weight_only(gpu: GPUSpec, weight_format: str | None, dtype: str = "") -> bool:
    """fp8 weights (a format, or the plain fp8 precision) on a GPU without fp8 tensor cores (A100, T4, ...):
    stored in fp8, computed in 16 bits."""
    fp8 = weight_format == "fp8" or (weight_format is None and dtype == "fp8")
    return fp8 and gpu.key != THIS_MACHINE and "fp8" not in gpu.peak_flops


def assumptions(
    spec: ModelSpec,
    gpu: GPUSpec,
    i: Any,  # engine.calc.report.Inputs, resolved
    timing: TimingEstimate,
    speed: SpeedEstimate | None,
    fit: MemoryAnswer,
) -> list[str]:
    """Every assumption behind the figures, as a sentence that says what it means for the user."""
    out = [_sentence(a) for a in spec.assumptions]
    pc = param_count(spec)
    if pc.source == "formula" and spec.source == "config.json":
        t = spec.traits
        out.append(
            "Parameters come from the formula, not the model's own class (it could not be built here): "
            f"{'gated' if t.gated_mlp else 'plain'} MLP, {'parallel' if t.parallel_attn else 'sequential'} "
            f"attention and MLP, biases q/k/v {'yes' if t.qkv_bias else 'no'}, output {'yes' if t.out_bias else 'no'}, "
            f"MLP {'yes' if t.mlp_bias else 'no'}, head {'tied' if spec.tied_embeddings else 'untied'}. Check these "
            "against the model card if the size looks off."
        )
    if i.weight_format:
        out.append(_sentence(weight_storage_note(i.weight_format, i.group_size, i.scope)))
    if fp8_weight_only(gpu, i.weight_format, i.dtype):
        out.append(
            f"The {gpu.name} has no fp8 tensor cores, so fp8 there is weight-only (W8A16 through vLLM's FP8 Marlin "
            f"kernel, as {FP8_DOCS} says): the weights take half the memory and decode reads half the bytes, but "
            "the math runs in 16 bits, so prefill is no faster; the launch command keeps the model's --dtype."
        )
    if spec.is_moe:
        out.append(
            f"Mixture of experts: memory holds all {pc.total:,} parameters; a decode step reads the experts its "
            f"{i.batch} sequence(s) visit, assuming tokens spread evenly over them ({spec.experts_per_token} of "
            f"{spec.n_experts} per token)."
        )
    layout = fit.layout
    tp = layout.tensor_parallel if layout is not None else i.n_gpus
    if tp > 1:
        out.append(
            f"Tensor parallel over {tp} GPUs: the all-reduces' time counts the link's bandwidth "
            f"({gpu.interconnect or 'interconnect'}) plus a fixed latency each; {2 * spec.n_layer} of them per step "
            "weigh most on decode's small messages."
        )
    stages = layout.pipeline_parallel if layout is not None else 1
    if stages > 1 and i.batch > 1:
        out.append(
            f"Pipeline stages ({stages}) are timed one after another, as one sequence passes through them. A server "
            "that splits a batch into micro-batches (vLLM's and SGLang's pipeline parallel) keeps every stage busy "
            f"at once under load, so with {i.batch} users the throughput here is a floor: up to {stages} times "
            "higher, the per-token times up to that much lower."
        )
    for phase, pt in (("prefill", timing.prefill), ("decode", timing.decode_step)):
        if pt.comm_share > TP_DOMINATES:
            out.append(
                f"Tensor-parallel all-reduces take {pt.comm_share:.0%} of each {phase} step over {gpu.interconnect}: "
                "communication dominates; fewer GPUs per replica (or replicas) would be faster."
            )
    if speed is not None:
        out += _speed_notes(speed, tp)
    if fit.serving is not None:
        out += [_serving_note(n) for n in fit.serving.notes]
    return [s for s in out if s]


def launch_note(
    fit: MemoryAnswer,
    n_gpus: int,
    model_id: str | None,
    *,
    held: int = 0,
    max_num_seqs: int = 0,
    cap_flag: str = "--max-num-seqs",
) -> str:
    """Which GPUs the launch command is for, what to do about the model id, and (`held` sequences of the plan's
    length one server's cache holds, below its `max_num_seqs`) why the command's cap exceeds what fits."""
    layout = fit.layout
    assert layout is not None
    replica = layout.tensor_parallel * layout.pipeline_parallel
    if fit.fits:
        where = f"For the {n_gpus} GPU(s) asked ({layout.layout()})."
    else:
        where = (
            f"Does not fit on the {n_gpus} GPU(s) asked ({fit.refusal}): this command is for the "
            f"{fit.gpus_needed:,} GPUs it needs ({layout.describe()})."
        )
    if layout.replicas > 1:
        where += (
            f" Run {layout.replicas:,} copies, one per group of {replica} GPU(s), behind a load balancer."
        )
    if 0 < held < max_num_seqs:
        where += (
            f" {cap_flag} {max_num_seqs} caps the requests a server runs at once; "
            + ("the cache of each copy" if layout.replicas > 1 else "its cache")
            + f" holds {held:,} sequences of this length, so past {held:,} running requests wait for free blocks."
        )
    if model_id is None:
        where += (
            " No model id is known (the config names none): replace <model-id> with the model's Hugging Face id, "
            "or give it in the Model id field (--model-id on the command line)."
        )
    return where


def efficiency_of(est: Any, gpu: GPUSpec) -> Efficiency:
    """The Efficiency an estimate's times were computed with: calibrated, the engine class's fit, or the bound."""
    if est.calibrated is not None:
        return est.calibrated.efficiency
    if est.speed is not None:  # with the anchor's factor on its fixed costs, as the tiles were timed
        anchor = getattr(est, "anchor", None)
        return scaled_fixed(est.speed.fit.efficiency(gpu), anchor.factor if anchor is not None else 1.0)
    return DATASHEET


def reasoning(est: Any, spec: ModelSpec, gpu: GPUSpec) -> list[str]:
    """The estimate's (engine.calc.report.Estimate) reasoning as Markdown bullets, each sentence built from the
    numbers beside it."""
    m, t, i, fit = est.memory, est.timing, est.inputs, est.fit
    eff = efficiency_of(est, gpu)
    layout = fit.layout
    n = layout.tensor_parallel if layout is not None else i.n_gpus
    # an engine that splits the model by layers (transformers' device_map="auto", llama.cpp, ExLlamaV2) runs its
    # stages one after another: a step reads at one GPU's bandwidth, as its times were computed
    # (engine.calc.observations.parallel), and hands its activations on between stages instead of all-reducing
    stages = n if est.speed is not None and n > 1 and ENGINES.get(i.engine or "", "") in LAYER_SPLIT else 1
    n = n // stages

    def _share(e: float, figure: str) -> str:
        """The utilisation, of the figure it scales (the GPU's as the catalogue gives it: a T4's is the book's
        300 GB/s, not the datasheet's 320, which a student read '76% of the datasheet's' against)."""
        if e >= 1:
            return ""
        by = "this machine's calibration" if est.calibrated else f"as fitted for {i.engine}"
        return f" ({e:.0%} of the {figure} the GPU figures give, {by})"

    def _unread(stored: float) -> str:
        """Why a decode step reads fewer weight bytes than the weights tile holds (GPT-Neo 2.7B: 5.29 GB read
        beside 5.30 GB; Llama 3 8B: 15.01 beside 16.06): a lookup table is read a row per token, not whole, and
        the norms' few weights are left out of the time. Said whenever the two figures shown differ."""
        read = t.decode_step.weights_bytes
        if fmt.gb(read) == fmt.gb(stored):
            return ""
        tables = (["the input embedding table"] if not spec.tied_embeddings else []) + (
            ["the position-embedding table"] if spec.traits.learned_positions else []
        )
        why = ["reads only the experts its tokens visit (see Experts)"] if spec.is_moe else []
        if tables:
            why.append(
                f"looks up one row per token of {' and '.join(tables)} instead of reading "
                + ("it" if len(tables) == 1 else "them")
            )
        said = [f"a step {' and '.join(why)}"] if why else []
        if norms := param_count(spec).norms * stored / m.params:
            said.append(f"the estimate leaves out the norms' {fmt.gb(norms)}, too small to time")
        if not said:
            return ""
        return f" ({fmt.gb(stored - read)} less than the {fmt.gb(stored)} stored: {'; '.join(said)})"

    def _activations(phase, bw: float) -> str:
        """The bytes the memory-bound operators move besides weights and KV cache (activations), where they add
        more than 0.5%: said, so that the bytes over the bandwidth give the time shown."""
        other = phase.memory_s * bw - phase.weights_bytes - phase.kv_bytes
        return f" + {fmt.gb(other)} of activations" if other > 0.005 * phase.memory_s * bw else ""

    def _parts(phase) -> str:
        """The phase's time as the sum it is: memory-bound and compute-bound operators, fixed cost, all-reduces (or,
        between layer-split stages, hand-offs)."""
        named = (
            (phase.memory_s, "memory-bound operators"),
            (phase.compute_s, "compute-bound operators"),
            (phase.overhead_s, "fixed per-step cost"),
            (phase.comm_s, "hand-offs between stages" if stages > 1 else "all-reduces"),
        )
        shown = [f"{fmt.seconds(v)} {what}" for v, what in named if v > 0]
        return " + ".join(shown) + " = " if len(shown) > 1 else ""

    kv_elem = (
        m.kv_bytes_per_token / (2 * spec.kv_layers * spec.n_kv_head * spec.head_dim) if spec.kv_layers else 0
    )
    layers = (
        f"{spec.kv_layers} attention layers" if spec.kv_layers != spec.n_layer else f"{spec.n_layer} layers"
    )
    users = layout.batch_per_replica if layout is not None else i.batch
    bandwidth = gpu.bandwidth_bytes_per_s * n * eff.bandwidth
    # a prefill of b x P tokens reaches the ramped share of its utilisation (engine.calc.timing.ramped)
    prefill_share = ramped_flops(eff, max(1, users * i.prompt_tokens))
    prefill_rate = gpu.flops_for(i.dtype) * n * prefill_share
    lines = [
        f"**Weights** = {m.params:,} parameters ({count_words(est.params.source)}) × "
        f"{m.weights_bytes / m.params:.4g} B "
        f"({i.weights_label}) = **{fmt.gb(m.weights_bytes)}**.",
        f"**KV cache** = 2 × {layers} × {spec.n_kv_head} KV heads × {spec.head_dim} head dim × {kv_elem:g} B = "
        f"{m.kv_bytes_per_token:,.0f} B per token ({i.kv_dtype}); × {i.batch} user{'s' if i.batch != 1 else ''} × "
        f"{i.seq_len:,} tokens = "
        f"**{fmt.gb(m.kv_cache_bytes)}** for this load"
        + (
            f" (capped at the {spec.sliding_window}-token window the model evicts beyond)"
            if spec.window_evicts
            else ""
        )
        + ".",
        f"**Memory** ({_memory_model(fit)}): {fit.sentence}",
        f"**Decode**: each step reads {fmt.gb(t.decode_step.weights_bytes)} of weights{_unread(m.weights_bytes)} + "
        f"{fmt.gb(t.decode_step.kv_bytes)} of KV cache{_activations(t.decode_step, bandwidth)} at "
        f"{fmt.gb(bandwidth)}/s{_share(eff.bandwidth, f'{fmt.gb(bandwidth / eff.bandwidth)}/s')}: "
        f"{_parts(t.decode_step)}{fmt.seconds(t.decode_s_per_token)} per step, "
        + (f"for all {users} users at once: " if users != 1 else "for the one user: ")
        + f"{t.decode_step.bound}-bound.",
        f"**Prefill**: {fmt.flops(t.prefill.flops)}"
        + (
            f", {fmt.flops(t.prefill.compute_s * prefill_rate)} of it in compute-bound operators"
            if t.prefill.memory_s > 0 and t.prefill.compute_s > 0
            else ""
        )
        + f" at {fmt.flops(prefill_rate, 'FLOP/s')}"
        f"{_share(prefill_share, fmt.flops(prefill_rate / prefill_share, 'FLOP/s') if prefill_share else '')}: "
        f"{_parts(t.prefill)}"
        f"{fmt.seconds(t.prefill_s)}: {t.prefill.bound}-bound.",
    ]
    if spec.is_moe:
        lines.append(
            f"**Experts**: memory holds all {est.params.total:,} parameters; a token uses {est.params.active:,} "
            f"({spec.experts_per_token} of {spec.n_experts} experts + the router), which is what decode streams at batch 1."
        )
    if stages > 1:
        lines.append(
            f"**Layer split** over {stages} GPUs (consecutive layers on each, as "
            f"{ENGINE_WORDS.get(i.engine or '', i.engine)} places them by default): a step passes through the "
            f"{stages} stages one after another, so it reads at one "
            f"GPU's bandwidth and computes at one GPU's rate; handing the activations to the next stage over "
            f"{gpu.interconnect or 'the interconnect'} costs {fmt.seconds(t.prefill.comm_s)} of prefill and "
            f"{fmt.seconds(t.decode_step.comm_s)} per decode step. Tensor parallel (a serving engine) would put all "
            f"{stages} GPUs to work on every step."
        )
    if n > 1:
        lines.append(
            f"**Tensor parallel** over {gpu.interconnect or 'the interconnect'} "
            f"({fmt.gb(gpu.interconnect_bytes_per_s)}/s each way): 2 all-reduces per layer cost "
            f"{fmt.seconds(t.prefill.comm_s)} of prefill ({t.prefill.comm_share:.0%}) and "
            f"{fmt.seconds(t.decode_step.comm_s)} per decode step ({t.decode_step.comm_share:.0%})."
        )
    if i.usd_per_gpu_hour is not None and math.isfinite(est.cost.usd_per_million_tokens):
        lines.append(
            f"**Cost**: ${i.usd_per_gpu_hour:g}/GPU-hour × {est.priced_gpus} = {fmt.usd(est.cost.usd_per_hour)}/hour ÷ "
            f"({est.tokens_per_s:,.0f} tok/s × 3600) × 10⁶ = **{fmt.usd(est.cost.usd_per_million_tokens)} per million "
            "output tokens**" + ("" if est.fits else f" on the {est.priced_gpus} GPUs it needs") + "."
        )
    return lines


def _memory_model(fit: MemoryAnswer) -> str:
    if fit.serving is not None:
        return f"as {fit.model} allocates it"
    return f"weights + KV + {fit.overhead.overhead_bytes / max(fit.overhead.weights_bytes + fit.overhead.kv_cache_bytes, 1):.0%} overhead"
