"""Streamlit-only helpers shared by every page: page setup, the one cached engine, formatting.

Caching lives here and only here: `st.cache_resource` wraps the engine's loader, so one loaded model
serves every browser session in this server process.
"""

from __future__ import annotations

import streamlit as st

from engine import hardware, models
from engine.errors import EngineError

APP_TITLE = "Inference Lab"


def page_setup(title: str, icon: str = "🔬", *, layout: str = "wide") -> None:
    """Every page calls this first: one place owns page config and the sidebar's model status."""
    st.set_page_config(page_title=f"{title} · {APP_TITLE}", page_icon=icon, layout=layout)


@st.cache_resource(show_spinner=False)
def cached_hardware() -> hardware.HardwareInfo:
    return hardware.detect()


@st.cache_resource(show_spinner=False, max_entries=2)
def cached_model(name: str, dtype: str) -> models.LoadedModel:
    """One LoadedModel per (name, dtype) per server process, shared by every session.
    max_entries bounds memory: loading a third model evicts the least recently used one."""
    return models.load_model(name, dtype=dtype)


def init_state(namespace: str, **defaults) -> None:
    """Initialise a page's session-state keys once, namespaced as '<namespace>.<key>'."""
    for key, value in defaults.items():
        st.session_state.setdefault(f"{namespace}.{key}", value)


def show_error(exc: EngineError | ValueError) -> None:
    st.error(str(exc), icon="⚠️")


def fmt_bytes(n: float | None) -> str:
    if n is None:
        return "n/a"
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n:.0f} B"


def fmt_seconds(s: float | None) -> str:
    if s is None or s != s:  # None or NaN
        return "n/a"
    if s < 1e-3:
        return f"{s * 1e6:.0f} µs"
    if s < 1:
        return f"{s * 1e3:.1f} ms"
    return f"{s:.2f} s"


def fmt_count(n: float | None) -> str:
    if n is None:
        return "n/a"
    for unit, size in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.2f}{unit}"
    return f"{n:.0f}"
