"""Memory and cost: will it fit, how fast, how much, and how close the estimate comes to a real run.

One call gathers the inputs (ui.calc_widgets.calc_inputs: this machine's calibration read once), one call makes
the answer (ui.calc_view.calc_answer: engine.calc.report.estimate and the batch sweep); the rest draws it."""

from __future__ import annotations

import streamlit as st

from engine.calc.serving_memory import is_cpu
from engine.calc.specs import THIS_MACHINE, count_words
from engine.core.errors import EngineError
from ui import export
from ui.calc_view import (
    answer_card,
    assumptions,
    breakdown_frame,
    calc_answer,
    cost_and_plan_tiles,
    cost_curve,
    export_parts,
    formulas,
    header,
    measured_section,
    memory_tiles,
    paged_section,
    speed_tiles,
    tensor_parallel_tiles,
    verdict,
    why,
)
from ui.calc_widgets import calc_inputs, measured_here_line
from ui.common import page_setup, show_error
from ui.simulate_widgets import solvers_section
from ui.trackrecord_view import launch_commands, speed_caption, track_record_section
from ui.widgets import refusals

page_setup("Memory and cost")
NS = "calc"

st.title("Memory and cost")
st.caption(
    "Will the model fit, how fast will it generate, what will it cost, and how close is the estimate to a run "
    "measured on this machine. Every figure has its formula one click away; GB here are 10^9 bytes."
)

left, right = st.columns([1, 2], gap="large")
with left:
    st.subheader("Inputs")
    alert = st.container()  # a refused answer is said here, at the top of the inputs, in view
    request = calc_inputs(NS)

if request is None:
    said = refusals()
    right.info(
        f"Nothing to answer yet: {'; '.join(said)}. The answer comes back once it is changed."
        if said
        else "Nothing to answer yet: an input on the left is missing or refused (it says what it needs); the "
        "answer comes back once it is given."
    )
    st.stop()
try:
    answer = calc_answer(request)
except EngineError as exc:
    with alert:
        show_error(exc)  # at the top of the inputs, where the value to change is
    right.info("Nothing to answer yet: the sentence at the top of the inputs says what to change.")
    st.stop()

est = answer.est
with right:
    st.subheader(header(answer))
    st.markdown(
        answer_card(est, cpu=is_cpu(request.gpu))
    )  # the answer first, above the assumptions and the plan's paragraph
    assumptions(est)
    left_half, right_half = st.columns([1, 1])
    with left_half:
        verdict(answer, NS)
    with right_half:
        st.dataframe(breakdown_frame(est), hide_index=True, width="stretch")
        st.caption(
            f"Parameters per component in millions ({est.params.total:,} in all), {count_words(est.params.source)}"
            + f"; bytes at {est.inputs.weights_label}"
            + (" (average bytes per weight, scales included)" if est.inputs.weight_format else "")
            + "."
        )
    memory_tiles(est)
    speed_tiles(est)
    if request.gpu.key == THIS_MACHINE and (
        here := measured_here_line(request.spec, est.inputs.dtype, est.inputs.batch, request.cal)
    ):
        st.markdown(here)  # the same quantity measured, beside the estimate by the one rule
    if est.speed is not None:
        st.markdown(speed_caption(est, request.gpu))
    cost_and_plan_tiles(est, cpu=is_cpu(request.gpu))
    if est.fit.layout is not None and est.fit.layout.tensor_parallel > 1:
        tensor_parallel_tiles(est, request.gpu, answer.split)
    paged_section(est, NS)
    launch_commands(est)
    with st.expander("Why: the reasoning with these numbers", expanded=True):
        st.markdown("\n".join(f"- {line}" for line in why(answer)))
        for note in request.spec.notes:
            st.caption(note)
    formulas()

st.divider()
solvers_section(NS, request.spec, request.gpu, est.inputs)  # max context, max users, cheapest GPU

st.divider()
st.header("Cost and latency against batch size")
cost_curve(answer, NS)

st.divider()
st.header("Estimate vs measurement on this machine")
measured_section(answer, NS)

st.divider()
track_record_section(NS)

st.divider()
export.download_button("Memory and cost", export_parts(answer), key=f"{NS}.html")
