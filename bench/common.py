"""What every benchmark does the same way: write its result as JSON under bench/results/, named by kind and
machine, with the load average it ran under beside the figures."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from engine.core import paths
from engine.core.jsonsafe import to_jsonable
from engine.core.load import cores, loadavg

ROOT = Path(__file__).resolve().parents[1]
# Chromium flags for headless runs here (the browser tests and bench/load.py): no sandbox (root in a VM), no GPU,
# no background traffic to the network this machine does not have
CHROMIUM_ARGS = (
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
)


def stop_process(proc, timeout_s: float) -> None:
    """Ask a child process to end; kill it when it has not within timeout_s."""
    import subprocess

    proc.terminate()
    try:
        proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()


def lever_result(kind: str, args: Any, entries: list, load_before: tuple[float, ...]) -> dict:
    """The result of a lever benchmark (quant, speculate): its rows with the run's date, machine and load."""
    load_after = loadavg()
    print(f"load average before {load_before[0]:.1f}, after {load_after[0]:.1f} ({cores()} cores)")
    return {
        "benchmark": kind,
        "machine": paths.machine_id(),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "load_average_before": load_before,
        "load_average_after": load_after,
        "args": vars(args),
        "entries": entries,
    }


def write_result(kind: str, result: dict) -> Path:
    """bench/results/<kind>-<machine>.json (NaN written as null); prints where it went."""
    out = ROOT / "bench" / "results" / f"{kind}-{paths.machine_id()}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(to_jsonable(result), indent=2, allow_nan=False))
    print(f"wrote {out.relative_to(ROOT)}")
    return out


def lever_bench(kind: str, doc: str, spec_cls: Any, run: Any, cmd: Any, argv: list[str] | None) -> int:
    """A lever benchmark (quant, speculate): the experiment's own spec for flags, its run on the model it names with
    progress printed, the CLI's table, and bench/results/<kind>-<machine>.json with the load average."""
    import argparse

    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    spec_cls.add_arguments(p)
    args = p.parse_args(argv)
    spec = spec_cls.from_args(args)
    load_before = loadavg()
    report = run(spec.load(), spec, progress=lambda f, m: print(f"[{f:4.0%}] {m}", flush=True))
    entries = cmd.rows(report)
    print(cmd.format_text(entries))
    write_result(kind, lever_result(kind, args, entries, load_before))
    return 0
