"""One run's measurement, in base units. Shared by generation, the scheduler, the race, bench/ and pages.

Definitions (vLLM, benchmarks/benchmark_serving.py; the pages say the same; computed only by engine.runtime.metrics):
- TTFT: from the request entering the engine to the first generated token being available.
- TPOT: (latency - TTFT) / (output_tokens - 1), vLLM's definition: it excludes the first token, so it is
  the steady decode rate. Undefined (NaN) for a single-token output.
- latency: end to end, request to last token.
- tokens_per_s: output tokens (all sequences of a batch) / latency.
- decode_tokens_per_s: output tokens after the first step / (latency - TTFT), per sequence summed over the batch.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

# Who measured a run (Measurement.source) in a reader's words; a source not listed is "another tool".
SOURCE_WORDS = {
    "playground": "the Playground",
    "batching": "the Batching page",
    "lab": "the Few-shot, code and eval page",
    "race": "the Latency race",
    "calibration": "a calibration of this machine",
    "benchmark": "a benchmark script",
    "cli": "the command line",
    "server": "the Serving page's server",
}
NO_SOURCE = "older runs that did not record where they came from"


def sources_in_words(counts: dict[str, int]) -> str:
    """Run counts by source ({"playground": 27, "": 4}) as a reader says them: "27 from the Playground, 4 older
    runs that did not record where they came from"; sources not in SOURCE_WORDS are counted as another tool."""
    said: dict[str, int] = {}
    for source, n in counts.items():
        where = NO_SOURCE if not source else f"from {SOURCE_WORDS.get(source, 'another tool')}"
        said[where] = said.get(where, 0) + n
    return ", ".join(f"{n} {where}" for where, n in sorted(said.items(), key=lambda kv: (-kv[1], kv[0])))


@dataclass(frozen=True)
class Measurement:
    model: str
    dtype: str
    device: str
    batch_size: int
    prompt_tokens: int  # summed over the batch (without padding)
    output_tokens: int  # summed over the batch
    ttft_s: float
    tpot_s: float  # NaN when output_tokens per sequence <= 1
    latency_s: float
    tokens_per_s: float
    decode_tokens_per_s: float
    peak_memory_bytes: int
    peak_memory_kind: str  # "cuda max_memory_allocated" or "process RSS (CPU)"
    use_cache: bool
    started_at: str  # ISO 8601, UTC
    weights_bytes: int = 0  # bytes of parameters read per decode step (for achieved-bandwidth figures)
    queue_s: float = 0.0  # time spent waiting for the model before the run started (included in TTFT)
    params: int = 0
    max_new_tokens: int = 0
    source: str = ""  # who measured it: "playground", "batching", "calibration", "benchmark"; "" = not said
    stop_reason: str = ""  # "eos" | "stop" | "length" | "cancelled"; "" = not recorded (older log lines)
    # the 1-minute load average when the run ended and whether that made it busy (engine.core.load's one rule);
    # None: not recorded (older log lines, and runs logged without a run report)
    loadavg_1m: float | None = None
    busy: bool | None = None

    @property
    def comparable(self) -> bool:
        """A cancelled run's timing covers a run cut short by a person, not the shape it claims: keep it out of
        estimate-vs-measurement comparisons."""
        return self.stop_reason != "cancelled"

    @property
    def achieved_bytes_per_s(self) -> float:
        """Weights bytes x decode steps per second: a lower bound on the memory traffic of decode."""
        if not self.weights_bytes or not math.isfinite(self.tpot_s) or self.tpot_s <= 0:
            return math.nan
        return self.weights_bytes / self.tpot_s

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> Measurement:
        names = {f.name for f in dataclasses.fields(cls)}
        clean = {
            k: (math.nan if v is None and k in ("tpot_s",) else v) for k, v in data.items() if k in names
        }
        return cls(**clean)
