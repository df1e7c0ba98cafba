"""On the Roofline page: the ridge note per precision, the context cap said, measured prefill
and decode drawn apart, and the operator labels legible (apart, inside the axes) at batch 1 and 512."""

from __future__ import annotations

import json
from pathlib import Path

from streamlit.testing.v1 import AppTest

from engine.calc.roofline import analyse, roof_for
from engine.calc.specs import load_gpu_catalog, model_preset
from engine.runtime import runlog
from tests.factories import synthetic_run
from ui.plots_calc import roofline_figure
from ui.roofline_labels import Frame, label_boxes

PHASES = ("prefill", "decode")

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
    # without measured runs (the note keeps off those too, wherever other tests' runs put them)
    at.checkbox(key="roof.measured").uncheck().run()
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
    pre, dec = (traces[f"measured {p} (this machine, every model run here)"] for p in ("prefill", "decode"))
    assert pre["marker"]["symbol"] != dec["marker"]["symbol"]
    assert pre["marker"]["color"] != dec["marker"]["color"]


def assert_labels_legible(fig: dict) -> None:
    """Every operator point has a label; no two labels overlap; each stays inside the axes; no marker prints
    its own text (plotly's fixed-side text is what piled up at the ridge and ran off the left edge)."""
    boxes = label_boxes(fig)
    assert boxes
    for i, (name, box, _) in enumerate(boxes):
        assert box.inside(), f"{name} leaves the axes: {box}"
        for other, obox, _ in boxes[i + 1 :]:
            assert not box.overlaps(obox), f"{name} {box} overlaps {other} {obox}"
    anchors = {(round(p[0]), round(p[1])) for _, _, p in boxes}
    frame = Frame(fig["layout"]["xaxis"]["range"], fig["layout"]["yaxis"].get("range", [0, 1]))
    for t in fig["data"]:
        if str(t.get("name", "")).endswith(" operators"):
            assert "text" not in t["mode"]
            for x, y, size in zip(t["x"], t["y"], t["marker"]["size"], strict=True):
                # labelled itself, or merged into the label of a marker it touches
                px, py = frame.px(x), frame.py(y)
                assert any(abs(px - ax) + abs(py - ay) <= size + 40 for ax, ay in anchors), (t["name"], x)


def test_operator_labels_stay_apart_and_inside_the_axes():
    """Default settings and batch 512 (where decode's and prefill's projections meet at the ridge)."""
    at = AppTest.from_file(PAGE, default_timeout=120).run()
    assert_labels_legible(figure(at))
    at.select_slider(key="roof.b").set_value(512).run()
    assert_labels_legible(figure(at))


def test_crowded_roofline_labels_stay_apart():
    """SmolLM2 (grouped K/V, gated MLP) in fp32 at s = 4,096, batch 512: ten operator clusters, eight of them on
    the flat roof within one decade."""
    spec = model_preset("smollm2-135m")
    roof = roof_for(load_gpu_catalog()["t4"], "fp32")
    results = [
        analyse(spec, roof, phase=ph, seq_len=2048, batch=512, dtype="fp32", gpu_name="T4") for ph in PHASES
    ]
    assert_labels_legible(roofline_figure([roof], results).to_plotly_json())


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


def test_the_ridge_note_keeps_off_the_measured_stars():
    """The walkthrough saw the ridge note drawn over this machine's measured stars: stars placed exactly where the
    note goes first (left of the ridge, at a three-thousandth of the peak) now push it to another height."""
    from ui.roofline_labels import _circle_meets_box, markers_px, note_box

    spec = model_preset("gpt-neo-125m")
    roof = roof_for(load_gpu_catalog()["t4"], "fp16")
    results = [
        analyse(spec, roof, phase=ph, seq_len=512, batch=1, dtype="fp16", gpu_name="T4") for ph in PHASES
    ]
    y = roof.peak_flops_per_s / 3000
    stars = [{"intensity": roof.ridge / f, "flops_per_s": y, "hover": "run"} for f in (2, 3, 4, 6, 8)]
    fig = roofline_figure([roof], results, measured=stars)
    spec_json = fig.to_plotly_json()
    frame = Frame(spec_json["layout"]["xaxis"]["range"], spec_json["layout"]["yaxis"]["range"])
    note = next(a for a in spec_json["layout"]["annotations"] if a["text"].startswith("<b>ridge"))
    lines = note["text"].replace("<b>", "").replace("</b>", "").split("<br>")
    box = note_box(frame, roof.ridge, 10 ** note["y"], lines, shift_px=-60)
    assert 10 ** note["y"] != y  # moved from where it went before
    assert not any(_circle_meets_box(mx, my, r, box) for mx, my, r in markers_px(fig, frame))
    assert box.inside()


