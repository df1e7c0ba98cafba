"""The engine's OpenAI-compatible server under load: start it as a subprocess, sweep the number of users with the
load generator, find the knee under the SLOs, put the calculator's max-users prediction beside it, and
cross-check the load generator against GuideLLM (vLLM project) and AIPerf (NVIDIA) on the same server and workload.

    .venv/bin/python bench/serving.py [--model smollm2-135m-instruct] [--levels 1,2,4,8] [--requests 16]
                                      [--output-tokens 32] [--slo-ttft 2] [--slo-tpot 0.2]
                                      [--peer guidellm,aiperf|none] [--peer-concurrency 4] [--peer-requests 32]
                                      [--peer-repeats 2] [--no-sweep] [--label NAME]

    .venv/bin/python bench/serving.py --vllm [--levels 1,4,8] [--rounds 2] [--dtype fp32] [--threads 1]

--vllm: the engine's server against vLLM's (`python -m engine serve --backend vllm`, .venv-vllm from
scripts/make_vllm_env.sh) on the same model, precision, threads, KV space, max batch and workload, both running,
the runs interleaved level by level (engine.backends.compare); prints output tok/s, TTFT p50, ITL p50 and TPOT p50
side by side with the ratios lab / vLLM against issue 32's targets, and vLLM's KV line beside the calculator's.
Writes bench/results/serving-vllm-<machine>.json.

The peers need `bash scripts/make_guidellm_env.sh` and `bash scripts/make_aiperf_env.sh` (side venvs; their pins
differ from the main ones). Cross-check protocol: the same n prompts in the same order (ours' seeded plan of the
shipped prompts, written in each peer's file format with its output length), the chat endpoint, `ignore_eos`, the
server's default temperature, the same concurrency and request count, tokens counted from the server's usage.
Runs interleave (ours, GuideLLM, AIPerf, ours, ...) and the medians are compared as ratios peer / ours, so drift on
a shared machine hits all. Side by side: output tokens/s, p50 TTFT, and p50 ITL as both peers define it (per
request, (E2E - TTFT) / (tokens - 1): ours' TPOT; ours' pooled chunk gaps are kept beside it). Writes
bench/results/serving[-label]-<machine>.json; prints loadavg beside every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import stop_process  # noqa: E402
from engine.calc import capacity  # noqa: E402
from engine.calc.specs import model_preset  # noqa: E402
from engine.core import (  # noqa: E402
    load,
    paths,
    stats,
)
from engine.loadgen.server_side import fetch_timings  # noqa: E402
from engine.loadgen.sweep import run_once, run_sweep, to_json  # noqa: E402
from engine.loadgen.workload import SLO, LoadSpec, plan  # noqa: E402
from engine.runtime.models import PRESETS  # noqa: E402
from engine.serving.process import ServerProcess  # noqa: E402


def loadavg() -> str:
    """The 1-, 5- and 15-minute load averages as the result files have always written them ("0.52 0.61 0.70")."""
    return " ".join(f"{x:.2f}" for x in load.loadavg())


def prediction(model: str, dtype: str, sweep, slo: SLO, slots: int) -> dict | None:
    """The calculator's max users within the TPOT objective, bandwidth calibrated at the lowest level."""
    preset = PRESETS.get(model)  # the one model -> calculator table (engine/data/presets.toml)
    key = preset.calculator if preset is not None else None
    first = sweep.points[0] if sweep.points else None
    if key is None or first is None or not first.tpot_s.p50 or slo.tpot_s is None:
        return None
    # the lowest level's TPOT calibrates the bandwidth (the rule's only free number): the page's prediction
    run = capacity.predict_from_run(
        model_preset(key),
        dtype,
        first.prompt_tokens_median,
        sweep.spec.output_tokens,
        first.tpot_s.p50,
        slo.tpot_s,
        slots,
    )
    pred = run.prediction
    return {
        "calc_spec": key,
        "dtype": dtype,
        "context_tokens": run.context_tokens,
        "calibrated_at_users": first.level,
        "bandwidth_bytes_per_s": pred.bandwidth_bytes_per_s,
        "max_users": pred.max_users,
        "limited_by": pred.limited_by,
        "tpot_s_by_users": pred.tpot_s_by_users,
    }


