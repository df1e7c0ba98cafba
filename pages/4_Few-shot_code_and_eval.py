"""Few-shot prompting, code generation and evaluation with lm-evaluation-harness (chapter 4, 4.1.2-4.1.4).

Thin page: widgets and layout here; the work is in engine.lab.fewshot, engine.lab.codegen and engine.lab.evaluation.
"""

from __future__ import annotations

import time

import pandas as pd
import streamlit as st

from engine.core.errors import EngineError
from engine.core.jsonsafe import from_jsonable
from engine.lab import codegen, evaluation, fewshot
from engine.runtime import run
from engine.runtime.settings import GenerationConfig
from ui import export, lab_view, lab_widgets, pace
from ui.common import fmt_seconds, init_state, page_setup, show_error
from ui.playground_widgets import live_line
from ui.widgets import RADIO, SLIDER, button_why, refused, sidebar_model, spec_input, split_dataframes

EVAL_COLUMNS = ("word_perplexity", "byte_perplexity", "bits_per_byte", "engine_bits_per_byte", "device",
                "task_version", "documents", "runtime_s")  # fmt: skip
EVAL_PARTS = (
    ("What each run measured (the engine's own forward beside the harness's)",
     ("word perplexity", "byte perplexity", "bits per byte", "engine bits per byte")),
    ("Where and how it ran", ("device", "task version", "documents", "runtime s")),
)  # fmt: skip
NS = "lab"
MAX_UPLOAD_BYTES = fewshot.MAX_CSV_BYTES
FS, CODE, EVAL = fewshot.FewShotSpec, codegen.CodeSpec, evaluation.EvalSpec
CLASSIFY_EXPERIMENT = "fewshot-classify"  # one text classified: kept for a reload and presenter mode
SWEEP_EXPERIMENT = "fewshot-accuracy"  # the run log's name: the clock's estimate and the reload
CODE_EXPERIMENT = "lab-code"  # one generated and reviewed draft
QUICK_QUERIES, QUICK_LIMIT = 16, 8  # the page's first runs take seconds; the engine's default is all of them

page_setup("Few-shot, code and eval", measures=True)
init_state(NS, sweep=None, classified=None, code=None, eval_runs=None, last_eval=None)
EVAL_EXPERIMENT = "evaluation"
state = st.session_state
if state[f"{NS}.eval_runs"] is None:  # a new session, or a reload: this browser session's stored runs
    state[f"{NS}.eval_runs"] = lab_view.session_eval_runs(EVAL_EXPERIMENT)

st.title("Few-shot, code and eval")
st.caption(
    "Chapter 4.1.2-4.1.4: show a model a few examples and it classifies new text; ask it for code and "
    "review what comes back; and measure a model with a shared evaluation harness before trusting it."
)

lm = sidebar_model(NS)
if lm is None:
    st.stop()
st.caption(f"Loaded **{lm.name}** in {lm.dtype} on {lm.device} ({lm.params / 1e6:.1f} M parameters).")

kept = lab_view.kept_in_other_tabs(
    code=(CODE_EXPERIMENT, state[f"{NS}.code"]), evaluation_run=(EVAL_EXPERIMENT, state[f"{NS}.last_eval"])
)
kept_slot = st.empty()  # always drawn: a note that comes and goes above the tabs would move them, and a moved
if kept:  # st.tabs is a new one, back on its first tab (a click on Generate code jumped the view to Few-shot)
    kept_slot.info(kept, icon=":material/history:")
tab_fs, tab_code, tab_eval = st.tabs(["Few-shot", "Code generation", "Evaluation"])
done_shown = sweep_shown = None  # what the few-shot tab shows, for the report (none without a dataset)


# --- Few-shot ----------------------------------------------------------------------------------------------
def _k_input(container, name: str, **kwargs):
    """A widget for a field about k, labelled as the field writes it: k is the chapter's symbol, in lower case."""
    return spec_input(container, FS, name, label=FS.label(name), **kwargs)