def _note_box(spec_json: dict, x: float):
    from ui.roofline_labels import note_box

    frame = Frame(spec_json["layout"]["xaxis"]["range"], spec_json["layout"]["yaxis"]["range"])
    note = next(a for a in spec_json["layout"]["annotations"] if a["text"].startswith("<b>ridge"))
    lines = note["text"].replace("<b>", "").replace("</b>", "").split("<br>")
    return frame, note_box(frame, x, 10 ** note["y"], lines, shift_px=note["ax"])


def test_the_ridge_note_crosses_no_roof_line():
    """The presenter saw the ridge note drawn across the sloped roof (1280 x 900, this machine's roof and measured
    stars between 10 and 40 ops/byte, as on the page): every preferred height either crossed the roof or hid a
    star. The note and its arrow now keep off every roof line and every marker."""
    from engine.calc.roofline import Roof
    from ui.roofline_labels import _circle_meets_box, _line_points, markers_px

    spec = model_preset("gpt-neo-125m")
    roof = roof_for(load_gpu_catalog()["t4"], "fp16")
    results = [
        analyse(spec, roof, phase=ph, seq_len=512, batch=1, dtype="fp16", gpu_name="T4") for ph in PHASES
    ]
    machine = Roof(150e9, 32e9, "this machine (measured, fp32)")
    stars = [
        {"intensity": i, "flops_per_s": f, "hover": "run"}
        for i in (12, 18, 22, 30, 130)
        for f in (6e8, 1.5e9, 1e10, 2e10, 5e10)
    ]
    for measured in ([], stars):
        fig = roofline_figure(
            [roof], results, measured=measured, machine_roof=machine, ridge_note="NVIDIA's datasheet: x"
        )
        spec_json = fig.to_plotly_json()
        frame, box = _note_box(spec_json, roof.ridge)
        roofs = [(list(t["x"]), list(t["y"])) for t in spec_json["data"] if t.get("mode") == "lines"]
        assert len(roofs) == 2
        crossing = [p for p in _line_points(frame, roofs) if box.contains(*p, 1.0)]
        assert not crossing, f"the ridge note {box} crosses a roof at {crossing[:3]}"
        assert not any(_circle_meets_box(mx, my, r, box) for mx, my, r in markers_px(fig, frame))
        assert box.inside()


def test_a_small_ridge_reads_as_its_figures_divide():
    """The presenter's walk: 'this machine (measured, fp32): ridge 3.4' beside 172.49 GFLOP/s and 49.4 GB/s, whose
    quotient is 3.49 (the chapter's one truncated decimal). Below 10 the ridge keeps two decimals; the chapter's
    T4 still reads 216.6."""
    from engine.calc import format as fmt
    from engine.calc.roofline import Roof
    from ui.plots_calc import roofline_figure

    machine = Roof(172.49e9, 49.41e9, "this machine (measured, fp32)")
    assert fmt.ridge(machine.ridge) == "3.49" and fmt.ridge(65e12 / 300e9) == "216.6"
    assert fmt.ridge(0.29) == "0.29" and fmt.ridge(12.345) == "12.3"
    fig = roofline_figure([Roof(65e12, 320e9, "T4")], [], machine_roof=machine)
    names = [t.name for t in fig.data if t.name]
    assert "this machine (measured, fp32): ridge 3.49" in names and "T4: ridge 203.1" in names
