"""Where batch-1 decode time goes on this CPU, in four probes on the bundled model:

1. profile: torch.profiler over 10 decode steps of SmolLM2 (fp32, KV cache): the share of `aten::mm`;
2. layouts: one token through each of the model's weight shapes, in nn.Linear's layout (x @ W^T, W stored
   [out, in]) and pre-transposed (x @ W_t, W_t stored [in, out] contiguous), 30 copies of each so they stream
   from memory as a model's layers do: the bandwidth each reaches;
3. compile: a hand-written greedy decode loop with a static KV cache, eager against torch.compile of the step
   (inductor, default mode), tokens per second of the decode steps only, and whether greedy tokens agree;
   after the layouts probe, the layers whose pre-transposed layout was over 10% faster are switched to it
   first (eager measured again), so the compiled figure is of both changes together;
4. floor: the model's own 211 weight products for one token, in order, and nothing else (no norms, attention,
   sampling or Python between them), through nn.Linear (x @ W^T: MKL's matrix-vector product, which ran on one
   core here), the pre-transposed layout, and oneDNN with the weight pre-packed
   (torch.ops.mkldnn._reorder_linear_weight / _linear_pointwise, as inductor's freezing does), against this
   machine's read bandwidth measured in the same run: the fastest a decode step can be with each kernel.

    .venv/bin/python -m bench.decode_probe [--probes profile layouts compile floor] [--tokens 64] [--out F]

Prints what it measured and the load average; writes bench/results/decode-probe-<machine>.json (or --out). A benchmark,
not a test: run it on a quiet machine. The compile probe compiles for about a minute.
"""

from __future__ import annotations

import argparse
import json
import time
from datetime import UTC, datetime
from pathlib import Path

from bench.common import ROOT
from engine.core import paths
from engine.core.load import loadavg_1m
from engine.runtime import models

MODEL = "smollm2-135m-instruct"
PROMPT = "The history of the printing press begins"


def _first_ids(lm):
    import torch

    return torch.tensor([lm.tokenizer(PROMPT)["input_ids"]])


def profile(lm) -> dict:
    import torch
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    with torch.inference_mode():
        out = lm.model(_first_ids(lm), use_cache=True)
        cache, nxt = out.past_key_values, out.logits[:, -1:].argmax(-1)

        def step(nxt):
            o = lm.model(nxt, past_key_values=cache, use_cache=True, logits_to_keep=1)
            return o.logits[:, -1:].argmax(-1)

        for _ in range(5):
            nxt = step(nxt)
        with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(10):
                nxt = step(nxt)
    rows = prof.key_averages()
    total = sum(r.self_cpu_time_total for r in rows)
    top = sorted(rows, key=lambda r: r.self_cpu_time_total, reverse=True)[:8]
    return {
        "step_ms": total / 10 / 1e3,
        "top_ops": [{"op": r.key, "share": r.self_cpu_time_total / total, "calls": r.count} for r in top],
    }


def layouts(lm) -> list[dict]:
    import torch
    import torch.nn.functional as F

    shapes = sorted(
        {tuple(m.weight.shape) for m in lm.model.modules() if isinstance(m, torch.nn.Linear)},
        key=lambda s: s[0] * s[1],
    )

    def best(fn, x, mats) -> float:
        """Seconds per matrix: the fastest of 5 passes over `mats`, after one untimed pass."""
        with torch.inference_mode():
            for w in mats:
                fn(x, w)
            b = float("inf")
            for _ in range(5):
                t = time.perf_counter()
                for w in mats:
                    fn(x, w)
                b = min(b, (time.perf_counter() - t) / len(mats))
        return b

    rows = []
    for out_f, in_f in shapes:
        n = 30 if out_f * in_f < 10_000_000 else 2
        ws = [torch.randn(out_f, in_f) for _ in range(n)]
        x = torch.randn(1, in_f)
        nbytes = out_f * in_f * 4
        linear_s = best(F.linear, x, ws)
        transposed_s = best(torch.matmul, x, [w.t().contiguous() for w in ws])
        rows.append(
            {
                "shape_out_in": [out_f, in_f],
                "linear_gb_per_s": nbytes / linear_s / 1e9,
                "pretransposed_gb_per_s": nbytes / transposed_s / 1e9,
            }
        )
    return rows


