"""Latency race (chapter 4.3.4): vanilla transformers against peer inference engines, DeepSpeed and the levers
that make decoding faster, each in its own worker process, weighed against output quality."""

from __future__ import annotations

import streamlit as st

from engine.core.errors import EngineError
from engine.race import contenders, runner, serialise, verdict
from engine.race.peers import base as peers
from engine.runtime import models
from ui import pace
from ui.common import cached_hardware, init_state, page_setup, show_error
from ui.race_widgets import BUSY_WINNER, contender_picker, race_defaults, show_result
from ui.widgets import SLIDER, spec_input

page_setup("Latency race", measures=True)
init_state("race", result=None)
hw = cached_hardware()

st.title("Latency race")
# two lines above the form: at 1280 x 800 the five-line chapter paragraph and the GPU note pushed the Run button to
# the fold and its clock below it (the presenter pressed Run and saw nothing move); they are at the page's end now
st.markdown(
    "Press **Run the race**: vanilla transformers against whole inference **engines** and single **levers**, each "
    "in its own process on the same prompts, timed, then checked for the same output."
)
# The page's own starting race, sized for a live demo: vanilla against the fastest peer, 8 tokens. bench/tour.py
# measured vanilla + CTranslate2 + DeepSpeed at 16 tokens at 125 s (load 2.0-2.2): each lane is a process of its
# own (~10 s to import and load, then its quality checks), and vanilla runs again at the end. Every other lane,
# the chapter's DeepSpeed included, is one click away.
PAGE_CONTENDERS = race_defaults()
PAGE_TOKENS = 8
EXPERIMENT = "race"

with st.form("race.form"):
    presets = [n for n, p in models.PRESETS.items() if p.kind != "hub"] + [
        n for n, p in models.PRESETS.items() if p.kind == "hub"
    ]
    c1, c2 = st.columns(2)
    model = spec_input(
        c1,
        runner.RaceSpec,
        "model",
        key="race.model",
        label="Model",
        choices=presets,
        # a shareable link picks the model (/Latency_race?model=tiny-gpt-neo), as the Playground's does
        value=linked if (linked := st.query_params.get("model")) in presets else models.DEFAULT_MODEL,
        format_func=lambda n: f"{n} ({models.PRESETS[n].kind})",
        help="random = true shape and timings with random weights (gibberish text)",
    )
    dtype = spec_input(
        c2,
        runner.RaceSpec,
        "dtype",
        key="race.dtype",
        label="Race precision (vanilla's)",
        choices=["auto", "fp32", "bf16", *(["fp16"] if hw.has_gpu else [])],
        help="auto = fp16 on a GPU (as in the chapter), fp32 on the CPU",
    )
    c1, c2 = st.columns(2)
    chosen_engines = contender_picker(
        c1, "engines", "Engines (vanilla, the baseline, always runs)", PAGE_CONTENDERS
    )
    chosen_levers = contender_picker(c2, "levers", "Levers", PAGE_CONTENDERS)
    c1, c2, c3 = st.columns(3)
    runs = spec_input(
        c1, runner.RaceSpec, "runs", key="race.runs", label="Timed runs per contender", widget=SLIDER, hi=20
    )
    max_new = spec_input(
        c2,
        runner.RaceSpec,
        "max_new_tokens",
        key="race.max_new",
        label="New tokens per run",
        widget=SLIDER,
        hi=256,
        value=PAGE_TOKENS,
    )
    warmup = spec_input(
        c3, runner.RaceSpec, "warmup", key="race.warmup", label="Warm-up runs (dropped)", widget=SLIDER, hi=3
    )
    # the clock beside the button while a race runs: in view when it is pressed, at 1280 x 800 too
    go_col, clock_col = st.columns([1, 3], vertical_alignment="center")
    started = go_col.form_submit_button("Run the race", type="primary")
    clock = clock_col.empty()
# the winner in one line under the button: the race's tables land below the fold at 900 px
headline = st.empty()
# the line that says whose race is shown (presenter mode's, a reload's) and the busy warning: right under the
# winner, in view at 1280 x 800 on a quiet machine (below the results' heading they were off screen)
status = st.container()

why_no_interval = verdict.interval_reason(runs, warmup)
if why_no_interval:
    st.info(f"With these settings the speedups get {why_no_interval}; they are shown as pale bars.")

