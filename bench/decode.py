"""Decode throughput: the engine (generate and stream, with its timing and measuring, and the in-flight
scheduler with one request - the playground's and the server's path: slot KV cache, sampling on the last
logits only; with --layout, engine.runtime.cpu_layout's measured weight layout) against plain `model.generate` on the
same model in nn.Linear's layout (as Hugging Face ships it), same prompt and settings, measured in the same run and
interleaved (A B C D A B C D ...) so machine noise hits all alike. Also: achieved weight bandwidth (weights
bytes x decode steps/s, from each variant's own TPOT) against this machine's measured read bandwidth, measured
in the same run, and whether each variant's greedy tokens equal plain `generate`'s in the original layout. For
an fp32 model on the CPU, also the floor: the model's weight products alone, per kernel (bench/decode_probe.py).

    .venv/bin/python bench/decode.py [--models smollm2-135m-instruct gpt-neo-125m-random] [--repeats 5] [--compile]
                                     [--layout]

--compile adds the scheduler with its decode step compiled (Scheduler(compile_decode=True), torch.compile
with dynamic shapes); it compiles for about a minute first.

Prints a table and writes bench/results/decode-<machine>.json. Targets: the engine costs at most 5% against
plain generate in the same layout; the target: batch-1 decode at 50% of the measured read bandwidth.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine.batching.scheduler import Scheduler  # noqa: E402
from engine.core import paths, stats  # noqa: E402
from engine.core.threads import run_in_thread  # noqa: E402
from engine.runtime import generation, hardware, models  # noqa: E402
from engine.runtime.generation import GenerationConfig  # noqa: E402

PROMPT = "The history of the printing press begins"


def plain_generate(lm, cfg: GenerationConfig) -> tuple[int, float, list[int]]:
    """The baseline: what a notebook does (tokenize, generate, count), timed end to end."""
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
        )
    if lm.device.startswith("cuda"):
        torch.cuda.synchronize()
    prompt_len = enc["input_ids"].shape[1]
    return int(out.shape[1] - prompt_len), time.perf_counter() - t0, out[0, prompt_len:].tolist()


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
    while sched.snapshot().alive:  # idle_exit_s=0: its thread, and OpenMP team, end before the next lane
        time.sleep(0.001)
    m = c.measurement
    return m.output_tokens, m.latency_s, m.tpot_s, c.token_ids


def alone(fn, *args):
    """fn(*args) on a thread of its own that ends with it (engine.core.threads): each lane runs with the only
    OpenMP team in the process, as the dashboard's do. A team left on the main thread or a shared worker
    made every other lane ~10% slower at batch 1 (bench/threads.py)."""
    return run_in_thread(lambda: fn(*args))


def load(name: str, dtype: str, layout: bool):
    """The model in nn.Linear's layout (as Hugging Face ships it), or with engine.runtime.cpu_layout's measured one."""
    saved = os.environ.get("INFERENCE_LAB_CPU_LAYOUT")
    os.environ["INFERENCE_LAB_CPU_LAYOUT"] = "1" if layout else "0"
    try:
        return models.load_model(name, dtype=dtype)
    finally:
        if saved is None:
            os.environ.pop("INFERENCE_LAB_CPU_LAYOUT")
        else:
            os.environ["INFERENCE_LAB_CPU_LAYOUT"] = saved


def bench_model(
    name: str, repeats: int, max_new_tokens: int, dtype: str, compiled: bool = False, layout: bool = False
) -> dict:
    base = alone(load, name, dtype, False)
    lm = alone(load, name, dtype, True) if layout else base
    layout_note = next((n for n in lm.notes if n.startswith("weight layout")), "weight layout: nn.Linear's")
    cfg = GenerationConfig(max_new_tokens=max_new_tokens)
    sched = Scheduler(lm, max_batch=1, record=False, idle_exit_s=0.0)
    lanes: dict[str, Scheduler] = {"engine scheduler": sched}
    extra: dict = {}
    if compiled:
        lanes["engine scheduler, compiled decode"] = csched = Scheduler(
            lm, max_batch=1, record=False, compile_decode=True, idle_exit_s=0.0
        )
        t0 = time.perf_counter()
        alone(engine_scheduler, csched, cfg)  # compiles
        extra["compile_s"] = time.perf_counter() - t0
    for _ in range(2):  # warm-up: allocator, kernels, caches
        alone(plain_generate, base, cfg)
        alone(plain_generate, lm, cfg)
        alone(engine_generate, lm, cfg)
        for sc in lanes.values():
            alone(engine_scheduler, sc, cfg)
    reference = alone(plain_generate, base, cfg)[2]  # greedy tokens in the original layout
    # plain generate on the engine's copy: a lane of its own only when that copy has another layout
    same_layout = "plain generate, engine layout" if layout else "plain generate"
    same = {"plain generate, engine layout": alone(plain_generate, lm, cfg)[2] == reference} if layout else {}
    same["engine generate"] = (
        list(alone(lambda: generation.generate(lm, PROMPT, cfg, record=False).token_ids)) == reference
    )
    for lane, sc in lanes.items():
        same[lane] = list(alone(engine_scheduler, sc, cfg)[3]) == reference
    rates: dict[str, list[float]] = {
        k: [] for k in ("plain generate", same_layout, "engine generate", "engine stream", *lanes)
    }
    tpots: dict[str, list[float]] = {k: [] for k in ("engine", *lanes)}
    for _ in range(repeats):
        for lane, sc in lanes.items():
            n, t, tpot, _ids = alone(engine_scheduler, sc, cfg)
            rates[lane].append(n / t)
            tpots[lane].append(tpot)
        n, t, _ids = alone(plain_generate, base, cfg)
        rates["plain generate"].append(n / t)
        if layout:
            n, t, _ids = alone(plain_generate, lm, cfg)
            rates["plain generate, engine layout"].append(n / t)
        n, t, tpot = alone(engine_generate, lm, cfg)
        rates["engine generate"].append(n / t)
        tpots["engine"].append(tpot)
        n, t, tpot = alone(engine_stream, lm, cfg)
        rates["engine stream"].append(n / t)
        tpots["engine"].append(tpot)
    for sc in lanes.values():
        sc.close()
    if lm.device == "cpu" and lm.dtype == "fp32":
        # the same weights' products alone, per kernel: the fastest a step could be (bench/decode_probe.py)
        from bench.decode_probe import floor

        extra["floor"] = alone(floor, lm)
    med = {k: stats.median(v) for k, v in rates.items()}
    tpot = {k: stats.median(v) for k, v in tpots.items()}
    return {
        "model": name,
        "dtype": lm.dtype,
        "params": lm.params,
        "weights_bytes": lm.weights_bytes,
        "layout": layout_note,
        "max_new_tokens": max_new_tokens,
        "repeats": repeats,
        "tokens_per_s_median": med,
        "tokens_per_s_runs": rates,
        "ratio_vs_plain": {k: v / med["plain generate"] for k, v in med.items()},
        "ratio_engine_generate_vs_plain_same_layout": med["engine generate"] / med[same_layout],
        "ratio_engine_stream_vs_plain_same_layout": med["engine stream"] / med[same_layout],
        "tpot_s_median": tpot,
        "achieved_weight_bytes_per_s": {k: lm.weights_bytes / v for k, v in tpot.items()},
        "greedy_tokens_equal_plain_original_layout": same,
        **extra,
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
        help="add the scheduler with its decode step compiled (compiles for about a minute first)",
    )
    ap.add_argument(
        "--layout",
        action="store_true",
        help="the engine's lanes on engine.runtime.cpu_layout's measured weight layout (INFERENCE_LAB_CPU_LAYOUT=1)",
    )
    ap.add_argument(
        "--out", type=Path, default=ROOT / "bench" / "results" / f"decode-{paths.machine_id()}.json"
    )
    args = ap.parse_args()
    info = run_in_thread(hardware.detect)
    bw = run_in_thread(lambda: hardware.measure_memory_bandwidth(info.accelerator))
    rows = [
        bench_model(m, args.repeats, args.max_new_tokens, args.dtype, args.compile, args.layout)
        for m in args.models
    ]
    print(
        f"measured read bandwidth: {bw.read_bytes_per_s / 1e9:.1f} GB/s ({info.accelerator}, {info.cpu_name}); "
        f"load average {os.getloadavg()[0]:.1f}"
    )
    read = bw.read_bytes_per_s
    for r in rows:
        m, ratio = r["tokens_per_s_median"], r["ratio_vs_plain"]
        print(f"\n{r['model']} {r['dtype']}, {r['max_new_tokens']} new tokens; {r['layout']}")
        print(f"{'lane':<38}{'tok/s':>8}{'x plain':>9}{'TPOT GB/s':>11}{'% of BW':>9}  greedy = plain's")
        for lane in m:
            achieved = r["achieved_weight_bytes_per_s"].get(
                "engine" if lane in ("engine generate", "engine stream") else lane
            )
            same = r["greedy_tokens_equal_plain_original_layout"].get(lane)
            print(
                f"{lane:<38}{m[lane]:>8.1f}{ratio[lane]:>9.3f}"
                + (
                    f"{achieved / 1e9:>11.1f}{100 * achieved / read:>8.0f}%"
                    if achieved
                    else f"{'':>11}{'':>9}"
                )
                + ("" if same is None else f"  {same}")
            )
        print(
            f"engine overhead against plain generate in the same layout: generate "
            f"{r['ratio_engine_generate_vs_plain_same_layout']:.3f}x, stream {r['ratio_engine_stream_vs_plain_same_layout']:.3f}x"
            + (f"; compiled in {r['compile_s']:.0f} s" if "compile_s" in r else "")
        )
        if "floor" in r:
            f = r["floor"]
            print(
                f"the {f['weights']} weight products alone, nothing else (bench/decode_probe.py floor; read bandwidth "
                f"{f['read_bandwidth_bytes_per_s'] / 1e9:.1f} GB/s when they ran):"
            )
            for kernel, k in f["kernels"].items():
                print(
                    f"  {kernel:<28}{k['bytes_per_s'] / 1e9:>6.1f} GB/s "
                    f"{k['fraction_of_read_bandwidth']:>5.0%} of that read bandwidth"
                )
            linear = f["kernels"]["nn.Linear (x @ W^T)"]["bytes_per_s"]
            print(
                "  each lane against the nn.Linear kernel's floor: "
                + ", ".join(
                    f"{lane} {v / linear:.0%}" for lane, v in r["achieved_weight_bytes_per_s"].items()
                )
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
