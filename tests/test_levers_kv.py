"""KV-cache quantization: the calculator's bytes (KIVI residual arithmetic), a backend that cannot run says
why, and on SmolLM2 the bytes read from a real QuantizedCache equal the calculator's."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from engine.calc import quant as qcalc
from engine.core.errors import InvalidParameterError
from engine.levers import kvquant as K

ROOT = Path(__file__).resolve().parents[1]


def test_kv_quant_bytes_arithmetic():
    values = 2 * 30 * 3 * 64  # SmolLM2-135M: 30 layers, 3 KV heads, head_dim 64
    assert qcalc.kv_quant_bytes(values, 40, 24, 4, None) == 64 * values * 4
    q = qcalc.KVQuant(bits=4, group=64, scale_bytes=4, zero_bytes=4, residual=128)
    # 24 decoded tokens stay in the fp32 residual; the 40 prompt tokens cost 0.5 + 8/64 bytes per value
    assert qcalc.kv_quant_bytes(values, 40, 24, 4, q) == 24 * values * 4 + 40 * values * (0.5 + 8 / 64)
    # at 128 decoded tokens the residual has just been flushed: everything is quantized
    assert qcalc.kv_quant_bytes(values, 40, 128, 4, q) == 168 * values * (0.5 + 8 / 64)
    with pytest.raises(InvalidParameterError):
        qcalc.kv_quant_bytes(values, -1, 0, 4, q)


def test_bad_inputs(tiny_lm):
    with pytest.raises(InvalidParameterError, match="nbits"):
        K.run_kv(tiny_lm, nbits=3)
    with pytest.raises(InvalidParameterError, match="unknown KV backend"):
        K.backend_status("int1")


def test_tiny_model_bytes_match_and_missing_backend_says_why(tiny_lm, monkeypatch):
    monkeypatch.setitem(K.BACKENDS, "hqq", "not_installed_hqq_xyz")
    rows = K.run_kv(tiny_lm, ["quanto", "fp8", "hqq"], max_new_tokens=6)
    assert [r.backend for r in rows] == ["none", "quanto", "fp8", "hqq"]
    for row in rows[:3]:
        assert row.status == "ok", row.reason
        assert row.kv_bytes == pytest.approx(row.predicted_bytes)  # read from the cache = the calculator
    assert rows[2].kv_bytes < rows[0].kv_bytes  # fp8 stores 1 byte per value instead of 4
    assert rows[3].status == "skipped" and "not installed" in rows[3].reason
    assert "cannot run here" in K.verdict(rows[3], rows[0])
    # a 4-bit cache saving less than fp8 on a short run says why: its newest tokens are still full precision
    quanto, fp8 = rows[1], rows[2]
    assert (
        quanto.full_precision_tokens == 5 and fp8.full_precision_tokens == 0
    )  # 6 new tokens, the last not fed
    said = K.verdict(quanto, rows[0])
    assert (
        f"5 of the {quanto.tokens} tokens, the ones made since, are still in the full-precision window"
        in said
    )
    assert (
        "The prompt was quantized at its first step" in said
    )  # 63 of 109 beside "up to 128" read as a contradiction
    assert f"{quanto.quantized_ratio:.1f}× fewer bytes" in said and quanto.quantized_ratio == pytest.approx(
        4 / (0.5 + 2 * 4 / K.GROUP)
    )
    assert "no full-precision window" in K.verdict(fp8, rows[0])
    assert "None" not in str(K.verdict(rows[0], None))


@pytest.mark.slow
def test_quantized_cache_bytes_match_the_calculator(smol_lm):
    rows = K.run_kv(smol_lm, ["quanto", "fp8"], max_new_tokens=8)
    for row in rows:
        assert row.status == "ok", row.reason
        assert row.kv_bytes == pytest.approx(row.predicted_bytes)
    assert rows[1].kv_bytes < rows[0].kv_bytes and rows[1].max_sequences > rows[0].max_sequences


_FRESH_PROCESS = """
import sys
import engine.batching.kv, transformers.cache_utils  # the engine's first cache import, as a run makes it
print("loaded at import:", "hqq" in sys.modules, "torch._dynamo" in sys.modules)
import torch
from transformers import LlamaConfig, QuantizedCache
from engine.core import libs
libs.hqq_quantizer()  # what the KV lever calls before it builds an HQQ cache
config = LlamaConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                     intermediate_size=128, vocab_size=100)
cache = QuantizedCache(backend="hqq", config=config, nbits=4, q_group_size=16, residual_length=4)
k = torch.randn(1, 2, 12, 16)
keys, values = cache.update(k, k.clone(), 0)
print("hqq cache:", type(cache.layers[0]).__name__, tuple(keys.shape), "hqq" in sys.modules)
"""


@pytest.mark.skipif(importlib.util.find_spec("hqq") is None, reason="hqq is not installed")
@pytest.mark.slow  # loads the bundled model or runs a process of its own
def test_hqq_waits_for_the_kv_lever_and_then_quantizes_a_cache():
    """transformers imports hqq (and with it torch._dynamo, ~4 s) at its first cache import; the engine defers that
    to the HQQ backend of the KV lever, which still builds a real HQQ-quantized cache afterwards."""
    out = subprocess.run(
        [sys.executable, "-c", _FRESH_PROCESS], capture_output=True, text=True, timeout=300, cwd=ROOT
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "loaded at import: False False" in out.stdout
    assert "hqq cache: HQQQuantizedLayer (1, 2, 12, 16) True" in out.stdout


_IMPORT_ORDERS = """
import subprocess, sys
orders = {
    "calculator": "import engine.cli, engine.commands.estimate",
    "transformers first": "import transformers.utils, engine.batching.kv, transformers.cache_utils",
    "engine first": "import engine, transformers.cache_utils",
}
for name, code in orders.items():
    probe = code + "; import sys; print(*(m in sys.modules for m in ('transformers', 'hqq')))"
    print(name, subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True).stdout.strip())
"""


@pytest.mark.skipif(importlib.util.find_spec("hqq") is None, reason="hqq is not installed")
@pytest.mark.slow  # loads the bundled model or runs a process of its own
def test_deferring_hqq_costs_a_process_that_never_imports_transformers_nothing():
    """The deferral waits for transformers' own import: the calculator's commands do not import transformers at
    all (deferring by importing transformers.utils at the engine's import cost them about a second), and whichever
    comes first, the engine or transformers, the first cache import leaves hqq unloaded."""
    out = subprocess.run(
        [sys.executable, "-c", _IMPORT_ORDERS], capture_output=True, text=True, timeout=300, cwd=ROOT
    )
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    assert "calculator False False" in lines
    assert "transformers first True False" in lines
    assert "engine first True False" in lines
