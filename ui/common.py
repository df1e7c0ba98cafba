"""Streamlit-only helpers shared by every page: page setup, the one cached engine, formatting.

The engine's loader is cached here (`st.cache_resource`), so one loaded model serves every browser session in this
server process; the other caches sit beside what they hold: the shared scheduler (ui.batching_widgets), parsed
configs (ui.model_inputs), the server slot (ui.serving_server), the track record (ui.trackrecord_view).
"""

from __future__ import annotations

import re
import uuid
import weakref
from dataclasses import dataclass
from pathlib import Path

import streamlit as st

from engine.calc import format as fmt
from engine.calibration import machine
from engine.core.load import cores, is_busy, loadavg_1m
from engine.core.paths import scrub
from engine.runtime import hardware, models

APP_TITLE = "Inference Lab"


ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class NavPage:
    script: str  # relative to the repository root
    title: str  # the one name of the page: sidebar, browser tab, page title and README
    icon: str  # a Material Symbol: drawn from the font Streamlit bundles, no emoji font needed

    @property
    def url_path(self) -> str:
        """The stable deep link, Streamlit's own rule for a pages/ file: its name after the number
        (pages/1_Playground.py -> /Playground?model=tiny-gpt-neo); the home page is the root."""
        stem = Path(self.script).stem
        return "" if self.script == "app.py" else stem.split("_", 1)[1]


# Bundled, so the browser tab has its icon offline (a ":material/...:" page icon is fetched from a font CDN).
FAVICON = str(ROOT / "ui" / "assets" / "favicon.png")
HOME = NavPage("app.py", "Home", ":material/home:")
PAGES = (
    NavPage("pages/1_Playground.py", "Playground", ":material/chat:"),
    NavPage("pages/2_Memory_and_cost.py", "Memory and cost", ":material/calculate:"),
    NavPage("pages/3_Roofline.py", "Roofline", ":material/show_chart:"),
    NavPage("pages/4_Few-shot_code_and_eval.py", "Few-shot, code and eval", ":material/science:"),
    NavPage("pages/5_Latency_race.py", "Latency race", ":material/timer:"),
    NavPage("pages/6_Batching.py", "Batching", ":material/stacks:"),
    NavPage(
        "pages/7_Quantization_and_speculative_decoding.py",
        "Quantization and speculative decoding",
        ":material/compress:",
    ),
    NavPage("pages/8_Serving.py", "Serving", ":material/dns:"),
)


def navigation(home) -> st.navigation:
    """The app's pages for `st.navigation` (app.py): Home (a callable, the default page at /) then PAGES, with
    their titles, icons and stable URL paths."""
    # The bundled favicon first: otherwise the browser shows the page's Material icon, fetched from a font CDN.
    st.set_page_config(page_icon=FAVICON)
    pages = [st.Page(home, title=HOME.title, icon=HOME.icon, default=True)]
    pages += [st.Page(str(ROOT / p.script), title=p.title, icon=p.icon, url_path=p.url_path) for p in PAGES]
    return st.navigation(pages, position="sidebar")


def _leave_pages_folder_mode() -> None:
    """A fresh server that first receives a deep link (/Playground?model=...) runs the page in Streamlit's old
    pages-folder mode, because the folder is named pages/ and app.py's st.navigation has not run yet in this
    process: the sidebar then lists file names ("app", no icons). Switching the process to st.navigation and
    rerunning runs app.py, which resolves the same URL to the same page (its hash is that of the URL path).
    PagesManager.uses_pages_directory is Streamlit's own switch (set False by st.navigation itself)."""
    from streamlit.runtime.pages_manager import PagesManager

    if PagesManager.uses_pages_directory and (ROOT / "pages").is_dir() and st.runtime.exists():
        PagesManager.uses_pages_directory = False
        st.rerun()


