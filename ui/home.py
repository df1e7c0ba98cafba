"""The home page: what the lab is for, this machine's hardware, and the models loaded in this server."""

from __future__ import annotations

import json

import streamlit as st
from streamlit.errors import StreamlitAPIException

from engine.calc import format as fmt
from engine.runtime import models
from ui.calc_widgets import machine_panel
from ui.common import (
    PAGES,
    ROOT,
    cached_hardware,
    fmt_bytes,
    fmt_count,
    fmt_seconds,
    loaded_models,
    page_setup,
)
from ui.machine_view import panel_button

GUIDE = {
    "Playground": "Load a model, generate for one prompt or a batch, streamed, with TTFT, TPOT, latency and "
    "throughput measured on every run; switch the KV cache off to see what it buys.",
    "Memory and cost": "Will a model fit on a GPU, how fast will it decode, what will a million tokens cost, "
    "and how close is that estimate to a run on this machine.",
    "Roofline": "Why generation is memory-bound: each operator's arithmetic intensity against a GPU's "
    "ops/byte ridge (the T4's 216.6), with this machine's measured runs placed on it.",
    "Few-shot, code and eval": "Few-shot classification scored by log-likelihood, code generation with a "
    "syntax check and a linter, and lm-evaluation-harness perplexity before anything is trusted.",
    "Latency race": "Vanilla Hugging Face generation against inference engines (CTranslate2, OpenVINO, ONNX "
    "Runtime, vLLM, DeepSpeed where a GPU has its kernels) and levers, each in its own process, weighed against "
    "output quality.",
    "Batching": "Static against in-flight batching, the memory limit on batch size, and the "
    "throughput/latency trade-off, measured.",
    "Quantization and speculative decoding": "The article's levers on this machine: fewer bytes per weight and "
    "per cached token, and several tokens per forward pass, each against its baseline and the calculator.",
    "Serving": "This engine behind an OpenAI-compatible server, or any vLLM, TGI or SGLang URL, swept by load: "
    "latency percentiles, throughput and goodput, and how many users fit within the SLOs.",
}

# The tour, one stop per page in the sidebar's order: (page title, query parameters for its deep link, what to do
# there, the chapter section).
TOUR = (
    (
        "Playground",
        {"model": "smollm2-135m-instruct", "prompt": "passage"},
        "Press **Generate**, then turn **Use KV cache** off and press **Generate** again: the link starts the prompt "
        "from the *passage* example (a few hundred tokens), which every step without the cache runs over again; the "
        "per-token chart shows what the cache saves on every step after the first.",
        "4.1.1 and 4.3.1",
    ),
    (
        "Memory and cost",
        {},
        "Pick a model and the T4: does it fit in fp32, in fp16, and what does a million tokens cost? Under the "
        "tiles, **Static vs paged KV cache** shows how many more sequences paging fits. Then choose *this machine* "
        "as the GPU for its measured roofs, and press **{measure}** beside it.",
        "4.2 and 4.3.3",
    ),
    (
        "Roofline",
        {},
        "Decode's operators sit far left of the ridge: memory-bound, so a faster memory, not more "
        "FLOP/s, makes them faster.",
        "4.3.1",
    ),
    (
        "Few-shot, code and eval",
        {},
        "Press **Classify** (a few examples, scored by log-likelihood), then **Generate code** in the *Code "
        "generation* tab (syntax-checked and linted) and **Run evaluation** in the *Evaluation* tab (perplexity).",
        "4.1.2 to 4.1.4",
    ),
    (
        "Latency race",
        {},
        "Press **Run the race**: vanilla generation against CTranslate2, each timed in its own process; the "
        "chapter's DeepSpeed and every other engine and lever are one click away.",
        "4.3.4",
    ),
    (
        "Batching",
        {},
        "Under *Simulate N users*, press **Simulate** to send 6 requests at once and watch them share decode steps; "
        "the table after it says how long each waited to join and why.",
        "4.3.2",
    ),
    (
        "Quantization and speculative decoding",
        {},
        "Press **Quantize and measure** (int8 against fp32), then in the *Speculative decoding* tab **Measure "
        "speculative decoding** (prompt lookup against plain greedy): each verdict calls a lever faster or slower "
        "only when its whole 95% interval lies on one side of 1×.",
        "4.2; the NVIDIA article's quantization and speculative decoding",
    ),
    (
        "Serving",
        {},
        "Press **Start server** (the OpenAI-compatible server, for the bundled model), then **Run sweep** to sweep "
        "the load (latency percentiles, throughput and how many users fit within the SLOs), and **Stop server** when "
        "done.",
        "4.3.2; the NVIDIA article's in-flight batching",
    ),
)


