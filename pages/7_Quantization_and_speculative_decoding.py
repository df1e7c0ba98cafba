"""The article's levers, measured on this machine (NVIDIA, "Mastering LLM Techniques: Inference
Optimization"): weight quantization, KV-cache quantization and speculative decoding, each beside what the
calculator or the theory predicts, with every verdict written from the numbers next to it."""

from __future__ import annotations

import streamlit as st

from engine.core.errors import EngineError
from engine.core.jsonsafe import from_jsonable
from engine.lab.evaluation import scored_text
from engine.levers import kvquant, quant, speculative
from engine.race.quality import BPB_DOCUMENTS
from ui import levers_widgets, pace
from ui.common import init_state, page_setup, show_error
from ui.widgets import model_picker, sent_in_range, spec_input, split_dataframes

NS = "levers"
# The page's own starting runs, sized for a live demo on a 2-core CPU (bench/tour.py measures them): int8 against
# fp32, prompt lookup against plain greedy, a short KV-cache generation. Every scheme and method is one click away.
PAGE_SCHEMES = ("fp32", "int8")
PAGE_Q_TOKENS, PAGE_Q_DOCS = 16, 2
PAGE_METHODS, PAGE_WORKLOADS, PAGE_S_TOKENS = ("prompt_lookup",), ("input_grounded",), 24
PAGE_KV_TOKENS = 64
QS, KS = quant.QuantSpec, kvquant.KVSpec
page_setup("Quantization and speculative decoding", measures=True)
init_state(NS, quant=None, kv=None, spec=None)

st.title("Quantization and speculative decoding")
st.markdown(
    "Three levers from NVIDIA's guide to LLM inference optimization, each applied to the loaded model and "
    "measured in one run against its own baseline: **fewer bytes per weight**, **fewer bytes per cached "
    "token**, and **several tokens per forward pass**. Whatever wins or loses here is what this machine does."
)
with st.sidebar:
    name, dtype = model_picker(NS, allow_custom=False)
    st.caption("Quantization and the KV cache are measured against the model in fp32.")

tab_q, tab_kv, tab_s = st.tabs(["Weight quantization", "KV-cache quantization", "Speculative decoding"])

with tab_q:
    st.markdown(
        "Each scheme quantizes a copy of the fp32 model (every linear layer except the output layer). Weight "
        "bytes are read from the quantized tensors themselves (scales and zero points included) and set beside "
        "the calculator's bytes for the same shapes. Speedup = median fp32 time per "
        "token / median scheme time per token, with a bootstrap 95% interval. Quality: "
        + quant.QUALITY_METHOD.format(n="N")
    )
    with st.form(f"{NS}.qform"):
        c = st.columns([2, 1, 1, 1])  # the chosen schemes' tags need the room
        schemes = spec_input(
            c[0], quant.QuantSpec, "schemes", key=f"{NS}.schemes", label="Schemes", value=PAGE_SCHEMES
        )
        q_tokens = spec_input(c[1], QS, "max_new_tokens", key=f"{NS}.qtok", value=PAGE_Q_TOKENS)
        q_runs = spec_input(c[2], QS, "runs", key=f"{NS}.qruns", label="Timed runs")
        q_docs = spec_input(
            c[3], QS, "eval_docs", key=f"{NS}.qdocs", label="Bits/byte documents", value=PAGE_Q_DOCS
        )
        go_q = st.form_submit_button("Quantize and measure", type="primary")
    headline = st.empty()  # the result in one line under the button: the tables land below the fold at 900 px
    if sent_in_range(go_q, q_tokens, q_runs, q_docs):
        levers_widgets.measure_into(
            f"{NS}.quant",
            "quant",
            name,
            "fp32",
            "Weight quantization",
            lambda lm, report: quant.run_quant(
                lm,
                quant.QuantSpec(
                    model=name, schemes=schemes, max_new_tokens=q_tokens, runs=q_runs, eval_docs=q_docs
                ),
                progress=report,
            ),
            size=len(set(schemes) | {"fp32"}) * (q_tokens * (q_runs + 1) + 100 * q_docs),
            settings={"model": name, "schemes": schemes, "max_new_tokens": q_tokens, "runs": q_runs},
        )
    shown = pace.shown_result(
        "quant", st.session_state[f"{NS}.quant"], lambda p: from_jsonable(quant.QuantReport, p)
    )
    if shown is not None:
        result = shown.result
        if quant.headline(result.rows):
            # a ratio measured under load swings either way (walks read int8 4.23× and 1.26× faster live, busy,
            # where the quiet recorded run says 1.58-1.69× slower): no direction is called from a busy run
            headline.markdown(
                ("**Measured on a busy machine: no speed verdict; run again when it is quiet** (presenter mode "
                 "shows the last quiet run). " if shown.busy else "")
                + quant.headline(result.rows, busy=bool(shown.busy)) + " The tables and verdicts below have the rest."
            )  # fmt: skip
        pace.note(shown)
        st.caption(
            f"{result.model} on {result.device}: {result.runs} timed runs of {result.max_new_tokens} tokens "
            f"per scheme; bits per byte over {scored_text(result.eval_documents)}. The Latency race scores the "
            f"first {BPB_DOCUMENTS}, so its figure for the same model differs wherever the counts differ: other "
            "text, not another model."
        )
        split_dataframes(
            levers_widgets.quant_records(result.rows, busy=bool(shown.busy)),
            "scheme",
            levers_widgets.quant_parts(quant.memory_note(result.rows)),
        )
        base = result.rows[0] if result.rows and result.rows[0].scheme == "fp32" else None
        if shown.busy:
            st.markdown("**Verdicts of a run measured on a busy machine** (other work shifts each scheme's timing "
                        "differently, so a ratio can turn either way):")  # fmt: skip
        for row in result.rows:
            st.markdown(f"- {quant.verdict(row, base, busy=bool(shown.busy))}")
        levers_widgets.downloads(result.rows, "quantization", f"{NS}.qdl")
    else:
        st.info(
            "Choose schemes and press **Quantize and measure**: a progress bar shows the time so far and what is "
            "left, estimated from the last run on this machine."
        )

