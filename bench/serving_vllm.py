"""The engine's server against vLLM's (bench/serving.py --vllm): `python -m engine serve --backend vllm` (.venv-vllm
from scripts/make_vllm_env.sh) on the same model, precision, threads, KV space, max batch and workload, both
running, the runs interleaved level by level (engine.backends.compare); prints output tok/s, TTFT p50, ITL p50 and
TPOT p50 side by side with the ratios lab / vLLM against issue 32's targets, vLLM's KV line beside the calculator's,
and the calibrated calculator's prediction for this machine. Writes bench/results/serving-vllm-<machine>.json.
"""

from __future__ import annotations

import signal
import sys
from datetime import UTC, datetime

from bench.common import write_result
from bench.serving_common import loadavg, warm_up
from engine.calc.specs import GIB
from engine.core import load, paths
from engine.loadgen.workload import LoadSpec
from engine.serving.process import ServerProcess

# issue 32's targets, lab / vLLM: output throughput at least these at 1 / 4 / 8 users, ITL p50 at most ITL_TARGET at 4, 8
THROUGHPUT_TARGETS = {1.0: 0.8, 4.0: 0.6, 8.0: 0.6}
ITL_TARGET = 1.3


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x * 1e3:.0f}"


def _met(ratio: float | None, target: float | None, at_least: bool) -> str:
    if ratio is None or target is None:
        return ""
    ok = ratio >= target if at_least else ratio <= target
    return f" ({'>=' if at_least else '<='} {target:g}: {'met' if ok else 'not met'})"


def print_versus(out: dict) -> None:
    a = out["args"]
    print(
        f"lab server vs {out['vllm_build']}: {a['model']} {a['dtype']}, {out['threads']} compute thread(s) each, KV "
        f"{a['kv_gib']} GiB each, max batch {a['max_batch']}; {a['requests']} requests x {a['output_tokens']} tokens "
        f"per level; {a['rounds']} round(s) interleaved, medians"
    )
    print(
        f"{'users':>5} {'lab tok/s':>9} {'vLLM tok/s':>10} {'lab/vLLM':>9}{'':<22} {'TTFT p50 lab/vLLM':>18} "
        f"{'ITL p50 lab/vLLM':>17} {'ratio':>6}{'':<20} {'TPOT p50 lab/vLLM':>18}"
    )
    for r in out["table"]:
        u = r["users"]
        tput = r["lab / vllm output tok/s"]
        itl = r["lab / vllm ITL p50"]
        print(
            f"{u:>5g} {r['lab output tok/s'] or 0:>9.1f} {r['vllm output tok/s'] or 0:>10.1f} "
            f"{(tput or 0):>9.2f}{_met(tput, THROUGHPUT_TARGETS.get(u), True):<22} "
            f"{_ms(r['lab TTFT p50']) + ' / ' + _ms(r['vllm TTFT p50']) + ' ms':>18} "
            f"{_ms(r['lab ITL p50']) + ' / ' + _ms(r['vllm ITL p50']) + ' ms':>17} {(itl or 0):>6.2f}"
            f"{_met(itl, ITL_TARGET if u >= 4 else None, False):<20} "
            f"{_ms(r['lab TPOT p50']) + ' / ' + _ms(r['vllm TPOT p50']) + ' ms':>18}"
        )
    kv = out.get("vllm_kv")
    if kv:
        pred = kv.get("predicted") or {}
        print(
            f"vLLM logged: {kv['logged']['line']}; the calculator: {pred.get('kv_cache_tokens', 0):,} tokens, "
            f"{pred.get('max_concurrency', 0):.2f}x ({kv.get('tokens_off')} tokens off)"
        )
    calc = out.get("calculator")
    if calc:
        print(f"the calculator for this machine (calibrated on {calc['calibrated_on']}), 95% intervals:")
        for lv in calc["levels"]:
            t, p = lv["output_tokens_per_s"], lv["tpot_s"]
            print(
                f"{lv['users']:>5g} {t['central']:>9.1f} tok/s ({t['low']:.1f} to {t['high']:.1f}), TPOT "
                f"{p['central'] * 1e3:.0f} ms ({p['low'] * 1e3:.0f} to {p['high'] * 1e3:.0f})"
            )
    print(f"load average: start {out['loadavg_start']}, end {out['loadavg_end']}")
    print("  after each run: " + ", ".join(f"{n}@{lv:g}:{la:.1f}" for n, lv, _, la in out["loads"]))