def tokenizer_dir(model: str) -> Path:
    """GuideLLM counts prompt tokens with a Hugging Face tokenizer: the model's cached folder (tiny-gpt-neo
    borrows the bundled SmolLM2's tokenizer, so it uses that one)."""
    own = paths.models_dir() / model
    return own if (own / "tokenizer.json").exists() else paths.models_dir() / "smollm2-135m-instruct"


def _peer_env() -> dict[str, str]:
    """The peers' environment: their tokenizers load the bundled model's folder by path. HF_HUB_OFFLINE is left
    out: AIPerf 0.13's offline branch treats any name as a hub repo id and fails on a path ('Repo id must be in
    the form repo_name or namespace/repo_name'); without it, a local folder is read as a folder and nothing is
    fetched (the machine has no hub access anyway)."""
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    return {**env, "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}


def _run_peer(name: str, cmd: list[str], cwd: Path) -> None:
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=_peer_env(), cwd=cwd)
    if r.returncode != 0:
        tail = [line for line in (r.stderr or r.stdout).splitlines() if line.strip()][-12:]
        raise RuntimeError(f"{name} failed ({r.returncode}): " + " | ".join(tail))


@dataclass(frozen=True)
class PeerWorkload:
    root_url: str
    model: str
    concurrency: int
    n: int
    guidellm_data: Path
    aiperf_data: Path


def guidellm_run(w: PeerWorkload, out: Path) -> dict:
    cmd = [
        str(PEERS["guidellm"]),
        "run",
        "--backend",
        f"kind=openai_http,target={w.root_url},model={w.model}",
        "--profile",
        f"kind=concurrent,streams={w.concurrency}",
        "--constraint",
        f"kind=max_requests,count={w.n}",
        "--data",
        f"kind=json_file,path={w.guidellm_data}",
        "--tokenizer",
        f"kind=huggingface_auto,model={tokenizer_dir(w.model)}",
        "--output",
        f"kind=json,path={out}",
        "--disable-progress",
        "--disable-console",
    ]
    _run_peer("guidellm", cmd, out.parent)
    m = json.loads(out.read_text())["benchmarks"][0]["metrics"]

    def p50(name: str) -> float:
        return m[name]["successful"]["median"] / 1e3  # ms -> s

    return {
        "ttft_s_p50": p50("time_to_first_token_ms"),
        "itl_s_p50": p50("inter_token_latency_ms"),  # per request: (E2E - TTFT) / (tokens - 1)
        "completed": m["request_totals"]["successful"],
        "output_tokens_per_s": m["output_tokens_per_second"]["successful"]["mean"],
    }


def aiperf_run(w: PeerWorkload, out: Path) -> dict:
    cmd = [
        str(PEERS["aiperf"]),
        "profile",
        "--model",
        w.model,
        "--url",
        w.root_url,
        "--endpoint-type",
        "chat",
        "--streaming",
        "--input-file",
        str(w.aiperf_data),
        "--custom-dataset-type",
        "single_turn",
        "--extra-inputs",
        "ignore_eos:true",
        "--use-legacy-max-tokens",  # max_tokens, as ours and GuideLLM send
        "--use-server-token-count",  # the server's usage, as ours counts
        "--tokenizer",
        str(tokenizer_dir(w.model)),
        "--concurrency",
        str(w.concurrency),
        "--request-count",
        str(w.n),
        "--output-artifact-dir",
        str(out),
        "--ui-type",
        "none",
        "--no-gpu-telemetry",
        "--no-server-metrics",
        "--workers-max",
        "1",
    ]
    _run_peer("aiperf", cmd, out.parent)
    d = json.loads((out / "profile_export_aiperf.json").read_text())
    return {
        "ttft_s_p50": d["time_to_first_token"]["p50"] / 1e3,
        "itl_s_p50": d["inter_token_latency"]["p50"] / 1e3,  # per request: (E2E - TTFT) / (tokens - 1)
        "completed": int(d["request_count"]["avg"]),
        "output_tokens_per_s": d["output_token_throughput"]["avg"],  # output tokens / benchmark duration
    }


