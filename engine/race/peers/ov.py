"""OpenVINO GenAI (https://openvinotoolkit.github.io/openvino.genai/): optimum-intel's exporter, then
`LLMPipeline` on the CPU.

Conversion: `optimum-cli export openvino --model <hf folder> --task text-generation-with-past
--weight-format fp32|int8 <dir>`, run by the side environment .venv-peers (optimum-intel 2.2.0 pins
transformers<5.6; scripts/install_peers.sh). Generation: token ids in (`TokenizedInputs`, so the engine's
tokenizer and chat template are not applied a second time: `apply_chat_template=False`), greedy, a
`StreamerBase` whose `write` is called once per new token. `INFERENCE_PRECISION_HINT="f32"`: on CPUs with
bf16 the plugin would otherwise compute in bf16. Log-probabilities: not exposed (LLMPipeline returns the
generated tokens and a sequence score, not the log-probability of a given text).
"""

from __future__ import annotations

import time
from pathlib import Path

from engine.race.peers import convert_util
from engine.race.peers.base import Generated, export_cli


class OVSession:
    def __init__(self, folder: Path, precision: str, threads: int, device: str, eos_ids: set[int], tokenizer):
        import openvino_genai as og

        self.og = og
        self.pipe = og.LLMPipeline(
            str(folder), "CPU", INFERENCE_PRECISION_HINT="f32", INFERENCE_NUM_THREADS=threads
        )
        self.eos_ids = eos_ids

    def generate(self, prompt_ids: list[int], max_new_tokens: int) -> Generated:
        import numpy as np
        import openvino as ov

        og = self.og
        cfg = og.GenerationConfig()
        cfg.max_new_tokens = max_new_tokens
        cfg.do_sample = False
        cfg.apply_chat_template = False
        if self.eos_ids:
            cfg.stop_token_ids = set(self.eos_ids)
        times: list[float] = []

        class Clock(og.StreamerBase):
            def write(self, token):  # one new token (or a list of them)
                now = time.perf_counter()
                times.extend([now] * (len(token) if isinstance(token, list) else 1))
                return og.StreamingStatus.RUNNING

            def end(self):
                return None

        ids = np.asarray([prompt_ids], dtype=np.int64)
        inputs = og.TokenizedInputs(ov.Tensor(ids), ov.Tensor(np.ones_like(ids)))
        out = self.pipe.generate(inputs, cfg, Clock())
        done = time.perf_counter()
        new = [int(t) for t in out.tokens[0]]
        if len(new) < max_new_tokens and self.eos_ids and (not new or new[-1] not in self.eos_ids):
            new.append(min(self.eos_ids))  # stopped on EOS without returning it: vanilla counts that step
        times = (times + [done] * len(new))[: len(new)] if len(times) < len(new) else times[: len(new)]
        return Generated(new, times)

    def token_logprobs(self, ids: list[int]) -> list[float] | None:
        return None


class OVBackend:
    name = "openvino"
    label = "OpenVINO GenAI"
    dist = "openvino-genai"
    module = "openvino_genai"
    logprobs_note = (
        "not exposed: OpenVINO GenAI's LLMPipeline returns generated tokens and a sequence score, "
        "not the log-probability of a given text"
    )
    precisions = ("fp32", "int8")

    def unsupported(self, architecture: str, model_type: str) -> str:
        return ""  # optimum-intel exports GPT-Neo, Llama and most decoder families; a failure says why

    def convert(self, source: Path, target: Path, precision: str) -> list[str]:
        cli, why = export_cli()
        if cli is None:
            raise RuntimeError(why)
        return convert_util.run(
            [
                str(cli),
                "export",
                "openvino",
                "--model",
                str(source),
                "--task",
                "text-generation-with-past",
                "--weight-format",
                precision,
                str(target),
            ],
            "optimum-cli export openvino",
        )

    def open(self, folder, precision, threads, device, eos_ids, tokenizer) -> OVSession:
        return OVSession(folder, precision, threads, device, eos_ids, tokenizer)

    def cuda_note(self) -> str:
        return "CPU only here: OpenVINO's GPU device is Intel GPUs; it has no CUDA path"


BACKEND = OVBackend()
