"""Shared widgets: the model picker and the 'load with progress' helper every model-using page calls."""

from __future__ import annotations

import streamlit as st

from engine.core import dtypes
from engine.core.errors import EngineError
from engine.runtime import models
from ui.common import cached_hardware, cached_model, show_error

CUSTOM = "other (hub id or local folder)…"
REMOTE_CODE_HELP = (
    "Safetensors weights only, from the hub or a folder under the server's allowed model roots. "
    "Remote code is off: a model's own Python code never runs unless the server operator enables "
    "INFERENCE_LAB_TRUST_REMOTE_CODE=1; nothing in the browser can turn it on."
)


def model_picker(
    key: str, *, default: str = models.DEFAULT_MODEL, allow_custom: bool = True
) -> tuple[str, str]:
    """Preset/custom model name and dtype, with each preset's description. Returns (name, dtype)."""
    hw = cached_hardware()
    names = list(models.PRESETS) + ([CUSTOM] if allow_custom else [])
    linked = st.query_params.get("model")  # shareable demo links: /playground?model=tiny-gpt-neo
    if linked in models.PRESETS:
        default = linked
    choice = st.selectbox(
        "Model",
        names,
        index=names.index(default) if default in names else 0,
        key=f"{key}.model",
        format_func=lambda n: n if n == CUSTOM else f"{n} ({models.PRESETS[n].kind})",
        help="Offline: smollm2-135m-instruct (real text), tiny-gpt-neo and the *-random shapes (random weights). "
        "gpt-neo-* need the Hugging Face hub or a local cache.",
    )
    if choice == CUSTOM:
        choice = st.text_input(
            "Hub id or local folder",
            key=f"{key}.custom",
            placeholder="EleutherAI/gpt-neo-125m or my-model/",
            help=REMOTE_CODE_HELP,
        ).strip()
    else:
        st.caption(models.PRESETS[choice].description)
    options = [d for d in dtypes.LOADABLE if d != "fp16" or hw.fp16_supported]
    dtype = st.selectbox(
        "Precision",
        ["auto", *options],
        key=f"{key}.dtype",
        help="auto = fp16 on a GPU (as in the chapter), fp32 on the CPU. fp16 is offered on CUDA GPUs only.",
    )
    return choice, dtype


def load_with_progress(name: str, dtype: str) -> models.LoadedModel | None:
    """The shared cached model, loading it with a status box the first time; None (with st.error) on failure."""
    if not name:
        st.info("Enter a hub id or a local folder to load.")
        return None
    try:
        with st.spinner(
            f"Loading {name} ({dtype})… the first load of the bundled model dequantizes it (~20 s)"
        ):
            return cached_model(name, dtype)
    except EngineError as exc:
        show_error(exc)
        return None


def spec_number(container, spec, name: str, label: str, key: str, *, value=None, lo=None, **kwargs):
    """A number input whose default and bounds come from an experiment's spec (engine.core.spec), so a page
    never restates them; whole numbers stay ints. `value` / `lo`: a page's own starting value or a higher
    floor (a workload's length that 0 would switch off)."""
    spec_lo, hi = spec.bounds(name)
    lo = spec_lo if lo is None else lo
    default = spec.default(name) if value is None else value
    if isinstance(default, int):
        lo, hi = (None if lo is None else int(lo)), (None if hi is None else int(hi))
    return container.number_input(
        label, min_value=lo, max_value=hi, value=default, key=key, help=spec.help(name), **kwargs
    )


def note_metric(container, label: str, value, note=None, **kwargs) -> None:
    """A metric whose second line is a note (a range, a unit, a limit), not a change: drawn without colour or
    arrow, so it never reads as better or worse."""
    container.metric(label, value, note, delta_color="off", delta_arrow="off", **kwargs)


def sidebar_model(namespace: str, **picker) -> models.LoadedModel | None:
    """A page's model: picked in the sidebar under 'Model', then loaded with progress (one copy per server);
    None while it cannot load (the reason is on the page)."""
    with st.sidebar:
        st.subheader("Model")
        name, dtype = model_picker(namespace, **picker)
    return load_with_progress(name, dtype)
