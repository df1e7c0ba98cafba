"""The simulator against published serving sweeps (engine/data/published/serving_sweeps.toml): each row's setup
(model config, GPU, engine, concurrency, request count, mean prompt and output lengths) simulated, its output
throughput beside the published one. The issue's target: median |error| <= 20% (bench/simulate.py prints it).

The rows' lengths are ShareGPT's, which vary widely around their means; the simulator sends the means. That, and
the engine class's fit on other GPUs (engine.calc.efficiency), is what the error measures.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import cache

from engine.calc.hf_config import spec_from_hf_config
from engine.calc.published import PUBLISHED_DIR, configs
from engine.core.interval import Interval
from engine.core.stats import median
from engine.loadgen.workload import SLO
from engine.simulate.spec import SimulateSpec
from engine.simulate.sweep import deployment, simulate

SWEEPS_FILE = PUBLISHED_DIR / "serving_sweeps.toml"


@dataclass(frozen=True)
class SweepRow:
    id: str
    model: str
    config_model: str
    gpu_key: str
    tensor_parallel: int
    dtype: str
    engine: str
    engine_version: str
    concurrency: int
    num_prompts: int
    prompt_tokens: int  # mean per request
    output_tokens: int
    value: float  # output tokens/s
    source: str
    quote: str
    notes: str


@cache
def sweep_rows() -> tuple[SweepRow, ...]:
    with SWEEPS_FILE.open("rb") as f:
        raw = tomllib.load(f)["row"]
    return tuple(
        SweepRow(
            id=r["id"],
            model=r["model"],
            config_model=r["config_model"],
            gpu_key=r["gpu_key"],
            tensor_parallel=int(r.get("tensor_parallel", 1)),
            dtype=r["dtype"],
            engine=r["engine"],
            engine_version=str(r.get("engine_version", "")),
            concurrency=int(r["concurrency"]),
            num_prompts=int(r["num_prompts"]),
            prompt_tokens=round(r["prompt_tokens_total"] / r["num_prompts"]),
            output_tokens=round(r["output_tokens_total"] / r["num_prompts"]),
            value=float(r["value"]),
            source=r["source"],
            quote=r["quote"],
            notes=r.get("notes", ""),
        )
        for r in raw
    )


@dataclass(frozen=True)
class RowCheck:
    row: SweepRow
    predicted: Interval  # output tokens/s, over the step-time interval

    @property
    def error(self) -> float:
        """predicted / published - 1."""
        return self.predicted.central / self.row.value - 1

    @property
    def inside(self) -> bool:
        return self.predicted.covers(self.row.value)


def simulate_row(row: SweepRow) -> RowCheck:
    spec = SimulateSpec(
        model=row.model,
        gpu=row.gpu_key,
        n_gpus=row.tensor_parallel,
        dtype=row.dtype,
        engine=row.engine,
        mode="concurrency",
        start="together",  # a benchmark's clients start at once (vllm bench serve --max-concurrency)
        sweep=str(row.concurrency),
        n_requests=row.num_prompts,
        prompt_tokens=row.prompt_tokens,
        output_tokens=row.output_tokens,
    ).validate()
    model = spec_from_hf_config(configs()[row.config_model], name=row.model)
    out = simulate(spec, SLO(ttft_s=None, tpot_s=None), deploy=deployment(spec, model))
    return RowCheck(row, out.intervals()[0]["output_tokens_per_s"])


def check_all() -> tuple[list[RowCheck], dict]:
    """Every row simulated; a summary: rows, median and worst |error|, share inside the interval."""
    checks = [simulate_row(r) for r in sweep_rows()]
    errors = [abs(c.error) for c in checks]
    summary = {
        "rows": len(checks),
        "sources": len({c.row.source.split("@")[0] for c in checks}),
        "median_abs_error": median(errors),
        "worst_abs_error": max(errors),
        "inside": sum(c.inside for c in checks) / len(checks),
        "target": "median |error| <= 20% (issue 31)",
        "met": median(errors) <= 0.20,
    }
    return checks, summary