# the sweep-and-cross-check mode's arguments, which a --vllm run does not use: recording them would read as if
# peers or a transformers server had run
UNUSED_ARGS = frozenset(
    {
        "peer",
        "peer_concurrency",
        "peer_requests",
        "peer_repeats",
        "no_sweep",
        "third_party",
        "slo_ttft",
        "slo_tpot",
    }
)


def calculator_beside(sbs, args) -> dict | None:
    """The calibrated calculator's throughput and TPOT for this machine at each level (engine.backends.compare
    predicted), None without a calibration."""
    from engine.backends.compare import predicted
    from engine.calibration import load_calibration, resolve_model_spec

    cal = load_calibration()
    if cal is None:
        return None
    preds = predicted(sbs, cal, resolve_model_spec(args.model), args.dtype, first="lab")
    return {
        "calibrated_on": f"{cal.model}, {cal.created_at}",
        "levels": [
            {
                "users": p.users,
                "prompt_tokens": p.prompt_tokens,
                "output_tokens_per_s": p.output_tokens_per_s.to_json(),
                "tpot_s": p.tpot_s.to_json(),
            }
            for p in preds
        ],
    }


def versus_vllm(args) -> None:
    """The engine's server and vLLM's on one workload, interleaved (engine.backends.compare)."""
    from engine.backends.compare import run_side_by_side
    from engine.backends.vllm import availability
    from engine.backends.vllm_records import kv_records
    from engine.backends.vllm_server import STOP_TIMEOUT_S, wait_command_ready

    build, why = availability()
    if build is None:
        raise SystemExit(why)
    # an outer `timeout` (or a closed shell) sends SIGTERM: exit through the finally below, which stops both servers
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    threads = args.threads or max(1, load.cores() - 1)  # the engine server's own rule, given to both
    common = (
        "--dtype",
        args.dtype,
        "--threads",
        str(threads),
        "--kv-budget-bytes",
        str(args.kv_gib * GIB),
    )
    out: dict = {
        "benchmark": "serving-vllm",
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": paths.machine_id(),
        "args": {k: v for k, v in vars(args).items() if k not in UNUSED_ARGS},
        "threads": threads,
        "vllm_build": build.label,
        "loadavg_start": loadavg(),
    }
    before = len(kv_records())
    lab = ServerProcess(args.model, max_batch=args.max_batch, extra=common)
    vllm = ServerProcess(
        args.model,
        max_batch=args.max_batch,
        extra=(*common, "--backend", "vllm", "--max-model-len", str(args.max_model_len)),
    )
    try:
        lab.wait_ready()
        wait_command_ready(vllm)  # its KV row is written by then
        rows = kv_records()
        out["vllm_kv"] = rows[-1] if len(rows) > before else None
        specs = {
            name: LoadSpec(
                base_url=srv.base_url,
                model=args.model,
                mode="concurrency",
                n_requests=args.requests,
                output_tokens=args.output_tokens,
            )
            for name, srv in (("lab", lab), ("vllm", vllm))
        }
        for spec in specs.values():
            warm_up(spec)
        levels = [float(x) for x in args.levels.split(",")]
        sbs = run_side_by_side(specs, levels, rounds=args.rounds)
    finally:
        vllm.stop(STOP_TIMEOUT_S + 10)
        lab.stop()
    out["table"] = sbs.rows()
    out["loads"] = list(sbs.loads)
    out["runs"] = {n: {str(lv): list(ms) for lv, ms in by.items()} for n, by in sbs.runs.items()}
    out["targets"] = {
        "throughput_lab_over_vllm_at_least": THROUGHPUT_TARGETS,
        "itl_p50_lab_over_vllm_at_most_at_4_and_8_users": ITL_TARGET,
    }
    out["calculator"] = calculator_beside(sbs, args)
    out["loadavg_end"] = loadavg()
    write_result("serving-vllm", out)
    print_versus(out)
