"""ONNX Runtime GenAI (https://onnxruntime.ai/docs/genai/): its model builder, then `og.Generator`.

Conversion: `python -m onnxruntime_genai.models.builder -i <hf folder> -m <hf folder> -o <dir> -p fp32|int4
-e cpu -c <scratch>` (the builder also needs `onnx` and `onnx-ir`, which it does not declare). Generation:
`append_tokens(prompt)`, then `generate_next_token()` until `is_done()`, greedy (`do_sample=False`);
`max_length` counts the prompt. Log-probabilities: `get_output("logits")` after appending a text gives
the next-token logits of every appended position (`get_logits()` only the last), so bits per byte is measured.
"""

from __future__ import annotations

import re
import sys
import tempfile
import time
from pathlib import Path

from engine.race.peers import convert_util
from engine.race.peers.base import Generated


def _log_softmax_at(logits, targets) -> list[float]:
    import numpy as np

    x = np.asarray(logits, dtype=np.float64)  # [n, vocab]
    x = x - x.max(axis=-1, keepdims=True)
    logz = np.log(np.exp(x).sum(axis=-1))
    return [float(x[i, t] - logz[i]) for i, t in enumerate(targets)]


class ORTSession:
    def __init__(self, folder: Path, precision: str, threads: int, device: str, eos_ids: set[int], tokenizer):
        import onnxruntime_genai as og

        self.og = og
        cfg = og.Config(str(folder))
        cfg.clear_providers()  # the CPU execution provider
        self.model = og.Model(cfg)

    def _generator(self, max_length: int):
        params = self.og.GeneratorParams(self.model)
        params.set_search_options(do_sample=False, max_length=max_length)
        return self.og.Generator(self.model, params)

    def generate(self, prompt_ids: list[int], max_new_tokens: int) -> Generated:
        import numpy as np

        gen = self._generator(len(prompt_ids) + max_new_tokens)
        gen.append_tokens(np.asarray([prompt_ids], dtype=np.int32))
        ids, times = [], []
        while not gen.is_done():
            gen.generate_next_token()
            ids.append(int(gen.get_next_tokens()[0]))
            times.append(time.perf_counter())
        return Generated(ids, times)

    def token_logprobs(self, ids: list[int]) -> list[float] | None:
        import numpy as np

        gen = self._generator(len(ids) + 1)
        gen.append_tokens(np.asarray([ids[:-1]], dtype=np.int32))
        logits = np.asarray(
            gen.get_output("logits")
        )  # [1, n, vocab]: every appended position (get_logits: last only)
        logits = logits.reshape(-1, logits.shape[-1])
        if logits.shape[0] != len(ids) - 1:
            return None
        return _log_softmax_at(logits, ids[1:])


class ORTBackend:
    name = "onnxruntime-genai"
    label = "ONNX Runtime GenAI"
    dist = "onnxruntime-genai"
    module = "onnxruntime_genai"
    logprobs_note = ""
    precisions = ("fp32", "int8", "int4")

    def supported_architectures(self) -> set[str]:
        import onnxruntime_genai.models.builder as builder

        text = Path(builder.__file__).read_text(encoding="utf-8")
        return set(re.findall(r'config\.architectures\[0\] == "(\w+)"', text))

    def unsupported(self, architecture: str, model_type: str) -> str:
        if architecture in self.supported_architectures():
            return ""
        return (
            f"its model builder has no recipe for {architecture or model_type} (it builds e.g. Llama, "
            "Mistral, Phi, Qwen, Gemma; not GPT-Neo)"
        )

    def convert(self, source: Path, target: Path, precision: str) -> list[str]:
        with tempfile.TemporaryDirectory(prefix="ort-builder-cache-") as scratch:
            return convert_util.run(
                [
                    sys.executable,
                    "-m",
                    "onnxruntime_genai.models.builder",
                    "-i",
                    str(source),
                    "-m",
                    str(source),
                    "-o",
                    str(target),
                    "-p",
                    precision,
                    "-e",
                    "cpu",
                    "-c",
                    scratch,
                ],
                "onnxruntime_genai.models.builder",
            )

    def open(self, folder, precision, threads, device, eos_ids, tokenizer) -> ORTSession:
        return ORTSession(folder, precision, threads, device, eos_ids, tokenizer)

    def cuda_note(self) -> str:
        return (
            "CPU only here: the onnxruntime-genai wheel is the CPU build; its CUDA build is the separate "
            "onnxruntime-genai-cuda package, not installed"
        )


BACKEND = ORTBackend()