with st.expander("The contenders"):
    for c in contenders.CONTENDERS.values():
        st.markdown(f"- **{c.label}** ({c.group}): {c.description}")
    path, _ = contenders.ds_python()
    st.markdown(
        "Pinned DeepSpeed environment: "
        + (
            "installed (transformers 4.42.4 with DeepSpeed)"
            if path
            else "not installed (the README says how)"
        )
    )
    st.markdown(
        "**Peer engines installed here** (the README's peer-engine install step installs them; each converts a "
        "model once, offline, into the model cache, and later races reuse it; vLLM loads the model folder itself, "
        "from its own environment, made by the README's vLLM step):"
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
    except (EngineError, ValueError) as exc:
        show_error(exc)
    else:
        lanes = len(spec.contenders) + int(
            spec.recheck_baseline
        )  # one worker process each: what a race costs
        result = pace.run_experiment(
            EXPERIMENT,
            f"Racing {len(spec.contenders)} contenders"
            + (
                " (then vanilla again, to check the baseline held: one worker each)"
                if spec.recheck_baseline
                else ""
            ),
            lambda report: runner.run_race(spec, progress=lambda d, t, m: report(d / t, f"{d}/{t} · {m}")),
            size=lanes,
            settings={"model": model, "lanes": lanes, "runs": runs, "max_new_tokens": max_new},
            store=serialise.to_dict,
            where=clock,
        )
        if result is not None:
            st.session_state["race.result"] = serialise.to_dict(result)

shown = pace.shown_result(EXPERIMENT, st.session_state["race.result"], lambda d: d)
if shown is not None:
    race = serialise.from_dict(shown.result)
    headline.markdown(
        f"{BUSY_WINNER} The tables and charts below have what was measured."
        if shown.busy
        else f"**Winner.** {verdict.winner_line(race.contenders)} The verdicts, tables and charts below have the rest."
    )
    with status:
        pace.note(shown)
    st.subheader("Live run (this machine)" if not shown.note else "Race (this machine)")
    show_result(race, key="live", busy=bool(shown.busy))

st.subheader("Recorded races")
recorded = serialise.load_recorded()
if not any(r.hardware.get("gpu") for _, r in recorded):
    st.info(
        "No recorded GPU results exist yet. The repository's GPU check, run on a machine with a CUDA GPU, races "
        "GPT-Neo 125M / 1.3B shapes and the bundled model (vanilla fp16 against DeepSpeed kernel injection) and "
        "records them; they appear here, labelled with their hardware and date."
    )
on_gpu = [r for _, r in recorded if r.hardware.get("gpu")]
gpu_words = (
    f"{len(on_gpu)} by the repository's GPU check on {', '.join(sorted({r.hardware['gpu'] for r in on_gpu}))}, and "
    if on_gpu
    else ""
)
st.caption(
    f"{len(recorded)} recorded race{'' if len(recorded) == 1 else 's'}, none of them live: {gpu_words}{len(recorded) - len(on_gpu)} by the race "
    "benchmark on CPU machines (the peer engines' race). Each is labelled with its hardware and date."
)
for path, rec in sorted(recorded, key=lambda pr: not pr[1].hardware.get("gpu")):  # the GPU races first
    where = rec.hardware.get("gpu") or f"CPU {rec.hardware.get('cpu', '?')}"
    with st.expander(f"Recorded, not live: {rec.model} on {where} · {rec.started_at[:16].replace('T', ' ')}"):
        show_result(rec, key=f"rec.{path.stem}")

with st.expander("Chapter 4.3.4's experiment, and how the race keeps it fair"):
    st.markdown(
        "Chapter 4.3.4 loads GPT-Neo in half precision, wraps it with "
        "`deepspeed.init_inference(model, dtype=torch.float16, replace_with_kernel_inject=True)` and compares its "
        "latency with the vanilla model, then asks whether the output is still as good. Here that experiment is one "
        "click, plus the contenders that answer *what actually makes decoding faster*: **engines** (whole inference "
        "engines: OpenVINO GenAI, ONNX Runtime GenAI, CTranslate2, vLLM, DeepSpeed) and **levers** (one change to "
        "vanilla transformers). Each contender runs in its own process (clean memory, its own Python interpreter), on "
        "the same prompts, greedy, with the same warm-up and timed runs and the same tokenizer counting the tokens."
    )
    if not hw.has_gpu:
        st.info(
            "No CUDA GPU here, so DeepSpeed runs its **pass-through** engine (no kernels injected: its inference "
            "kernels are CUDA kernels) and is labelled as such. Recorded GPU results, when there are any, are under "
            "Recorded races above."
        )

with st.expander("DeepSpeed in a notebook vs outside one"):
    st.markdown(
        "DeepSpeed expects to be started by its launcher (`deepspeed --num_gpus 1` followed by your script), which spawns one "
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
        "speak. With this dashboard's transformers 5 the DeepSpeed contender says so before it tries. The "
        "repository's pinned DeepSpeed environment (transformers 4.42.4 + DeepSpeed 0.19.8, made by a script the "
        "README names) is what the DeepSpeed (pinned env) contender runs in."
    )