# What each stop asks the presenter to press, in its order: (the page's button, how the tour names that run). The
# Memory and cost stop presses its machine panel's button, whose label follows the machine (ui.machine_view).
PRESSES: dict[str, tuple[tuple[str, str], ...]] = {
    "Playground": (("Generate", "Generate"), ("Generate", "Generate with the KV cache off")),
    "Few-shot, code and eval": (
        ("Classify", "Classify"),
        ("Generate code", "Generate code"),
        ("Run evaluation", "Run evaluation"),
    ),
    "Latency race": (("Run the race", "Run the race"),),
    "Batching": (("Simulate", "Simulate"),),
    "Quantization and speculative decoding": (
        ("Quantize and measure", "Quantize and measure"),
        ("Measure speculative decoding", "Measure speculative decoding"),
    ),
    "Serving": (("Start server", "Start server"), ("Run sweep", "Run sweep"), ("Stop server", "Stop server")),
}


def presses(measure: str) -> dict[str, tuple[tuple[str, str], ...]]:
    """PRESSES with the Memory and cost stop's: `measure`, the machine panel's button as it reads now."""
    return {**PRESSES, "Memory and cost": ((measure, measure),)}


def _tour_record() -> dict | None:
    """The lab's tour benchmark's last record on this kind of machine (bench/results), or None."""
    files = sorted((ROOT / "bench" / "results").glob("tour-full-*.json"))
    try:
        return json.loads(files[-1].read_text()) if files else None
    except (OSError, ValueError):
        return None


def stop_runs(
    asked: dict[str, tuple[tuple[str, str], ...]] | None = None,
) -> dict[str, list[tuple[str, float]]]:
    """Each stop's runs that its text asks for (`asked`: presses(), by the page's button labels), as (the tour's
    name for the run, seconds) from the tour benchmark's last record, by the stop's title. A run the benchmark made
    that the stop does not ask for (Batching's replay) is left out; a run it did not make has no time."""
    asked = presses(panel_button()) if asked is None else asked
    out: dict[str, list[tuple[str, float]]] = {}
    for stop in (_tour_record() or {}).get("stops", []):
        try:
            made = [(str(a["button"]), float(a["s"])) for a in stop.get("actions", [])]
            title = stop["title"]
        except (KeyError, TypeError, ValueError):
            continue
        runs = []
        for button, words in asked.get(title, ()):
            hit = next((k for k, (b, _) in enumerate(made) if b == button), None)
            if hit is not None:
                runs.append((words, made.pop(hit)[1]))  # in order: the second Generate is the second run
        if runs:
            out[title] = runs
    return out


def tour_pace(runs: dict[str, list[tuple[str, float]]] | None = None) -> str:
    """How long the runs the stops ask for took when the lab's tour benchmark last pressed them on this kind of
    machine (measured, dated, with the load it ran under), and which run to skip when short of time; "" without a
    record. `runs`: stop_runs()."""
    d = _tour_record()
    runs = stop_runs() if runs is None else runs
    if d is None or not runs:
        return ""
    try:
        when, n, load = d["date"][:10], d["cores"], d["load_average_before"][0]
    except (KeyError, IndexError, TypeError):
        return ""
    took = sum(s for stop in runs.values() for _, s in stop)
    return (
        f"Time it: the runs the stops below ask for took {fmt.seconds(took)} in all when the lab's tour benchmark "
        f"last pressed them ({when}, {n} cores, load average {load:.1f} at the start, measured). Other work on the "
        "machine stretches every run, and the Playground's second run, with the KV cache off, is the one that grows "
        "most: short of time, give it fewer new tokens or leave it out."
    )


def took_words(runs: list[tuple[str, float]]) -> str:
    """'Simulate took 3.77 s' / 'Generate took 5.29 s, Generate with the KV cache off 29.4 s'."""
    (words, s), *rest = runs
    return ", ".join([f"{words} took {fmt.seconds(s)}", *(f"{w} {fmt.seconds(t)}" for w, t in rest)])


TOUR_ANCHOR = "start-here"


