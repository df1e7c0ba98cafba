"""The engine's OpenAI-compatible server under load: start it as a subprocess, sweep the number of users with the
load generator, find the knee under the SLOs, put the calculator's max-users prediction beside it, and
cross-check the load generator against GuideLLM (a peer tool, vLLM project) on the same server and workload.

    .venv/bin/python bench/serving.py [--model smollm2-135m-instruct] [--levels 1,2,4,8] [--requests 16]
                                      [--output-tokens 32] [--slo-ttft 2] [--slo-tpot 0.2] [--peer guidellm|none]

The peer needs `bash scripts/make_guidellm_env.sh` (a side venv; GuideLLM's pins differ from the main ones).
Cross-check protocol: the same prompts file (the shipped prompts, each with its output length), the chat
endpoint, `ignore_eos`, the server's default temperature, the same concurrency and request count; runs are
interleaved (ours, GuideLLM, ours, GuideLLM, ours) and the medians compared, so drift on a shared machine hits both. Reported side by side:
p50 TTFT, and GuideLLM's p50 ITL (per-request mean gap) beside ours (per-request TPOT, the same quantity, and
pooled chunk gaps). Writes bench/results/serving-<machine>.json; prints loadavg beside every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine.calc import capacity  # noqa: E402
from engine.calc.specs import model_preset  # noqa: E402
from engine.core import paths, stats  # noqa: E402
from engine.loadgen.sweep import run_once, run_sweep, to_json  # noqa: E402
from engine.loadgen.workload import SLO, LoadSpec, load_prompts  # noqa: E402
from engine.runtime.models import PRESETS  # noqa: E402
from engine.serving.process import ServerProcess  # noqa: E402

GUIDELLM = ROOT / ".venv-guidellm" / "bin" / "guidellm"


def loadavg() -> str:
    p = Path("/proc/loadavg")
    return " ".join(p.read_text().split()[:3]) if p.exists() else "n/a"


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


def guidellm_run(base: str, model: str, data: Path, concurrency: int, n: int, out: Path) -> dict:
    cmd = [
        str(GUIDELLM),
        "run",
        "--backend",
        f"kind=openai_http,target={base},model={model}",
        "--profile",
        f"kind=concurrent,streams={concurrency}",
        "--constraint",
        f"kind=max_requests,count={n}",
        "--data",
        f"kind=json_file,path={data}",
        "--tokenizer",
        f"kind=huggingface_auto,model={tokenizer_dir(model)}",
        "--output",
        f"kind=json,path={out}",
        "--disable-progress",
        "--disable-console",
    ]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env, cwd=ROOT)
    if r.returncode != 0:
        raise RuntimeError(f"guidellm failed ({r.returncode}): {r.stderr[-1500:]}")
    m = json.loads(out.read_text())["benchmarks"][0]["metrics"]

    def p50(name: str) -> float:
        return m[name]["successful"]["median"] / 1e3  # ms -> s

    return {
        "ttft_s_p50": p50("time_to_first_token_ms"),
        "itl_s_p50": p50("inter_token_latency_ms"),
        "tpot_s_p50": p50("time_per_output_token_ms"),
        "completed": m["request_totals"]["successful"],
        "output_tokens_per_s": m["output_tokens_per_second"]["successful"]["mean"],
    }


def cross_check(
    srv: ServerProcess, model: str, concurrency: int, n: int, output_tokens: int, repeats: int = 2
) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="serving-peer-"))
    data = tmp / "prompts.jsonl"
    prompts = load_prompts(None)
    data.write_text(
        "".join(json.dumps({"prompt": p, "output_tokens_count": output_tokens}) + "\n" for p in prompts)
    )
    spec = LoadSpec(
        base_url=srv.base_url,
        model=model,
        endpoint="chat",
        mode="concurrency",
        concurrency=concurrency,
        n_requests=n,
        output_tokens=output_tokens,
        prompts_file=str(data),
        temperature=None,
    )
    no_slo = SLO(ttft_s=None, tpot_s=None)

    def ours() -> dict:
        m = run_once(spec, no_slo)
        return {
            "ttft_s_p50": m.ttft_s.p50,
            "tpot_s_p50": m.tpot_s.p50,
            "itl_s_p50_pooled": m.itl_s.p50,
            "completed": m.completed,
            "output_tokens_per_s": m.output_tokens_per_s,
            "loadavg": loadavg(),
        }

    # interleaved ours, peer, ours, peer, ..., ours: drift on a shared machine hits both; medians compared
    runs_ours, runs_peer = [ours()], []
    for i in range(repeats):
        peer = guidellm_run(
            srv.base_url.removesuffix("/v1"), model, data, concurrency, n, tmp / f"guidellm-{i}.json"
        )
        peer["loadavg"] = loadavg()
        runs_peer.append(peer)
        runs_ours.append(ours())

    def med(runs: list[dict], key: str) -> float:
        return stats.median([r[key] for r in runs])

    o_ttft, o_tpot, o_itl = (med(runs_ours, k) for k in ("ttft_s_p50", "tpot_s_p50", "itl_s_p50_pooled"))
    p_ttft, p_itl = med(runs_peer, "ttft_s_p50"), med(runs_peer, "itl_s_p50")
    return {
        "tool": "guidellm 0.8.1",
        "concurrency": concurrency,
        "requests": n,
        "output_tokens": output_tokens,
        "ours": runs_ours,
        "guidellm": runs_peer,
        "median_ours": {"ttft_s_p50": o_ttft, "tpot_s_p50": o_tpot, "itl_s_p50_pooled": o_itl},
        "median_guidellm": {"ttft_s_p50": p_ttft, "itl_s_p50": p_itl},
        "ttft_p50_ratio_ours_over_peer": o_ttft / p_ttft,
        "itl_p50_ratio_ours_tpot_over_peer_itl": o_tpot / p_itl,
        "itl_p50_ratio_ours_pooled_over_peer_itl": o_itl / p_itl,
    }


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
            proc.terminate()
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--levels", default="1,2,4,8", help="users to sweep")
    ap.add_argument("--requests", type=int, default=16)
    ap.add_argument("--output-tokens", type=int, default=32)
    ap.add_argument("--max-batch", type=int, default=8)
    ap.add_argument("--slo-ttft", type=float, default=2.0)
    ap.add_argument("--slo-tpot", type=float, default=0.2)
    ap.add_argument("--peer", choices=("guidellm", "none"), default="guidellm")
    ap.add_argument("--peer-concurrency", type=int, default=4)
    ap.add_argument("--peer-requests", type=int, default=32)
    ap.add_argument(
        "--peer-repeats", type=int, default=2, help="GuideLLM runs, interleaved with repeats + 1 of ours"
    )
    ap.add_argument(
        "--third-party",
        choices=("transformers-serve", "none"),
        default="none",
        help="also load-test Hugging Face's `transformers serve` on the same model folder",
    )
    args = ap.parse_args()

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
        loads: list[str] = []
        t0 = time.perf_counter()
        sweep = run_sweep(spec, slo, levels, keep_going=True, progress=lambda f, msg: loads.append(loadavg()))
        out["sweep"] = to_json(sweep)
        out["sweep_s"] = time.perf_counter() - t0
        out["loadavg_per_level"] = loads[: len(sweep.points)]
        out["prediction"] = prediction(args.model, "fp32", sweep, slo, args.max_batch)
        if args.peer == "guidellm":
            if not GUIDELLM.exists():
                out["cross_check"] = {"skipped": "no .venv-guidellm: run bash scripts/make_guidellm_env.sh"}
            else:
                out["cross_check"] = cross_check(
                    srv,
                    args.model,
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
    res = ROOT / "bench" / "results" / f"serving-{paths.machine_id()}.json"
    res.write_text(json.dumps(out, indent=2))

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
    cc = out.get("cross_check")
    if cc and "skipped" not in cc:
        g = cc["guidellm"]
        print(f"cross-check at {cc['concurrency']} users, {cc['requests']} requests (chat, ignore_eos):")
        order = [x for pair in zip(cc["ours"], [*g, None], strict=False) for x in pair if x is not None]
        for r in order:
            name = "guidellm" if "itl_s_p50" in r else "ours"
            itl = r.get("itl_s_p50", r.get("tpot_s_p50"))
            print(
                f"  {name:<9} TTFT p50 {r['ttft_s_p50'] * 1e3:7.1f} ms   ITL/TPOT p50 {itl * 1e3:6.1f} ms   "
                f"tok/s {r['output_tokens_per_s']:6.1f}   loadavg {r['loadavg']}"
            )
        print(
            f"  ratio of medians ours/guidellm: TTFT p50 {cc['ttft_p50_ratio_ours_over_peer']:.3f}, "
            f"TPOT vs ITL p50 {cc['itl_p50_ratio_ours_tpot_over_peer_itl']:.3f} "
            f"(pooled chunk gaps {cc['itl_p50_ratio_ours_pooled_over_peer_itl']:.3f})"
        )
    elif cc:
        print(f"cross-check skipped: {cc['skipped']}")
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