def _dataset() -> fewshot.LabelledSet | None:
    source = spec_input(st, FS, "source", key=f"{NS}.fs_source", widget=RADIO, horizontal=True)
    shipped, upload, _ = fewshot.SOURCES
    try:
        if source == shipped:
            ds = fewshot.load_shipped(fewshot.DEFAULT_SET)
            st.caption(
                f"{len(ds)} short sentences written for this project, labelled {' / '.join(ds.labels)} "
                "(the lab's bundled sentiment set)."
            )
            return ds
        if source == upload:
            up = st.file_uploader("CSV file (at most 1 MB)", type=["csv"], key=f"{NS}.fs_upload")
            if up is None:
                st.info("Choose a CSV with columns text,label.")
                return None
            if up.size > MAX_UPLOAD_BYTES:
                st.error(f"The file is {up.size:,} bytes; the limit is {MAX_UPLOAD_BYTES:,} (1 MB).")
                return None
            return fewshot.parse_csv(up.getvalue(), name=up.name)
        pasted = st.text_area(
            "CSV text",
            "text,label\nI loved every minute of it.,positive\nIt broke on the first day.,negative\n"
            "What a kind and helpful shop.,positive\nThe food was cold and bland.,negative\n",
            key=f"{NS}.fs_paste",
            height=150,
        )
        return fewshot.parse_csv(pasted, name="pasted")
    except EngineError as exc:
        show_error(exc)
        return None


def _template() -> fewshot.PromptTemplate:
    d = fewshot.PromptTemplate()
    c1, c2, c3 = st.columns([3, 1, 1])
    instruction = c1.text_input("Instruction", d.instruction, key=f"{NS}.fs_instruction")
    input_prefix = c2.text_input("Input prefix", d.input_prefix, key=f"{NS}.fs_in_prefix")
    output_prefix = c3.text_input("Output prefix", d.output_prefix, key=f"{NS}.fs_out_prefix")
    return fewshot.PromptTemplate(
        instruction=instruction, input_prefix=input_prefix, output_prefix=output_prefix
    )


