"""Decode throughput per lane, on the CPU or a CUDA GPU: plain `model.generate` (what a notebook does), the
engine's generate, stream and in-flight scheduler (the playground's and the server's paths), and with --compile the
same engine paths with compiled decode (GenerationConfig.compile / Scheduler(compile_decode=True): a static KV slot
cache and a torch.compile'd step, CUDA graphs on a GPU; gpt-fast's recipe). Measured in one run and interleaved
(A B C ... A B C ...) so machine noise hits every lane alike, at each batch size asked for (--batches 1 8).

Per lane: tokens/s (median of --repeats), the ratio to plain generate at the same batch, a compiled lane's ratio to
its eager twin, the weight bandwidth its decode steps reached (weights bytes / time per step: each step reads every
weight once; the KV cache read on top is left out, so this is a lower bound on the traffic) as a fraction of the
read bandwidth measured in the same run on the same device, and whether its greedy tokens equal plain generate's at
the same batch. With --layout the engine lanes run on engine.runtime.cpu_layout's measured weight layout. For an fp32
model on the CPU, also the floor: the model's weight products alone, per kernel (bench/decode_probe.py).

    .venv/bin/python -m bench.decode [--models smollm2-135m-instruct gpt-neo-125m-random] [--repeats 5]
                                     [--compile] [--batches 1 8] [--device cuda --dtype fp16] [--layout]

The first compiled run per model and shape compiles (25-65 s per graph on a 2-core CPU; batch 1 and batch > 1 are
separate graphs); that time is reported as compile_s and kept out of the timed runs. Prints a table and writes
bench/results/decode-<machine>.json (--out). Targets: the engine costs at most 5% against plain generate; compiled
decode at least 1.15x eager on this CPU; on an H200, GPT-Neo 1.3B fp16 at batch 1 at 50% of the read
bandwidth and batch 8 at 5x batch 1's throughput.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from bench.common import ROOT
from engine.batching.scheduler import Scheduler
from engine.core import paths, stats
from engine.core.jsonsafe import to_jsonable
from engine.core.load import loadavg
from engine.core.threads import run_in_thread
from engine.race import compat
from engine.runtime import generation, hardware, models, streaming
from engine.runtime.sampling import eos_ids
from engine.runtime.settings import GenerationConfig

PROMPTS = (  # row i of a batch of B takes PROMPTS[i]; batch 1 is the first
    "The history of the printing press begins",
    "Once upon a time, in a small village by the sea,",
    "def fibonacci(n):",
    "The capital of France is",
    "A memory-bound workload is one where",
    "In 1969 the first humans",
    "The recipe calls for two cups of",
    "Transformers process tokens by",
)


@dataclass
class Run:
    tokens: int  # generated, all rows
    seconds: float  # request to last token
    tpot_s: float | None  # seconds per decode step (None: not measured per step, plain generate)
    token_ids: list[tuple[int, ...]]  # per row
    decode: str = "eager"  # how the decode steps ran ("compiled" only when they did)


@dataclass
class Lane:
    name: str
    batch: int
    run: Callable[[], Run]
    eager_twin: str | None = None  # for a compiled lane: the eager lane it is compared with


def plain_generate(lm, prompts: tuple[str, ...], cfg: GenerationConfig) -> Run:
    """The baseline: tokenize (left-padded), `generate`, count, timed end to end."""
    import torch

    tok = lm.tokenizer
    tok.padding_side = "left"
    enc = tok(list(prompts), return_tensors="pt", padding=True).to(lm.model.device)
    hardware.sync(lm.device)
    t0 = time.perf_counter()
    with torch.inference_mode():
        out = lm.model.generate(**enc, **generation.greedy_kwargs(lm, cfg.max_new_tokens), use_cache=True)
    hardware.sync(lm.device)
    seconds = time.perf_counter() - t0
    width = enc["input_ids"].shape[1]
    eos = eos_ids(lm)
    rows = []
    for row in out[:, width:].tolist():
        cut = next((i + 1 for i, t in enumerate(row) if t in eos), len(row))
        rows.append(tuple(row[:cut]))
    return Run(sum(len(r) for r in rows), seconds, None, rows)


def engine_generate(lm, prompts: tuple[str, ...], cfg: GenerationConfig) -> Run:
    if len(prompts) == 1:
        c = generation.generate(lm, prompts[0], cfg, record=False)
        m, done = c.measurement, [c]
    else:
        b = generation.generate_batch(lm, list(prompts), cfg, record=False)
        m, done = b.measurement, list(b.completions)
    return Run(m.output_tokens, m.latency_s, m.tpot_s, [c.token_ids for c in done], done[0].decode)


def engine_stream(lm, prompt: str, cfg: GenerationConfig) -> Run:
    s = streaming.stream(lm, prompt, cfg, record=False)
    for _ in s:
        pass
    c = s.completion
    m = c.measurement
    return Run(m.output_tokens, m.latency_s, m.tpot_s, [c.token_ids], c.decode)


def engine_scheduler(sched: Scheduler, prompts: tuple[str, ...], cfg: GenerationConfig) -> Run:
    """`len(prompts)` requests submitted together (they share every decode step from the first)."""
    t0 = time.perf_counter()
    done = [h.result() for h in [sched.submit(p, cfg) for p in prompts]]
    seconds = time.perf_counter() - t0
    while sched.snapshot().alive:  # idle_exit_s=0: its thread, and OpenMP team, end before the next lane
        time.sleep(0.001)
    tpots = [c.measurement.tpot_s for c in done if c.measurement.output_tokens > 1]
    return Run(
        sum(c.measurement.output_tokens for c in done),
        seconds,
        stats.median(tpots) if tpots else None,
        [c.token_ids for c in done],
        done[0].decode,
    )


def alone(fn, *args):
    """fn(*args) on a thread of its own that ends with it (engine.core.threads): each lane runs with the only
    OpenMP team in the process, as the dashboard's do. A team left on the main thread or a shared worker
    made every other lane ~10% slower at batch 1 (bench/threads.py)."""
    return run_in_thread(lambda: fn(*args))


def load(name: str, dtype: str, device: str, layout: bool):
    """The model in nn.Linear's layout (as Hugging Face ships it), or with engine.runtime.cpu_layout's measured one."""
    saved = os.environ.get("INFERENCE_LAB_CPU_LAYOUT")
    os.environ["INFERENCE_LAB_CPU_LAYOUT"] = "1" if layout else "0"
    try:
        return models.load_model(name, dtype=dtype, device=device)
    finally:
        if saved is None:
            os.environ.pop("INFERENCE_LAB_CPU_LAYOUT")
        else:
            os.environ["INFERENCE_LAB_CPU_LAYOUT"] = saved


LANE_KINDS = ("plain", "generate", "stream", "scheduler")


def lanes_for(
    lm, base, batch: int, cfg: GenerationConfig, compiled: bool, schedulers: list, kinds=LANE_KINDS
) -> list[Lane]:
    prompts = PROMPTS[:batch]
    ccfg = GenerationConfig(max_new_tokens=cfg.max_new_tokens, compile=True)
    sched = Scheduler(lm, max_batch=batch, record=False, idle_exit_s=0.0)
    schedulers.append(sched)
    suffix = "" if batch == 1 else f", batch {batch}"
    out = [
        Lane(f"plain generate{suffix}", batch, lambda: plain_generate(base, prompts, cfg)),
        Lane(f"engine generate{suffix}", batch, lambda: engine_generate(lm, prompts, cfg)),
    ]
    if lm is not base:
        out.append(
            Lane(f"plain generate, engine layout{suffix}", batch, lambda: plain_generate(lm, prompts, cfg))
        )
    if batch == 1:
        out.append(Lane("engine stream", 1, lambda: engine_stream(lm, prompts[0], cfg)))
    out.append(Lane(f"engine scheduler{suffix}", batch, lambda: engine_scheduler(sched, prompts, cfg)))
    out = [ln for ln in out if _kind(ln.name) in kinds or _kind(ln.name) == "plain"]  # plain: the baseline
    if compiled:
        csched = Scheduler(lm, max_batch=batch, record=False, idle_exit_s=0.0, compile_decode=True)
        schedulers.append(csched)
        out += [
            Lane(
                f"engine generate, compiled{suffix}",
                batch,
                lambda: engine_generate(lm, prompts, ccfg),
                eager_twin=f"engine generate{suffix}",
            ),
            Lane(
                f"engine scheduler, compiled{suffix}",
                batch,
                lambda: engine_scheduler(csched, prompts, cfg),
                eager_twin=f"engine scheduler{suffix}",
            ),
        ]
        out = [ln for ln in out if _kind(ln.name) in kinds or _kind(ln.name) == "plain"]
    return out


def _kind(lane: str) -> str:
    return "plain" if lane.startswith("plain") else lane.split(",")[0].removeprefix("engine ")


def bench_model(
    name: str,
    repeats: int,
    max_new_tokens: int,
    dtype: str,
    device: str,
    batches: list[int],
    compiled: bool = False,
    layout: bool = False,
    read_bandwidth: float | None = None,
    warmup: int = 2,
    kinds=LANE_KINDS,
) -> dict:
    base = alone(load, name, dtype, device, False)
    lm = alone(load, name, dtype, device, True) if layout else base
    layout_note = next((n for n in lm.notes if n.startswith("weight layout")), "weight layout: nn.Linear's")
    cfg = GenerationConfig(max_new_tokens=max_new_tokens)
    schedulers: list[Scheduler] = []
    lanes = [ln for b in batches for ln in lanes_for(lm, base, b, cfg, compiled, schedulers, kinds)]
    first_s: dict[str, float] = {}
    for lane in lanes:  # a compiled lane's first run compiles: timed on its own, kept out of the timed runs
        if lane.eager_twin:
            t0 = time.perf_counter()
            alone(lane.run)
            first_s[lane.name] = time.perf_counter() - t0
    for _ in range(warmup):  # allocator, kernels, caches, CUDA graphs recorded
        for lane in lanes:
            alone(lane.run)
    runs: dict[str, list[Run]] = {lane.name: [] for lane in lanes}
    for _ in range(repeats):
        for lane in lanes:
            runs[lane.name].append(alone(lane.run))
    for sc in schedulers:
        sc.close()
    rows = []
    by_name = {lane.name: lane for lane in lanes}
    for lane in lanes:
        done = runs[lane.name]
        rate = stats.median([r.tokens / r.seconds for r in done])
        tpot = _tpot(done)
        plain = next(n for n in runs if n.startswith("plain generate") and by_name[n].batch == lane.batch)
        plain_rate = stats.median([r.tokens / r.seconds for r in runs[plain]])
        achieved = lm.weights_bytes / tpot if tpot else None
        twin = lane.eager_twin
        rows.append(
            {
                "lane": lane.name,
                "batch": lane.batch,
                "decode": done[-1].decode,
                "tokens_per_s": rate,
                "tokens_per_s_runs": [r.tokens / r.seconds for r in done],
                "tpot_s": tpot,
                "x_plain": rate / plain_rate,
                "x_eager": rate / stats.median([r.tokens / r.seconds for r in runs[twin]]) if twin else None,
                # the decode steps alone (the prefill is eager in both): eager TPOT / this lane's TPOT
                "x_eager_tpot": (_tpot(runs[twin]) or math.nan) / tpot if twin and tpot else None,
                "achieved_weight_bytes_per_s": achieved,
                "fraction_of_read_bandwidth": achieved / read_bandwidth
                if achieved and read_bandwidth
                else None,
                "greedy_equal_plain": done[-1].token_ids == runs[plain][-1].token_ids,
                "greedy_equal_eager": done[-1].token_ids == runs[twin][-1].token_ids if twin else None,
            }
        )
    # the compile alone: the first run's time beyond the lane's typical run
    compile_s = {k: v - stats.median([r.seconds for r in runs[k]]) for k, v in first_s.items()}
    extra: dict = {}
    if lm.device == "cpu" and lm.dtype == "fp32":
        # the same weights' products alone, per kernel: the fastest a step could be (bench/decode_probe.py)
        from bench.decode_probe import floor

        extra["floor"] = alone(floor, lm)
    return {
        "model": name,
        "dtype": lm.dtype,
        "device": lm.device,
        "params": lm.params,
        "weights_bytes": lm.weights_bytes,
        "layout": layout_note,
        "max_new_tokens": max_new_tokens,
        "repeats": repeats,
        "compile_s": compile_s,
        "first_run_s": first_s,
        "compile_status": generation.compile_status(lm),
        "lanes": rows,
        **extra,
    }


def _tpot(done: list[Run]) -> float | None:
    tpots = [r.tpot_s for r in done if r.tpot_s]
    return stats.median(tpots) if tpots else None


def print_model(r: dict) -> None:
    print(f"\n{r['model']} {r['dtype']} on {r['device']}, {r['max_new_tokens']} new tokens; {r['layout']}")
    print(
        f"{'lane':<40}{'tok/s':>9}{'x plain':>9}{'x eager':>9}{'TPOT ms':>9}{'TPOT x eager':>14}{'step GB/s':>11}"
        f"{'% of BW':>9}  greedy = plain's"
    )
    status = r.get("compile_status") or {}
    if status.get("cudagraph_skips"):
        print(
            f"CUDA graphs skipped for {status['cudagraph_skips']} compiled graph(s): the compiled lanes ran without "
            "them (inductor's log above says why)"
        )
    for row in r["lanes"]:
        achieved, frac = row["achieved_weight_bytes_per_s"], row["fraction_of_read_bandwidth"]
        print(
            f"{row['lane']:<40}{row['tokens_per_s']:>9.1f}{row['x_plain']:>9.3f}"
            + (f"{row['x_eager']:>9.3f}" if row["x_eager"] else f"{'':>9}")
            + (f"{row['tpot_s'] * 1e3:>9.1f}" if row["tpot_s"] else f"{'':>9}")
            + (f"{row['x_eager_tpot']:>14.3f}" if row["x_eager_tpot"] else f"{'':>14}")
            + (f"{achieved / 1e9:>11.1f}" if achieved else f"{'':>11}")
            + (f"{100 * frac:>8.1f}%" if frac else f"{'':>9}")
            + f"  {row['greedy_equal_plain']}"
            + ("" if row["decode"] == "eager" or "compiled" in row["lane"] else f" ({row['decode']})")
            + ("" if "compiled" not in row["lane"] or row["decode"] == "compiled" else "  NOT COMPILED")
        )
    if r["compile_s"]:
        print(
            "compile (a compiled lane's first run beyond its typical run): "
            + ", ".join(f"{k} {v:.0f} s" for k, v in r["compile_s"].items())
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
            "  each engine lane against the nn.Linear kernel's floor: "
            + ", ".join(
                f"{row['lane']} {row['achieved_weight_bytes_per_s'] / linear:.0%}"
                for row in r["lanes"]
                if row["achieved_weight_bytes_per_s"]
            )
        )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["smollm2-135m-instruct", "gpt-neo-125m-random"])
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--batches", type=int, nargs="+", default=[1], help="batch sizes (1 8: both)")
    ap.add_argument(
        "--warmup", type=int, default=2, help="untimed rounds of every lane before the timed ones"
    )
    ap.add_argument(
        "--lanes",
        nargs="+",
        default=list(LANE_KINDS),
        choices=LANE_KINDS,
        help="which engine paths to time (plain generate, the baseline, always runs)",
    )
    ap.add_argument(
        "--compile",
        action="store_true",
        help="add the compiled lanes (GenerationConfig.compile, Scheduler(compile_decode=True)); compiles first",
    )
    ap.add_argument(
        "--layout",
        action="store_true",
        help="the engine's lanes on engine.runtime.cpu_layout's measured weight layout (INFERENCE_LAB_CPU_LAYOUT=1)",
    )
    ap.add_argument("--out", type=Path, default=None, help="default bench/results/decode-<machine>.json")
    args = ap.parse_args()
    if any(b < 1 or b > len(PROMPTS) for b in args.batches):
        ap.error(f"--batches: each from 1 to {len(PROMPTS)}")
    if os.environ.get(
        compat.TOKENIZER_DIR_ENV
    ):  # a lent GPU machine: the random presets' tokenizer is carried
        compat.install([])
    device = models.resolve_device(args.device)
    load_start = loadavg()
    info = run_in_thread(hardware.detect)
    bw = run_in_thread(lambda: hardware.measure_memory_bandwidth(device))
    rows = [
        bench_model(
            m,
            args.repeats,
            args.max_new_tokens,
            args.dtype,
            device,
            args.batches,
            args.compile,
            args.layout,
            bw.read_bytes_per_s,
            args.warmup,
            tuple(args.lanes),
        )
        for m in args.models
    ]
    load_end = loadavg()
    gpu = info.gpus[0].name if device.startswith("cuda") and info.gpus else None
    print(
        f"measured read bandwidth: {bw.read_bytes_per_s / 1e9:.1f} GB/s ({device}: {gpu or info.cpu_name}); "
        f"load average {load_start[0]:.1f} at the start, {load_end[0]:.1f} at the end"
    )
    for r in rows:
        print_model(r)
    result = {
        "benchmark": "decode",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": paths.machine_id(),
        "device": device,
        "hardware": {
            "cpu": info.cpu_name,
            "threads": info.torch_threads,
            "gpu": gpu,
            "gpus": [g.name for g in info.gpus],
            "torch": info.torch_version,
            "cuda": info.cuda_build,
        },
        "read_bandwidth_bytes_per_s": bw.read_bytes_per_s,
        "read_bandwidth_buffer_bytes": bw.buffer_bytes,
        "load_average": {"start": load_start, "end": load_end},
        "rows": rows,
    }
    tag = "" if device == "cpu" else f"-{device.split(':')[0]}"
    out = args.out or ROOT / "bench" / "results" / f"decode{tag}-{paths.machine_id()}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(to_jsonable(result), indent=2, allow_nan=False))  # NaN as null
    print(f"wrote {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