with tab_kv:
    st.markdown(
        "transformers' `QuantizedCache` (KIVI, Liu et al. 2024) keeps the newest tokens in full precision and "
        f"stores older ones in 2–8 bits with a scale and a zero point per group of {kvquant.GROUP}. Bytes are read from "
        "the cache after one greedy generation and set beside the calculator's; "
        "quality is the greedy continuation compared with the plain cache's."
    )
    status = {b: kvquant.backend_status(b) for b in kvquant.BACKENDS}
    for b, (ok, why) in status.items():
        (st.caption if ok else st.warning)(f"backend **{b}**: {why}")
    with st.form(f"{NS}.kvform"):
        c = st.columns([2, 1, 1, 1])
        backends = spec_input(c[0], kvquant.KVSpec, "backends", key=f"{NS}.backends", label="Backends")
        nbits = spec_input(
            c[1], kvquant.KVSpec, "nbits", key=f"{NS}.nbits", label="Bits (quanto: 2/4; HQQ: 2/4/8)"
        )
        kv_tokens = spec_input(c[2], KS, "max_new_tokens", key=f"{NS}.kvtok", value=PAGE_KV_TOKENS)
        budget_gb = spec_input(c[3], kvquant.KVSpec, "budget_gb", key=f"{NS}.budget")
        go_kv = st.form_submit_button("Measure the KV cache", type="primary")
    if sent_in_range(go_kv, kv_tokens, budget_gb):
        levers_widgets.measure_into(
            f"{NS}.kv",
            "kv-cache",
            name,
            "fp32",
            "KV cache",
            lambda lm, report: kvquant.run_kv(
                lm,
                backends,
                nbits=int(nbits),
                max_new_tokens=int(kv_tokens),
                budget_bytes=float(budget_gb) * 1e9,
                progress=report,
            ),
            size=(len(backends) + 1) * kv_tokens,
            settings={"model": name, "backends": backends, "nbits": nbits, "max_new_tokens": kv_tokens},
        )
    shown = pace.shown_result(
        "kv-cache", st.session_state[f"{NS}.kv"], lambda p: from_jsonable(list[kvquant.KVResult], p)
    )
    rows = shown.result if shown else None
    if rows:
        pace.note(shown)
        st.dataframe(levers_widgets.kv_table(rows), hide_index=True, width="stretch")
        for row in rows:
            st.markdown(f"- {kvquant.verdict(row, rows[0])}")
        levers_widgets.downloads(rows, "kv-cache", f"{NS}.kvdl")

