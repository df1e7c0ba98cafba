"""A roofline read in words (engine.calc.roofline's numbers): which operators are memory-bound, how far below the
ridge, and which lever helps; generated from the numbers, so the sentences change as the inputs move."""

from __future__ import annotations

from engine.calc.format import ridge as fmt_ridge
from engine.calc.roofline import RooflineResult


def diagnose(result: RooflineResult) -> list[str]:
    """Plain-language reading of a roofline: which operators are memory-bound, how far below the ridge,
    and which lever helps. Generated from the numbers, so it changes as the sliders move."""
    ridge = result.ridge_ops_per_byte
    mem = [p for p in result.operators if p.bound == "memory"]
    comp = [p for p in result.operators if p.bound == "compute"]
    mem_share = sum(p.share_of_time for p in mem)
    lines = [
        f"{len(mem)} of {len(result.operators)} operators are memory-bound on {result.gpu} "
        f"(ridge {fmt_ridge(ridge)} ops/byte); they take {mem_share:.0%} of the {result.phase} time."
    ]
    if mem:
        worst = min(mem, key=lambda p: p.intensity)
        lines.append(
            f"Lowest intensity: {worst.name} at {worst.intensity:.2f} ops/byte, {ridge / worst.intensity:,.0f}x "
            f"below the ridge: it can use at most {worst.attainable_flops_per_s / result.peak_flops_per_s:.1%} of peak compute."
        )
    attn = [p for p in result.operators if p.group == "attention"]
    proj = [p for p in result.operators if p.group in ("projection", "mlp", "head")]
    if result.phase == "decode":
        lines.append(_decode_weights_line(result, proj))
        if attn:
            lines.append(
                f"Attention reads each sequence's own KV cache, so its intensity ({attn[0].intensity:.2f} ops/byte "
                "for QK^T) does not grow with batch: a smaller KV cache (GQA/MQA, a lower KV precision) and fused "
                "kernels that never write the scores to memory are its levers, not more compute."
            )
    else:
        tokens = result.seq_len * max(1, result.batch)
        if comp:
            names = [p.name for p in comp]
            listed = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
            lines.append(
                f"Prefill processes {tokens:,} tokens per weight read"
                + (f" ({result.batch} prompts of {result.seq_len})" if result.batch > 1 else "")
                + f", so the projections are compute-bound ({listed}): here more FLOP/s would help."
            )
        head = next((p for p in result.operators if p.name == "lm_head" and p.bound == "memory"), None)
        if head is not None and result.seq_len > 1:
            rows = (
                f"for one token of the {result.seq_len}"
                if result.batch <= 1
                else f"for each prompt's last token, {result.batch} of the {tokens:,}"
            )
            lines.append(
                f"lm_head is memory-bound in prefill too ({head.intensity:.1f} ops/byte): only the last prompt "
                f"token's logits choose the first new token, so it reads the whole vocabulary matrix {rows}, as in "
                "decode."
            )
        soft = [p for p in attn if p.bound == "memory"]
        if soft:
            lines.append(
                f"{', '.join(p.name for p in soft)} stay memory-bound even in prefill: the unfused attention writes "
                f"and re-reads a {result.seq_len}x{result.seq_len} score matrix per head. A fused (flash) attention "
                "kernel keeps the scores on chip."
            )
    if result.phase == "decode" and mem_share > 0.5:
        weights_bound = any(p.bound == "memory" for p in proj)
        levers = (
            "batching, KV cache, lower precision, fused kernels"
            if weights_bound
            else "the projections already share each weight read across the batch: a smaller KV cache (GQA/MQA, "
            "a lower KV precision) and fused attention"
        )
        lines.append(
            f"Verdict: generation is memory-bound ({mem_share:.0%} of a step is memory-bound operators). Move fewer "
            f"bytes ({levers}); a GPU with more FLOP/s and the same bandwidth would not be faster."
        )
    elif result.phase == "decode" and mem:
        lines.append(
            f"Verdict: at batch {result.batch} a step is mostly compute ({1 - mem_share:.0%} of it compute-bound "
            "operators): more FLOP/s would help the projections, while attention's KV reads stay memory-bound."
        )
    return lines


def _decode_weights_line(result: RooflineResult, proj: list) -> str:
    """Decode's weight-reading operators against the ridge, by the same comparison the plot draws (an operator is
    compute-bound when its intensity reaches the ridge): below it each step streams the weights from memory, above
    it the step waits on FLOP/s."""
    if not proj:
        return ""
    ridge = result.ridge_ops_per_byte
    low, high = min(p.intensity for p in proj), max(p.intensity for p in proj)
    span = f"{high:.1f}" if round(low, 1) == round(high, 1) else f"{low:.1f}–{high:.1f}"
    head = (
        f"Decode multiplies one token per sequence by every weight: at batch {result.batch} the weight-reading "
        f"operators do {span} ops/byte against the ridge's {fmt_ridge(ridge)}"
    )
    above = [p for p in proj if p.bound == "compute"]
    if not above:
        return (
            f"{head}, below it, so each step streams all weights from memory. Batching raises their intensity "
            "(weights are read once for the whole batch) until it meets the ridge; lower precision (int8/int4) "
            "moves fewer bytes per step."
        )
    if len(above) == len(proj):
        return (
            f"{head}, above it, so they are compute-bound: the batch shares each weight read, and their steps wait "
            "on FLOP/s, not on streaming the weights; more batching no longer makes a step cheaper per token."
        )
    names = ", ".join(p.name for p in above)
    return (
        f"{head}: {names} pass the ridge (compute-bound), the rest still stream their weights from memory. "
        "Batching raises the rest until they meet the ridge too."
    )