def floor(lm, passes: int = 12) -> dict:
    """Median seconds for one token through every nn.Linear weight of the model, per kernel; and the read
    bandwidth measured now (engine.runtime.hardware), so the fractions come from one run. A floor only for a model
    larger than the CPU's caches (the 538 MB bundled model): a tiny one is read from cache, past 100%."""
    import torch
    import torch.nn.functional as F

    from engine.core import stats
    from engine.runtime import hardware

    weights = [m.weight.detach() for m in lm.model.modules() if isinstance(m, torch.nn.Linear)]
    nbytes = sum(w.numel() * w.element_size() for w in weights)
    xs = {k: torch.randn(1, k) for k in {w.shape[1] for w in weights}}

    def packed(x, p):
        return torch.ops.mkldnn._linear_pointwise(x, p, None, "none", [], "")

    # (kernel, the weight as that kernel wants it, in-features) per product
    kernels = {
        "nn.Linear (x @ W^T)": [(F.linear, w, w.shape[1]) for w in weights],
        "pre-transposed (x @ W_t)": [(torch.matmul, w.t().contiguous(), w.shape[1]) for w in weights],
    }
    if torch.backends.mkldnn.is_available():
        kernels["oneDNN, pre-packed"] = [
            (packed, torch.ops.mkldnn._reorder_linear_weight(w, 1), w.shape[1]) for w in weights
        ]
    out: dict = {"weights": len(weights), "bytes": nbytes, "kernels": {}}
    with torch.inference_mode():
        for name, calls in kernels.items():
            times = []
            for _ in range(passes + 1):
                t0 = time.perf_counter()
                for fn, w, k in calls:
                    fn(xs[k], w)
                times.append(time.perf_counter() - t0)
            s = stats.median(times[1:])
            out["kernels"][name] = {"seconds": s, "bytes_per_s": nbytes / s}
    bw = hardware.measure_memory_bandwidth("cpu").read_bytes_per_s
    out["read_bandwidth_bytes_per_s"] = bw
    for v in out["kernels"].values():
        v["fraction_of_read_bandwidth"] = v["bytes_per_s"] / bw
    return out


def pretranspose(model, shapes: set[tuple[int, int]]) -> int:
    """Make every nn.Linear whose [out, in] weight is in `shapes` multiply by a contiguous copy of its
    transpose (x @ W_t) instead of nn.Linear's x @ W^T; returns how many layers changed. A probe only: the copy
    doubles those weights' memory."""
    import torch

    changed = 0
    for mod in model.modules():
        if isinstance(mod, torch.nn.Linear) and tuple(mod.weight.shape) in shapes:
            mod.weight_t = mod.weight.detach().t().contiguous()
            mod.forward = lambda x, m=mod: (
                torch.matmul(x, m.weight_t)
                if m.bias is None
                else torch.addmm(m.bias, x.flatten(0, -2), m.weight_t).view(*x.shape[:-1], -1)
            )
            changed += 1
    return changed