with tab_fs:
    st.markdown(
        "A GPT-style model was never trained to classify sentiment, yet a prompt that shows it a few labelled "
        "examples (*few-shot*) often lets it label new text. The label is read the way evaluation harnesses "
        "read it: the model's log-likelihood of each candidate label after the prompt; the highest wins."
    )
    ds = _dataset()
    if ds is not None:
        with st.expander(f"The {len(ds)} labelled examples"):
            st.dataframe(
                pd.DataFrame([{"text": e.text, "label": e.label} for e in ds.examples]), hide_index=True
            )
        template = _template()

        st.subheader("Classify one text")
        c1, c2 = st.columns([3, 1])
        query = c1.text_input(
            "Text to classify", "The staff were rude and the room was dirty.", key=f"{NS}.fs_query"
        )
        k_one = _k_input(c2, "k", key=f"{NS}.fs_k", widget=SLIDER, hi=min(FS.bounds("k")[1], len(ds)))
        show_free = st.checkbox(
            "Also generate a free-text completion",
            value=True,
            key=f"{NS}.fs_free",
            help="generate() continues the prompt; what it returns includes the prompt itself.",
        )
        classify_pressed = st.button("Classify", key=f"{NS}.fs_classify", type="primary")
        classify_settings = {"model": lm.name, "dataset": ds.name, "k": k_one, "text": query}
        headline = (
            st.empty()
        )  # the label in one line under the button: the prompt and scores push it below the fold
        if classify_pressed:

            def classify(_report) -> dict:
                demos = fewshot.select_demonstrations(ds.examples, k_one, seed=0)
                prompt = fewshot.build_prompt(demos, query, template)
                scores = fewshot.score_labels(lm, prompt, ds.labels, delimiter=template.target_delimiter)
                free = None
                if show_free:
                    c = run.run(
                        lm,
                        prompt,
                        GenerationConfig(max_new_tokens=8, stop=("\n",), include_prompt=True),
                        source="lab",
                    ).completion
                    free = {"full_text": c.full_text, "text": c.text, "stop_reason": c.stop_reason}
                return {"prompt": prompt, "scores": scores, "free": free, "k": k_one}

            done = pace.run_experiment(
                CLASSIFY_EXPERIMENT,
                f"Classifying one text with {k_one} examples",
                classify,
                settings=classify_settings,
            )
            if done is not None:
                state[f"{NS}.classified"] = done
        done_shown = pace.shown_result(
            CLASSIFY_EXPERIMENT,
            state[f"{NS}.classified"],
            lab_widgets.classified_from_record,
            now=classify_settings,
        )
        pace.note(done_shown)
        done = done_shown.result if done_shown is not None else None
        if done is not None:
            headline.markdown(lab_widgets.classified_headline(done["scores"], done["k"]))
            st.markdown(f"**The exact prompt sent** ({done['k']}-shot):")
            st.code(done["prompt"], language=None)
            c1, c2 = st.columns([2, 3])
            with c1:
                st.metric("Predicted label", done["scores"].predicted)
                st.dataframe(
                    pd.DataFrame(
                        {
                            "label": done["scores"].labels,
                            "log-likelihood": done["scores"].logprobs,
                            "probability": done["scores"].probabilities,
                            "tokens": done["scores"].token_counts,
                        }
                    ),
                    hide_index=True,
                )
            with c2:
                st.plotly_chart(
                    lab_widgets.label_probability_figure(done["scores"]), key=f"{NS}.fs_probs_chart"
                )
            if done["free"] is not None:
                stopped = {
                    "eos": "end of sequence",
                    "stop": "the newline stop sequence",
                    "length": "the 8-token limit",
                }
                st.markdown(
                    f"**Free-text completion** (greedy; stopped by {stopped.get(done['free']['stop_reason'], '?')}). "
                    "As in the chapter, what `generate` returns *includes the prompt*; the new text is at the end:"
                )
                st.code(done["free"]["full_text"], language=None)
                st.caption(f"New text only: {done['free']['text']!r}")

        st.subheader("Accuracy for k = 0, 1, 2, 4, 8")
        st.markdown(
            "Every query is classified with k examples drawn (seeded) from the *other* items, so zero-shot and "
            "k-shot are compared on the same queries; the examples of a smaller k are the first ones of a larger k."
        )
        c1, c2 = st.columns(2)
        ks = _k_input(c1, "ks", key=f"{NS}.fs_ks", value=tuple(k for k in FS.default("ks") if k < len(ds)))
        n_queries = spec_input(
            c2,
            FS,
            "max_queries",
            key=f"{NS}.fs_nq",
            widget=SLIDER,
            hi=len(ds),
            value=min(len(ds), QUICK_QUERIES),
        )
        sweep_settings = {"model": lm.name, "dataset": ds.name, "ks": sorted(ks), "queries": n_queries}
        if st.button("Measure accuracy vs k", key=f"{NS}.fs_sweep"):
            record = pace.run_experiment(
                SWEEP_EXPERIMENT,
                f"Measuring accuracy at k = {', '.join(map(str, sorted(ks)))} on {n_queries} queries",
                lambda report: lab_widgets.sweep_record(
                    fewshot.accuracy_by_k(
                        lm, ds, sorted(ks), template=template, max_queries=n_queries, progress=report
                    ),
                    lm,
                    ds,
                    n_queries,
                ),
                size=n_queries * sum(k + 1 for k in ks),  # prompt work grows with the demonstrations shown
                settings=sweep_settings,
            )
            if record is not None:
                state[f"{NS}.sweep"] = record
        sweep_shown = pace.shown_result(
            SWEEP_EXPERIMENT, state[f"{NS}.sweep"], lab_widgets.sweep_from_record, now=sweep_settings
        )
        pace.note(sweep_shown)
        sweep = sweep_shown.result if sweep_shown is not None else None
        if sweep is not None and sweep["results"]:
            res = sweep["results"]
            st.caption(
                f"{sweep['model']} on '{sweep['dataset']}', {res[0].total} queries. "
                + lab_widgets.accuracy_sentence(res)
            )
            st.plotly_chart(lab_widgets.accuracy_figure(res, sweep["baseline"]), key=f"{NS}.fs_acc_chart")
            st.dataframe(
                pd.DataFrame(
                    [
                        {
                            "k": r.k,
                            "accuracy": f"{r.accuracy:.0%}",  # as the chart's axis reads it
                            "correct": f"{r.correct}/{r.total}",
                            "95% interval": f"{r.interval.low:.0%} to {r.interval.high:.0%}",
                            "mean prompt tokens": round(r.mean_prompt_tokens),
                            "time": fmt_seconds(r.runtime_s),
                        }
                        for r in res
                    ]
                ),
                hide_index=True,
            )
            k_show = st.select_slider(
                "Confusion matrix for k", [r.k for r in res], value=res[-1].k, key=f"{NS}.fs_cm_k"
            )
            chosen = next(r for r in res if r.k == k_show)
            st.plotly_chart(lab_widgets.confusion_figure(chosen), key=f"{NS}.fs_cm_chart")


