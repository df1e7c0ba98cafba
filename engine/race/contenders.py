"""The latency race's contenders: what each one changes relative to vanilla transformers generation.

Chapter 4.3.4 races vanilla GPT-Neo against DeepSpeed inference with kernel injection
(`deepspeed.init_inference(model, dtype=torch.float16, replace_with_kernel_inject=True)`). The other
contenders answer "what actually makes this faster": the KV cache (section 4.3.1), precision (4.2), the
fastest pure-PyTorch paths transformers offers (SDPA attention, static cache + torch.compile) and the engine's own
compiled decode (a static slot cache and a torch.compile'd step, CUDA graphs on a GPU: gpt-fast's recipe).

A Contender is data; the worker (engine/race/worker.py) turns it into load/init/generate calls, and
says in its result what actually ran (a contender whose feature the model or machine lacks reports
"skipped" with the reason instead of pretending).
"""

from __future__ import annotations

import os
import sys
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from engine.core.errors import InvalidParameterError

ROOT = Path(__file__).resolve().parents[2]
# The pinned side environment made by scripts/make_ds_env.sh (transformers 4.42.4 + deepspeed 0.19.8).
DS_PYTHON_ENV = "INFERENCE_LAB_DS_PYTHON"
DEFAULT_DS_VENV = ROOT / ".venv-ds" / "bin" / "python"
# scripts/install_peers.sh leaves this marker when the peer runtimes would have changed the main .venv's pins
# and went into the side environment instead: the peer workers are then started with its python.
PEERS_VENV = ROOT / ".venv-peers"
PEERS_IN_SIDE_ENV = PEERS_VENV / ".runtimes-in-side-env"


@dataclass(frozen=True)
class Contender:
    """One configuration in the race. `dtype` is "chosen" (the race's precision), "fp32" or "half"
    (fp16 on a CUDA GPU, bf16 on the CPU, where fp16 runs through slow reference kernels)."""

    name: str
    label: str
    description: str
    dtype: str = "chosen"
    use_cache: bool = True
    deepspeed: bool = False
    kernel_inject: bool = False  # requested; the result's `kernel_inject` says whether it was applied
    attn_implementation: str | None = None  # None keeps what transformers picked when loading
    static_cache: bool = False
    compile: bool = False  # torch.compile of the forward (transformers auto-compiles a static cache on CUDA)
    compiled_decode: bool = False  # the engine's compiled decode (GenerationConfig.compile)
    python: str | None = None  # interpreter for the worker process; None = the one running the race
    group: str = "levers"  # "engines": a whole inference engine; "levers": one change to vanilla transformers
    peer: str | None = (
        None  # a peer engine (engine/race/peers): "openvino", "onnxruntime-genai", "ctranslate2"
    )
    precision: str | None = None  # the peer's weight format after conversion: fp32, int8, int4

    def engine_name(self) -> str:
        if self.peer:
            return self.peer
        return "deepspeed" if self.deepspeed else "transformers"

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> Contender:
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})

    def interpreter(self) -> str:
        return self.python or sys.executable


