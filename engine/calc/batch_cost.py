"""Cost against batch: latency and $/M output tokens at batch 1, 2, 4, ... on the GPUs asked, the curve behind
"batching lowers the cost until memory runs out" (the Memory & cost page's chart). Each point is the calculator's
own answer (engine.calc.report: resolve, the one memory answer, the times at an efficiency) at that batch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from engine.calc.cost import estimate_cost
from engine.calc.efficiency import timing as timing_of
from engine.calc.report import Inputs, memory, resolve
from engine.calc.specs import GPUSpec, ModelSpec
from engine.calc.timing import DATASHEET, Efficiency


@dataclass(frozen=True)
class BatchPoint:
    batch: int
    fits: bool
    tokens_per_s: float
    decode_s_per_token: float
    generation_s: float
    usd_per_million_tokens: float  # on the GPUs asked, priced as if the batch fitted there


def batch_sweep(
    spec: ModelSpec,
    gpu: GPUSpec,
    inputs: Inputs,
    eff: Efficiency = DATASHEET,
    max_batch_: int = 4096,
) -> list[BatchPoint]:
    """Latency and $/M tokens on the GPUs asked at batch 1, 2, 4, ... up to `max_batch_` and two points past the
    fit limit, with every other input as given: the curve behind "batching lowers the cost until memory runs
    out". A point fits when the plan's one memory answer holds that batch on those GPUs; points past the limit
    are priced as if it did (the chart draws them hollow). `eff`: the asked estimate's (`efficiency_of`), so a
    calibrated or fitted efficiency is reused at every batch (an approximation for a calibration)."""
    i = inputs.resolved()
    points: list[BatchPoint] = []
    b = 1
    while b <= max_batch_:
        ib, setup = resolve(spec, gpu, replace(i, batch=b))
        fits = memory(setup, ib).fits
        t = timing_of(setup, eff)  # the GPUs asked, as if it fitted: the curve stays on one set of GPUs
        price = (
            estimate_cost(t.tokens_per_s, i.usd_per_gpu_hour, i.n_gpus).usd_per_million_tokens
            if i.usd_per_gpu_hour is not None
            else math.nan
        )
        points.append(BatchPoint(b, fits, t.tokens_per_s, t.decode_s_per_token, t.generation_s, price))
        if not fits and len([p for p in points if not p.fits]) >= 2:
            break
        b *= 2
    return points
