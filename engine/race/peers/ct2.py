"""CTranslate2 (https://opennmt.net/CTranslate2/): `ct2-transformers-converter`, then `Generator`.

Conversion: `python -m ctranslate2.converters.transformers --model <hf folder> --output_dir <dir>
--quantization float32|int8`. Generation: `Generator.generate_tokens(prompt_tokens, max_length=N,
sampling_topk=1, end_token=[...])` yields one step per token (greedy with top-k 1); CTranslate2 takes token
strings, so the HF tokenizer's ids are turned into its tokens. Log-probabilities: `Generator.score_batch`
returns ln p of every token given the ones before it (teacher-forced), so bits per byte is measured.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from engine.race.peers import convert_util
from engine.race.peers.base import Generated

QUANTIZATION = {"fp32": "float32", "int8": "int8"}


class CT2Session:
    def __init__(self, folder: Path, precision: str, threads: int, device: str, eos_ids: set[int], tokenizer):
        import ctranslate2

        self.generator = ctranslate2.Generator(
            str(folder), device=device, intra_threads=threads, compute_type=QUANTIZATION[precision]
        )
        self.tokenizer = tokenizer
        self.end_tokens = tokenizer.convert_ids_to_tokens(sorted(eos_ids)) if eos_ids else None
        self.eos_ids = eos_ids

    def generate(self, prompt_ids: list[int], max_new_tokens: int) -> Generated:
        tokens = self.tokenizer.convert_ids_to_tokens(prompt_ids)
        ids, times = [], []
        for step in self.generator.generate_tokens(
            tokens, max_length=max_new_tokens, sampling_topk=1, end_token=self.end_tokens
        ):
            ids.append(int(step.token_id))
            times.append(time.perf_counter())
        done = time.perf_counter()
        if len(ids) < max_new_tokens and self.eos_ids and (not ids or ids[-1] not in self.eos_ids):
            ids.append(min(self.eos_ids))  # it stopped on EOS without yielding it: vanilla counts that step
            times.append(done)
        return Generated(ids, times)

    def token_logprobs(self, ids: list[int]) -> list[float] | None:
        tokens = self.tokenizer.convert_ids_to_tokens(ids)
        result = self.generator.score_batch([tokens], max_input_length=0)[0]
        return [float(x) for x in result.log_probs]


class CT2Backend:
    name = "ctranslate2"
    label = "CTranslate2"
    dist = "ctranslate2"
    module = "ctranslate2"
    logprobs_note = ""
    precisions = tuple(QUANTIZATION)

    def unsupported(self, architecture: str, model_type: str) -> str:
        from ctranslate2.converters import transformers as converter
        from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

        config_class = CONFIG_MAPPING_NAMES.get(model_type, "")
        if config_class in converter._MODEL_LOADERS:
            return ""
        return (
            f"its Transformers converter has no loader for {config_class or model_type} "
            f"({architecture}); it converts e.g. GPT-2, GPT-J, GPT-NeoX, Llama, Mistral, Qwen, Phi, but not "
            "GPT-Neo"
        )

    def convert(self, source: Path, target: Path, precision: str) -> list[str]:
        return convert_util.run(
            [
                sys.executable,
                "-m",
                "ctranslate2.converters.transformers",
                "--model",
                str(source),
                "--output_dir",
                str(target),
                "--quantization",
                QUANTIZATION[precision],
            ],
            "ct2-transformers-converter",
        )

    def open(self, folder, precision, threads, device, eos_ids, tokenizer) -> CT2Session:
        return CT2Session(folder, precision, threads, device, eos_ids, tokenizer)

    def cuda_note(self) -> str:
        import ctranslate2

        if ctranslate2.get_cuda_device_count() > 0:
            return ""
        return "CPU only here: CTranslate2 sees no CUDA device (its wheel has a CUDA path; it needs a GPU and cuBLAS)"


BACKEND = CT2Backend()