def tour_panel() -> None:
    """'Start here': one deep link per stop, half a minute each, with the chapter section it demonstrates."""
    st.subheader("Start here: a tour of every page", anchor=TOUR_ANCHOR)  # linked from the page's first lines
    # how long it takes and presenter mode first: below the eight stops they sat past the first screen
    measure = panel_button()  # the machine panel's button as the Memory and cost page shows it now
    runs = stop_runs(presses(measure))
    pace_line = tour_pace(runs)
    if pace_line:
        st.caption(pace_line)
    st.caption(
        "Each live run shows a progress bar with the time so far and what is left. Presenting? Switch on "
        "**Presenter mode** in the sidebar: every page then opens on the last run recorded on this machine, with "
        "its date, so the tour can be shown before anything runs. A page reload keeps this session's runs."
    )
    pages = {p.title: p for p in PAGES}
    for n, (title, params, what, section) in enumerate(TOUR, 1):
        c1, c2 = st.columns([2, 5], vertical_alignment="center")
        with c1:
            try:
                st.page_link(
                    str(ROOT / pages[title].script),
                    label=f"{n}. {title}",
                    icon=pages[title].icon,
                    query_params=params or None,
                )
            except StreamlitAPIException:
                st.markdown(f"**{n}. {title}**")  # run on its own (a test), outside the app's navigation
        took = f"; in that benchmark {took_words(runs[title])}" if title in runs else ""
        c2.markdown(f"{what.format(measure=measure)} *(chapter section {section}{took})*")
    st.caption(
        'What the lab follows: **chapter 4, "Running inference"**, of the Manning book this lab accompanies '
        "(GPT-Neo as the reference model; generating, few-shot prompting, code and evaluation in 4.1; memory and "
        "cost in 4.2; the GPU, the KV cache, batching, generation-time estimates and DeepSpeed in 4.3), and "
        'NVIDIA\'s technical blog article **"Mastering LLM Techniques: Inference Optimization"** (prefill and '
        "decode, in-flight batching, the KV cache and its memory, quantization). The pages say which section each "
        "figure comes from."
    )


def hardware_panel() -> None:
    hw = cached_hardware()
    st.subheader("This machine")
    if hw.gpus:
        for g in hw.gpus:
            cols = st.columns(4)
            cols[0].metric(f"GPU {g.index}", g.name)
            cols[1].metric(
                "Memory used", f"{fmt_bytes(g.memory_used_bytes)} / {fmt_bytes(g.memory_total_bytes)}"
            )
            cols[2].metric("Utilization", "n/a" if g.utilization_pct is None else f"{g.utilization_pct:.0f}%")
            cols[3].metric("Power draw", "n/a" if g.power_w is None else f"{g.power_w:.0f} W")
        st.caption(f"Read through {hw.gpus[0].source}; {hw.nvml_status}. Measured now, not a datasheet.")
    if hw.gpu_reason:
        st.info(
            f"**No GPU in use.** {hw.gpu_reason[:1].upper()}{hw.gpu_reason[1:]}. Everything here runs on the CPU; the "
            "calculators and roofline still model any GPU from their catalog.",
            icon=":material/info:",
        )
    cols = st.columns(4)
    cols[0].metric("CPU", hw.cpu_name)
    cols[1].metric("Cores (torch threads)", f"{hw.cpu_cores_logical} ({hw.torch_threads})")
    cols[2].metric(
        "RAM", fmt_bytes(hw.ram_total_bytes), help=f"{fmt_bytes(hw.ram_available_bytes)} available now"
    )
    cols[3].metric("torch", hw.torch_version, help=f"CUDA build: {hw.cuda_build or 'none'}")


def models_panel() -> None:
    st.subheader("Models loaded in this server")
    loaded = loaded_models()
    if not loaded:
        st.caption(
            f"None yet. The Playground loads **{models.DEFAULT_MODEL}** (bundled, offline) by default."
        )
        return
    rows = [
        {
            "model": lm.name,
            "precision": lm.dtype,
            "parameters": fmt_count(lm.params),
            "memory footprint": fmt_bytes(lm.footprint_bytes),
            "placement": ", ".join(f"{k or 'all'} → {v}" for k, v in lm.device_map.items()),
            "load time": fmt_seconds(lm.load_s),
        }
        for lm in loaded
    ]
    st.dataframe(rows, hide_index=True, width="stretch")
    # each model's source in a line of its own: a column of them pushed the table past 1280 px
    st.markdown("\n".join(f"- **{lm.name}**: {lm.source}" for lm in loaded))
    st.caption(
        "Footprint: the memory the loaded model's parameters and buffers take, measured by transformers. "
        "Placement: the devices the model's layers sit on when it was split across several, else its one device. "
        "One copy of each model serves every browser session."
    )


def render() -> None:
    page_setup("Home")
    st.title("Inference Lab")
    st.markdown(
        "See LLM inference: **what a model costs to run, why it is slow, and what makes it faster.** "
        "Every figure is either measured on this machine or computed from a formula you can open; "
        "each says which."
    )
    st.markdown(
        f"Presenting, or new here? **[Start here: a tour of every page](#{TOUR_ANCHOR})**, one stop per page, "
        "with how long its live runs take and presenter mode; it follows this machine's roofs below."
    )
    st.subheader("This machine's roofs")
    st.caption(
        "Memory bandwidth and matmul FLOP/s of the machine this server runs on: the roofs of the calculator's and "
        "the roofline's 'this machine', one stored measurement that every page reads."
    )
    machine_panel("home")
    tour_panel()
    with st.expander("Every page in one line"):
        for p in PAGES:
            st.markdown(f"- **{p.title}**: {GUIDE[p.title]}")
    hardware_panel()
    models_panel()
