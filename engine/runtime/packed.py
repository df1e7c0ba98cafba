"""Linear layers with their weights packed once for oneDNN, as a CPU serving engine keeps them.

A decode step on a CPU is a handful of matrix products per layer with few rows (one per running request) against
weights read from memory. Through nn.Linear, torch computes each with its BLAS on the [out, in] weight as stored,
and the product slows as rows join: SmolLM2-135M fp32, one thread, the model's own forward took 84 ms for 1 row and
155 ms for 8 (aten::mm 60 -> 114 ms of it, torch profiler), where vLLM's CPU build, whose linear layers run through
oneDNN, took 70 ms per token at 1 user and 71 ms at 8 on the same machine (bench/serving.py --vllm). oneDNN's
linear with the weight reordered once into its blocked layout for a batch of `rows` (what torch's inductor does
for frozen CPU weights: mkldnn._reorder_linear_weight and mkldnn._linear_pointwise) keeps a few-row product
bandwidth-bound: [8, 576] x [576, 1536] 0.33 -> 0.20 ms, and no slower for 1 row (0.11 -> 0.09 ms) or 64.

The products are the same sums in another order: logits differ in the last bits (about 1e-4 of a unit here), so
greedy tokens are checked against the unpacked model (tests/test_packed.py). The packed copy sits beside each
weight (the originals stay: a weight tied to the input embedding keeps serving it, and `.weight` reads as
before), so the linear layers' memory doubles. Only for a process that owns its model (the server's), on a CPU,
in fp32, for plain nn.Linear modules; a model shared by pages is never touched.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

ROWS_HINT = 8  # the scheduler's default max batch: the row count the layout is packed for (any count works)


@dataclass(frozen=True)
class PackReport:
    packed: int = 0  # linear layers now through oneDNN
    bytes: int = 0  # the packed copies' bytes (beside the originals)
    skipped: str = ""  # why nothing was packed

    def note(self) -> str:
        if self.skipped:
            return f"linear weights not packed: {self.skipped}"
        return f"{self.packed} linear layers packed for oneDNN ({self.bytes / 1e6:.0f} MB beside the weights)"


def why_not(model) -> str:
    """'' when the model's linear layers can be packed here, else why not (one clause)."""
    import torch

    if not torch.backends.mkldnn.is_available():
        return "this torch build has no oneDNN"
    p = next(model.parameters(), None)
    if p is None or p.device.type != "cpu":
        return "the model is not on the CPU"
    if p.dtype != torch.float32:
        return f"the model is {str(p.dtype).removeprefix('torch.')} (packed only in fp32)"
    return ""


def pack_linears(model, rows: int = ROWS_HINT) -> PackReport:
    """Route every fp32 CPU nn.Linear of `model` through oneDNN with its weight packed for `rows` rows (in place:
    each module's forward is replaced on the instance). Returns what was packed."""
    import torch
    from torch import nn

    why = why_not(model)
    if why:
        return PackReport(skipped=why)
    packed = nbytes = 0
    with torch.no_grad():
        for mod in model.modules():
            w = getattr(mod, "weight", None)
            if type(mod) is not nn.Linear or w is None or w.dtype != torch.float32 or w.device.type != "cpu":
                continue
            pw = torch.ops.mkldnn._reorder_linear_weight(w.detach(), max(1, int(rows)))
            bias = None if mod.bias is None else mod.bias.detach()
            mod.forward = partial(_packed_forward, pw, bias)
            packed += 1
            nbytes += pw.numel() * pw.element_size()
    return PackReport(packed, nbytes)


def _packed_forward(weight, bias, x):
    import torch

    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")