# --- Code generation ------------------------------------------------------------------------------------
with tab_code:
    st.markdown(
        "A language model writes code the way it writes prose: one likely token after another. The result is a "
        "**draft**: it is shown as text, checked for syntax with `ast.parse` and linted with "
        "[ruff](https://docs.astral.sh/ruff/). **It is never executed.**"
    )
    modes = {"instruct": "Ask in words (chat template)", "complete": "Continue code (the chapter's way)"}
    mode = spec_input(
        st,
        CODE,
        "mode",
        key=f"{NS}.code_mode",
        widget=RADIO,
        value="instruct" if lm.has_chat_template else "complete",
        format_func=modes.get,
        horizontal=True,
    )
    default_prompt = codegen.DEFAULT_INSTRUCTION if mode == "instruct" else codegen.DEFAULT_PROMPT
    prompt = st.text_area("Prompt", default_prompt, height=120, key=f"{NS}.code_prompt_{mode}")
    c1, c2 = st.columns(2)
    max_new = spec_input(c1, CODE, "max_new_tokens", key=f"{NS}.code_max_new", widget=SLIDER, step=16)
    stop_text = c2.text_input(
        "Stop sequences (continue mode; comma-separated, \\n for newline)",
        ", ".join(s.replace("\n", "\\n") for s in CODE.default("stop")),
        key=f"{NS}.code_stop",
        disabled=mode == "instruct",
    )
    code_settings = {"model": lm.name, "mode": mode, "prompt": prompt, "max_new_tokens": max_new}
    if st.button("Generate code", key=f"{NS}.code_go", type="primary"):
        clicked = time.perf_counter()  # the stored run's "took" is the whole wait: generation and review
        stops = tuple(s.strip().replace("\\n", "\n") for s in stop_text.split(",") if s.strip())
        try:
            # streamed as it is written; the review (syntax, lint) runs on the finished text
            code_run = run.start(lm, prompt, codegen.code_config(max_new, mode, stops), source="lab")
            clock, live, shown = st.empty(), st.empty(), prompt if mode == "complete" else ""
            clock.caption(live_line(0, max_new, 0.0, None))
            try:
                # a chunk, or at least every 0.25 s: the clock moves while it waits
                for ev in code_run.events():
                    clock.caption(live_line(ev.tokens, max_new, ev.elapsed_s, ev.compiling))
                    if ev.text:
                        shown += ev.text
                        live.code(shown, language="python")
                done_run = code_run.report()  # measured and logged once, with its source
            finally:
                code_run.cancel()  # a rerun or a closed tab stops generating for nobody
            clock.empty()
            live.empty()
            state[f"{NS}.code"] = codegen.review(done_run.completion, mode)
            pace.keep(CODE_EXPERIMENT, state[f"{NS}.code"], wall_s=time.perf_counter() - clicked,
                      size=max_new, settings=code_settings, load_before=done_run.load_before)  # fmt: skip
        except EngineError as exc:
            show_error(exc)
    shown_code = pace.shown_result(
        CODE_EXPERIMENT, state[f"{NS}.code"], lab_view.code_from_record, now=code_settings
    )
    pace.note(shown_code)
    if shown_code is not None:
        lab_view.show_code_result(shown_code.result)
    st.info("**Why review is needed.** " + codegen.WHY_REVIEW, icon=":material/rate_review:")


