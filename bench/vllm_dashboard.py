"""Does vLLM's Grafana "Overview" dashboard find its data on this engine's server? Starts `python -m engine serve`,
sends a few streamed requests, scrapes /metrics and checks every series the dashboard's queries read (the list
in tests/data/vllm_overview_dashboard_metrics.json, copied from vLLM's repository at the commit it names): served,
with the dashboard's metric type and the labels its queries filter or group on, and with samples.

    .venv/bin/python -m bench.vllm_dashboard [--model tiny-gpt-neo] [--requests 4]

Prints one row per series and writes bench/results/vllm-dashboard-<machine>.json.
"""

from __future__ import annotations

import argparse
import json

import httpx2 as httpx
from prometheus_client.parser import text_string_to_metric_families

from bench.common import ROOT, write_result
from engine.core.load import loadavg
from engine.loadgen.server_side import metrics_url
from engine.loadgen.sweep import _run_blocking
from engine.loadgen.workload import LoadSpec
from engine.serving.process import ServerProcess
from engine.serving.runner import ServeSpec

DASHBOARD = ROOT / "tests" / "data" / "vllm_overview_dashboard_metrics.json"


def check(want: dict, families: dict) -> dict:
    """One dashboard series against the scraped families: served / not exported (with the data file's reason)."""
    row = {"series": want["series"], "type": want["type"], "labels": want["labels"]}
    reason = want.get("not_applicable") or want.get("not_exported")
    fam = families.get(want["family"])
    if reason:
        return {**row, "verdict": "not exported (explained)", "why": reason, "served": fam is not None}
    if fam is None:
        return {**row, "verdict": "MISSING"}
    suffixes = ("_bucket", "_sum", "_count") if want["type"] == "histogram" else ("",)
    base = want["series"]
    seen = [s for s in fam.samples if s.name in {base + x for x in suffixes}]
    labelled = all(set(want["labels"]) <= set(s.labels) for s in seen)
    ok = fam.type == want["type"] and bool(seen) and labelled
    return {**row, "verdict": "served" if ok else "WRONG", "served_type": fam.type, "samples": len(seen)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ServeSpec.add_arguments(p, only=("model",), defaults={"model": "tiny-gpt-neo"})
    LoadSpec.add_arguments(p, only=("n_requests",), defaults={"n_requests": 4})
    args = p.parse_args(argv)
    data = json.loads(DASHBOARD.read_text())
    with ServerProcess(args.model) as srv:
        spec = LoadSpec(base_url=srv.base_url, model=args.model, mode="concurrency", concurrency=2,
                        n_requests=args.n_requests, output_tokens=8)  # fmt: skip
        records = _run_blocking(spec)
        text = httpx.get(metrics_url(srv.base_url), timeout=30).text
    families = {f.name: f for f in text_string_to_metric_families(text)}
    rows = [check(m, families) for m in data["metrics"]]
    for r in rows:
        print(f"{r['verdict']:<26} {r['type']:<9} {r['series']:<48} {','.join(r['labels'])}")
    served = sum(r["verdict"] == "served" for r in rows)
    bad = [r["series"] for r in rows if r["verdict"] in ("MISSING", "WRONG")]
    print(f"{served} of {len(rows)} dashboard series served; {len(rows) - served - len(bad)} not exported with a "
          f"reason; missing or wrong: {', '.join(bad) or 'none'} ({sum(r.ok for r in records)} requests sent)")  # fmt: skip
    write_result("vllm-dashboard", {
        "benchmark": "vllm-dashboard", "dashboard": data["source"], "model": args.model,
        "load_average": loadavg(), "rows": rows, "served": served, "missing_or_wrong": bad,
    })  # fmt: skip
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
