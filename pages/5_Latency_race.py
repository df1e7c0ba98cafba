"""Latency race (chapter 4.3.4): vanilla transformers against peer inference engines, DeepSpeed and the levers
that make decoding faster, each in its own worker process, weighed against output quality."""

from __future__ import annotations

import streamlit as st

from engine.core.errors import EngineError
from engine.race import contenders, runner, serialise, verdict
from engine.race.peers import base as peers
from engine.runtime import models
from ui.common import cached_hardware, init_state, page_setup, show_error
from ui.race_widgets import contender_picker, show_result

page_setup("Latency race", ":material/timer:", measures=True)
init_state("race", result=None)
hw = cached_hardware()

st.title("Latency race")
st.markdown(
    "Chapter 4.3.4 loads GPT-Neo in half precision, wraps it with "
    "`deepspeed.init_inference(model, dtype=torch.float16, replace_with_kernel_inject=True)` and compares its "
    "latency with the vanilla model, then asks whether the output is still as good. Here that experiment is one "
    "click, plus the contenders that answer *what actually makes decoding faster*: **engines** (whole inference "
    "engines: OpenVINO GenAI, ONNX Runtime GenAI, CTranslate2, vLLM, DeepSpeed) and **levers** (one change to vanilla "
    "transformers). Each contender runs in its own process (clean memory, its own Python interpreter), on the "
    "same prompts, greedy, with the same warm-up and timed runs and the same tokenizer counting the tokens."
)
if not hw.has_gpu:
    st.info(
        "No CUDA GPU here, so DeepSpeed runs its **pass-through** engine (no kernels injected: its inference "
        "kernels are CUDA kernels) and is labelled as such. Recorded GPU results, when there are any, are shown "
        "at the bottom of the page."
    )

with st.form("race.form"):
    presets = [n for n, p in models.PRESETS.items() if p.kind != "hub"] + [
        n for n, p in models.PRESETS.items() if p.kind == "hub"
    ]
    c1, c2 = st.columns(2)
    model = c1.selectbox(
        "Model",
        presets,
        index=presets.index(models.DEFAULT_MODEL),
        key="race.model",
        format_func=lambda n: f"{n} ({models.PRESETS[n].kind})",
        help="random = true shape and timings with random weights (gibberish text)",
    )
    dtype = c2.selectbox(
        "Race precision (vanilla's)",
        ["auto", "fp32", "bf16", *(["fp16"] if hw.has_gpu else [])],
        key="race.dtype",
        help="auto = fp16 on a GPU (as in the chapter), fp32 on the CPU",
    )
    c1, c2 = st.columns(2)
    chosen_engines = contender_picker(c1, "engines", "Engines (vanilla, the baseline, always runs)")
    chosen_levers = contender_picker(c2, "levers", "Levers")
    c1, c2, c3 = st.columns(3)
    runs = c1.slider("Timed runs per contender", 1, 20, runner.RaceSpec.runs, key="race.runs")
    max_new = c2.slider("New tokens per run", 2, 256, runner.RaceSpec.max_new_tokens, key="race.max_new")
    warmup = c3.slider("Warm-up runs (dropped)", 0, 3, runner.RaceSpec.warmup, key="race.warmup")
    started = st.form_submit_button("Run the race", type="primary")

why_no_interval = verdict.interval_reason(runs, warmup)
if why_no_interval:
    st.info(f"With these settings the speedups get {why_no_interval}; they are shown as grey points.")

with st.expander("The contenders"):
    for c in contenders.CONTENDERS.values():
        st.markdown(f"- **{c.label}** (`{c.name}`, {c.group}): {c.description}")
    path, why = contenders.ds_python()
    st.markdown(f"Pinned DeepSpeed environment: {'`' + path + '`' if path else why}")
    st.markdown(
        "**Peer engines installed here** (`bash scripts/install_peers.sh` installs the three converting ones; "
        "each converts a model once, offline, into the model cache, and later races reuse it; vLLM loads the "
        "model folder itself, from its own environment made by `bash scripts/make_vllm_env.sh`):"
    )
    st.dataframe(peers.installed(), hide_index=True, width="stretch")

if started:
    try:
        spec = runner.RaceSpec(
            model=model,
            contenders=tuple(contenders.resolve([*chosen_engines, *chosen_levers])),
            runs=runs,
            warmup=warmup,
            max_new_tokens=max_new,
            dtype=dtype,
        ).validate()
        bar = st.progress(0.0, text="starting the race…")

        def on_progress(done: int, total: int, message: str) -> None:
            bar.progress(done / total, text=f"{done}/{total} · {message}")

        result = runner.run_race(spec, progress=on_progress)
        bar.progress(1.0, text="done")
        st.session_state["race.result"] = serialise.to_dict(result)
    except (EngineError, ValueError) as exc:
        show_error(exc)

if st.session_state["race.result"]:
    st.subheader("Live run (this machine)")
    show_result(serialise.from_dict(st.session_state["race.result"]), key="live")

st.subheader("Recorded races")
recorded = serialise.load_recorded()
if not any(r.hardware.get("gpu") for _, r in recorded):
    st.info(
        "No recorded GPU results exist yet. `bash scripts/gpu_check.sh` on a machine with a CUDA GPU races "
        "GPT-Neo 125M / 1.3B shapes and the bundled model (vanilla fp16 against DeepSpeed kernel injection) and "
        "writes them to bench/results/; they appear here, labelled with their hardware and date."
    )
st.caption(
    "`bench/race.py` records the peer engines' race on this kind of CPU machine; each recorded race is "
    "labelled with its hardware and date, and is not a live measurement."
)
for path, rec in recorded:
    where = rec.hardware.get("gpu") or f"CPU {rec.hardware.get('cpu', '?')}"
    with st.expander(f"Recorded, not live: {rec.model} on {where} · {rec.started_at[:10]} · {path.name}"):
        show_result(rec, key=f"rec.{path.stem}")

with st.expander("DeepSpeed in a notebook vs outside one"):
    st.markdown(
        "DeepSpeed expects to be started by its launcher (`deepspeed --num_gpus 1 script.py`), which spawns one "
        "process per GPU and sets `RANK`, `LOCAL_RANK`, `WORLD_SIZE`, `MASTER_ADDR` and `MASTER_PORT` for each. "
        "A Jupyter notebook has no launcher, so the chapter's notebook works around it by setting those "
        "variables by hand for a single process before `init_inference`. Outside notebooks you do not: run the "
        "script with the `deepspeed` launcher (or `torchrun`), and tensor parallelism over several GPUs "
        "(`tensor_parallel={'tp_size': N}`) works the same way. This page's workers are plain processes, so "
        "each DeepSpeed worker sets the single-process variables itself, the notebook workaround in code."
    )
    st.markdown(
        "**Versions.** DeepSpeed's own tests pin transformers 4.42.4 as the last known good for kernel "
        "injection; GPT-Neo moved to Cache objects in 4.45, which DeepSpeed's injected attention does not "
        "speak. With this dashboard's transformers 5 the `deepspeed` contender says so before it tries. "
        "`bash scripts/make_ds_env.sh` makes a pinned side environment (`.venv-ds`: transformers 4.42.4 + "
        "DeepSpeed 0.19.8) that the `deepspeed-pinned` contender runs in."
    )
