"""Quantized weight formats: exact storage bytes, scales and zero points included.

A quantized tensor stores `bits` per weight plus, for every group of `group_size` consecutive weights, a scale
(and, for asymmetric formats, a zero point or minimum). Bytes for n weights in groups of g:

    bytes = ceil(n / g) * (g * bits / 8 + scale_bytes + zero_bytes)

so the effective bits per weight are bits + 8 * (scale_bytes + zero_bytes) / g. Sources:
- GGUF block formats: ggml's `GGML_QUANT_SIZES` (gguf-py, gguf/constants.py: (block size, bytes per block)) and
  ggml-common.h: Q8_0 = fp16 scale + 32 int8 (34 B per 32); Q4_0 = fp16 scale + 32 x 4 bit (18 B per 32);
  Q4_1 = fp16 scale + fp16 min + 32 x 4 bit (20 B per 32); Q5_0 22 B, Q5_1 24 B per 32; the k-quants Q2_K 84,
  Q3_K 110, Q4_K 144, Q5_K 176, Q6_K 210 B per 256.
- bitsandbytes 0.50 nf4 (blocks of 64, no double quantization): fp32 absmax per block, except on a CPU with
  AVX-512 BF16, where the first forward repacks each weight for the fused CPU kernel and converts its absmax to
  bf16 (`bnb-nf4-bf16-absmax`). Which one a model uses is read from the library on the machine at hand
  (engine.levers.quant.bnb_nf4_format), never assumed.
- torchao 0.18 weight-only, checked against the real quantized tensors (tests/test_levers_quant.py):
  `Int8WeightOnlyConfig` (Int8Tensor) keeps per output channel an fp32 `scale` and an int8 `zero_point`
  (5 B per row, whatever the model's dtype); int4 with groups of g keeps a scale and a zero point per group in
  the *model's* dtype: bf16 (2 + 2 B) for a bf16 model (the CUDA tinygemm path), fp32 (4 + 4 B) for an fp32
  model on the CPU (`PrototypeInt4WeightOnlyConfig`, Int4OpaqueTensor's `scale_and_zero`).

Pure standard library: the calculators, the quantization lab and the CLI share these numbers.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypeVar

from engine.core.errors import InvalidParameterError

T = TypeVar("T")


@dataclass(frozen=True)
class QuantFormat:
    name: str
    bits: float  # stored bits per weight, before scales
    group_size: int | None  # weights per scale; None = one group per row (per-channel)
    scale_bytes: float  # bytes of scale per group
    zero_bytes: float  # bytes of zero point / minimum per group (0 for symmetric)
    source: str
    tensor_bytes: float = 0.0  # fixed bytes per tensor (fp8's per-tensor weight and input scales)
    input_row_bytes: float = 0.0  # bytes per input feature per tensor (GPTQ's g_idx, int32)

    def bytes_for(self, n: int, group_size: int | None = None, row: int | None = None) -> int:
        """bytes = ceil(n / g) x (g x bits / 8 + scale + zero), g = group size (or the row length)."""
        g = group_size or self.group_size or row
        if g is None:
            raise InvalidParameterError(
                f"{self.name} scales per row: give the row length (the layer's input size)"
            )
        if g <= 0 or n < 0:
            raise InvalidParameterError(f"group size must be positive and n >= 0, got g={g}, n={n}")
        groups = math.ceil(n / g)
        return math.ceil(groups * (g * self.bits / 8 + self.scale_bytes + self.zero_bytes))


_GGML = "ggml gguf-py GGML_QUANT_SIZES / ggml-common.h"
FORMATS: dict[str, QuantFormat] = {
    f.name: f
    for f in (
        QuantFormat("F32", 32, 1, 0, 0, _GGML),
        QuantFormat("F16", 16, 1, 0, 0, _GGML),
        QuantFormat("BF16", 16, 1, 0, 0, _GGML),
        QuantFormat("Q8_0", 8, 32, 2, 0, _GGML),
        QuantFormat("Q4_0", 4, 32, 2, 0, _GGML),
        QuantFormat("Q4_1", 4, 32, 2, 2, _GGML),
        QuantFormat("Q5_0", 5, 32, 2, 0, _GGML),
        QuantFormat("Q5_1", 5, 32, 2, 2, _GGML),
        # k-quants: bytes per 256-weight super-block, folded into an effective scale per block.
        QuantFormat("Q2_K", 2, 256, 84 - 64, 0, _GGML),
        QuantFormat("Q3_K", 3, 256, 110 - 96, 0, _GGML),
        QuantFormat("Q4_K", 4, 256, 144 - 128, 0, _GGML),
        QuantFormat("Q5_K", 5, 256, 176 - 160, 0, _GGML),
        QuantFormat("Q6_K", 6, 256, 210 - 192, 0, _GGML),
        QuantFormat(
            "int8-per-channel",
            8,
            None,
            4,
            1,
            "torchao Int8WeightOnlyConfig: fp32 scale + int8 zero point per row",
        ),
        QuantFormat(
            "int4-g128", 4, 128, 2, 2, "torchao int4 weight-only, bf16 model: bf16 scale + zero per group"
        ),
        QuantFormat(
            "bnb-int8", 8, None, 4, 0, "bitsandbytes LLM.int8 (Int8Params): int8 + one fp32 SCB per row"
        ),
        QuantFormat(
            "bnb-nf4", 4, 64, 4, 0, "bitsandbytes nf4, blocksize 64, no double quant: fp32 absmax per block"
        ),
        QuantFormat(
            "bnb-nf4-bf16-absmax",
            4,
            64,
            2,
            0,
            "bitsandbytes 0.50 nf4 on a CPU with AVX-512 BF16: Linear4bit.forward repacks the weight for its "
            "fused kernel and stores the absmax per block in bf16 (functional._convert_weight_packed_for_cpu)",
        ),
        # Checkpoint formats that serving engines load (vLLM's quantization methods), each checked against the
        # layout its library writes; the head and embeddings stay 16-bit unless a scope says otherwise.
        QuantFormat(
            "fp8-e4m3",
            8,
            None,
            0,
            0,
            "FP8 E4M3 weights with a per-tensor fp32 weight scale and input scale (NVIDIA ModelOpt / llm-compressor "
            "checkpoints, vLLM's `fp8` method)",
            tensor_bytes=8,
        ),
        QuantFormat(
            "nvfp4",
            4,
            16,
            1,
            0,
            "NVFP4: E2M1 values in blocks of 16 with an FP8 E4M3 scale each, plus fp32 global scales per tensor "
            "(NVIDIA ModelOpt; Blackwell tensor cores)",
            tensor_bytes=8,
        ),
        QuantFormat(
            "mxfp4",
            4,
            32,
            1,
            0,
            "MXFP4 (OCP microscaling): E2M1 values in blocks of 32 with an E8M0 scale each (gpt-oss experts)",
        ),
        QuantFormat(
            "awq-int4",
            4,
            128,
            2,
            0.5,
            "AWQ (AutoAWQ GEMM, vLLM `awq`): int4 packed in int32 `qweight`, fp16 `scales` and 4-bit `qzeros` per "
            "group of 128",
        ),
        QuantFormat(
            "gptq-int4",
            4,
            128,
            2,
            0.5,
            "GPTQ (AutoGPTQ / GPTQModel, vLLM `gptq`): int4 `qweight`, fp16 `scales`, 4-bit `qzeros` per group of "
            "128, and an int32 `g_idx` per input feature",
            input_row_bytes=4,
        ),
        QuantFormat(
            "gptq-int8",
            8,
            128,
            2,
            1,
            "GPTQ 8-bit: int8 `qweight`, fp16 `scales`, 8-bit `qzeros` per group of 128, int32 `g_idx` per input",
            input_row_bytes=4,
        ),
        QuantFormat(
            "bnb-nf4-dq",
            4,
            64,
            1 + 4 / 256,
            0,
            "bitsandbytes nf4 with double quantization (bnb_4bit_use_double_quant): the block absmax stored in "
            "8 bits with one fp32 scale per 256 blocks",
        ),
        QuantFormat(
            "int4-g128-fp32",
            4,
            128,
            4,
            4,
            "torchao int4 weight-only on an fp32 model (CPU): fp32 scale + zero",
        ),
    )
}


def _lookup(table: Mapping[str, T], name: str, what: str) -> T:
    """table[name], or a message that names the choices."""
    try:
        return table[name]
    except KeyError:
        raise InvalidParameterError(f"unknown {what} {name!r}; choose one of {', '.join(table)}") from None


def get(name: str) -> QuantFormat:
    return _lookup(FORMATS, name, "quantized format")


def tensor_bytes(shape: tuple[int, ...], fmt: str, group_size: int | None = None) -> int:
    """Bytes of one tensor of `shape` in `fmt`: groups run along the last (input) dimension, as ggml and
    torchao store them; a per-channel format has one group per row."""
    if not shape or any(d < 0 for d in shape):
        raise InvalidParameterError(f"bad tensor shape {shape}")
    n = math.prod(shape)
    row = shape[-1]
    f = get(fmt)
    fixed = math.ceil(f.tensor_bytes + f.input_row_bytes * row)
    if f.group_size is None and f.scale_bytes == 0 and f.zero_bytes == 0:
        return math.ceil(n * f.bits / 8) + fixed  # per-tensor scales only
    g = group_size or f.group_size or row
    if row % g and f.group_size is not None and f.group_size > 1:
        # ggml requires rows to be whole blocks; the last partial block is still stored whole.
        rows = n // row
        return rows * f.bytes_for(row, g) + fixed
    return f.bytes_for(n, g, row) + fixed


@dataclass(frozen=True)
class WeightFormat:
    """A weight format the calculator offers: how its tensors are stored (`storage`, a key of FORMATS), which
    modules it covers by default, and the precision its matmuls run in."""

    name: str
    storage: str
    scope: str  # default modules (SCOPES)
    compute: str  # "int8" | "int4" (weight-only: fp16 math) | "fp8" (fp8 tensor cores where the GPU has them)
    vllm_quantization: str | None  # vLLM's --quantization name (None: not served by vLLM from this format)
    description: str


# Which modules a format quantizes. `linear`: every linear layer of the decoder (attention, MLP, experts, router
# excluded), the embeddings and the output head kept 16-bit, as AWQ/GPTQ/FP8/bitsandbytes checkpoints do;
# `linear+head`: and the head (torchao over every nn.Linear); `mlp`: only the MLPs / experts (FFN-only fp8);
# `experts`: only the MoE experts (gpt-oss's MXFP4); `all`: every matrix, embeddings included (GGUF).
SCOPES: tuple[str, ...] = ("linear", "linear+head", "mlp", "experts", "all")
_GGUF = ("Q8_0", "Q6_K", "Q5_K", "Q5_1", "Q5_0", "Q4_K", "Q4_1", "Q4_0", "Q3_K", "Q2_K")
WEIGHT_FORMATS_TABLE: dict[str, WeightFormat] = {
    w.name: w
    for w in (
        WeightFormat("int8", "int8-per-channel", "linear+head", "int8", None, "torchao int8 weight-only"),
        WeightFormat("int4", "int4-g128", "linear+head", "int4", None, "torchao int4 weight-only, groups"),
        WeightFormat("fp8", "fp8-e4m3", "linear", "fp8", "fp8", "FP8 E4M3, per-tensor scales"),
        WeightFormat("nvfp4", "nvfp4", "linear", "int4", "modelopt_fp4", "NVFP4 (Blackwell)"),
        WeightFormat("mxfp4", "mxfp4", "experts", "int4", "mxfp4", "MXFP4 experts (gpt-oss)"),
        WeightFormat("awq", "awq-int4", "linear", "int4", "awq", "AWQ int4, groups of 128"),
        WeightFormat("gptq", "gptq-int4", "linear", "int4", "gptq", "GPTQ int4, groups of 128"),
        WeightFormat("gptq-int8", "gptq-int8", "linear", "int8", "gptq", "GPTQ int8, groups of 128"),
        WeightFormat(
            "bnb-nf4", "bnb-nf4", "linear", "int4", "bitsandbytes", "bitsandbytes nf4, blocks of 64"
        ),
        WeightFormat(
            "bnb-nf4-dq", "bnb-nf4-dq", "linear", "int4", "bitsandbytes", "bitsandbytes nf4, double quant"
        ),
        WeightFormat("bnb-int8", "bnb-int8", "linear", "int8", "bitsandbytes", "bitsandbytes LLM.int8"),
        *(WeightFormat(g, g, "all", "int8" if g == "Q8_0" else "int4", "gguf", f"GGUF {g}") for g in _GGUF),
    )
}


def weight_format(name: str) -> WeightFormat:
    return _lookup(WEIGHT_FORMATS_TABLE, name, "weight format")


# Weight formats the calculator offers (WEIGHT_FORMATS_TABLE: torchao int8/int4, checkpoint
# formats vLLM loads, bitsandbytes, GGUF blocks), each with the modules it covers by default.
WEIGHT_FORMATS: tuple[str, ...] = tuple(WEIGHT_FORMATS_TABLE)


def quant_format_name(name: str, group_size: int | None) -> tuple[str, int | None]:
    """(storage format, a key of FORMATS; group size) for a weight format: int8 is per output channel unless a
    group size is given; int4 groups 128 weights unless told otherwise; every other format has its own groups."""
    if name == "int8":
        return "int8-per-channel", group_size or None
    if name == "int4":
        return "int4-g128", group_size or 128
    return weight_format(name).storage, None


def format_scope(name: str, scope: str | None) -> str:
    """The modules a format quantizes: the one asked for, else the format's default."""
    chosen = scope or weight_format(name).scope
    if chosen not in SCOPES:
        raise InvalidParameterError(f"unknown module scope {chosen!r}; choose one of {', '.join(SCOPES)}")
    return chosen


