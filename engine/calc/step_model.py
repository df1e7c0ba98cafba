"""The per-step time model a serving simulator drives: how long one scheduler step takes on a GPU the machine does
not have, for an engine class fitted on published runs (engine.calc.efficiency), and the fixed cost a request pays
before its first token.

    step_time(setup, engine, decode_rows, context_tokens, prefill_tokens) -> Interval   seconds of one step
    step_parts(setup, engine, decode_rows, context_tokens, prefill_tokens) -> StepParts  its central value, in parts
    request_fixed_s(setup, engine) -> float                                                seconds per request

A step is one forward over `decode_rows` sequences decoding a token each (against `context_tokens` cached tokens
in all: KV bytes and attention FLOPs are linear in it) and `prefill_tokens` prompt tokens in the same forward
(chunked prefill); its central value uses the class's utilisation on the setup's GPU family, its interval the
residual band of published rows like it (engine.calc.cells), its bound every roof reached. Only the setup's
model, GPU, precision, weight format, KV precision and GPU count matter; its batch and lengths are ignored.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.calc.cells import gpu_family, regime_of
from engine.calc.efficiency import ClassFit, bound_efficiency, class_efficiency, fits
from engine.calc.observations import parallel
from engine.calc.timing import Efficiency, PhaseTime, Setup, step_inputs, step_seconds
from engine.core.interval import Interval


@dataclass(frozen=True)
class StepParts:
    """One step's central time in the parts a reader can weigh against each other (seconds)."""

    seconds: float  # the whole step: the sum of the three parts below
    roofs_s: float  # the operators at the class's fitted bandwidth and FLOP/s: the weights and KV cache read
    fixed_s: float  # what scales with neither bytes nor FLOPs: per-layer launches and all-reduce latencies
    transfer_s: float  # the all-reduces' bytes over the GPU link (and any pipeline hand-over)
    allreduces: int  # all-reduces in the step (2 per layer in tensor parallel, else 0)
    fixed_factor: float  # the factor on the fixed costs (engine.calc.anchor; 1: the fit's own)


def step_time(
    setup: Setup,
    engine: str,
    decode_rows: int,
    context_tokens: int,
    prefill_tokens: int,
    *,
    fixed_factor: float = 1.0,
) -> Interval:
    """Seconds of one scheduler step (central, interval, physical bound, rows behind the interval); `fixed_factor`:
    on the fixed costs, as a published run of the layout puts them (engine.calc.anchor), as the estimate takes it."""
    kw = {"decode_rows": decode_rows, "context_tokens": context_tokens, "prefill_tokens": prefill_tokens}
    fit, s, _, t = _central(setup, engine, fixed_factor, kw)
    bound = step_seconds(s, bound_efficiency(), **kw).seconds
    fixed = t.overhead_s + (t.seconds - t.memory_s - t.compute_s - t.overhead_s)
    regime = regime_of(fixed_s=fixed, memory_s=t.memory_s, compute_s=t.compute_s)
    kind = "decode" if not prefill_tokens else ("ttft" if not decode_rows else "throughput")
    band = fits().band(kind, (fit.engine_class, gpu_family(s.gpu), regime))
    return Interval(max(t.seconds * band.low, bound), t.seconds, t.seconds * band.high, bound, band.rows)


def _central(
    setup: Setup, engine: str, fixed_factor: float, kw: dict[str, int]
) -> tuple[ClassFit, Setup, Efficiency, PhaseTime]:
    """The class's fit, the setup as that class parallelises it, its efficiency (with `fixed_factor` on the fixed
    costs) and the step's central timing: what step_time and step_parts both read, so their parts add up to one."""
    fit = fits().for_engine(engine)
    s = parallel(setup, fit.engine_class)
    eff = class_efficiency(fit, s, fixed_factor=fixed_factor)
    return fit, s, eff, step_seconds(s, eff, **kw)


def step_parts(
    setup: Setup,
    engine: str,
    decode_rows: int,
    context_tokens: int,
    prefill_tokens: int,
    *,
    fixed_factor: float = 1.0,
) -> StepParts:
    """`step_time`'s central value in its parts: the same efficiency and the same operators, split into what reads
    bytes or does FLOPs, what is fixed per step, and what moves the all-reduces' bytes."""
    kw = {"decode_rows": decode_rows, "context_tokens": context_tokens, "prefill_tokens": prefill_tokens}
    _, s, eff, t = _central(setup, engine, fixed_factor, kw)
    allreduces = step_inputs(s, **kw)[3]
    latencies = allreduces * eff.allreduce_latency_s + (s.pipeline - 1) * eff.stage_hop_s
    # comm_s holds the latencies and the bytes' time: the bytes' time is what is left of it
    transfer = max(0.0, t.comm_s - latencies)
    return StepParts(
        t.seconds, t.memory_s + t.compute_s, t.overhead_s + latencies, transfer, allreduces, fixed_factor
    )


def request_fixed_s(setup: Setup, engine: str) -> float:
    """A request's fixed cost before its first token (tokenize, schedule, the first step's launch, detokenize,
    HTTP), fitted per engine class on published first-token rows, at the setup's GPU family."""
    fit = fits().for_engine(engine)
    return fit.efficiency(setup.gpu).request_fixed_s
