"""On the Roofline page: the ridge note per precision, the context cap said, measured prefill
and decode drawn apart, and the two phases' operator labels kept apart."""

from __future__ import annotations

import json
from pathlib import Path

import plotly.graph_objects as go
from streamlit.testing.v1 import AppTest

from engine.runtime import runlog
from tests.factories import synthetic_run
from ui.roofline_view import separate_labels

PAGE = str(Path(__file__).resolve().parents[1] / "pages" / "3_Roofline.py")


def figure(at: AppTest) -> dict:
    return json.loads(at.get("plotly_chart")[0].proto.spec)


def test_ridge_note_follows_the_precision():
    at = AppTest.from_file(PAGE, default_timeout=120).run()
    fp16 = " ".join(a["text"] for a in figure(at)["layout"]["annotations"])
    assert "ridge 216.6" in fp16 and "→ 203.1" in fp16
    at.select_slider(key="roof.dtype").set_value("fp32").run()
    fp32 = " ".join(a["text"] for a in figure(at)["layout"]["annotations"])
    assert "ridge 27.0" in fp32 and "203" not in fp32 and "→ 25.3" in fp32
    assert any("8.1 TFLOPS fp32 / 300 GB/s = 27.0" in c.value for c in at.caption)
    note = next(a for a in figure(at)["layout"]["annotations"] if a["text"].startswith("<b>ridge"))
    decode = next(t for t in figure(at)["data"] if t["name"] == "decode operators")
    assert (
        10 ** note["y"] < min(decode["y"]) / 10
    )  # the note sits well below the decode labels it used to cover


def test_sequence_capped_at_the_context_says_so():
    at = AppTest.from_file(PAGE, default_timeout=120).run()
    assert not at.info
    at.select_slider(key="roof.s").set_value(32768).run()
    assert any("context window of 2,048" in i.value for i in at.info)
    assert any("s = 2,048" in h.value for h in at.subheader)


def test_measured_prefill_and_decode_look_different():
    for _ in range(2):
        runlog.record(
            synthetic_run(
                "gpt-neo-125m-random", "fp32", 0.2, 0.02, params=125_000_000, weights_bytes=500_000_000
            ),
            source="playground",
        )
    at = AppTest.from_file(PAGE, default_timeout=120).run()
    traces = {t["name"]: t for t in figure(at)["data"]}
    pre, dec = traces["measured prefill (this machine)"], traces["measured decode (this machine)"]
    assert pre["marker"]["symbol"] != dec["marker"]["symbol"]
    assert pre["marker"]["color"] != dec["marker"]["color"]


def test_overlapping_phase_labels_are_moved_apart():
    fig = go.Figure()
    fig.add_scatter(
        x=[1.0, 100.0],
        y=[1e12, 1e14],
        text=["a", "b"],
        textposition=["top left", "top left"],
        mode="markers+text",
        name="prefill operators",
    )
    fig.add_scatter(
        x=[1.1],
        y=[1.05e12],
        text=["c"],
        textposition=["top left"],
        mode="markers+text",
        name="decode operators",
    )
    separate_labels(fig)
    assert fig.data[0].textposition == ("bottom right", "top left")  # only the clashing pair moves
    assert fig.data[1].textposition == ("top left",)


def test_decode_diagnosis_follows_the_ridge_the_plot_draws():
    """At batch 512 the decode projections sit right of the ridge (216.6) in the plot; the text said
    "423.1 ops/byte ... so each step streams all weights from memory". Batch 1 stays memory-bound."""
    at = AppTest.from_file(PAGE, default_timeout=120).run()
    one = " ".join(m.value for m in at.markdown)
    assert "below it, so each step streams all weights from memory" in one
    at.select_slider(key="roof.b").set_value(512).run()
    assert not at.exception
    text = " ".join(m.value for m in at.markdown)
    assert "streams all weights from memory" not in text
    assert "above it, so they are compute-bound" in text and "against the ridge's 216.6" in text
    decode = next(t for t in figure(at)["data"] if t["name"] == "decode operators")
    assert decode["x"] and max(decode["x"]) > 216.6  # the plot puts the projections past the ridge too
