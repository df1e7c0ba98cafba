"""The race's record: what one contender measured (ContenderResult) and the whole race (RaceResult).

Plain data only. Reading a worker's reply into a record is engine.race.process; JSON/CSV and the recorded
files are engine.race.serialise; running the race is engine.race.runner.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

SCHEMA = 2  # 2: peer engines (engine, engine_version, precision, conversion), bits per byte, peak RSS, drift

# The CLI's --json promises at least these per contender (scripts and checks read them); CSV columns follow this order.
SUMMARY_FIELDS = (
    "name",
    "label",
    "group",
    "status",
    "reason",
    "engine",
    "engine_version",
    "precision",
    "kernel_inject",
    "deepspeed_mode",
    "dtype",
    "device",
    "use_cache",
    "attn_implementation",
    "latency_s_median",
    "latency_s_q1",
    "latency_s_q3",
    "ttft_s_median",
    "tpot_s_median",
    "tokens_per_s_median",
    "output_tokens_median",
    "peak_memory_bytes",
    "peak_rss_bytes",
    "speedup_vs_vanilla",
    "speedup_low",
    "speedup_high",
    "interval_shown",
    "first_divergence_token",
    "exact_match_rate",
    "perplexity",
    "bits_per_byte",
    "conversion_s",
    "converted_now",
    "baseline_drift",
    "verdict",
    "runs",
    "python",
    "transformers",
    "deepspeed",
    "exit_code",
)


@dataclass
class ContenderResult:
    """One lane of the race: identity, what ran, the raw timed runs, their medians, and quality vs vanilla."""

    # identity: which lane, and what actually ran
    name: str
    label: str
    description: str
    status: str  # "ran" | "failed" | "skipped" | "crashed" | "timeout"
    reason: str = ""
    group: str = "levers"  # "engines" (whole inference engines) or "levers" (one change to vanilla)
    engine: str = "transformers"
    engine_version: str | None = None
    precision: str | None = None  # the peer's weight format (fp32, int8, int4); torch lanes: dtype
    kernel_inject: bool = False  # whether DeepSpeed's kernels were actually injected
    deepspeed_mode: str | None = None
    dtype: str | None = None
    device: str | None = None
    use_cache: bool = True
    attn_implementation: str | None = None
    python: str = ""
    notes: list[str] = field(default_factory=list)
    # raw timed runs (warm-ups dropped)
    latencies_s: list[float] = field(default_factory=list)
    ttfts_s: list[float] = field(default_factory=list)
    tpots_s: list[float] = field(default_factory=list)
    tokens_per_s: list[float] = field(default_factory=list)
    output_tokens: list[int] = field(default_factory=list)
    warmup_s: list[float] = field(default_factory=list)
    # summaries of the runs (engine.core.stats)
    latency_s_median: float = math.nan
    latency_s_q1: float = math.nan
    latency_s_q3: float = math.nan
    ttft_s_median: float = math.nan
    tpot_s_median: float = math.nan
    tokens_per_s_median: float = math.nan
    output_tokens_median: float = math.nan
    peak_memory_bytes: int | None = None
    peak_memory_kind: str = ""
    peak_rss_bytes: int | None = (
        None  # the worker process's peak resident set (VmHWM, its own: not the parent's), every lane
    )
    # against vanilla (engine.race.runner.compare)
    speedup_vs_vanilla: float = math.nan
    speedup_low: float = math.nan
    speedup_high: float = math.nan
    interval_shown: bool = False  # False: too few runs or no warm-up for an interval (engine.race.verdict)
    interval_note: str = ""
    baseline_drift: float | None = None  # vanilla's median latency at the end / at the start of the race
    first_divergence_token: int | None = (
        None  # None: identical to vanilla, or not comparable (see quality_note)
    )
    exact_match_rate: float = math.nan
    quality_note: str = ""
    perplexity: float | None = None
    bits_per_byte: float | None = None
    bits_per_byte_note: str = ""  # why there is none ("not exposed by ...")
    verdict: str = ""
    token_ids: list[list[int]] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    # peers: the offline conversion into the engine's own format
    conversion_s: float | None = None  # how long the conversion took (now or when it was cached)
    converted_now: bool | None = None  # True: converted in this race; False: taken from the model cache
    conversion_dir: str = ""
    # process facts
    versions: dict[str, Any] = field(default_factory=dict)
    load_s: float | None = None
    init_s: float | None = None
    wall_s: float | None = None
    exit_code: int | None = None
    stderr_tail: str = ""
    traceback: str = ""
    load_avg: tuple[float, float] | None = None  # 1-minute load average before and after the worker

    @property
    def ran(self) -> bool:
        return self.status == "ran"

    def summary(self) -> dict[str, Any]:
        row = {k: getattr(self, k) for k in SUMMARY_FIELDS if hasattr(self, k)}
        row["runs"] = len(self.latencies_s)
        row["transformers"] = self.versions.get("transformers")
        row["deepspeed"] = self.versions.get("deepspeed")
        return row


@dataclass
class RaceResult:
    model: str
    dtype: str
    device: str
    runs: int
    warmup: int
    max_new_tokens: int
    prompts: list[str]
    started_at: str
    finished_at: str = ""
    hardware: dict[str, Any] = field(default_factory=dict)
    contenders: list[ContenderResult] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    chat_template: bool | None = None  # None: each worker used the model's chat template if it has one
    baseline_recheck: ContenderResult | None = None  # vanilla again at the end: did the machine drift?
    winner: str = ""
    load_avg_start: tuple[float, float, float] | None = None
    kind: str = "race"
    schema: int = SCHEMA

    def summary_rows(self) -> list[dict[str, Any]]:
        return [c.summary() for c in self.contenders]