PEERS = {
    "guidellm": ROOT / ".venv-guidellm" / "bin" / "guidellm",
    "aiperf": ROOT / ".venv-aiperf" / "bin" / "aiperf",
}
PEER_RUNS = {"guidellm": guidellm_run, "aiperf": aiperf_run}
PEER_VERSIONS = {"guidellm": "guidellm 0.8.1", "aiperf": "aiperf 0.13.0"}
COMPARED = (  # (key, words): ours' TPOT p50 is the per-request quantity both peers call ITL
    ("output_tokens_per_s", "throughput (output tok/s)"),
    ("ttft_s_p50", "TTFT p50"),
    ("itl_s_p50", "ITL p50 (per request)"),
)
AGREEMENT = 0.10  # the target: within 10% of ours


def _median(runs: list[dict], key: str) -> float | None:
    vals = [r[key] for r in runs if r.get(key) is not None]
    return stats.median(vals) if vals else None


def server_view(base_url: str, n: int) -> dict:
    """The server's own timings of the last n requests (this engine keeps them: GET /v1/requests/timings): p50 of
    its TTFT (request received -> first chunk written), queue and prefill. The same for every tool, so where the
    tools' client TTFTs differ, this says whether the server served their requests differently (their arrival
    timing) or the clients measured differently (their own overhead: client TTFT - server TTFT)."""
    rows = list(fetch_timings(base_url).values())[-n:]

    def p50(key: str) -> float | None:
        vals = [r[key] for r in rows if isinstance(r.get(key), int | float)]
        return stats.median(vals) if vals else None

    return {"requests": len(rows), **{f"server_{k}_p50": p50(k) for k in ("ttft_s", "queue_s", "prefill_s")}}


def cross_check(
    srv: ServerProcess,
    model: str,
    peers: list[str],
    concurrency: int,
    n: int,
    output_tokens: int,
    repeats: int = 2,
) -> dict:
    """Ours and each peer on one workload: the same n prompts in the same order (ours' seeded plan, written to
    each peer's file format), the same output length with ignore_eos, the chat endpoint, the server's default
    temperature, the same concurrency and request count. Runs interleave (ours, each peer, ours, ...) so drift on
    a shared machine hits all; medians are compared as ratios peer / ours."""
    tmp = Path(tempfile.mkdtemp(prefix="serving-peer-"))
    spec = LoadSpec(
        base_url=srv.base_url,
        model=model,
        endpoint="chat",
        mode="concurrency",
        concurrency=concurrency,
        n_requests=n,
        output_tokens=output_tokens,
        temperature=None,
    )
    prompts = [r.prompt for r in plan(spec)]
    w = PeerWorkload(
        srv.base_url.removesuffix("/v1"), model, concurrency, n, tmp / "guidellm.jsonl", tmp / "aiperf.jsonl"
    )
    w.guidellm_data.write_text(
        "".join(json.dumps({"prompt": p, "output_tokens_count": output_tokens}) + "\n" for p in prompts)
    )
    w.aiperf_data.write_text(
        "".join(json.dumps({"text": p, "output_length": output_tokens}) + "\n" for p in prompts)
    )
    no_slo = SLO(ttft_s=None, tpot_s=None)

    def ours() -> dict:
        m = run_once(spec, no_slo)
        return {
            "ttft_s_p50": m.ttft_s.p50,
            "itl_s_p50": m.tpot_s.p50,
            "itl_s_p50_pooled_gaps": m.itl_s.p50,
            "completed": m.completed,
            "output_tokens_per_s": m.output_tokens_per_s,
            "loadavg": loadavg(),
            **server_view(srv.base_url, n),
        }

    runs: dict[str, list[dict]] = {"ours": [ours()], **{p: [] for p in peers}}
    failed: dict[str, str] = {}
    for i in range(repeats):
        for peer in peers:
            if peer in failed:
                continue
            out = tmp / (f"{peer}-{i}" if peer == "aiperf" else f"{peer}-{i}.json")
            try:
                r = PEER_RUNS[peer](w, out)
            except (RuntimeError, subprocess.TimeoutExpired, KeyError, ValueError) as exc:
                failed[peer] = str(exc)[-1500:]
                continue
            r["loadavg"] = loadavg()
            r.update(server_view(srv.base_url, n))
            runs[peer].append(r)
        runs["ours"].append(ours())

    medians = {
        tool: {key: _median(rs, key) for key, _ in (*COMPARED, ("server_ttft_s_p50", ""))}
        for tool, rs in runs.items()
        if rs
    }
    table = []
    for tool, med in medians.items():
        row: dict = {
            "tool": "ours (engine loadgen)" if tool == "ours" else PEER_VERSIONS[tool],
            "runs": len(runs[tool]),
            **med,
        }
        if tool != "ours":
            ratios = {key: med[key] / medians["ours"][key] for key, _ in COMPARED}
            row["ratio_to_ours"] = ratios
            row["within_10_percent"] = {k: abs(v - 1) <= AGREEMENT for k, v in ratios.items()}
        table.append(row)
    return {
        "concurrency": concurrency,
        "requests": n,
        "output_tokens": output_tokens,
        "endpoint": "chat",
        "ignore_eos": True,
        "runs": runs,
        "table": table,
        "failed": failed,
        "target": f"peers within {AGREEMENT:.0%} of ours on throughput, TTFT p50 and ITL p50",
    }


