"""What a simulated sweep is asked: the model, the GPUs and engine, the scheduler's knobs and the load generator's
workload. One Spec (engine.core.spec): `python -m engine simulate`'s flags, the Serving page's widgets and
bench/simulate.py read its defaults and bounds. The SLOs are the load generator's own Spec (engine.loadgen.SLO)."""

from __future__ import annotations

from dataclasses import dataclass

from engine.calc.report import DTYPE_DEFAULT_WORDS, ENGINE_CHOICES
from engine.calc.serving_memory import utilization_option
from engine.calc.specs import PRECISIONS, THIS_MACHINE
from engine.core.errors import InvalidParameterError
from engine.core.spec import Spec, option
from engine.loadgen.workload import LoadSpecError, parse_levels

MODES = ("concurrency", "rate")  # the command's words; the load generator's are "concurrency" and "poisson"
STARTS = (
    "spread",
    "together",
)  # how fixed users start: a deployment's steady state, or a load generator's sweep
# the scheduler's cap where the server names none: SGLang's (its own default, sized from its pool, is not modelled;
# the launch command states this one). vLLM's is its default for the GPU (engine.calc.serving_startup.vllm_max_num_seqs)
DEFAULT_GPU_BATCH = 256
MAX_GPU_BATCH = (
    4096  # the most users the solver searches (engine.simulate.solve): a larger cap would never bind
)


@dataclass(frozen=True)
class SimulateSpec(Spec):
    model: str | None = option(
        None, "a calculator or engine preset (python -m engine gpus --models); or give --config", kind=str
    )
    config: str | None = option(None, "path of a Hugging Face config.json (or its folder)", kind=str)
    gpu: str = option(
        "h100-sxm", f"a GPU catalogue key (python -m engine gpus), or {THIS_MACHINE} (its calibration)"
    )
    n_gpus: int = option(1, "GPUs in tensor parallel", lo=1, hi=1024, flag="--gpus", label="GPUs")
    dtype: str = option(
        "bf16",
        "weight precision",
        kind=str,
        choices=PRECISIONS,
        cli_help=f"weight precision (default: {DTYPE_DEFAULT_WORDS})",
    )
    kv_dtype: str | None = option(
        None, "KV cache precision (default: the weights')", kind=str, choices=PRECISIONS
    )
    engine: str = option(
        "vllm",
        "the engine class whose step times, fitted on its published runs, are used",
        choices=ENGINE_CHOICES,
    )
    mode: str = option("concurrency", "fixed users (concurrency) or Poisson arrivals (rate)", choices=MODES)
    sweep: str = option("1,4,16", "load levels: users, or requests per second with --mode rate")
    n_requests: int = option(
        200,
        "requests per level",
        lo=1,
        hi=100_000,
        flag="--requests",
        label="requests",
        kind=int,
        cli_help="requests per level (default: 200, or 20 per user at the most users asked where that is more, so "
        "every level of fixed users reaches steady state)",
    )
    prompt_tokens: int = option(512, "prompt tokens per request", lo=1, hi=1_000_000)
    prompt_tokens_max: int | None = option(
        None, "draw prompt lengths uniformly up to this (seeded)", kind=int, lo=1, hi=1_000_000
    )
    output_tokens: int = option(128, "output tokens per request (ignore_eos: every request makes them)", lo=1)
    output_tokens_max: int | None = option(None, "draw output lengths uniformly up to this", kind=int, lo=1)
    start: str | None = option(
        None,
        "how the fixed users start: spread (steady state, as a deployment's users run: their first requests spread "
        "over one round and left out of the figures) or together (all at once, as a load generator's sweep starts "
        f"them) (default: spread on a GPU; together on {THIS_MACHINE}, to set beside the load generator's sweeps)",
        kind=str,
        choices=STARTS,
    )
    burstiness: float = option(1.0, "Gamma arrivals as vLLM's bench serve: 1 = Poisson, < 1 burstier")
    seed: int = option(0, "seed of the workload (lengths and arrival times), the load generator's")
    max_batch: int | None = option(
        None,
        "the scheduler's max batch, the server's --max-num-seqs (default: vLLM's own for the GPU: 1024 on GPUs of "
        f"70 GiB or more other than A100s, 256 on the rest; {DEFAULT_GPU_BATCH} with --engine sglang; the server's 8 "
        f"on {THIS_MACHINE})",
        kind=int,
        lo=1,
        hi=MAX_GPU_BATCH,
    )
    prefill_chunk_tokens: int | None = option(
        None,
        "tokens of one prefill chunk (default: vLLM's max-num-batched-tokens on a GPU; the server's 256 on "
        f"{THIS_MACHINE})",
        kind=int,
        lo=1,
    )
    mixed_prompt_tokens: int | None = option(
        None,
        "prompt tokens a decode step may carry (default: the chunk on a GPU, as vLLM's chunked prefill; the "
        f"server's 16 on {THIS_MACHINE})",
        kind=int,
        lo=1,
    )
    gpu_memory_utilization: float | None = utilization_option(
        "vLLM's --gpu-memory-utilization: sizes the KV budget (default: vLLM's)"
    )
    keep_going: bool = option(False, "simulate every level even after one misses the SLOs")

    def validate(self) -> SimulateSpec:
        if bool(self.model) == bool(self.config):
            raise InvalidParameterError(
                "give the model as --model (a preset) or --config (a config.json), one of them"
            )
        super().validate()
        self.levels()
        for lo_name, hi_name in (
            ("prompt_tokens", "prompt_tokens_max"),
            ("output_tokens", "output_tokens_max"),
        ):
            hi = getattr(self, hi_name)
            if hi is not None and hi < getattr(self, lo_name):
                raise InvalidParameterError(
                    f"{hi_name.replace('_', ' ')} ({hi}) is below {lo_name.replace('_', ' ')} "
                    f"({getattr(self, lo_name)}); raise it or leave it out"
                )
        if self.burstiness <= 0:
            raise InvalidParameterError(
                f"burstiness must be a positive number (1 = Poisson), got {self.burstiness}"
            )
        return self

    def levels(self) -> tuple[float, ...]:
        """The sweep's levels as numbers (users must be whole)."""
        try:
            levels = parse_levels(self.sweep)
        except LoadSpecError as exc:
            raise InvalidParameterError(str(exc)) from None
        if self.mode == "concurrency" and any(v != int(v) for v in levels):
            bad = next(v for v in levels if v != int(v))
            raise InvalidParameterError(
                f"users are whole numbers; {bad:g} is not (use --mode rate for a rate)"
            )
        return tuple(sorted(set(levels)))

    @property
    def starts_together(self) -> bool:
        """Fixed users that all send their first request at once (the load generator's sweep)."""
        default = "together" if self.gpu == THIS_MACHINE else "spread"
        return self.mode == "concurrency" and (self.start or default) == "together"

    @property
    def lock_step(self) -> bool:
        """Fixed users started together whose requests all have the same lengths: they finish each round together
        too, so each round's first tokens wait for all of its prefills."""
        return self.starts_together and self.prompt_tokens_max is None and self.output_tokens_max is None

    @property
    def title(self) -> str:
        return f"{self.model or self.config} on {self.gpu} x {self.n_gpus}, {self.engine}"
