"""The bundled SmolLM2 GGUF's tensor payload, predicted exactly from its tensor types and shapes
(engine.calc.quant), and the calculator's Q4_1 estimate beside it (it assumes one format for every matrix)."""

from __future__ import annotations

import pytest

from engine.calc import quant
from engine.calc.memory import weights_bytes
from engine.calc.specs import model_preset

gguf = pytest.importorskip("gguf")


@pytest.fixture(scope="module")
def tensors():
    from engine.runtime.models import bundled_gguf_path

    try:
        path = bundled_gguf_path()
    except Exception as exc:  # the package that ships the file is missing
        pytest.skip(f"bundled GGUF not found: {exc}")
    return gguf.GGUFReader(str(path)).tensors


def test_every_tensor_of_the_bundled_gguf_is_predicted_exactly(tensors):
    total = 0
    for t in tensors:
        shape = tuple(int(d) for d in reversed(t.shape.tolist()))  # ggml lists ne0 (the row) first
        predicted = quant.tensor_bytes(shape, t.tensor_type.name)
        assert predicted == int(t.n_bytes), (t.name, t.tensor_type.name, shape)
        total += predicted
    assert total == sum(int(t.n_bytes) for t in tensors) == 96_576_768


def test_calculator_q4_1_estimate_is_close_and_says_why_not_exact(tensors):
    """The file keeps token_embd in Q8_0 and the norms in F32; the calculator's Q4_1 estimate (every matrix in
    Q4_1, norms F32) is below the file by the embedding's Q8_0 - Q4_1 difference exactly."""
    spec = model_preset("smollm2-135m")
    est = weights_bytes(spec, "int4", "Q4_1")
    emb = (spec.vocab, spec.hidden)
    payload = sum(int(t.n_bytes) for t in tensors)
    assert est + quant.tensor_bytes(emb, "Q8_0") - quant.tensor_bytes(emb, "Q4_1") == payload


def test_int8_and_int4_weight_only_bytes_include_their_scales():
    spec = model_preset("gpt-neo-125m")
    plain = weights_bytes(spec, "int8")
    per_channel = weights_bytes(spec, "int8", "int8")
    g32 = weights_bytes(spec, "int4", "int4", 32)
    g128 = weights_bytes(spec, "int4", "int4", 128)
    assert per_channel > plain * 0.99  # 1 B per matmul weight + 5 B per row, 16-bit embeddings
    assert g32 > g128  # smaller groups, more scales
    # one 768 x 768 projection in int4 g128: 768 rows x 6 groups x (64 B + bf16 scale + bf16 zero)
    assert quant.tensor_bytes((768, 768), "int4-g128", 128) == 768 * 6 * 68
