"""Synthetic objects for tests that must not depend on timing: one place to build them."""

from __future__ import annotations

from engine.runtime.measurement import Measurement


def synthetic_run(model: str, dtype: str, ttft_s: float, tpot_s: float, **fields) -> Measurement:
    """A batch-1 run of 40 prompt and 32 output tokens with the given TTFT and TPOT."""
    base = {
        "model": model,
        "dtype": dtype,
        "device": "cpu",
        "batch_size": 1,
        "prompt_tokens": 40,
        "output_tokens": 32,
        "ttft_s": ttft_s,
        "tpot_s": tpot_s,
        "latency_s": ttft_s + 31 * tpot_s,
        "tokens_per_s": 1.0,
        "decode_tokens_per_s": 1.0,
        "peak_memory_bytes": 1,
        "peak_memory_kind": "process RSS (CPU)",
        "use_cache": True,
        "started_at": "2026-11-29T10:00:00+00:00",
        # measured on a quiet machine unless a test says otherwise: the run log stamps a run that carries no load
        # with the load now, which on a busy test machine would make a comparison test depend on its neighbours
        "loadavg_1m": 0.5,
        "busy": False,
    }
    return Measurement(**{**base, **fields})


def tables_in_order(at) -> list:
    """The page's tables as drawn, dataframes and static tables alike, in page order (a table of verdicts is drawn
    static so its cells wrap: ui.widgets.split_dataframes)."""
    out: list = []

    def walk(node) -> None:
        children = getattr(node, "children", {})
        for k in sorted(children):
            child = children[k]
            if getattr(child, "type", "") in ("dataframe", "table"):
                out.append(child)
            walk(child)

    walk(at.main)
    return out
