"""Decode throughput: the engine (generate and stream, with its timing and measuring, and the in-flight
scheduler with one request - the playground's and the server's path: slot KV cache, sampling on the last
logits only) against plain `model.generate` on the same model, prompt and settings, measured in the same run
and interleaved (A B C D A B C D ...) so machine noise hits all alike. Also: achieved weight bandwidth
(weights bytes x decode steps/s, from each variant's own TPOT) against this machine's measured read
bandwidth, and a check that the scheduler's greedy tokens equal plain `generate`'s.

    .venv/bin/python bench/decode.py [--models smollm2-135m-instruct gpt-neo-125m-random] [--repeats 5] [--compile]

--compile adds an experiment outside the engine's path: `generate` with a static KV cache and torch.compile.

Prints a table and writes bench/results/decode-<machine>.json. Target: the engine costs at most 5%.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine import generation, hardware, models, paths, stats  # noqa: E402
from engine.batching.scheduler import Scheduler  # noqa: E402
from engine.generation import GenerationConfig  # noqa: E402

PROMPT = "The history of the printing press begins"


def plain_generate(lm, cfg: GenerationConfig, **extra) -> tuple[int, float, list[int]]:
    """The baseline: what a notebook does (tokenize, generate, count), timed end to end; `extra` goes to
    `generate` (the compile experiment's static cache)."""
    import torch

    enc = lm.tokenizer(PROMPT, return_tensors="pt").to(lm.model.device)
    t0 = time.perf_counter()
    with torch.inference_mode():
        out = lm.model.generate(
            **enc,
            max_new_tokens=cfg.max_new_tokens,
            do_sample=False,
            use_cache=True,
            pad_token_id=lm.tokenizer.pad_token_id,
            temperature=None,
            top_p=None,
            top_k=None,
            **extra,
        )
    if lm.device.startswith("cuda"):
        torch.cuda.synchronize()
    prompt_len = enc["input_ids"].shape[1]
    return int(out.shape[1] - prompt_len), time.perf_counter() - t0, out[0, prompt_len:].tolist()


def compiled_generate(lm, cfg: GenerationConfig) -> tuple[int, float, list[int]]:
    """The experiment: `generate` with a static KV cache and its forward compiled by torch.compile (inductor,
    default mode; transformers compiles on a CPU only when asked to with CompileConfig's all-devices flag).
    The first call compiles (about a minute here); one compile per cache length."""
    from transformers import CompileConfig

    cc = CompileConfig(fullgraph=False, dynamic=False, mode="default")
    cc._compile_all_devices = True  # transformers' own switch for compiling off CUDA
    return plain_generate(lm, cfg, cache_implementation="static", compile_config=cc)


def engine_generate(lm, cfg):
    c = generation.generate(lm, PROMPT, cfg, record=False)
    return c.measurement.output_tokens, c.measurement.latency_s, c.measurement.tpot_s


def engine_stream(lm, cfg):
    s = generation.stream(lm, PROMPT, cfg, record=False)
    for _ in s:
        pass
    m = s.completion.measurement
    return m.output_tokens, m.latency_s, m.tpot_s


def engine_scheduler(sched, cfg):
    c = sched.submit(PROMPT, cfg).result()
    m = c.measurement
    return m.output_tokens, m.latency_s, m.tpot_s, c.token_ids


def bench_model(name: str, repeats: int, max_new_tokens: int, dtype: str, compiled: bool = False) -> dict:
    lm = models.load_model(name, dtype=dtype)
    cfg = GenerationConfig(max_new_tokens=max_new_tokens)
    sched = Scheduler(lm, max_batch=1, record=False)
    for _ in range(2):  # warm-up: allocator, kernels, caches
        plain_generate(lm, cfg)
        engine_generate(lm, cfg)
        engine_scheduler(sched, cfg)
    rates: dict[str, list[float]] = {
        "plain generate": [],
        "engine generate": [],
        "engine stream": [],
        "engine scheduler": [],
    }
    compiled_extra: dict = {}
    if compiled:
        t0 = time.perf_counter()
        _n, _t, ids = compiled_generate(lm, cfg)  # compiles
        compiled_extra = {
            "compile_s": time.perf_counter() - t0,
            "compiled_greedy_tokens_equal_plain": ids == plain_generate(lm, cfg)[2],
        }
        rates["compiled generate"] = []
    tpots: list[float] = []
    sched_tpots: list[float] = []
    same_tokens = (
        generation.generate(lm, PROMPT, cfg, record=False).token_ids == engine_scheduler(sched, cfg)[3]
    )
    for _ in range(repeats):
        n, t, tpot, _ids = engine_scheduler(sched, cfg)
        rates["engine scheduler"].append(n / t)
        sched_tpots.append(tpot)
        n, t, _ids = plain_generate(lm, cfg)
        rates["plain generate"].append(n / t)
        n, t, tpot = engine_generate(lm, cfg)
        rates["engine generate"].append(n / t)
        tpots.append(tpot)
        n, t, tpot = engine_stream(lm, cfg)
        rates["engine stream"].append(n / t)
        tpots.append(tpot)
        if compiled:
            n, t, _ids = compiled_generate(lm, cfg)
            rates["compiled generate"].append(n / t)
    sched.close()
    med = {k: stats.median(v) for k, v in rates.items()}
    tpot = stats.median(tpots)
    sched_tpot = stats.median(sched_tpots)
    return {
        "model": name,
        "dtype": lm.dtype,
        "params": lm.params,
        "weights_bytes": lm.weights_bytes,
        "max_new_tokens": max_new_tokens,
        "repeats": repeats,
        "tokens_per_s_median": med,
        "tokens_per_s_runs": rates,
        "ratio_engine_generate_vs_plain": med["engine generate"] / med["plain generate"],
        "ratio_engine_stream_vs_plain": med["engine stream"] / med["plain generate"],
        "ratio_engine_scheduler_vs_plain": med["engine scheduler"] / med["plain generate"],
        "tpot_s_median": tpot,
        "achieved_weight_bytes_per_s": lm.weights_bytes / tpot,
        "scheduler_tpot_s_median": sched_tpot,
        "scheduler_achieved_weight_bytes_per_s": lm.weights_bytes / sched_tpot,
        "scheduler_greedy_tokens_equal_generate": same_tokens,
        **(
            {
                "ratio_compiled_vs_plain": med["compiled generate"] / med["plain generate"],
                # whole-run tok/s (prefill included) x weight bytes: a lower bound on the decode bandwidth
                "compiled_achieved_weight_bytes_per_s_lower_bound": lm.weights_bytes
                * med["compiled generate"],
                **compiled_extra,
            }
            if compiled
            else {}
        ),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["smollm2-135m-instruct", "gpt-neo-125m-random"])
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument(
        "--compile",
        action="store_true",
        help="add the experiment: static KV cache + torch.compile of the forward (compiles for about a minute)",
    )
    ap.add_argument(
        "--out", type=Path, default=ROOT / "bench" / "results" / f"decode-{paths.machine_id()}.json"
    )
    args = ap.parse_args()
    info = hardware.detect()
    bw = hardware.measure_memory_bandwidth(info.accelerator)
    # Everything runs on one worker thread, as the dashboard's script threads do. On an oversubscribed CPU,
    # torch ops issued from the main thread were measured ~10x slower than from a worker thread (OpenMP
    # spin-waiting), which would make the baseline look slow for a reason that has nothing to do with it.
    with ThreadPoolExecutor(max_workers=1) as pool:
        rows = pool.submit(
            lambda: [
                bench_model(m, args.repeats, args.max_new_tokens, args.dtype, args.compile)
                for m in args.models
            ]
        ).result()
    print(
        f"measured read bandwidth: {bw.read_bytes_per_s / 1e9:.1f} GB/s ({info.accelerator}, {info.cpu_name}); "
        f"load average {os.getloadavg()[0]:.1f}"
    )
    print(
        f"{'model':<24}{'dtype':<6}{'plain tok/s':>12}{'engine':>9}{'stream':>9}{'eng/plain':>11}"
        f"{'str/plain':>11}{'GB/s':>7}{'% of BW':>9}"
    )
    for r in rows:
        m = r["tokens_per_s_median"]
        achieved = r["achieved_weight_bytes_per_s"]
        print(
            f"{r['model']:<24}{r['dtype']:<6}{m['plain generate']:>12.1f}{m['engine generate']:>9.1f}"
            f"{m['engine stream']:>9.1f}{r['ratio_engine_generate_vs_plain']:>11.3f}"
            f"{r['ratio_engine_stream_vs_plain']:>11.3f}{achieved / 1e9:>7.1f}{100 * achieved / bw.read_bytes_per_s:>8.0f}%"
        )
        sa = r["scheduler_achieved_weight_bytes_per_s"]
        print(
            f"{'':<30}scheduler (1 request) {m['engine scheduler']:.1f} tok/s = "
            f"{r['ratio_engine_scheduler_vs_plain']:.3f}x plain; {sa / 1e9:.1f} GB/s = "
            f"{100 * sa / bw.read_bytes_per_s:.0f}% of read bandwidth; greedy tokens equal generate's: "
            f"{r['scheduler_greedy_tokens_equal_generate']}"
        )
        if "ratio_compiled_vs_plain" in r:
            cb = r["compiled_achieved_weight_bytes_per_s_lower_bound"]
            print(
                f"{'':<30}static cache + torch.compile {m['compiled generate']:.1f} tok/s = "
                f"{r['ratio_compiled_vs_plain']:.3f}x plain; >= {cb / 1e9:.1f} GB/s = "
                f"{100 * cb / bw.read_bytes_per_s:.0f}% of read bandwidth (whole run); compiled in "
                f"{r['compile_s']:.0f} s; greedy tokens equal plain's: {r['compiled_greedy_tokens_equal_plain']}"
            )
    result = {
        "benchmark": "decode",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": paths.machine_id(),
        "hardware": {
            "cpu": info.cpu_name,
            "threads": info.torch_threads,
            "gpus": [g.name for g in info.gpus],
            "torch": info.torch_version,
        },
        "read_bandwidth_bytes_per_s": bw.read_bytes_per_s,
        "load_average": os.getloadavg(),
        "rows": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(f"wrote {args.out.relative_to(ROOT) if args.out.is_relative_to(ROOT) else args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
