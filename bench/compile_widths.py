"""Compiled decode across buffer widths: does one compiled step serve a second width, and which compile settings
keep it compiled? (The lent H200, 2026-12-04: bench.decode's compiled lanes recompiled when the slot cache grew
from 128 to 192 columns - "tensor 'mask' size mismatch at index 1. expected 128, actual 192" - and the recompile
failed with an empty AssertionError, so every later step ran eagerly; on this CPU the same widths share one graph.)

For each variant of engine.runtime.compiled._compile, a fresh model generates greedily at three prompt lengths
(buffers of 128, 192 and 256 columns) and records the decoder's status after each, the TPOT, and the traceback of
a failure. (Marking only the mask's width dynamic is refused: dynamo ties it to the cache buffers' width.) Runs on a CUDA machine (scripts/gpu_check.sh, ONLY=compile-widths) or here on the CPU.

    python -m bench.compile_widths --model gpt-neo-125m-random --device cuda --dtype fp16 --out FILE
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
import traceback
from datetime import UTC, datetime

import torch

VARIANTS = {  # name: torch.compile keyword arguments besides fullgraph (None: the engine's own choice)
    "engine": None,
    "dynamic-no-cudagraphs": {"dynamic": True, "mode": "default"},
    "static-per-width": {"dynamic": False},
}
PROMPT_WORDS = (10, 80, 150)  # with 64 new tokens: buffers of 128, 192 and 256 columns


def run_variant(name: str, model: str, device: str, dtype: str, tokens: int) -> dict:
    from engine.runtime import compiled, generation, models
    from engine.runtime.settings import GenerationConfig

    torch._dynamo.reset()
    original_compile, original_failure = compiled._compile, compiled._compile_failure
    failures: list[str] = []

    def failure(exc: BaseException) -> str:
        failures.append("".join(traceback.format_exception(exc))[-3000:])
        print(f"--- {name}: compile failure\n{failures[-1]}", file=sys.stderr, flush=True)
        return original_failure(exc)

    kw = VARIANTS[name]
    if isinstance(kw, dict):
        compiled._compile = lambda fn, mode: torch.compile(fn, fullgraph=True, **{"mode": mode, **kw})
    compiled._compile_failure = failure
    rows = []
    try:
        lm = models.load_model(model, device=device, dtype=dtype)
        for words in PROMPT_WORDS:
            cfg = GenerationConfig(max_new_tokens=tokens, compile=True)
            t0 = time.perf_counter()
            c = generation.generate(lm, "hello " * words, cfg)
            wall = time.perf_counter() - t0
            again = generation.generate(lm, "hello " * words, cfg)  # the same shape again: no compile in it
            status = compiled.compile_status(lm)
            rows.append(
                {
                    "prompt_words": words,
                    "prompt_tokens": c.measurement.prompt_tokens,
                    "first_wall_s": wall,
                    "tpot_s": again.measurement.tpot_s,
                    "status": status.to_dict() if status else None,
                }
            )
            print(name, words, f"{wall:.1f} s", f"tpot {1e3 * (again.measurement.tpot_s or 0):.2f} ms",
                  status.state if status else None, status.reason if status else "", flush=True)  # fmt: skip
    except Exception as exc:  # a probe: record whatever broke and go on to the next variant
        failures.append("".join(traceback.format_exception(exc))[-3000:])
    finally:
        compiled._compile, compiled._compile_failure = original_compile, original_failure
    return {"variant": name, "rows": rows, "failures": failures}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="tiny-gpt-neo")
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="fp32")
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--out", default="")
    a = p.parse_args(argv)
    from engine.race import compat

    compat.install(
        []
    )  # on a lent GPU: the random presets read the carried tokenizer (INFERENCE_LAB_TOKENIZER_DIR)
    results: list[dict] = []
    for v in a.variants.split(
        ","
    ):  # the record rewritten after each variant: a time-boxed run keeps what it did
        results.append(run_variant(v, a.model, a.device, a.dtype, a.tokens))
        if a.out:
            with open(a.out, "w") as f:
                json.dump(_record(a, results), f, indent=2, default=str)
    return 0


def _record(a: argparse.Namespace, results: list[dict]) -> dict:
    return {
        "benchmark": "compile_widths",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": platform.node(),
        "device": torch.cuda.get_device_name(0) if a.device == "cuda" else platform.processor() or "cpu",
        "torch": torch.__version__,
        "model": a.model,
        "dtype": a.dtype,
        "results": results,
    }


if __name__ == "__main__":
    sys.exit(main())
