"""Streamlit-only helpers shared by every page: page setup, the one cached engine, formatting.

Caching lives here and only here: `st.cache_resource` wraps the engine's loader, so one loaded model
serves every browser session in this server process.
"""

from __future__ import annotations

import weakref
from pathlib import Path

import streamlit as st
from streamlit.errors import StreamlitPageNotFoundError

from engine import hardware, machine, models
from engine.errors import EngineError

APP_TITLE = "Inference Lab"


ROOT = Path(__file__).resolve().parents[1]
# Material icons ship with Streamlit: no emoji font needed on the viewer's machine.
NAV_ICONS = {
    "Playground": ":material/chat:", "Memory and cost": ":material/calculate:", "Roofline": ":material/show_chart:",
    "Few-shot code and eval": ":material/science:", "Latency race": ":material/timer:", "Batching": ":material/stacks:",
}


def nav_title(path: Path) -> str:
    """'pages/2_Memory_and_cost.py' -> 'Memory and cost'."""
    return path.stem.split("_", 1)[-1].replace("_", " ")


def page_setup(title: str, icon: str = ":material/science:", *, layout: str = "wide") -> None:
    """Every page calls this first: one place owns page config and the navigation.
    Streamlit's own pages-folder menu is hidden (.streamlit/config.toml) because it can only call the home
    page 'app'; this one names it Home and gives each page an icon."""
    st.set_page_config(page_title=f"{title} · {APP_TITLE}", page_icon=icon, layout=layout)
    with st.sidebar:
        try:
            st.page_link("app.py", label="Home", icon=":material/home:")
            for path in sorted((ROOT / "pages").glob("*.py")):
                name = nav_title(path)
                st.page_link(f"pages/{path.name}", label=name, icon=NAV_ICONS.get(name, ":material/article:"))
        except StreamlitPageNotFoundError:
            pass  # the page runs on its own (AppTest.from_file, `streamlit run pages/x.py`): no app to link to
        st.divider()


@st.cache_resource(show_spinner=False)
def cached_hardware() -> hardware.HardwareInfo:
    return hardware.detect()


@st.cache_resource(show_spinner=False, max_entries=2)
def _load(name: str, dtype: str) -> models.LoadedModel:
    return models.load_model(name, dtype=dtype)


@st.cache_resource(show_spinner=False)
def _loaded_registry() -> weakref.WeakValueDictionary:
    # Weak: when the cache above evicts a model, it leaves this list too (no second reference keeps it alive).
    return weakref.WeakValueDictionary()


def cached_model(name: str, dtype: str) -> models.LoadedModel:
    """One LoadedModel per (name, dtype) per server process, shared by every session.
    max_entries bounds memory: loading a third model evicts the least recently used one.
    Failures are not cached (st.cache_resource does not cache exceptions), so a retry tries again."""
    lm = _load(name.strip(), dtype)
    _loaded_registry()[(lm.name, dtype)] = lm
    return lm


def loaded_models() -> list[models.LoadedModel]:
    return list(_loaded_registry().values())


@st.cache_resource(show_spinner="Measuring this machine's memory bandwidth and matmul FLOP/s…")
def cached_machine_measurement() -> machine.MachineMeasurement:
    """The one measurement of this machine (read and copy bandwidth, matmul FLOP/s per precision), taken once
    per server process by engine.machine.measure and stored with its date; home, calculator and roofline
    all read this one."""
    return machine.measure()


def init_state(namespace: str, **defaults) -> None:
    """Initialise a page's session-state keys once, namespaced as '<namespace>.<key>'."""
    for key, value in defaults.items():
        st.session_state.setdefault(f"{namespace}.{key}", value)


def show_error(exc: EngineError | ValueError) -> None:
    st.error(str(exc), icon=":material/error:")


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
