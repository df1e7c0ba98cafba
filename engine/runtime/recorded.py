"""Recorded decode measurements (bench/results): rows the pages show as recorded evidence, labelled with the
machine and date they were measured on, never as live; and the compiled-decode default each device earns from
them.

Two kinds of file are read: bench/decode.py's (`"benchmark": "decode"`, CPU or CUDA: one row per lane and
batch, with tokens/s, the fraction of the read bandwidth measured in the same run, a compiled lane's ratio to its
eager twin and greedy equality), and the first GPU check's scheduler file (`"kind": "scheduler-gpu"`, eager only,
dated and named by the gpu_check file of the same stamp).

The default of compiled decode (what a playground user gets without touching the switch): its compile is paid once
per model and server (25-65 s on a 2-core CPU), then every token is faster by the measured ratio. It is on where
the recorded measurement says the compile pays for itself within PAYBACK_TOKENS generated tokens, the tokens of a
short playground session; elsewhere the switch starts off, and says what it would cost and buy.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

RESULTS_DIR = Path(__file__).resolve().parents[2] / "bench" / "results"
# Sixteen runs of the playground's default 64 tokens: about a session's worth of generation. Compiled decode is on by
# default only where the compile is paid back within this many tokens.
PAYBACK_TOKENS = 1024
BATCH1_LANES = (
    "engine scheduler",
    "engine generate",
)  # the playground's single prompt goes through the scheduler


@dataclass(frozen=True)
class DecodeRow:
    source: str  # the result file's name
    date: str  # ISO date-time the run finished
    machine: str  # the GPU's name (and memory, driver) or the CPU's
    device: str  # "cuda" or "cpu"
    model: str
    dtype: str
    batch: int
    lane: str
    decode: str  # "plain", "eager" or "compiled"
    tokens_per_s: float
    fraction_of_read_bandwidth: float | None
    read_bandwidth_bytes_per_s: float | None
    x_eager: float | None  # a compiled lane's tokens/s over its eager twin's, measured in the same run
    greedy_equal: bool | None  # its greedy tokens equal plain generate's (None: not checked)
    compile_s: float | None  # a compiled lane's first run minus its typical run: the compile it paid once
    # the model's compile per graph in that run ((shape class, seconds): engine.runtime.compiled.shape_class)
    compile_shapes: tuple[tuple[str, float], ...] = ()


def _rows_from_decode(path: Path, data: dict) -> list[DecodeRow]:
    hw = data.get("hardware") or {}
    device = str(data.get("device") or "cpu").split(":")[0]
    machine = (hw.get("gpu") if device == "cuda" else hw.get("cpu")) or data.get("machine") or "?"
    bw = data.get("read_bandwidth_bytes_per_s")
    out = []
    for model in data.get("rows") or []:
        compile_s = model.get("compile_s") or {}
        shapes = tuple(sorted(((model.get("compile_status") or {}).get("compile_s") or {}).items()))
        for lane in model.get("lanes") or []:
            name = lane["lane"]
            out.append(
                DecodeRow(
                    source=path.name,
                    date=str(data.get("date", "")),
                    machine=str(machine),
                    device=device,
                    model=model["model"],
                    dtype=model["dtype"],
                    batch=int(lane["batch"]),
                    lane=name,
                    decode="plain" if name.startswith("plain") else lane.get("decode", "eager"),
                    tokens_per_s=float(lane["tokens_per_s"]),
                    fraction_of_read_bandwidth=lane.get("fraction_of_read_bandwidth"),
                    read_bandwidth_bytes_per_s=bw,
                    x_eager=lane.get("x_eager"),
                    greedy_equal=lane.get("greedy_equal_plain"),
                    compile_s=compile_s.get(name),
                    compile_shapes=shapes,
                )
            )
    return out


def _gpu_label(raw: str | None) -> str:
    """nvidia-smi's "name, memory.total, driver" ("NVIDIA H200, 143771 MiB, 580.159.04") in the app's units:
    "NVIDIA H200 (150.76 GB, driver 580.159.04)"; anything else as it is."""
    from engine.calc.format import gb

    m = re.fullmatch(r"\s*(.+?),\s*(\d+)\s*MiB,\s*(\S+)\s*", raw or "")
    if not m:
        return raw or ""
    return f"{m.group(1)} ({gb(int(m.group(2)) * 2**20)}, driver {m.group(3)})"


def _rows_from_scheduler_gpu(path: Path, data: dict) -> list[DecodeRow]:
    stamp = re.search(r"(\d{8}T\d{6}Z)", path.name)
    machine, date = "GPU (machine not recorded)", ""
    if stamp:
        check = path.with_name(f"gpu_check-{stamp.group(1)}.json")
        try:
            summary = json.loads(check.read_text(encoding="utf-8"))
            machine, date = _gpu_label(summary.get("gpu")) or machine, summary.get("date") or ""
        except (OSError, ValueError):
            pass
        date = date or f"{stamp.group(1)[:4]}-{stamp.group(1)[4:6]}-{stamp.group(1)[6:8]}"
    return [
        DecodeRow(
            source=path.name,
            date=date,
            machine=machine,
            device="cuda",
            model=data["model"],
            dtype=data["dtype"],
            batch=int(run["requests"]),
            lane="engine scheduler" if run["requests"] == 1 else f"engine scheduler, batch {run['requests']}",
            decode="eager",
            tokens_per_s=float(run["tokens_per_s"]),
            fraction_of_read_bandwidth=run.get("bandwidth_utilisation"),
            read_bandwidth_bytes_per_s=data.get("measured_read_bytes_per_s"),
            x_eager=None,
            greedy_equal=None,
            compile_s=None,
        )
        for run in data.get("runs") or []
    ]


def load_decode_rows(directory: Path | None = None, device: str | None = None) -> list[DecodeRow]:
    """Every recorded decode row (optionally of one device kind, "cpu" or "cuda"), newest file first; files that
    cannot be read are skipped."""
    rows: list[DecodeRow] = []
    for path in sorted(Path(directory or RESULTS_DIR).glob("*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            if not isinstance(data, dict):
                continue
            if data.get("benchmark") == "decode" and isinstance(
                (data.get("rows") or [{}])[0].get("lanes"), list
            ):
                rows += _rows_from_decode(path, data)
            elif data.get("kind") == "scheduler-gpu":
                rows += _rows_from_scheduler_gpu(path, data)
        except (OSError, ValueError, TypeError, KeyError):
            continue
    if device is not None:
        rows = [r for r in rows if r.device == device.split(":")[0]]
    return sorted(rows, key=lambda r: r.date, reverse=True)


def newest_run(rows: list[DecodeRow]) -> list[DecodeRow]:
    """The rows of the newest recorded file among `rows` (one run: one machine, one date)."""
    if not rows:
        return []
    newest = max(rows, key=lambda r: r.date).source
    return [r for r in rows if r.source == newest]


@dataclass(frozen=True)
class CompileAdvice:
    """Whether compiled decode starts on for a device, and the recorded numbers that decide it."""

    on: bool
    speedup: float | None = None  # compiled tokens/s over eager, batch 1, measured in one run
    compile_s: float | None = None
    payback_tokens: float | None = None  # tokens after which the compile is paid back
    model: str = ""
    machine: str = ""
    date: str = ""
    source: str = ""


def payback_tokens(eager_tokens_per_s: float, compiled_tokens_per_s: float, compile_s: float) -> float:
    """Generated tokens after which a one-time compile of `compile_s` is paid back by the faster steps:
    compile_s / (1/eager - 1/compiled). Infinite when compiled is not faster."""
    saved = 1 / eager_tokens_per_s - 1 / compiled_tokens_per_s
    return compile_s / saved if saved > 0 else math.inf


def playground_shape() -> str:
    """The graph a playground user's first compiled run compiles: one request in the shared scheduler, whose slot
    table has room for more than one row."""
    from engine.runtime.compiled import shape_class

    return shape_class(1, 2, False)


def compile_advice(device: str, model: str | None = None, directory: Path | None = None) -> CompileAdvice:
    """Compiled decode's default for `device` from the newest recorded bench/decode.py --compile run on that
    device kind (the same model's rows when recorded, else any model's): on when compiled is faster at batch 1 and
    its compile is paid back within PAYBACK_TOKENS tokens. The compile counted is the one the playground's path
    pays (`playground_shape`) where the run recorded it: a lane's own first run may have found its graph compiled
    already by an earlier lane."""
    rows = [r for r in load_decode_rows(directory, device) if r.batch == 1]
    if model and any(r.model == model for r in rows):
        rows = [r for r in rows if r.model == model]
    for eager_lane in BATCH1_LANES:
        pairs = [
            (e, c)
            for c in rows
            if c.lane == f"{eager_lane}, compiled" and c.decode == "compiled" and c.compile_s is not None
            for e in rows
            if e.lane == eager_lane and e.source == c.source and e.model == c.model
        ]
        if pairs:
            eager, comp = max(pairs, key=lambda p: p[1].date)
            compile_s = dict(comp.compile_shapes).get(playground_shape(), comp.compile_s)
            assert compile_s is not None
            speedup = comp.tokens_per_s / eager.tokens_per_s
            payback = payback_tokens(eager.tokens_per_s, comp.tokens_per_s, compile_s)
            return CompileAdvice(
                on=speedup > 1 and payback <= PAYBACK_TOKENS,
                speedup=speedup,
                compile_s=compile_s,
                payback_tokens=payback,
                model=comp.model,
                machine=comp.machine,
                date=comp.date,
                source=comp.source,
            )
    return CompileAdvice(on=False)
