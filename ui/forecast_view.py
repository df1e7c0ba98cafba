"""The Playground's forecast before a run, said by the one rule for an estimate beside a measurement
(engine.calibration.beside): the calibrated model with its interval, or the roofs' bound said to be a bound, and
"not comparable" when the machine is busy now."""

from __future__ import annotations

import streamlit as st

from engine.calc import format as fmt
from ui.playground_widgets import LONG_RUN_S, forecast

FORECAST_MISSED = 1.5  # a run this many times its forecast says why


def forecast_outcome(expected_s: float, took_s: float, busy: bool) -> str:
    """What replaces the forecast once the run is over: the two times side by side and, when the run took much
    longer, why (the forecast before it stays on screen otherwise, '69.7 s' beside a 5.5 min run)."""
    ratio = took_s / expected_s if expected_s > 0 else float("nan")
    # what took_s counts, said: the request to its last token (the model was loaded before the button)
    said = (
        f"Forecast before the run: {fmt.seconds(expected_s)}; generation took {fmt.seconds(took_s)} "
        "(from the request to its last token)"
    )
    if ratio > FORECAST_MISSED:
        return said + (
            f", {ratio:.1f}× the forecast: other work on the machine took its share of the CPU during the run "
            "(the forecast can only scale by the load it saw before it)."
            if busy
            else f", {ratio:.1f}× the forecast."
        )
    return said + "."


def show_run_forecast(lm, prompt: str, max_new: int, use_cache: bool) -> float | None:
    """The forecast for this run (nothing for short runs or models the calculator has no shape for); returns the
    seconds to expect (the estimate scaled by the load now), which the run's clock counts down from before its
    first token."""
    fc = forecast(lm, prompt, max_new, use_cache)
    if fc is None:
        return None
    b = fc.beside()
    text = f"{b.sentence()} ({fc.basis}.)"
    expected = b.expected_s if b.expected_s is not None else fc.seconds
    long = max(b.predicted.high if b.predicted is not None else fc.seconds, expected) >= LONG_RUN_S
    if long or b.busy:
        st.warning(
            text
            + (
                " That is minutes: you can press **Stop** at any time and keep the text made so far."
                if long
                else ""
            ),
            icon=":material/hourglass_top:",
        )
    else:
        st.caption(text)
    return expected
