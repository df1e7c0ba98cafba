"""The article's levers, measured on this machine (NVIDIA, "Mastering LLM Techniques: Inference
Optimization"): weight quantization, KV-cache quantization and speculative decoding, each beside what the
calculator or the theory predicts, with every verdict written from the numbers next to it."""

from __future__ import annotations

import streamlit as st

from engine.core.errors import EngineError
from engine.levers import kvquant, quant, speculative
from ui import levers_widgets
from ui.common import init_state, page_setup, show_error
from ui.widgets import model_picker, spec_number

NS = "levers"
page_setup("Quantization and speculative decoding", ":material/compress:", measures=True)
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
        "the calculator's bytes for the same shapes (engine/calc/quant.py). Speedup = median fp32 time per "
        "token / median scheme time per token, with a bootstrap 95% interval. Quality: "
        + quant.QUALITY_METHOD.format(n="N")
    )
    with st.form(f"{NS}.qform"):
        c = st.columns(4)
        schemes = c[0].multiselect(
            "Schemes",
            list(quant.SCHEMES),
            default=list(quant.QuantSpec.default("schemes")),
            key=f"{NS}.schemes",
        )
        q_tokens = spec_number(c[1], quant.QuantSpec, "max_new_tokens", "New tokens", f"{NS}.qtok")
        q_runs = spec_number(c[2], quant.QuantSpec, "runs", "Timed runs", f"{NS}.qruns")
        q_docs = spec_number(c[3], quant.QuantSpec, "eval_docs", "Documents for bits/byte (N)", f"{NS}.qdocs")
        go_q = st.form_submit_button("Quantize and measure", type="primary")
    if go_q:
        levers_widgets.measure_into(
            f"{NS}.quant",
            name,
            "fp32",
            "weight quantization",
            lambda lm, report: quant.run_quant(
                lm,
                quant.QuantSpec(
                    model=name, schemes=tuple(schemes), max_new_tokens=q_tokens, runs=q_runs, eval_docs=q_docs
                ),
                progress=report,
            ),
        )
    result = st.session_state[f"{NS}.quant"]
    if result is not None:
        st.caption(
            f"{result.model} on {result.device}: {result.runs} timed runs of {result.max_new_tokens} tokens "
            f"per scheme; quality over {result.eval_documents} documents (measured)."
        )
        st.dataframe(levers_widgets.quant_table(result.rows), hide_index=True, width="stretch")
        base = result.rows[0] if result.rows and result.rows[0].scheme == "fp32" else None
        for row in result.rows:
            st.markdown(f"- {quant.verdict(row, base)}")
        levers_widgets.downloads(result.rows, "quantization", f"{NS}.qdl")
    else:
        st.info(
            "Choose schemes and press **Quantize and measure** (SmolLM2: about a minute per scheme on 2 cores)."
        )

with tab_kv:
    st.markdown(
        "transformers' `QuantizedCache` (KIVI, Liu et al. 2024) keeps the newest tokens in full precision and "
        f"stores older ones in 2–8 bits with a scale and a zero point per group of {kvquant.GROUP}. Bytes are read from "
        "the cache after one greedy generation and set beside the calculator's (engine.calc.quant.kv_quant_bytes); "
        "quality is the greedy continuation compared with the plain cache's."
    )
    status = {b: kvquant.backend_status(b) for b in kvquant.BACKENDS}
    for b, (ok, why) in status.items():
        (st.caption if ok else st.warning)(f"backend **{b}**: {why}")
    with st.form(f"{NS}.kvform"):
        c = st.columns(4)
        backends = c[0].multiselect(
            "Backends", list(kvquant.BACKENDS), default=list(kvquant.BACKENDS), key=f"{NS}.backends"
        )
        nbits = c[1].selectbox("Bits (quanto: 2/4; HQQ: 2/4/8)", [4, 2, 8], key=f"{NS}.nbits")
        kv_tokens = c[2].number_input("New tokens", 8, 1024, 256, key=f"{NS}.kvtok")
        budget_gb = c[3].number_input(
            "Memory budget for the cache (GB)", 0.01, 1000.0, 1.0, key=f"{NS}.budget"
        )
        go_kv = st.form_submit_button("Measure the KV cache", type="primary")
    if go_kv:
        levers_widgets.measure_into(
            f"{NS}.kv",
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
        )
    rows = st.session_state[f"{NS}.kv"]
    if rows:
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
        c = st.columns(5)
        methods = c[0].multiselect(
            "Methods", list(speculative.METHODS), default=list(speculative.METHODS), key=f"{NS}.methods"
        )
        workloads = c[1].multiselect(
            "Workloads", list(speculative.WORKLOADS), default=list(speculative.WORKLOADS), key=f"{NS}.wl"
        )
        draft = c[2].text_input("Draft model", speculative.SpeculateSpec.default("draft"), key=f"{NS}.draft")
        gamma = c[3].number_input(
            "Draft length γ", 0, 1000, speculative.SpeculateSpec.default("draft_length"), key=f"{NS}.gamma"
        )  # wider than the spec's bounds on purpose: the engine's message says what is allowed
        s_tokens = spec_number(c[4], speculative.SpeculateSpec, "max_new_tokens", "New tokens", f"{NS}.stok")
        s_runs = spec_number(st, speculative.SpeculateSpec, "runs", "Timed runs", f"{NS}.sruns")
        go_s = st.form_submit_button("Measure speculative decoding", type="primary")
    for w in speculative.WORKLOADS:
        st.caption(
            f"**{w}**: {speculative.WORKLOAD_DESCRIPTIONS[w]} ({len(speculative.WORKLOADS[w])} prompts)"
        )
    if go_s:
        try:
            spec = speculative.SpeculateSpec(
                model=name,
                dtype=dtype if dtype != "auto" else "fp32",
                methods=tuple(methods),
                workloads=tuple(workloads),
                draft=draft,
                draft_length=int(gamma),
                max_new_tokens=s_tokens,
                runs=s_runs,
            ).validate()
        except EngineError as exc:
            show_error(exc)
        else:
            levers_widgets.measure_into(
                f"{NS}.spec",
                name,
                spec.dtype,
                "speculative decoding",
                lambda lm, report: speculative.run_speculate(lm, spec, progress=report),
            )
    spec = st.session_state[f"{NS}.spec"]
    if spec is not None:
        st.dataframe(levers_widgets.spec_table(spec.rows), hide_index=True, width="stretch")
        for row in spec.rows:
            st.markdown(f"- {speculative.verdict(row)}")
        levers_widgets.downloads(spec.rows, "speculative", f"{NS}.sdl")
