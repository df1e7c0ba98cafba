"""The weight layout of a model's linear layers on a CPU, chosen by measuring it.

nn.Linear stores its weight [out, in] and computes x @ W^T. On this project's reference CPU a one-token
product (decode: a matrix-vector product) through a wide-and-short weight streams its bytes much slower in that
layout than through the same weight stored transposed, [in, out] contiguous: SmolLM2's MLP up/gate weights
[1536, 576] 15 GB/s against 23, its 49152-row output layer 15 against 28 (bench/decode_probe.py), while its
narrow [192, 576] weights go the other way. Which layout wins depends on the BLAS, the cores and the shape,
so nothing here is assumed: for each distinct weight shape the model's own weights of that shape are timed
in both layouts (several passes, fastest kept), for one token (batch-1 decode) and for `BATCH_ROWS` tokens
(a batched decode step), and the transposed layout is kept if it wins by more than `MARGIN` for one token and
is no slower for a batch: SmolLM2's 49152-row output layer streams twice as fast transposed for one token but
is 35% slower for 8, so it stays as it is (see `keeps_transposed`). The change is the strides of the weight
tensor, nothing else: `weight` stays an [out, in] tensor (a transposed view of an [in, out] buffer), every
module's code is unchanged, the bytes are the same, and a weight tied to the input embedding (lm_head) keeps
serving both. The products are the same sums computed in another order, so logits may differ in the last
bits; the decode benchmark checks greedy tokens against the original layout.

Only plain floating-point weights on the CPU are considered; quantized tensors, CUDA weights and modules that
are not nn.Linear (GPT-2's Conv1D) are left alone.

Opt-in (INFERENCE_LAB_CPU_LAYOUT=1), not the default: transformers' `save_pretrained` and bitsandbytes'
quantization walk parameters with `tensor.view(-1)`, which a transposed-strided weight cannot give ("view size
is not compatible with input tensor's size and stride"; found by the test suite), and on this machine the rule
keeps nothing for the bundled model anyway. bench/decode.py --layout measures what it buys.
"""

from __future__ import annotations

import os
import time
from collections import defaultdict
from dataclasses import dataclass, field

MARGIN = 1.10  # the transposed layout must be this much faster to be kept (timing noise is a few percent)
PASSES = 5  # timed passes per layout; the fastest counts
BATCH_ROWS = 8  # the scheduler's default max batch: the batched step the layout must not slow down
MIN_GROUP_BYTES = 32 << 20  # time at least this many bytes per pass, so the weights stream from memory


@dataclass(frozen=True)
class ShapeChoice:
    shape: tuple[int, int]  # [out, in]
    weights: int  # how many of the model's weights have this shape
    linear_bytes_per_s: float  # nn.Linear's layout, one token, measured
    transposed_bytes_per_s: float  # [in, out] contiguous, one token, measured
    transposed: bool  # the layout kept
    batch_linear_s: float = 0.0  # seconds per weight for BATCH_ROWS tokens, nn.Linear's layout
    batch_transposed_s: float = 0.0  # the same, transposed


@dataclass(frozen=True)
class LayoutReport:
    choices: tuple[ShapeChoice, ...] = ()
    seconds: float = 0.0
    skipped: str = ""  # why nothing was measured, when nothing was
    changed: int = field(default=0)

    def note(self) -> str:
        """One line for the model's notes (the playground's footprint panel)."""
        if self.skipped:
            return f"weight layout: nn.Linear's ({self.skipped})"
        kept = [c for c in self.choices if c.transposed]
        if not kept:
            return (
                f"weight layout: nn.Linear's for all {sum(c.weights for c in self.choices)} linear weights "
                f"(the transposed layout was not {MARGIN - 1:.0%} faster for one token without slowing a batch of "
                f"{BATCH_ROWS}, for any shape; measured in {self.seconds:.1f} s)"
            )
        shapes = "; ".join(
            f"[{c.shape[0]}, {c.shape[1]}] x{c.weights} {c.linear_bytes_per_s / 1e9:.1f} -> "
            f"{c.transposed_bytes_per_s / 1e9:.1f} GB/s"
            for c in kept
        )
        return (
            f"weight layout: {self.changed} linear weights stored [in, out], measured faster for one-token "
            f"products on this CPU and no slower for {BATCH_ROWS} ({shapes}); measured in {self.seconds:.1f} s"
        )


def enabled() -> bool:
    """INFERENCE_LAB_CPU_LAYOUT=1 turns the measured layout on (see the module docstring for why it is off)."""
    return os.environ.get("INFERENCE_LAB_CPU_LAYOUT", "0").lower() in ("1", "true", "yes", "on")