def weight_storage_note(name: str | None, group_size: int | None = None, scope: str | None = None) -> str:
    """What a quantized weight figure assumes (shown as a warning beside it)."""
    if not name:
        return ""
    fmt = weight_format(name)
    scope = format_scope(name, scope)
    covered = {
        "linear": "every linear layer of the decoder (routers, embeddings and the output head stay 16-bit)",
        "linear+head": "every linear layer and the output head (embeddings and routers stay 16-bit)",
        "mlp": "the MLPs and experts only (attention, routers, embeddings and the head stay 16-bit)",
        "experts": "the MoE experts only (everything else stays 16-bit)",
        "all": "every matrix, embedding and head included; norms and biases F32",
    }[scope]
    if name in ("int8", "int4"):
        g = quant_format_name(name, group_size)[1]
        per = f"groups of {g}" if g else "one scale per output channel"
        return f"{name} weight-only ({per}, torchao's layout) on {covered}; math runs in fp16"
    extra = (
        ". llama.cpp often keeps a few tensors (the output head) in a wider type, so a real file can be a few "
        "percent larger"
        if scope == "all"
        else ""
    )
    return f"{fmt.description} ({get(fmt.storage).source}) on {covered}{extra}"


def model_bytes(
    tensors: list[tuple[tuple[int, ...], bool, float]], fmt: str, group_size: int | None = None
) -> int:
    """Bytes of a whole model: each (shape, quantized, bytes per element if not) tensor either in `fmt`
    (groups along the last dimension) or at its own precision. Tied tensors must be listed once."""
    total = 0
    for shape, quantized, elem_bytes in tensors:
        total += (
            tensor_bytes(shape, fmt, group_size) if quantized else math.ceil(math.prod(shape) * elem_bytes)
        )
    return total


