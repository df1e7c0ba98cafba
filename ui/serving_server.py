"""The Serving page's local servers: the target choice and the start/stop row for this engine's server and vLLM's,
each a child process shared by every session (one per backend and dashboard, with a clear stop)."""

from __future__ import annotations

import streamlit as st

from engine.serving.process import ServerProcess
from ui import pace
from ui.common import show_error
from ui.widgets import button_why, refused, spec_input


class ServerSlot:
    """The one server of a backend this dashboard may run (started from the page, stopped from it): the engine's
    own (`python -m engine serve`) or vLLM's (`--backend vllm`, engine/backends/vllm.py), both as that command in a
    child process, so the command stops whatever it started."""

    def __init__(self, backend: str = "engine") -> None:
        self.backend = backend
        self.proc: ServerProcess | None = None
        self.settings: dict = {}

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.alive

    def start(
        self,
        model: str,
        max_batch: int,
        *,
        dtype: str = "auto",
        threads: int | None = None,
        kv_gb: float | None = None,
    ) -> ServerProcess:
        """Start and wait until it serves; a failure raises RuntimeError with the command's own one-line reason."""
        from engine.backends.vllm_server import command_reason, wait_command_ready

        self.stop()
        extra = ["--dtype", dtype]
        if threads:
            extra += ["--threads", str(threads)]
        if kv_gb:
            extra += ["--kv-budget-bytes", str(int(kv_gb * 1e9))]
        if self.backend == "vllm":
            extra += ["--backend", "vllm"]
        self.proc = ServerProcess(model, max_batch=max_batch, extra=tuple(extra))
        self.settings = {
            "model": model,
            "max_batch": max_batch,
            "dtype": dtype,
            "threads": threads,
            "kv_gb": kv_gb,
        }
        try:
            if self.backend == "vllm":
                return wait_command_ready(self.proc)
            return self.proc.wait_ready(300.0)
        except RuntimeError:
            reason = command_reason(self.proc.log_tail(200_000))
            self.stop()
            raise RuntimeError(reason) from None

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop(60.0 if self.backend == "vllm" else 10.0)  # vLLM's teardown takes seconds
            self.proc = None


def start_experiment(backend: str) -> str:
    return f"server-start-{backend}"


def start_with_clock(backend: str, slot: ServerSlot, model: str, batch: int, **settings) -> None:
    """Start a server behind the page clock, its time left from the last start of that server on this machine (its
    time is stored for the next one). A failed start raises RuntimeError with the command's own reason."""
    pace.run_experiment(
        start_experiment(backend),
        f"Starting {NAMES[backend]}'s server for {model} and waiting until it serves",
        lambda report: slot.start(model, batch, **settings),
        settings={"model": model, "max_batch": batch, **settings},
        store=lambda proc: {"model": model},  # the process itself is not a record
    )


@st.cache_resource(show_spinner=False)
def server_slot(backend: str = "engine") -> ServerSlot:
    return ServerSlot(backend)


TARGETS = (
    "This engine's server",
    "vLLM's server",
    "Both, side by side",
    "Any OpenAI-compatible URL",
)
BACKENDS_OF = {TARGETS[0]: ("engine",), TARGETS[1]: ("vllm",), TARGETS[2]: ("engine", "vllm")}
NAMES = {"engine": "this engine", "vllm": "vLLM"}
TITLES = {"engine": "This engine", "vllm": "vLLM"}  # at the start of a sentence
COMPARE_KEYS = {"engine": "lab", "vllm": "vllm"}  # the side-by-side's names (engine.backends.compare)


def vllm_status() -> tuple[str | None, str]:
    """(vLLM's build in words, "") or (None, the one sentence saying how to make its environment)."""
    from engine.backends.vllm import availability
    from engine.race.peers.base import PAGE_VLLM_NOTE

    build, _ = availability()
    return (build.label, "") if build else (None, f"vLLM is {PAGE_VLLM_NOTE}.")


def local_servers(target: str, ns: str) -> tuple[dict[str, str], str]:
    """The controls that start and stop the local servers a target needs, with the same model, precision, batch,
    threads and KV space for each; returns ({backend: base URL} of those running, the model)."""
    from engine.core.load import cores
    from engine.runtime.models import PRESETS
    from engine.serving.runner import ServeSpec

    backends = BACKENDS_OF[target]
    label, missing = vllm_status() if "vllm" in backends else (None, "")
    c = st.columns([2, 1, 1, 1, 1])

    def field(col, name: str, key: str = "", **narrow):
        """One ServeSpec field under this page's namespace (`key`: its session-state name where not the field's)."""
        return spec_input(col, ServeSpec, name, key=f"{ns}.{key or name}", **narrow)

    model = field(c[0], "model", key="engine_model", choices=list(PRESETS), label="Model")
    batch = field(c[1], "max_batch", label="Max batch")
    dtype = field(
        c[2],
        "dtype",
        choices=[d for d in ServeSpec.choices("dtype") if d != "fp16"],  # fp16: CUDA only
        label="Precision",
        help="auto: fp32 on a CPU",
    )
    threads = field(
        c[3],
        "threads",
        hi=max(1, cores()),
        value=max(1, cores() - 1),
        label="Compute threads",
        help="torch threads of each server (one core is left to HTTP, the default of both)",
    )
    kv_gb = field(
        c[4],
        "kv_budget_bytes",
        key="kv_gb",
        unit=1e9,
        value=2.0,
        lo=0.1,
        hi=64.0,
        label="KV space (GB)",
        help="each server's KV cache budget",
    )
    start_refused = refused(batch, threads, kv_gb)  # the refused field says why
    if missing:
        st.warning(missing, icon=":material/block:")
    elif label:
        st.caption(
            f"vLLM here: {label}, started eager (`--enforce-eager`) on a CPU, from its own environment."
        )
    slots = {b: server_slot(b) for b in backends}
    b1, b2 = st.columns(2)
    if missing:
        start_why = "vLLM's environment is missing (see above)"
    elif start_refused:
        start_why = "a setting above is out of range (the refused one says why)"
    elif all(s.running for s in slots.values()):
        start_why = "already serving"
    else:
        start_why = ""
    if button_why(
        b1,
        f"Start {'both' if len(slots) > 1 else 'server'}",
        key=f"{ns}.start",
        type="primary",
        why=start_why,
    ):
        for b, slot in slots.items():
            if slot.running:
                continue
            try:
                start_with_clock(b, slot, model, batch, dtype=dtype, threads=threads, kv_gb=kv_gb)
            except RuntimeError as exc:
                show_error(exc, prefix=f"{TITLES[b]}'s server did not start")
                break
    if b2.button(
        f"Stop {'both' if len(slots) > 1 else 'server'}",
        key=f"{ns}.stop",
        disabled=not any(s.running for s in slots.values()),
    ):
        for slot in slots.values():
            slot.stop()
        st.rerun()
    urls = {}
    for b, slot in slots.items():
        if slot.running and slot.proc is not None:
            urls[b] = slot.proc.base_url
            st.success(
                f"{TITLES[b]}'s server: `{slot.proc.base_url}` serving **{slot.proc.model}** "
                f"({slot.settings.get('dtype')}, {slot.settings.get('threads')} thread(s), "
                f"{slot.settings.get('kv_gb'):g} GB KV; reachable from this machine only).",
                icon=":material/dns:",
            )
    if len(urls) < len(slots):
        st.info(
            "Start the server(s) here (child processes of the dashboard, stopped from here or when it stops), or "
            "start one yourself and choose *Any OpenAI-compatible URL*."
        )
    return urls, model