def _plain(weight) -> bool:
    import torch

    return (
        type(weight.data) is torch.Tensor
        and weight.device.type == "cpu"
        and weight.dtype in (torch.float32, torch.bfloat16, torch.float16)
        and weight.dim() == 2
        and weight.is_contiguous()
    )


def _pass_s(x, weights) -> float:
    """Seconds for one token through every weight in `weights`: the fastest of PASSES passes."""
    import torch.nn.functional as F

    for w in weights[:2]:
        F.linear(x, w)
    best = float("inf")
    for _ in range(PASSES):
        t0 = time.perf_counter()
        for w in weights:
            F.linear(x, w)
        best = min(best, time.perf_counter() - t0)
    return best


def keeps_transposed(
    linear_s: float, transposed_s: float, batch_linear_s: float, batch_transposed_s: float
) -> bool:
    """The rule: faster by more than MARGIN for one token, and no slower for BATCH_ROWS tokens. No tolerance on
    the batch side: SmolLM2's [1536, 576] weights are 1.4x faster transposed for one token but 2-4% slower
    for 8, and bench/batching.py measured its in-flight throughput 9% lower with them transposed."""
    return linear_s > MARGIN * transposed_s and batch_transposed_s <= batch_linear_s


def transposed(weight):
    """The same values, stored [in, out] contiguous, seen as [out, in]."""
    return weight.detach().t().contiguous().t()


def optimize(model) -> LayoutReport:
    """Measure and set the faster layout for each shape of `model`'s nn.Linear weights (in place)."""
    import torch

    if not enabled():
        return LayoutReport(skipped="INFERENCE_LAB_CPU_LAYOUT is not 1")
    t0 = time.perf_counter()
    # Each distinct weight once (a tied lm_head is the embedding's tensor); remember every owner to re-point.
    owners: dict[int, list[tuple[torch.nn.Module, str]]] = defaultdict(list)
    params: dict[int, torch.nn.Parameter] = {}
    for mod in model.modules():
        for name, p in mod.named_parameters(recurse=False):
            owners[id(p)].append((mod, name))
            params[id(p)] = p
    linear_ids = {
        id(m.weight) for m in model.modules() if isinstance(m, torch.nn.Linear) and _plain(m.weight)
    }
    if not linear_ids:
        return LayoutReport(skipped="no plain CPU nn.Linear weights")
    groups: dict[tuple, list[int]] = defaultdict(list)
    for pid in linear_ids:
        p = params[pid]
        groups[(tuple(p.shape), p.dtype)].append(pid)

    def set_weight(pid: int, tensor) -> None:
        new = torch.nn.Parameter(tensor, requires_grad=False)
        for mod, name in owners[pid]:
            setattr(mod, name, new)
        params[pid] = new

    choices, changed = [], 0
    with torch.no_grad():  # not inference_mode: the kept tensors become the model's parameters
        for (shape, dtype), ids in sorted(groups.items(), key=lambda kv: kv[0][0]):
            nbytes = shape[0] * shape[1] * params[ids[0]].element_size()
            x = torch.randn(1, shape[1], dtype=dtype)
            xb = torch.randn(BATCH_ROWS, shape[1], dtype=dtype)
            # Time about MIN_GROUP_BYTES per pass, enough to stream from memory rather than cache: the model's
            # own weights of this shape (as few as that takes, so a large model's load stays quick), repeated
            # when they are fewer bytes than that.
            sample = ids[: max(1, -(-MIN_GROUP_BYTES // nbytes))]
            reps = max(1, -(-MIN_GROUP_BYTES // (nbytes * len(sample))))
            linear = [params[i].detach() for i in sample] * reps
            trial = [transposed(params[i]) for i in sample]
            linear_s, transposed_s = _pass_s(x, linear), _pass_s(x, trial * reps)
            batch_linear_s, batch_transposed_s = _pass_s(xb, linear), _pass_s(xb, trial * reps)
            total = nbytes * len(linear)
            keep = keeps_transposed(linear_s, transposed_s, batch_linear_s, batch_transposed_s)
            if keep:
                for pid, t in zip(sample, trial, strict=True):
                    set_weight(pid, t)
                for pid in ids[len(sample) :]:
                    set_weight(pid, transposed(params[pid]))
                changed += len(ids)
            del trial
            choices.append(
                ShapeChoice(
                    shape,
                    len(ids),
                    total / linear_s,
                    total / transposed_s,
                    keep,
                    batch_linear_s / len(linear),
                    batch_transposed_s / len(linear),
                )
            )
    return LayoutReport(tuple(choices), time.perf_counter() - t0, changed=changed)