def compile_loop(lm, tokens: int, pretransposed: set[tuple[int, int]] | None = None) -> dict:
    import torch
    from transformers import StaticCache

    ids = _first_ids(lm)
    m = lm.model

    def eager(nxt, cache, pos):
        return m(
            nxt, past_key_values=cache, cache_position=pos, position_ids=pos[None], use_cache=True
        ).logits

    def loop(step):
        cache = StaticCache(config=m.config, max_cache_len=ids.shape[1] + tokens + 8)
        with torch.inference_mode():
            out = m(ids, past_key_values=cache, cache_position=torch.arange(ids.shape[1]), use_cache=True)
            nxt = out.logits[:, -1].argmax(-1, keepdim=True)
            got = [int(nxt)]
            t0 = time.perf_counter()
            for i in range(tokens - 1):
                logits = step(nxt, cache, torch.tensor([ids.shape[1] + i]))
                nxt = logits[:, -1].argmax(-1, keepdim=True)
                got.append(int(nxt))
            return got, (tokens - 1) / (time.perf_counter() - t0)

    loop(eager)
    eager_ids, eager_rate = loop(eager)
    out: dict = {}
    if pretransposed:
        out["pretransposed_layers"] = pretranspose(m, pretransposed)
        loop(eager)
        ids_t, rate_t = loop(eager)
        out["pretransposed_eager_decode_tokens_per_s"] = rate_t
        out["pretransposed_greedy_tokens_equal"] = ids_t == eager_ids
    compiled = torch.compile(eager, dynamic=False)
    t0 = time.perf_counter()
    loop(compiled)
    compile_s = time.perf_counter() - t0
    compiled_ids, compiled_rate = loop(compiled)
    return {
        "eager_decode_tokens_per_s": eager_rate,
        "compiled_decode_tokens_per_s": compiled_rate,  # of the pre-transposed model when `pretransposed`
        "speedup": compiled_rate / eager_rate,
        "compile_s": compile_s,
        "greedy_tokens_equal": compiled_ids == eager_ids,
        "weights_bytes": lm.weights_bytes,
        **out,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--probes", nargs="+", default=["profile", "layouts", "compile", "floor"])
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument(
        "--out", type=Path, default=ROOT / "bench" / "results" / f"decode-probe-{paths.machine_id()}.json"
    )
    args = ap.parse_args()
    load_before = loadavg_1m()
    lm = models.load_model(MODEL, dtype="fp32", device="cpu")
    result: dict = {"model": MODEL, "dtype": "fp32", "load_average_before": load_before}
    if "profile" in args.probes:
        result["profile"] = p = profile(lm)
        print(f"decode step {p['step_ms']:.1f} ms (profiled); top self-CPU ops:")
        for r in p["top_ops"]:
            print(f"  {r['op']:<52}{r['share']:>7.1%}  {r['calls']} calls")
    if "layouts" in args.probes:
        result["layouts"] = rows = layouts(lm)
        print(f"{'weight [out, in]':<20}{'Linear GB/s':>13}{'pre-transposed GB/s':>21}")
        for r in rows:
            o, i = r["shape_out_in"]
            print(f"{f'[{o}, {i}]':<20}{r['linear_gb_per_s']:>13.1f}{r['pretransposed_gb_per_s']:>21.1f}")
    if "compile" in args.probes:
        faster = {
            tuple(r["shape_out_in"])
            for r in result.get("layouts", [])
            if r["pretransposed_gb_per_s"] > 1.1 * r["linear_gb_per_s"]
        }
        result["compile"] = c = compile_loop(lm, args.tokens, faster or None)
        if faster:
            print(
                f"pre-transposed {c['pretransposed_layers']} layers of shapes {sorted(faster)}: eager "
                f"{c['pretransposed_eager_decode_tokens_per_s']:.1f} tok/s; greedy tokens equal: "
                f"{c['pretransposed_greedy_tokens_equal']} (the compiled loop below runs on this model)"
            )
        print(
            f"static-cache decode loop: eager {c['eager_decode_tokens_per_s']:.1f} tok/s, compiled "
            f"{c['compiled_decode_tokens_per_s']:.1f} tok/s ({c['speedup']:.2f}x; compiled in {c['compile_s']:.0f} s); "
            f"weights read at {c['weights_bytes'] * c['compiled_decode_tokens_per_s'] / 1e9:.1f} GB/s compiled; "
            f"greedy tokens equal: {c['greedy_tokens_equal']}"
        )
    if "floor" in args.probes:
        result["floor"] = f = floor(lm)
        print(
            f"the {f['weights']} weight products alone ({f['bytes'] / 1e6:.0f} MB), one token; read bandwidth "
            f"{f['read_bandwidth_bytes_per_s'] / 1e9:.1f} GB/s measured in this run:"
        )
        for name, k in f["kernels"].items():
            print(
                f"  {name:<28}{1e3 * k['seconds']:>7.1f} ms {k['bytes_per_s'] / 1e9:>6.1f} GB/s "
                f"{k['fraction_of_read_bandwidth']:>5.0%} of read bandwidth"
            )
    result["load_average_after"] = loadavg_1m()
    result["date"] = datetime.now(UTC).isoformat(timespec="seconds")
    print(f"load average before {load_before:.2f}, after {result['load_average_after']:.2f}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(f"wrote {args.out.relative_to(ROOT) if args.out.is_relative_to(ROOT) else args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