# --- Evaluation ----------------------------------------------------------------------------------------------
with tab_eval:
    st.markdown(
        "Before a model goes to production its output should be measured on tasks like the ones it will face: "
        "the numbers decide whether it is good enough, which model or precision to deploy, and whether a change "
        "(quantization, a new checkpoint) made it worse. EleutherAI's **lm-evaluation-harness** (`lm-eval`) "
        "runs hundreds of tasks the same way for any model, and every task carries a **version**, so a result "
        "is only compared with results from the same task version."
    )
    ok, why = evaluation.harness_status()
    if not ok:
        st.warning(why)
    else:
        c1, c2, c3 = st.columns([2, 1, 1])
        task = spec_input(
            c1,
            EVAL,
            "task",
            key=f"{NS}.eval_task",
            format_func=lambda t: t + ("" if evaluation.TASKS[t].offline else " (needs the hub)"),
        )
        st.caption(evaluation.TASKS[task].description)
        docs = evaluation.TASKS[task].documents
        limit = spec_input(
            c2, EVAL, "limit", key=f"{NS}.eval_limit", hi=docs, value=min(docs, QUICK_LIMIT)
        )  # None (refused, with its sentence) when out of range
        check = spec_input(c3, EVAL, "crosscheck", key=f"{NS}.eval_check")
        runnable, reason = evaluation.task_status(task)
        if not runnable:
            st.warning(reason)
        eval_why = "" if runnable else "the task's documents cannot be reached (see above)"
        eval_why = "a setting above is out of range (it says which)" if refused(limit) else eval_why
        shown_limit = "N" if refused(limit) else int(limit)
        st.caption(
            "The same run from a shell: "
            f"`python -m engine eval --model {lm.name} --task {task} --dtype {lm.dtype} --limit {shown_limit} --json`"
            + (
                "; with lm-eval's own CLI, as the chapter runs it: "
                f"`lm_eval --model hf --model_args pretrained=<model> --tasks {task} --device {lm.device} "
                f"--limit {shown_limit}`"
                if task
                == "wikitext"  # lm-eval's own task; the offline one is the lab's, which the command above finds
                else " (this task ships with the lab, not with lm-eval, so the lab's command is the one that finds it)"
            )
        )
        eval_settings = {"model": lm.name, "task": task, "limit": limit, "crosscheck": check}
        if button_why(st, "Run evaluation", key=f"{NS}.eval_go", type="primary", why=eval_why):
            # with the clock (elapsed, what is left from the last run here), stored for a reload and presenter mode
            res = pace.run_experiment(
                EVAL_EXPERIMENT,
                "Evaluation",
                lambda report: evaluation.run_eval(
                    lm, task, limit=int(limit), crosscheck=check, progress=report
                ),
                size=float(limit),
                settings=eval_settings,
            )
            if res is not None:
                state[f"{NS}.last_eval"] = res
                state[f"{NS}.eval_runs"] = [*state[f"{NS}.eval_runs"], res.summary()]
        shown = pace.shown_result(
            EVAL_EXPERIMENT,
            state[f"{NS}.last_eval"],
            lambda p: from_jsonable(evaluation.EvalResult, p),
            now=eval_settings,
        )
        pace.note(shown)
        res = shown.result if shown else None
        if res is not None:
            st.markdown(
                f"**{res.task}** version {res.task_version} · lm-eval {res.harness_version} · {res.model} · "
                f"{res.dtype} · {res.device} · {res.documents} documents · harness run {fmt_seconds(res.runtime_s)}"
                + (
                    ""
                    if res.crosscheck is None
                    else f" + engine cross-check {fmt_seconds(res.crosscheck.engine.runtime_s)}"
                )
                + (
                    ""
                    if res.wall_s is None
                    else f" ({fmt_seconds(res.wall_s)} in all, loading lm-eval and the task too)"
                )
            )
            c1, c2, c3 = st.columns(3)
            c1.metric("word perplexity", f"{res.word_perplexity:.4g}")
            c2.metric("byte perplexity", f"{res.byte_perplexity:.4f}")
            c3.metric("bits per byte", f"{res.bits_per_byte:.4f}")
            if res.crosscheck is not None:
                cc = res.crosscheck
                text = (
                    f"Engine cross-check: {cc.engine.bits_per_byte:.4f} bits per byte from the engine's own forward "
                    f"passes over the same {cc.engine.documents} documents ({cc.engine.tokens:,} tokens, "
                    f"{cc.engine.bytes:,} bytes): relative difference {cc.relative_difference:.2e} "
                    f"(tolerance {cc.tolerance:.0%})."
                )
                (st.success if cc.agrees else st.error)(text)
        with st.expander("What the three metrics mean", expanded=res is None):
            st.markdown(
                "All three come from the same number: the total log-likelihood the model assigns to the documents, "
                "token by token (rolling windows, as lm-eval's `wikitext` task scores them)."
            )
            st.dataframe(
                pd.DataFrame(
                    [{"metric": k, "definition": v} for k, v in evaluation.METRIC_DEFINITIONS.items()]
                ),
                hide_index=True,
            )
        runs = state[f"{NS}.eval_runs"]
        if runs:
            st.subheader(f"This session's runs ({len(runs)})")
            st.caption(
                "Compare two models, or one model in two precisions: load another in the sidebar and run again."
            )
            # two tables led by the run: eleven columns in one were wider than the page at 1280 px (the tour)
            split_dataframes(
                [
                    {
                        "run": f"{n}. {r.get('model')} {r.get('dtype')} on {r.get('task')}",
                        **{k.replace("_", " "): r[k] for k in EVAL_COLUMNS if k in r},
                    }
                    for n, r in enumerate(runs, 1)
                ],
                "run",
                EVAL_PARTS,
            )
            st.plotly_chart(lab_widgets.eval_comparison_figure(runs), key=f"{NS}.eval_chart")
            c1, c2 = st.columns(2)
            c1.download_button(
                "Download runs as JSON",
                lab_widgets.runs_json(runs),
                file_name="inference-lab-eval-runs.json",
                mime="application/json",
                key=f"{NS}.eval_download",
                icon=":material/download:",
            )
            if c2.button("Clear runs", key=f"{NS}.eval_clear"):
                state[f"{NS}.eval_runs"] = []
                state[f"{NS}.last_eval"] = None
                st.rerun()

# --- One HTML report of this page's results (what the page shows, a run kept across a reload included) --------
export.download_button(
    "Few-shot, code and eval",
    lab_view.report_sections(
        classified=done_shown, sweep=sweep_shown, code=shown_code, eval_runs=state[f"{NS}.eval_runs"]
    ),
    key=f"{NS}.html",
)
