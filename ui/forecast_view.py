"""The Playground's forecast before a run, said by the one rule for an estimate beside a measurement
(engine.calibration.beside): the calibrated model with its interval, or the roofs' bound said to be a bound, and
"not comparable" when the machine is busy now."""

from __future__ import annotations

import streamlit as st

from ui.playground_widgets import LONG_RUN_S, forecast


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