def page_setup(title: str, *, layout: str = "wide", measures: bool = False) -> None:
    """Every page calls this first: one place owns page config. The navigation is app.py's st.navigation; a page
    run on its own (AppTest.from_file, `streamlit run pages/x.py`) simply has none. Here too: the browser
    session's key in the URL (a reload keeps the session's runs), the presenter-mode switch, and the one style
    rule that keeps tiles and selects legible. A page that times runs on this machine (`measures`) warns when the
    machine is busy."""
    _leave_pages_folder_mode()
    st.set_page_config(page_title=f"{title} · {APP_TITLE}", page_icon=FAVICON, layout=layout)
    legible()
    st.session_state[REFUSALS] = []  # this run's refused inputs (ui.widgets.spec_input adds them)
    browser_session()
    presenter_switch()
    if measures:
        busy_warning()


REFUSALS = "lab.refusals"
SESSION_PARAM = "session"  # the browser session's key in the page's URL: a reload keeps it, so its runs too
PRESENTER_PARAM = "presenter"
_SESSION_KEY = "lab.session"
_PRESENTER_KEY = "lab.presenter"


def browser_session() -> str:
    """This browser session's key: made once, kept in the session and in the URL (`?session=...`), so a page
    reload, which starts a new Streamlit session, finds the session's stored runs again (engine.runtime.runlog).
    A key from the URL is taken only in the shape this function makes (12 hex digits)."""
    sid = st.session_state.get(_SESSION_KEY)
    if sid is None:
        given = str(st.query_params.get(SESSION_PARAM, ""))
        sid = given if re.fullmatch(r"[0-9a-f]{12}", given) else uuid.uuid4().hex[:12]
        st.session_state[_SESSION_KEY] = sid
    if st.query_params.get(SESSION_PARAM) != sid:
        st.query_params[SESSION_PARAM] = sid  # a page switch drops the URL's parameters: put it back
    return sid


def presenter_mode() -> bool:
    """Presenter mode: each page opens on the last run recorded on this machine (dated) until one runs live."""
    if _PRESENTER_KEY not in st.session_state:
        st.session_state[_PRESENTER_KEY] = st.query_params.get(PRESENTER_PARAM) == "1"
    return bool(st.session_state[_PRESENTER_KEY])


def leave_recording() -> None:
    """Presenter mode switched off: a page that opened on a recorded run (its '<page>.restored', marked presenter)
    forgets it, so it shows this session's own runs only (the Playground still said 'Presenter mode: ... not live'
    with the switch off: a presenter's walk)."""
    state = st.session_state
    for key in [k for k in list(state.keys()) if str(k).endswith(".restored")]:
        if not getattr(state[key], "presenter", False):
            continue
        ns = str(key)[: -len(".restored")]
        del state[key]
        for part, empty in (("last", None), ("curve", {}), ("history", []), ("runs", None)):
            if f"{ns}.{part}" in state:
                state[f"{ns}.{part}"] = empty


def presenter_switch() -> None:
    """The sidebar switch for presenter mode, on every page (kept in the URL, so a reload keeps it too)."""
    on = presenter_mode()

    def flip() -> None:
        on = st.session_state["lab.presenter_switch"]
        st.session_state[_PRESENTER_KEY] = on
        if not on:
            leave_recording()

    st.sidebar.toggle(
        "Presenter mode",
        value=on,
        key="lab.presenter_switch",
        on_change=flip,
        help="Each page opens on the last run recorded on this machine, with its date, so a tour can be shown "
        "before anything runs; a live run replaces it.",
    )
    if on:
        st.query_params[PRESENTER_PARAM] = "1"
    elif PRESENTER_PARAM in st.query_params:
        del st.query_params[PRESENTER_PARAM]