@dataclass(frozen=True)
class KVQuant:
    """A quantized KV cache in the KIVI style (transformers' QuantizedCache): the newest `residual` tokens
    stay in the model's precision, older ones are stored in `bits` with one scale and one zero point of
    `scale_bytes` each per `group` values."""

    bits: float
    group: int
    scale_bytes: float
    zero_bytes: float
    residual: int


def kv_quant_bytes(
    values_per_token: int, prompt_tokens: int, decode_tokens: int, fp_bytes: float, q: KVQuant | None
) -> float:
    """KV bytes of one sequence: values_per_token = 2 x layers x kv_heads x head_dim.

    Unquantized: tokens x values x fp_bytes. Quantized (transformers' QuantizedLayer.update): the prompt is
    quantized at once; decoded tokens gather in a full-precision residual that is flushed into the quantized
    store when it reaches `residual`, so r = decode_tokens mod residual tokens stay in full precision and the
    rest cost bits / 8 + (scale + zero) / group bytes per value (KIVI, Liu et al. 2024)."""
    tokens = prompt_tokens + decode_tokens
    if prompt_tokens < 0 or decode_tokens < 0 or values_per_token <= 0:
        raise InvalidParameterError(
            f"token counts must be >= 0 and values per token > 0, got {prompt_tokens}, {decode_tokens}, "
            f"{values_per_token}"
        )
    if q is None:
        return tokens * values_per_token * fp_bytes
    fp_tokens = decode_tokens % q.residual
    per_value = q.bits / 8 + (q.scale_bytes + q.zero_bytes) / q.group
    return fp_tokens * values_per_token * fp_bytes + (tokens - fp_tokens) * values_per_token * per_value