def print_cross_check(cc: dict) -> None:
    print(
        f"cross-check at {cc['concurrency']} users, {cc['requests']} requests x {cc['output_tokens']} tokens "
        "(chat, ignore_eos; medians of interleaved runs):"
    )
    print(
        f"  {'tool':<22} {'runs':>4} {'tok/s':>8} {'TTFT p50':>10} {'ITL p50':>9} {'server TTFT p50':>16}   "
        "ratio to ours (tok/s, TTFT, ITL)"
    )
    for row in cc["table"]:
        ratios = row.get("ratio_to_ours")
        words = ""
        if ratios:
            words = ", ".join(
                f"{ratios[k]:.3f}" + ("" if row["within_10_percent"][k] else " (over 10%)")
                for k, _ in COMPARED
            )
        print(
            f"  {row['tool']:<22} {row['runs']:>4} {row['output_tokens_per_s']:>8.1f} "
            f"{row['ttft_s_p50'] * 1e3:>8.1f}ms {row['itl_s_p50'] * 1e3:>7.1f}ms "
            + (f"{row['server_ttft_s_p50'] * 1e3:>14.1f}ms" if row["server_ttft_s_p50"] else f"{'-':>16}")
            + f"   {words}"
        )
    for tool, rs in cc["runs"].items():
        print(f"  {tool} loadavg per run: {', '.join(r['loadavg'] for r in rs)}")
    for tool, why in cc["failed"].items():
        print(f"  {tool} could not run: {why}")


def third_party(model_dir: Path, levels: list[float], n: int, output_tokens: int, slo: SLO) -> dict:
    """The same load generator against Hugging Face's `transformers serve` (an OpenAI-compatible server in the
    transformers wheel): proof that the client needs nothing but a URL. It refuses vLLM's `ignore_eos` (422), so
    lengths are capped by max_tokens only; its model id is the folder path it was started with."""
    from engine.serving.process import free_port

    exe = Path(sys.executable).with_name("transformers")
    port = free_port()
    log = Path(tempfile.mkdtemp(prefix="tf-serve-")) / "serve.log"
    with open(log, "w") as fh:
        proc = subprocess.Popen(
            [str(exe), "serve", "--host", "127.0.0.1", "--port", str(port), str(model_dir)],
            stdout=fh,
            stderr=subprocess.STDOUT,
            env={**os.environ, "HF_HUB_OFFLINE": "1"},
        )
        try:
            import httpx2 as httpx

            deadline = time.monotonic() + 300
            while time.monotonic() < deadline:
                if proc.poll() is not None:
                    return {"skipped": f"transformers serve exited: {log.read_text()[-800:]}"}
                try:
                    if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                time.sleep(0.5)
            spec = LoadSpec(
                base_url=f"http://127.0.0.1:{port}/v1",
                model=str(model_dir),
                endpoint="chat",
                mode="concurrency",
                n_requests=n,
                output_tokens=output_tokens,
                ignore_eos=False,
            )
            sweep = run_sweep(spec, slo, levels, keep_going=True)
            return {
                "server": "transformers serve (transformers wheel)",
                "sweep": to_json(sweep),
                "loadavg": loadavg(),
            }
        finally:
            stop_process(proc, 20)


