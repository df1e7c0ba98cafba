"""One measurement of this machine: home, the calculator and the roofline read the same cached one."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from streamlit.testing.v1 import AppTest

from engine.calibration import machine
from engine.core import paths

ROOT = Path(__file__).resolve().parents[1]
FAKE = machine.MachineMeasurement(
    "test-machine",
    "2026-11-30T00:00:00+00:00",
    "cpu",
    "this machine (measured)",
    41e9,
    33e9,
    {"fp32": 123e9, "bf16": 321e9},
    1024,
    24e9,
    0.5,
)


def test_home_and_calculator_share_one_measurement(monkeypatch, tmp_path):
    from ui import calc_widgets, common

    monkeypatch.setenv("INFERENCE_LAB_HOME", str(tmp_path))  # no stored calibration: the measurement is used
    calls = []

    def fake_measure(dtypes=machine.DEFAULT_DTYPES, *, store=True):
        calls.append(dtypes)
        if store:  # stored under this machine's id, as measure() does
            machine.save(replace(FAKE, machine_id=paths.machine_id()))
        return FAKE

    monkeypatch.setattr(machine, "measure", fake_measure)
    common.cached_machine_measurement.clear()
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120).run()
    assert not [
        m for m in at.metric if m.label == "Read bandwidth (measured)"
    ]  # nothing stored: nothing shown
    at.button(key="home.measure").click().run()
    assert not at.exception
    shown = {m.label: m.value for m in at.metric}
    assert shown["Read bandwidth (measured)"] == "41.0 GB/s"
    assert (
        shown["Matmul fp32 (measured)"] == "123.00 GFLOP/s"
        and shown["Matmul bf16 (measured)"] == "321.00 GFLOP/s"
    )
    # its date and the load it was measured under, beside the figures
    assert any("measured 2026-11-30 00:00 UTC on cpu, load average 0.50" in c.value for c in at.caption)
    spec = calc_widgets.cached_machine()  # the calculator's and roofline's "this machine"
    assert spec.bandwidth_bytes_per_s == 41e9 and spec.flops_for("bf16") == 321e9
    assert len(calls) == 1, "measured once for every page"
    common.cached_machine_measurement.clear()


def test_the_home_panel_says_why_bf16_multiplies_below_fp32_here(monkeypatch):
    """The student read 'Matmul bf16 19 GFLOP/s' beside 'fp32 171 GFLOP/s' with no word on why; the sentence follows
    the two measured figures and what the CPU reports, and quotes the T4 from the catalogue."""
    import torch

    from ui.machine_view import precision_words

    class Roof:
        def __init__(self, fp32, bf16):
            self.rates = {"fp32": fp32, "bf16": bf16}

        def flops_for(self, dtype):
            return self.rates[dtype]

    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False)
    words = precision_words(Roof(171e9, 19e9))
    assert words.startswith("bf16 multiplies at 1/9 of the fp32 rate here: this CPU has no bf16 matrix")
    assert "a T4 multiplies fp16 at 65 TFLOPS against 8.1 in fp32" in words
    assert precision_words(Roof(100e9, 120e9)) == ""  # within 1.5x: nothing to explain
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: True)
    assert "no bf16 matrix instructions" not in precision_words(Roof(171e9, 19e9))
    assert precision_words(Roof(100e9, 400e9)).startswith("bf16 multiplies at 4.0x the fp32 rate")


def test_a_measurement_taken_busy_does_not_replace_a_quiet_one(monkeypatch, tmp_path):
    """The presenter's walk: 'Measure this machine again' beside a test suite on both cores stored 33.9 GB/s and
    106.59 GFLOP/s over 52.0 GB/s, labelled quiet by a lagging load average, and every page then read it. The
    verdict is now the CPU other programs took while it measured; a busy measurement never replaces a quiet one,
    and the page says so beside the figures it keeps."""
    from types import SimpleNamespace

    from engine.runtime import hardware
    from ui import common

    monkeypatch.setenv("INFERENCE_LAB_HOME", str(tmp_path))
    machine.save(replace(FAKE, machine_id=paths.machine_id(), others=0.1))  # quiet: 41 GB/s
    monkeypatch.setattr(hardware, "measure_memory_bandwidth", lambda device: SimpleNamespace(
        read_bytes_per_s=20e9, copy_bytes_per_s=15e9))  # fmt: skip
    monkeypatch.setattr(hardware, "measure_matmul_flops", lambda d, dt, n: SimpleNamespace(flops_per_s=50e9))
    monkeypatch.setattr(machine, "others_during", lambda before, wall: 1.6)  # other programs on the cores
    monkeypatch.setattr(machine, "loadavg_1m", lambda: 0.4)  # the lagging load average reads quiet
    busy = machine.measure(("fp32",))
    assert busy.busy and machine.latest().read_bytes_per_s == 41e9  # kept
    common.cached_machine_measurement.clear()
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120).run()
    at.button(key="home.measure").click().run()
    assert not at.exception
    assert {m.label: m.value for m in at.metric}["Read bandwidth (measured)"] == "41.0 GB/s"
    said = " ".join(w.value for w in at.warning)
    assert (
        "Measured while other programs took 1.6 of" in said and "Not stored" in said and "20.0 GB/s" in said
    )
    monkeypatch.setattr(machine, "others_during", lambda before, wall: 0.1)  # quiet again: stored
    assert not machine.measure(("fp32",)).busy and machine.latest().read_bytes_per_s == 20e9
    common.cached_machine_measurement.clear()
