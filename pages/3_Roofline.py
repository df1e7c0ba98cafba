"""Roofline: every operator of the model against the GPU's ops/byte ridge, with this machine's measured runs."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from engine.calc import format as fmt
from engine.calc.memory import formula_of
from engine.calc.roofline import Roof, RooflineSpec, analyse, measured_point, operators, roof_for
from engine.calc.specs import PRECISIONS, THIS_MACHINE, load_gpu_catalog
from engine.core.errors import EngineError
from ui import export
from ui.calc_widgets import (
    cached_machine,
    load_runs,
    machine_provenance,
    measured_roofline_points,
    model_input,
)
from ui.common import page_setup, show_error
from ui.plots_calc import roofline_figure
from ui.roofline_view import BATCHES, SEQ_LENS, reading, ridge_note, seq_cap_note, split_measured
from ui.widgets import SELECT_SLIDER, spec_input

page_setup("Roofline")
NS = "roof"

st.title("Roofline")
st.caption(
    "An operator that does I FLOPs per byte it moves can run at most at min(peak FLOP/s, I × bandwidth). Below "
    "the ridge (peak / bandwidth) it waits on memory, and more compute would not make it faster."
)

catalog = load_gpu_catalog()
left, right = st.columns([1, 3], gap="large")
with left:
    spec = model_input(NS, default="gpt-neo-125m")
    gpus = st.multiselect(
        "GPUs (the first is analysed; the rest are overlaid)",
        [*catalog, THIS_MACHINE],
        default=["t4"],
        key=f"{NS}.gpus",
        # the short name in a chip ("T4 (book..." was cut in this column); the full one is in the caption below
        format_func=lambda k: catalog[k].name.split(" (")[0] if k in catalog else "this machine",
    )
    dtype = spec_input(st, RooflineSpec, "dtype", key=f"{NS}.dtype", widget=SELECT_SLIDER, choices=PRECISIONS)
    seq = spec_input(st, RooflineSpec, "seq_len", key=f"{NS}.s", widget=SELECT_SLIDER, choices=SEQ_LENS)
    batch = spec_input(st, RooflineSpec, "batch", key=f"{NS}.b", widget=SELECT_SLIDER, choices=BATCHES)
    show_measured = st.checkbox(
        "This machine's runs",
        value=True,
        key=f"{NS}.measured",
        help="The runs measured on this machine, placed on it",
    )

if spec is None:
    st.stop()
if not gpus:
    with right:
        st.info("Choose at least one GPU.")
    st.stop()

cap_note = seq_cap_note(seq, spec.context_length, spec.name)
seq = min(seq, spec.context_length)
gpu_specs = [cached_machine() if k == THIS_MACHINE else catalog[k] for k in gpus]
roofs = [roof_for(g, dtype) for g in gpu_specs]
primary = gpu_specs[0]
try:
    results = [
        analyse(spec, roofs[0], phase=ph, seq_len=seq, batch=batch, dtype=dtype, gpu_name=primary.name)
        for ph in ("prefill", "decode")
    ]
except EngineError as exc:
    with right:
        show_error(exc)
    st.stop()

measured, machine_roof = [], None
if show_measured:
    pts = measured_roofline_points(load_runs())
    if pts:
        machine = cached_machine()
        measured = pts
        if THIS_MACHINE not in gpus:
            machine_roof = Roof(
                machine.flops_for("fp32"), machine.bandwidth_bytes_per_s, "this machine (measured, fp32)"
            )

note = ridge_note(catalog.get("t4-datasheet"), dtype) if primary.key == "t4" else ""
with right:
    st.subheader(f"{spec.name} on {primary.name} · {dtype} · s = {seq:,} · b = {batch}")
    if cap_note:
        st.info(cap_note, icon=":material/info:")
    fig = split_measured(
        roofline_figure(roofs, results, measured=measured, machine_roof=machine_roof, ridge_note=note)
    )
    st.plotly_chart(fig, width="stretch", key=f"{NS}.chart")
    if primary.key == "t4":
        st.caption(
            f"T4 as the chapter uses it: {primary.flops_for(dtype) / 1e12:g} TFLOPS {dtype} / "
            f"{primary.bandwidth_bytes_per_s / 1e9:g} GB/s = {fmt.ridge(roofs[0].ridge)} ops/byte. "
            + (f"{note.replace('→', 'gives')} (add 'T4 (NVIDIA datasheet)' to overlay it). " if note else "")
            + "Marker size: share of the phase's time."
        )
    else:
        st.caption(
            "Marker size: share of the phase's time. Operators at the same intensity share one labelled point."
        )
    if measured or THIS_MACHINE in gpus:
        st.caption(machine_provenance())  # the roofs 'this machine' is drawn with: their date and load
    if measured:
        st.caption(
            "Runs measured on this machine (stars: prefill, from TTFT; open diamonds: decode, from TPOT), placed on "
            "its measured roof (read bandwidth and matmul FLOP/s). "
            f"{formula_of(measured_point)}"
        )
    st.subheader("Diagnosis")
    for r in results:
        st.markdown(f"**{r.phase.capitalize()}** ({fmt.seconds(r.attainable_s)} at best on {primary.name}):")
        st.markdown("\n".join(f"- {line}" for line in reading(r)))

st.subheader("Operators")
rows = []
for r in results:
    for p in r.operators:
        rows.append(
            {
                "phase": r.phase,
                "operator": p.name,
                "FLOPs": fmt.flops(p.flops),
                "bytes": fmt.gb(p.bytes),
                "ops/byte": round(p.intensity, 3),
                "bound": p.bound,
                "attainable": fmt.flops(p.attainable_flops_per_s, "FLOP/s"),
                "time": fmt.seconds(p.attainable_s),
                "share of phase": f"{p.share_of_time:.1%}",
            }
        )
st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch")
report = [export.Text(cap_note)] if cap_note else []
report += [export.Figure(fig, "Marker size: share of the phase's time.")]
for r in results:
    report += [
        export.Heading(f"{r.phase.capitalize()} ({fmt.seconds(r.attainable_s)} at best on {primary.name})"),
        export.Text("\n".join(f"- {line}" for line in reading(r))),
    ]
report += [export.Heading("Operators"), export.Table(pd.DataFrame(rows))]
export.download_button(
    f"Roofline: {spec.name} on {primary.name}",
    report,
    key=f"{NS}.html",
    subtitle=f"{dtype} · s = {seq:,} · b = {batch}",
)
with st.expander("Formulas"):
    st.markdown(f"- {formula_of(operators)}")
    st.markdown(f"- {formula_of(analyse)}")
    st.markdown(
        f"- ridge = peak FLOP/s / bandwidth = {primary.flops_for(dtype) / 1e12:g} TFLOP/s / "
        f"{primary.bandwidth_bytes_per_s / 1e9:g} GB/s = {fmt.ridge(roofs[0].ridge)} ops/byte"
    )
    st.markdown(
        "All layers have the same shape, so one point stands for the operator in every layer; its FLOPs and "
        "bytes are summed over the layers. Unfused (eager) attention, as Hugging Face runs GPT-Neo: the scores "
        "are written and re-read; GPT-Neo keeps them in float32."
    )