def print_sweep(args, slo: SLO, sweep, out: dict) -> None:
    print(
        f"{args.model}, max batch {args.max_batch}, {args.requests} requests x {args.output_tokens} tokens per level; "
        f"SLO TTFT <= {slo.ttft_s} s, TPOT <= {slo.tpot_s} s ({slo.min_attainment:.0%} of requests)"
    )
    print(
        f"{'users':>5} {'req/s':>6} {'tok/s':>7} {'tok/s/user':>10} {'TTFT p50':>8} {'p99':>6} {'TPOT p50':>8} "
        f"{'ITL p50':>7} {'E2E p50':>7} {'SLO':>4}  loadavg"
    )
    for p, la in zip(sweep.points, out["loadavg_per_level"], strict=False):
        print(
            f"{p.level:>5g} {p.request_throughput:>6.2f} {p.output_tokens_per_s:>7.1f} {p.per_user_tokens_per_s:>10.1f} "
            f"{p.ttft_s.p50:>7.2f}s {p.ttft_s.p99:>5.2f}s {p.tpot_s.p50 * 1e3:>6.0f}ms {p.itl_s.p50 * 1e3:>5.0f}ms "
            f"{p.e2e_s.p50:>6.2f}s {'yes' if p.meets_slo else 'no':>4}  {la}"
        )
    print(f"measured knee: {sweep.knee:g} users" if sweep.knee else "measured knee: no level met the SLOs")
    pred = out["prediction"]
    if pred:
        print(
            f"calculator: {pred['max_users']} users within TPOT {slo.tpot_s} s (limited by {pred['limited_by']}; "
            f"bandwidth calibrated at {pred['calibrated_at_users']:g} user: {pred['bandwidth_bytes_per_s'] / 1e9:.2f} GB/s)"
        )


