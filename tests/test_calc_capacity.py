"""The calculator's max users within a TPOT objective (engine/calc/capacity.py)."""

from __future__ import annotations

import pytest

from engine.calc.capacity import calibrated_bandwidth, max_users
from engine.calc.memory import kv_bytes_per_token, weights_bytes
from engine.calc.specs import model_preset
from engine.core.errors import InvalidParameterError


def test_calibration_reproduces_the_measured_tpot_and_the_slo_decides():
    w, kv, ctx = 1e9, 1e5, 100  # 1 GB of weights, 100 kB/token, 100 cached tokens: 10 MB of KV per user
    bw = calibrated_bandwidth(w, kv, ctx, 0.05)
    pred = max_users(w, kv, ctx, bw, tpot_slo_s=0.05, slots=8)
    assert pred.tpot_s_by_users[0] == (1, pytest.approx(0.05))  # the rule gives back the calibration point
    assert pred.max_users == 1 and pred.limited_by == "TPOT objective"
    # each user adds 1 % of the weights' read: a 5 % looser objective holds 6 users (1 + 5 x 1 %  <= 1.05)
    assert max_users(w, kv, ctx, bw, tpot_slo_s=0.0525, slots=64).max_users == 6
    assert max_users(w, kv, ctx, bw, tpot_slo_s=10, slots=8).limited_by == "batch slots"
    assert max_users(w, kv, ctx, bw, tpot_slo_s=10, slots=8, kv_budget_bytes=3.5e7).max_users == 3
    assert max_users(w, kv, ctx, bw, tpot_slo_s=0.01, slots=8).max_users == 0


def test_uses_the_model_presets_and_refuses_nonsense():
    spec = model_preset("smollm2-135m")
    w, kv = weights_bytes(spec, "fp32"), kv_bytes_per_token(spec, "fp32")
    assert max_users(w, kv, 64, 1e10, tpot_slo_s=0.2, slots=8).max_users == 8
    with pytest.raises(InvalidParameterError):
        max_users(w, kv, 64, 1e10, tpot_slo_s=0, slots=8)
    with pytest.raises(InvalidParameterError):
        calibrated_bandwidth(w, kv, 64, float("nan"))