# Tiles (st.metric), selects and links wrap instead of cutting a value with an ellipsis ("451,280 ...",
# "145.41 GI", "Hugging Face transformers (eage", "6. Quantization and specul"); a long tile value also steps
# down in size. One rule for every page; tests/test_browser.py checks it at 1280 px.
LEGIBLE_CSS = """/* inference-lab: legible */
[data-testid="stMetricValue"], [data-testid="stMetricValue"] * {
  white-space: normal !important; overflow: visible !important; text-overflow: clip !important;
  overflow-wrap: anywhere; line-height: 1.15;
  font-size: clamp(1.1rem, 2.1vw, 2.25rem);
}
[data-testid="stMetricLabel"] *, [data-testid="stMetricDelta"] * {
  white-space: normal !important; overflow: visible !important; text-overflow: clip !important;
}
[data-baseweb="select"] div {
  white-space: normal !important; text-overflow: clip !important; overflow-wrap: anywhere;
}
[data-baseweb="select"] [value], [data-baseweb="select"] > div > div:first-child {
  overflow: visible !important; height: auto !important;
}
[data-testid="stPageLink"] *, [data-testid="stSidebarNavLink"] * {
  white-space: normal !important; overflow: visible !important; text-overflow: clip !important;
}
"""


def legible() -> None:
    st.html(f"<style>{LEGIBLE_CSS}</style>")


def busy_warning() -> None:
    """The one busy rule (engine.core.load.is_busy) on the load right now: other work competes with the runs this
    page times, so they come out slower than the machine can go, and by a different amount each time."""
    load, n = loadavg_1m(), cores()
    # always one element, filled or not: a warning that comes and goes between reruns moved every element after
    # it, and a moved st.tabs is drawn anew on its first tab (a click on Generate code jumped the view to Few-shot)
    slot = st.empty()
    if is_busy(load, n):
        slot.warning(
            f"This machine is busy: 1-minute load average {load:.1f} on {n} cores (a run that just ended here, "
            "the lab's own included, counts in that average for a minute or so). Timings measured now include "
            "waiting for a core: wait a minute and rerun, or compare with runs made on a quieter machine.",
            icon=":material/speed:",
        )


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
    Failures are not cached (st.cache_resource does not cache exceptions), so a retry tries again. "auto" is
    resolved first (fp32 on the CPU), so a page asking for "auto" and one asking for "fp32" share one copy."""
    dtype = models.resolve_dtype(dtype, models.resolve_device("auto"))
    lm = _load(name.strip(), dtype)
    _loaded_registry()[(lm.name, dtype)] = lm
    return lm


def loaded_models() -> list[models.LoadedModel]:
    return list(_loaded_registry().values())


@st.cache_resource(show_spinner="Measuring this machine's memory bandwidth and matmul FLOP/s…")
def cached_machine_measurement() -> machine.MachineMeasurement:
    """The one measurement of this machine (read and copy bandwidth, matmul FLOP/s per precision): the stored one
    (engine.calibration.machine.latest, with its date and load) when there is one, else measured now and stored.
    Home, calculator and roofline all read this one; `remeasure_machine` replaces it."""
    return machine.latest() or machine.measure()


def remeasure_machine() -> tuple[machine.MachineMeasurement, bool]:
    """Measure this machine again (a few seconds), store it, and make it the one every page reads; unless it was
    taken busy while the stored one was quiet (machine.stores): then the stored one stays. Returns the new
    measurement and whether it was stored."""
    new = machine.measure()  # stored (machine.stores): the cached reader below picks it up
    cached_machine_measurement.clear()
    kept = cached_machine_measurement()
    return new, kept.measured_at == new.measured_at


def init_state(namespace: str, **defaults) -> None:
    """Initialise a page's session-state keys once, namespaced as '<namespace>.<key>'."""
    for key, value in defaults.items():
        st.session_state.setdefault(f"{namespace}.{key}", value)


def show_error(exc: Exception, prefix: str = "") -> None:
    """An engine error on the page: its message (after `prefix`, if given), with any server path scrubbed
    (engine.core.paths.scrub)."""
    st.error(scrub(f"{prefix}: {exc}" if prefix else str(exc)), icon=":material/error:")


# The pages' short names for the one formatting module (engine.calc.format: decimal units, 1 GB = 1e9 bytes).
fmt_bytes = fmt.gb
fmt_seconds = fmt.seconds
fmt_count = fmt.compact