# issue 32's targets, lab / vLLM: output throughput at least these at 1 / 4 / 8 users, ITL p50 at most ITL_TARGET at 4, 8
THROUGHPUT_TARGETS = {1.0: 0.8, 4.0: 0.6, 8.0: 0.6}
ITL_TARGET = 1.3
GIB = 2**30


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
    from bench.common import write_result
    from engine.backends.compare import run_side_by_side
    from engine.backends.vllm import STOP_TIMEOUT_S, availability, kv_records, wait_command_ready

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
        "args": vars(args),
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
        no_slo = SLO(ttft_s=None, tpot_s=None)
        for spec in specs.values():  # warm-up, not counted
            run_once(replace(spec, concurrency=2, n_requests=4), no_slo)
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--levels", default="1,2,4,8", help="users to sweep")
    ap.add_argument("--requests", type=int, default=16)
    ap.add_argument("--output-tokens", type=int, default=32)
    ap.add_argument("--max-batch", type=int, default=8)
    ap.add_argument("--slo-ttft", type=float, default=2.0)
    ap.add_argument("--slo-tpot", type=float, default=0.2)
    ap.add_argument(
        "--peer",
        default="guidellm,aiperf",
        help="comma-separated peers to cross-check (guidellm, aiperf), or none",
    )
    ap.add_argument(
        "--no-sweep", action="store_true", help="only the cross-check (no user sweep, no prediction)"
    )
    ap.add_argument("--label", default="", help="a name in the result file: serving-<label>-<machine>.json")
    ap.add_argument("--peer-concurrency", type=int, default=4)
    ap.add_argument("--peer-requests", type=int, default=32)
    ap.add_argument(
        "--peer-repeats", type=int, default=2, help="runs of each peer, interleaved with repeats + 1 of ours"
    )
    ap.add_argument(
        "--third-party",
        choices=("transformers-serve", "none"),
        default="none",
        help="also load-test Hugging Face's `transformers serve` on the same model folder",
    )
    ap.add_argument(
        "--vllm",
        action="store_true",
        help="the engine's server against vLLM's, interleaved (needs .venv-vllm: bash scripts/make_vllm_env.sh)",
    )
    ap.add_argument("--rounds", type=int, default=2, help="--vllm: interleaved rounds (medians over them)")
    ap.add_argument("--dtype", default="fp32", help="--vllm: both servers' precision")
    ap.add_argument("--threads", type=int, default=None, help="--vllm: both servers' compute threads")
    ap.add_argument("--kv-gib", type=int, default=2, help="--vllm: both servers' KV space, GiB")
    ap.add_argument("--max-model-len", type=int, default=2048, help="--vllm: vLLM's --max-model-len")
    args = ap.parse_args()
    if args.vllm:
        if args.levels == "1,2,4,8":
            args.levels = "1,4,8"  # issue 32's levels
        versus_vllm(args)
        return

    slo = SLO(ttft_s=args.slo_ttft, tpot_s=args.slo_tpot)
    out: dict = {
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": paths.machine_id(),
        "model": args.model,
        "max_batch": args.max_batch,
        "loadavg_start": loadavg(),
    }
    with ServerProcess(args.model, max_batch=args.max_batch) as srv:
        spec = LoadSpec(
            base_url=srv.base_url,
            model=args.model,
            mode="concurrency",
            n_requests=args.requests,
            output_tokens=args.output_tokens,
        )
        run_once(
            replace(spec, concurrency=2, n_requests=4), SLO(ttft_s=None, tpot_s=None)
        )  # warm-up, not counted
        levels = [float(x) for x in args.levels.split(",")]
        sweep = None
        if not args.no_sweep:
            loads: list[str] = []
            t0 = time.perf_counter()
            sweep = run_sweep(
                spec, slo, levels, keep_going=True, progress=lambda f, msg: loads.append(loadavg())
            )
            out["sweep"] = to_json(sweep)
            out["sweep_s"] = time.perf_counter() - t0
            out["loadavg_per_level"] = loads[: len(sweep.points)]
            out["prediction"] = prediction(args.model, "fp32", sweep, slo, args.max_batch)
        peers = [p.strip() for p in args.peer.split(",") if p.strip() and p.strip() != "none"]
        unknown = [p for p in peers if p not in PEERS]
        if unknown:
            raise SystemExit(f"unknown peer {unknown[0]!r}: choose from {', '.join(PEERS)} or none")
        missing = [p for p in peers if not PEERS[p].exists()]
        if missing:
            out["cross_check_missing"] = {
                p: f"no .venv-{p}: run bash scripts/make_{p}_env.sh" for p in missing
            }
        present = [p for p in peers if p not in missing]
        if present:
            out["cross_check"] = cross_check(
                srv,
                args.model,
                present,
                args.peer_concurrency,
                args.peer_requests,
                args.output_tokens,
                args.peer_repeats,
            )
    if args.third_party == "transformers-serve":
        out["third_party"] = third_party(
            tokenizer_dir(args.model), levels[:2], min(args.requests, 4), args.output_tokens, slo
        )
    out["loadavg_end"] = loadavg()
    name = f"serving-{args.label}-{paths.machine_id()}" if args.label else f"serving-{paths.machine_id()}"
    res = ROOT / "bench" / "results" / f"{name}.json"
    res.write_text(json.dumps(out, indent=2))
    if sweep is not None:
        print_sweep(args, slo, sweep, out)
    if out.get("cross_check"):
        print_cross_check(out["cross_check"])
    for peer, why in out.get("cross_check_missing", {}).items():
        print(f"cross-check with {peer} skipped: {why}")
    tp = out.get("third_party")
    if tp and "skipped" not in tp:
        for p in tp["sweep"]["points"]:
            t = p["ttft_s"]["p50"]
            print(
                f"transformers serve, {p['level']:g} users: {p['completed']}/{p['requests']} completed, "
                f"TTFT p50 {t if t is None else round(t, 2)} s, tok/s {p['output_tokens_per_s']}, errors {p['errors']}"
            )
    elif tp:
        print(f"third-party server skipped: {tp['skipped']}")
    print(f"wrote {res.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