CONTENDERS: dict[str, Contender] = {
    c.name: c
    for c in (
        Contender(
            "vanilla",
            "Vanilla",
            "transformers `generate`, KV cache on, the race's precision: the baseline",
            group="engines",
        ),
        Contender(
            "deepspeed",
            "DeepSpeed",
            "deepspeed.init_inference with kernel injection on a CUDA GPU (the chapter's setup); on the CPU "
            "DeepSpeed's pass-through engine (no kernels replaced), labelled as such",
            deepspeed=True,
            kernel_inject=True,
            group="engines",
        ),
        Contender(
            "deepspeed-pinned",
            "DeepSpeed (pinned env)",
            "the same as DeepSpeed, run by its pinned side environment "
            "(transformers 4.42.4, DeepSpeed's last known good for kernel injection)",
            deepspeed=True,
            kernel_inject=True,
            group="engines",
        ),
        Contender(
            "no-kv-cache",
            "KV cache off",
            "use_cache=False: every step recomputes keys and values for the whole sequence (what the cache buys)",
            use_cache=False,
        ),
        Contender("fp32", "fp32", "full precision (4 bytes per weight)", dtype="fp32"),
        Contender(
            "half",
            "half precision",
            "fp16 on a CUDA GPU, bf16 on the CPU (2 bytes per weight: half the bytes read per token)",
            dtype="half",
        ),
        Contender(
            "sdpa",
            "SDPA attention",
            "torch.nn.functional.scaled_dot_product_attention (fused attention kernels) where the model supports it",
            attn_implementation="sdpa",
        ),
        Contender(
            "eager",
            "eager attention",
            "transformers' plain matmul-softmax-matmul attention, to show what SDPA buys",
            attn_implementation="eager",
        ),
        Contender(
            "static-compile",
            "static cache + compile",
            "a preallocated (static) KV cache with torch.compile of the forward, transformers' fastest "
            "pure-PyTorch decode path, where the model supports it",
            static_cache=True,
            compile=True,
        ),
        Contender(
            "compiled",
            "compiled decode",
            "the engine's compiled decode: vanilla's prefill, then a static (preallocated) KV slot cache and a "
            "torch.compile'd decode step, replayed as CUDA graphs on a GPU; its compile is in the warm-up",
            compiled_decode=True,
        ),
        *(
            Contender(name, label, desc, group="engines", peer=peer, precision=precision)
            for name, label, desc, peer, precision in (
                (
                    "openvino",
                    "OpenVINO fp32",
                    "OpenVINO GenAI's LLMPipeline on the CPU, model exported by "
                    "optimum-intel with fp32 weights",
                    "openvino",
                    "fp32",
                ),
                (
                    "openvino-int8",
                    "OpenVINO int8",
                    "OpenVINO GenAI, int8 weights (NNCF weight compression, per-channel asymmetric)",
                    "openvino",
                    "int8",
                ),
                (
                    "onnxruntime-genai",
                    "ONNX Runtime GenAI fp32",
                    "ONNX Runtime GenAI on the CPU, model built by its model builder with fp32 weights",
                    "onnxruntime-genai",
                    "fp32",
                ),
                (
                    "onnxruntime-genai-int4",
                    "ONNX Runtime GenAI int4",
                    "ONNX Runtime GenAI, int4 weights (MatMulNBits, block 32)",
                    "onnxruntime-genai",
                    "int4",
                ),
                (
                    "ctranslate2",
                    "CTranslate2 float32",
                    "CTranslate2's Generator, model converted by "
                    "ct2-transformers-converter with float32 weights",
                    "ctranslate2",
                    "fp32",
                ),
                ("ctranslate2-int8", "CTranslate2 int8", "CTranslate2, int8 weights", "ctranslate2", "int8"),
            )
        ),
        Contender(
            "vllm",
            "vLLM",
            "vLLM's offline LLM in its own environment, the race's precision, greedy; its engine "
            "stepped by hand for per-token times; eager on a CPU",
            group="engines",
            peer="vllm",
        ),
    )
}
PEERS: tuple[str, ...] = ("openvino", "onnxruntime-genai", "ctranslate2")
DEFAULT_CONTENDERS: tuple[str, ...] = (
    "vanilla",
    "openvino",
    "onnxruntime-genai",
    "ctranslate2",
    "deepspeed",
    "no-kv-cache",
    "half",
    "sdpa",
)
# Not in the default race: the compiled lane compiles in its own worker process first (25-65 s on a 2-core CPU
# for the models here, more for SmolLM2), longer than the rest of a default race; choose it by name.
BASELINE = "vanilla"


def ds_python() -> tuple[str | None, str]:
    """The pinned DeepSpeed interpreter, or None and the reason it is not there."""
    configured = os.environ.get(DS_PYTHON_ENV)
    if configured:
        if Path(configured).is_file() and os.access(configured, os.X_OK):
            return configured, f"{DS_PYTHON_ENV}={configured}"
        return None, f"{DS_PYTHON_ENV} is set to {configured!r}, which is not an executable file"
    if DEFAULT_DS_VENV.is_file():
        return str(DEFAULT_DS_VENV), str(DEFAULT_DS_VENV.relative_to(ROOT))
    return None, (
        "the pinned side environment does not exist: create it with `bash scripts/make_ds_env.sh` "
        f"(makes .venv-ds) or point {DS_PYTHON_ENV} at its python"
    )


def resolve(names: list[str] | tuple[str, ...], pythons: dict[str, str] | None = None) -> list[Contender]:
    """Contenders by name, baseline first, each with its interpreter. Raises InvalidParameterError."""
    names = [n.strip() for n in names if n and n.strip()]
    if not names:
        raise InvalidParameterError(
            f"no contenders chosen: pick at least one of {', '.join(CONTENDERS)} (vanilla is the baseline)"
        )
    unknown = [n for n in names if n not in CONTENDERS]
    if unknown:
        raise InvalidParameterError(
            f"unknown contender(s) {', '.join(unknown)}; choose from {', '.join(CONTENDERS)}"
        )
    pythons = dict(pythons or {})
    bad = [n for n in pythons if n not in CONTENDERS]
    if bad:
        raise InvalidParameterError(f"--python names unknown contender(s) {', '.join(bad)}")
    ordered = [BASELINE] + [
        n for n in dict.fromkeys(names) if n != BASELINE
    ]  # the baseline is always measured
    out = []
    for n in ordered:
        c = CONTENDERS[n]
        if n in pythons:
            c = replace(c, python=pythons[n])
        elif c.peer and PEERS_IN_SIDE_ENV.is_file():
            c = replace(c, python=str(PEERS_VENV / "bin" / "python"))
        elif n == "deepspeed-pinned":
            path, _ = ds_python()
            c = replace(c, python=path or "")  # "" makes the runner skip it with missing_reason()
        elif n == "vllm":
            path, _ = vllm_python()
            c = replace(c, python=path or "")
        out.append(c)
    return out


def vllm_python() -> tuple[str | None, str]:
    """.venv-vllm's interpreter (engine.backends.vllm), or None and the sentence saying how to make it."""
    from engine.backends.vllm import availability

    build, why = availability()
    return (build.python, build.label) if build else (None, why)


def missing_reason(c: Contender) -> str:
    """Why a lane that needs its own environment has none."""
    return vllm_python()[1] if c.peer == "vllm" else ds_python()[1]
