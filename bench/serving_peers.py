"""The load generator held to other tools and other servers (bench/serving.py's --peer and --third-party): GuideLLM
(vLLM project) and AIPerf (NVIDIA) on the engine's server and workload, and our load generator against Hugging
Face's `transformers serve`.

The peers need `bash scripts/make_guidellm_env.sh` and `bash scripts/make_aiperf_env.sh` (side venvs; their pins
differ from the main ones). Cross-check protocol: the same n prompts in the same order (ours' seeded plan of the
shipped prompts, written in each peer's file format with its output length), the chat endpoint, `ignore_eos`, the
server's default temperature, the same concurrency and request count, tokens counted from the server's usage.
Runs interleave (ours, GuideLLM, AIPerf, ours, ...) and the medians are compared as ratios peer / ours, so drift on
a shared machine hits all. Side by side: output tokens/s, p50 TTFT, and p50 ITL as both peers define it (per
request, (E2E - TTFT) / (tokens - 1): ours' TPOT; ours' pooled chunk gaps are kept beside it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench.common import ROOT, stop_process
from bench.serving_common import NO_SLO, loadavg
from engine.core import paths, stats
from engine.loadgen.server_side import fetch_timings
from engine.loadgen.sweep import run_once, run_sweep, to_json
from engine.loadgen.workload import SLO, LoadSpec, plan
from engine.serving.process import ServerProcess


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


def choose_peers(names: str) -> tuple[list[str], dict[str, str]]:
    """The peers named by --peer (comma-separated, or none) that can run, and why each of the others cannot; an
    unknown name ends the run."""
    peers = [p.strip() for p in names.split(",") if p.strip() and p.strip() != "none"]
    unknown = [p for p in peers if p not in PEERS]
    if unknown:
        raise SystemExit(f"unknown peer {unknown[0]!r}: choose from {', '.join(PEERS)} or none")
    missing = {p: f"no .venv-{p}: run bash scripts/make_{p}_env.sh" for p in peers if not PEERS[p].exists()}
    return [p for p in peers if p not in missing], missing


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

    def ours() -> dict:
        m = run_once(spec, NO_SLO)
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


def print_third_party(tp: dict) -> None:
    if "skipped" in tp:
        print(f"third-party server skipped: {tp['skipped']}")
        return
    for p in tp["sweep"]["points"]:
        t = p["ttft_s"]["p50"]
        print(
            f"transformers serve, {p['level']:g} users: {p['completed']}/{p['requests']} completed, "
            f"TTFT p50 {t if t is None else round(t, 2)} s, tok/s {p['output_tokens_per_s']}, errors {p['errors']}"
        )
