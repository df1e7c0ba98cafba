"""Fixed per-step costs anchored to a published run of the same layer layout.

An engine class's per-layer overhead and all-reduce latency are fitted on the runs it has, for vLLM runs of
7B-class models; for a deeper model in tensor parallel they count too much time per step (Llama-3.1-70B on 4 x H100
with vLLM: 43.8 ms for one user estimated, 23.6 ms per output token measured under a load). Where a published time
per output token of a model with the same layers, width and heads, on as many GPUs in tensor parallel, by an engine
of the same class, in 16-bit weights, lies below the estimate's one-user interval, the step's fixed costs (those
two: what scales with neither bytes nor FLOPs) are multiplied by

    g = (published TPOT - the step's byte, FLOP and transfer time) / the step's fixed time,   within [0, 1]

at that run's own GPU and lengths, and the same g applies to that layout on any GPU: the fixed costs are the
software's and the collectives' launch, not the memory's. Where no run of the layout was published at the setup's
own tensor-parallel size, the run at the nearest size (by ratio) sets g, and the words say so: g scales the fit's
per-layer launch and per-all-reduce latency, which the fit already counts for each size, so one engine's correction
carries across sizes as it does across GPUs. Without that, a 70B layout anchored at 4 GPUs only ran slower on 8 than
on 4 (38.1 against 25.1 ms per token on H100s with vLLM), because 8 kept the fit's costs that the run on 4 cut.
What this takes on trust: the anchor is the newest engines' (vLLM 0.6 and SGLang 0.3 on 4 x H100, 2024). The 2023
runs of the same layout on A100s (vLLM 0.1-0.2: 65.5, 56.7 and 69.8 ms for one user on 2, 4 and 8 GPUs) lie inside
or above the fit's interval, slower than the anchored estimate (54.0, 34.0 and 24.0 ms): an older engine's costs,
which the fit averages in and the anchor sets aside. A TPOT measured under load is at least one user's, so
the anchored step is still no quicker than that run. The estimate, the simulator and the answers built on them
read one g (`fixed_factor`); the track record never does, so no row is scored against its own anchor.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import cache

from engine.calc import published
from engine.calc.cells import gpu_vendor
from engine.calc.efficiency import estimate_speed, fits
from engine.calc.observations import setup_of
from engine.calc.seen import TPOT_METRICS, _load, _width
from engine.calc.specs import ModelSpec
from engine.calc.timing import Setup, timing_from, timing_inputs


@dataclass(frozen=True)
class Anchor:
    factor: float  # g: the fitted fixed costs x g
    tpot_s: float  # the published run's time per output token
    estimate_s: float  # the estimate's one-user TPOT for that run's setup, before the anchor
    model: str  # the run's model, as the source names it
    gpu: str  # its GPUs, in words
    load: str  # the load it was measured under
    engine: str  # the engine and version, as the source names them
    row_id: str
    run_tp: int  # the run's tensor-parallel size
    tp: int  # the size it is applied to (the setup's); another when no run of the layout has the setup's own

    def to_json(self) -> dict:
        return {"factor": self.factor, "run": self.row_id, "tpot_s": self.tpot_s, "model": self.model,
                "run_gpus": self.run_tp, "words": self.words()}  # fmt: skip

    def words(self) -> str:
        """The anchor in one clause: what was measured, and what the estimate makes of it."""
        return (
            f"a published run of {self.model} on {self.gpu} measured {self.tpot_s * 1e3:.1f} ms per output token "
            f"under {self.load} ({self.engine}) where the calculator's own fit says {self.estimate_s * 1e3:.1f} ms "
            f"for one user, so its per-layer and all-reduce costs are taken at {self.factor:.2f}x the fit's for a "
            + (
                "model of these layers on this many GPUs"
                if self.run_tp == self.tp
                else f"model of these layers, on {self.tp} GPUs as on the run's {self.run_tp} (no run of this layout "
                f"on {self.tp} GPUs was published; the factor is the engine's, on costs the fit counts for each size)"
            )
        )


def _layout(spec: ModelSpec) -> tuple[int, int, int, int]:
    """What the fixed costs of a step depend on: layers (a per-layer cost each, two all-reduces each in tensor
    parallel), the width and the heads (the shape of every kernel launched)."""
    return (spec.n_layer, spec.hidden, spec.n_head, spec.n_kv_head)


def fixed_factor(setup: Setup, engine_class: str, engine: str | None = None) -> float:
    """The factor on the setup's fixed costs: its anchor's, else 1 (the fit's own)."""
    a = anchor_for(setup, engine_class, engine)
    return a.factor if a is not None else 1.0


def anchor_for(setup: Setup, engine_class: str, engine: str | None = None) -> Anchor | None:
    """The setup's anchor for `engine` (a key of efficiency.ENGINES) of `engine_class`: a run of that engine itself
    where one qualifies (a vLLM answer anchored to an SGLang run was read as one engine's figures set by another's),
    else one of its class, the words saying which."""
    if not _anchorable(setup):
        return None
    layout, width, vendor = _layout(setup.spec), _width(setup.dtype), gpu_vendor(setup.gpu)
    if engine is not None:
        own = _anchor(layout, setup.n_gpus, engine_class, width, vendor, engine)
        if own is not None:
            return own
    return _anchor(layout, setup.n_gpus, engine_class, width, vendor)


@cache
def _anchor(
    layout: tuple[int, int, int, int],
    tp: int,
    engine_class: str,
    width: str,
    vendor: str,
    engine: str | None = None,
) -> Anchor | None:
    """The published runs of this layout on GPUs of `vendor` (an NVIDIA run does not set an AMD GPU's fixed costs:
    another stack launches its kernels and collectives) below the estimate's one-user interval (by `engine` alone
    where given),
    at this tensor-parallel size if any was published, else at the nearest (by ratio: 4 is as near to 8 as to 2);
    of those, the one that asks the smallest correction (the largest g)."""
    fit = fits().classes.get(engine_class)
    if fit is None:
        return None
    found: list[tuple[float, Anchor]] = []
    for r, s in _multi_gpu_runs(engine_class):
        if engine is not None and r.engine != engine:
            continue
        if r.tensor_parallel != r.gpu_count or r.calc_format is not None or _width(r.dtype) != width:
            continue
        scale = TPOT_METRICS[r.metric]
        if scale is None and not (r.batch <= 1 and r.batch_kind in ("batch", "concurrency")):
            continue  # a rate under load is not one user's time per token
        if s.pipeline != 1 or _layout(s.spec) != layout or r.value <= 0:
            continue
        if gpu_vendor(s.gpu) != vendor:
            continue
        tpot = r.value * scale if scale is not None else 1.0 / r.value
        one = replace(s, batch=1)
        est = estimate_speed(one, fit.engine_class).tpot_s
        if not (math.isfinite(est.low) and tpot < est.low):
            continue
        eff, inputs = fit.efficiency(one.gpu), timing_inputs(one)
        step = timing_from(inputs, eff).decode_step
        fixed = step.overhead_s + inputs.allreduces * eff.allreduce_latency_s
        if fixed <= 0:
            continue
        g = min(1.0, max(0.0, (tpot - (step.seconds - fixed)) / fixed))
        gpus, version = f"{r.gpu_count} x {one.gpu.name}", f"{r.engine} {r.engine_version}"
        a = Anchor(g, tpot, est.central, r.model, gpus, _load(r), version, r.id, r.gpu_count, tp)
        found.append((abs(math.log2(r.gpu_count / tp)), a))
    if not found:
        return None
    nearest = min(d for d, _ in found)
    return max((a for d, a in found if d == nearest), key=lambda a: a.factor)


def other_layouts(setup: Setup, engine_class: str) -> tuple[Anchor, ...]:
    """The engine class's anchors at other layouts on GPUs of the setup's vendor, for a tensor-parallel setup that
    has none of its own: the runs that found the fit's fixed costs too slow elsewhere (an engineer's walk: Qwen2.5-7B
    on 2 GPUs rested on a published run and scaled 106 -> 142 tok/s, Llama-3.1-8B did not and ran slower on 2 GPUs
    than on 1, with nothing said). Each at the setup's own size where published, else the nearest."""
    if not _anchorable(setup):
        return ()
    own, width, vendor = _layout(setup.spec), _width(setup.dtype), gpu_vendor(setup.gpu)
    layouts = sorted({_layout(s.spec) for _, s in _multi_gpu_runs(engine_class)} - {own})
    found = (_anchor(layout, setup.n_gpus, engine_class, width, vendor) for layout in layouts)
    return tuple(a for a in found if a is not None)


def _anchorable(setup: Setup) -> bool:
    """A setup whose fixed costs a run can anchor: tensor parallel over several GPUs, plain 16-bit weights."""
    return setup.pipeline == 1 and setup.n_gpus > 1 and setup.weight_format is None


@cache
def _multi_gpu_runs(engine_class: str) -> tuple[tuple[published.PublishedRow, Setup], ...]:
    """The class's published times per output token on several GPUs, each with the setup the calculator times it
    at (rows it cannot time left out): read once, where every estimate of a tensor-parallel plan asked for them."""
    runs = []
    for r in published.rows():
        if (
            r.kind != "speed"
            or r.metric not in TPOT_METRICS
            or r.engine_class != engine_class
            or r.gpu_count < 2
        ):
            continue
        s = setup_of(r)
        if not isinstance(s, str):
            runs.append((r, s))
    return tuple(runs)
