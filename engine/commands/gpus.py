"""`python -m engine gpus`: the GPU catalog with the source of every figure (and, with --models, the model presets)."""

from __future__ import annotations

from engine.arch.resolve import hub_presets
from engine.calc.format import ridge as fmt_ridge
from engine.calc.memory import params_of
from engine.calc.prices import price_for
from engine.calc.specs import THIS_MACHINE, load_gpu_catalog, load_model_presets

HELP = "list the GPU catalog (peak FLOP/s, bandwidth, memory, ridge, sources); --models lists model presets"


def add_arguments(parser) -> None:
    parser.add_argument("--models", action="store_true", help="list the calculator's model presets instead")


def run(args) -> dict:
    if args.models:
        return {
            "models": [
                {
                    "name": k,
                    "arch": s.arch,
                    "params": params_of(s),
                    "layers": s.n_layer,
                    "hidden": s.hidden,
                    "heads": s.n_head,
                    "kv_heads": s.n_kv_head,
                    "source": s.source,
                }
                for k, s in load_model_presets().items()
            ],
            # by Hugging Face id: each counted on the meta device when asked for (too slow to count them all here)
            "hub_models": [{"name": k, "source": p.source} for k, p in hub_presets().items()],
        }
    rows = []
    for key, g in load_gpu_catalog().items():
        price = price_for(key)
        rows.append(
            {
                "key": key,
                "name": g.name,
                "memory_bytes": g.memory_bytes,
                "bandwidth_bytes_per_s": g.bandwidth_bytes_per_s,
                "peak_flops": dict(g.peak_flops),
                "ridge_fp16_ops_per_byte": g.ridge("fp16"),
                "sources": dict(g.sources),
                "notes": g.notes,
                # the list price --usd-per-hour defaults to and the cheapest answer compares (None: no price)
                "usd_per_gpu_hour": price.usd_per_gpu_hour if price else None,
                "price_source": price.label if price else None,
            }
        )
    return {"gpus": rows, "also": f"{THIS_MACHINE}: measured bandwidth and matmul FLOP/s of this machine"}


def format_text(r: dict) -> str:
    if "models" in r:
        return "\n".join(
            f"{m['name']:<16} {m['arch']:<8} {m['params']:>15,} params  L{m['layers']} h{m['hidden']} "
            f"heads {m['heads']}/{m['kv_heads']} kv   {m['source']}"
            for m in r["models"]
        ) + (
            f"\n\n{len(r['hub_models'])} more by Hugging Face id (their published config.json; --model takes the id "
            "or the name after the owner):\n" + "\n".join(f"  {m['name']}" for m in r["hub_models"])
        )
    key = max(len("key"), *(len(g["key"]) for g in r["gpus"])) + 2  # the longest key and two spaces
    lines = [
        f"{'key':<{key}}{'name':<34}{'mem GB':>8}{'GB/s':>7}{'fp16 TF':>9}{'ridge':>8}{'$/GPU-h':>9}  source"
    ]
    for g in r["gpus"]:
        usd = "-" if g["usd_per_gpu_hour"] is None else f"{g['usd_per_gpu_hour']:.2f}"
        lines.append(
            f"{g['key']:<{key}}{g['name']:<34}{g['memory_bytes'] / 1e9:>8.2f}"
            f"{g['bandwidth_bytes_per_s'] / 1e9:>7.0f}"
            f"{g['peak_flops'].get('fp16', 0) / 1e12:>9.0f}{fmt_ridge(g['ridge_fp16_ops_per_byte']):>8}{usd:>9}"
            f"  {g['sources']['bandwidth']}"
        )
    lines.append(r["also"])
    lines.append(
        "mem GB: what the driver reports (nvidia-smi's MiB x 1,048,576 bytes), not the datasheet's round figure; a "
        "serving engine budgets from CUDA's total, a little less (the estimate says that figure). $/GPU-h: the list "
        "price an estimate uses by default (`--json`: each one's provider, date and source)"
    )
    return "\n".join(lines)