with tab_s:
    st.markdown(
        "A cheap drafter proposes γ tokens; the target checks them all in one forward pass and keeps the "
        "longest prefix it agrees with, plus one token of its own, so greedy output is unchanged. **Prompt "
        "lookup** drafts by matching the last n-gram in the prompt (free, wins when the answer copies the input); "
        "**a draft model** runs a smaller model per drafted token. c is what one drafted token costs in target "
        "forwards: the draft's time, plus what it adds to the verify forward (a forward of γ + 1 tokens is not "
        "free: timed against a one-token forward in the same run). Expected speedup (Leviathan et al., 2023): "
        "(1 − α^(γ+1)) / ((1 − α)(γc + 1))."
    )
    st.caption(
        "Offline draft models: `layers:N` = the target's own first N layers (self-speculation, no copy, "
        "same tokenizer); `bf16` = a bf16 copy of the target; or a model with the same tokenizer."
    )
    with st.form(f"{NS}.sform"):
        SS = speculative.SpeculateSpec
        c = st.columns(2)
        methods = spec_input(
            c[0], SS, "methods", key=f"{NS}.methods", label="Methods", value=PAGE_METHODS,
            format_func=speculative.method_name,
        )  # fmt: skip
        workloads = spec_input(
            c[1], SS, "workloads", key=f"{NS}.wl", label="Workloads", value=PAGE_WORKLOADS,
            format_func=speculative.workload_name,
        )  # fmt: skip
        c = st.columns(4)
        draft = spec_input(c[0], SS, "draft", key=f"{NS}.draft", label="Draft model")
        gamma = spec_input(c[1], SS, "draft_length", key=f"{NS}.gamma", label="Draft length γ")
        s_tokens = spec_input(
            c[2], SS, "max_new_tokens", key=f"{NS}.stok", label="New tokens", value=PAGE_S_TOKENS
        )
        s_runs = spec_input(c[3], SS, "runs", key=f"{NS}.sruns", label="Timed runs")
        go_s = st.form_submit_button("Measure speculative decoding", type="primary")
    for w in speculative.WORKLOADS:
        st.caption(
            f"**{speculative.workload_name(w)}**: {speculative.WORKLOAD_DESCRIPTIONS[w]} "
            f"({len(speculative.WORKLOADS[w])} prompts)"
        )
    spec_headline = st.empty()  # the result in one line under the button, as the quantization tab has
    if sent_in_range(go_s, gamma, s_tokens, s_runs):
        try:
            spec = SS(
                model=name,
                dtype=dtype if dtype != "auto" else "fp32",
                methods=methods,
                workloads=workloads,
                draft=draft,
                draft_length=gamma,
                max_new_tokens=s_tokens,
                runs=s_runs,
            ).validate()
        except EngineError as exc:
            show_error(exc)
        else:
            prompts = sum(len(speculative.WORKLOADS[w]) for w in spec.workloads)
            levers_widgets.measure_into(
                f"{NS}.spec",
                "speculative",
                name,
                spec.dtype,
                "Speculative decoding",
                lambda lm, report: speculative.run_speculate(lm, spec, progress=report),
                size=prompts * (1 + len(spec.methods)) * s_tokens * s_runs,
                settings={"model": name, "methods": spec.methods, "workloads": spec.workloads},
            )
    shown = pace.shown_result(
        "speculative", st.session_state[f"{NS}.spec"], lambda p: from_jsonable(speculative.SpecReport, p)
    )
    if shown is not None:
        line = speculative.headline(shown.result.rows, busy=bool(shown.busy))
        if line:
            spec_headline.markdown(line + " The tables and verdicts below have the rest.")
        pace.note(shown)
        split_dataframes(
            levers_widgets.spec_rows(shown.result.rows, busy=bool(shown.busy)),
            levers_widgets.SPEC_KEY,
            levers_widgets.SPEC_PARTS,
        )
        for row in shown.result.rows:
            st.markdown(f"- {speculative.verdict(row, busy=bool(shown.busy))}")
        levers_widgets.downloads(shown.result.rows, "speculative", f"{NS}.sdl")
