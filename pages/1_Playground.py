"""Prompt playground: load a model, generate for one prompt or a batch, streamed, measured every run."""

from __future__ import annotations

import math
import queue
import threading
import time

import pandas as pd
import streamlit as st

from engine.core.errors import CancelledError, EngineError
from engine.core.load import cores, is_busy, loadavg_1m
from engine.runtime import generation, runlog
from engine.runtime.generation import GenerationConfig
from engine.runtime.metrics import token_latencies
from ui import export
from ui.batching_widgets import cached_scheduler
from ui.common import fmt_bytes, fmt_count, fmt_seconds, init_state, page_setup, show_error
from ui.forecast_view import show_run_forecast
from ui.narrative import latency_sentence
from ui.playground_widgets import (
    compile_advice,
    compile_status_text,
    latency_figure,
    progress_text,
    show_decode_path,
    show_recorded_gpu_decode,
)
from ui.widgets import sidebar_model, spec_number

NS = "playground"
D = GenerationConfig()  # widget defaults come from the engine's dataclass: one source with the CLI

page_setup("Playground", measures=True)
init_state(NS, history=[], last=None, running=None, curve={})
st.title("Playground")
st.caption(
    "Generate with a causal LM and see what each run cost. Every number below a completion was "
    "measured on this run."
)

lm = sidebar_model(NS)

if lm is not None:
    with st.expander(
        f"Loaded: **{lm.name}** · {lm.dtype} · {lm.device} · {fmt_bytes(lm.footprint_bytes)}", expanded=False
    ):
        c = st.columns(4)
        c[0].metric("Parameters", fmt_count(lm.params), help="sum of parameter elements (tied weights once)")
        c[1].metric("Memory footprint", fmt_bytes(lm.footprint_bytes), help="model.get_memory_footprint()")
        c[2].metric("Load time", fmt_seconds(lm.load_s), help="measured when this server loaded it")
        c[3].metric("Context window", f"{lm.context_length:,} tokens")
        st.markdown(
            "**Placement** (accelerate's `hf_device_map`, or the single device): "
            + ", ".join(f"`{k or 'whole model'}` → `{v}`" for k, v in lm.device_map.items())
        )
        st.caption(f"Source: {lm.source}. " + " ".join(lm.notes))

with st.sidebar:
    st.header("Generation")
    max_new = spec_number(st, GenerationConfig, "max_new_tokens", "Max new tokens", key=f"{NS}.max_new")
    sample = st.toggle("Sample (off = greedy)", D.do_sample, key=f"{NS}.sample")
    temperature = st.slider(
        "Temperature", 0.05, 2.0, D.temperature, 0.05, disabled=not sample, key=f"{NS}.temp"
    )
    top_p = st.slider("Top-p", 0.05, 1.0, D.top_p, 0.05, disabled=not sample, key=f"{NS}.top_p")
    top_k = spec_number(
        st, GenerationConfig, "top_k", "Top-k (0 = off)", key=f"{NS}.top_k", disabled=not sample
    )
    rep = st.slider("Repetition penalty", 1.0, 2.0, D.repetition_penalty, 0.05, key=f"{NS}.rep")
    seed = st.number_input("Seed", 0, 2**31 - 1, D.seed or 0, disabled=not sample, key=f"{NS}.seed")
    stops = st.text_input("Stop sequences (comma-separated; \\n for newline)", "", key=f"{NS}.stop")
    use_cache = st.toggle(
        "Use KV cache",
        D.use_cache,
        key=f"{NS}.cache",
        help="Off recomputes every past token's keys and values at every step: watch TPOT grow.",
    )
    advice, advice_text = compile_advice(lm) if lm is not None else (None, "")
    compiled = st.toggle(
        "Compiled decode",
        advice.on if advice is not None else D.compile,
        key=f"{NS}.compile.{lm.device if lm is not None else 'none'}",  # its default is per device
        disabled=lm is None or not use_cache,
        help="A static (preallocated) KV cache and a torch.compile'd decode step, CUDA graphs on a GPU: the same "
        "greedy tokens, faster steps. The first run per model compiles the step; later runs reuse it. It runs on "
        "the KV cache.",
    )
    if advice_text:
        st.caption(advice_text)
    chat = st.toggle(
        "Use the chat template",
        False,
        key=f"{NS}.chat",
        disabled=lm is None or not lm.has_chat_template,
        help="Wraps the prompt as a user message (only for models that ship a template).",
    )
    include_prompt = st.toggle(
        "Show the prompt in the output",
        False,
        key=f"{NS}.incl",
        help="`generate` returns prompt + completion: the chapter's point. Off shows the completion only.",
    )

batch_mode = st.toggle(
    "Batch mode: one prompt per line, generated together as one padded batch", key=f"{NS}.batch"
)
prompt = st.text_area(
    "Prompts (one per line)" if batch_mode else "Prompt",
    "The capital of France is"
    if not batch_mode
    else "The capital of France is\nOnce upon a time\ndef fibonacci(n):",
    height=120,
    key=f"{NS}.prompt.{batch_mode}",
)
if lm is not None and not batch_mode:
    show_run_forecast(lm, prompt, int(max_new), use_cache)
go = st.button("Generate", type="primary", disabled=lm is None, key=f"{NS}.go")
if lm is not None:
    snap = cached_scheduler(lm).snapshot()
    st.caption(
        f"Shared scheduler for {lm.name}: {len(snap.running)} request(s) generating, "
        f"{len(snap.waiting)} waiting (all browser sessions). Single prompts with the KV cache on go "
        "through it; see the Batching page for its live batch."
    )

# A run that was still going when this script started again was stopped: by the Stop button, by a widget change,
# or by a closed tab. Keep what it made, marked cancelled; it never reaches a comparison or the run log.
running = st.session_state[f"{NS}.running"]
if running is not None:
    running["status"] = "cancelled"
    running["elapsed"] = time.perf_counter() - running["request_t"]
    st.session_state[f"{NS}.last"] = running
    st.session_state[f"{NS}.running"] = None
    st.session_state[f"{NS}.history"].append(
        {
            **running["row"],
            "output tokens": running["tokens"],
            "latency (s)": round(running["elapsed"], 3),
            "stop": "cancelled",
        }
    )


def metrics_row(m, load: float | None = None) -> None:
    """The run's measured figures, in two rows of three (six in a row cut their numbers), with the load the
    machine was under when it finished (a busy machine's TPOT is not this machine's TPOT: the calculator's bound
    and the race's figure are for a quiet one)."""
    c = [*st.columns(3), *st.columns(3)]
    c[0].metric("TTFT", fmt_seconds(m.ttft_s), help="request → first generated token")
    c[1].metric(
        "TPOT",
        fmt_seconds(m.tpot_s),
        help="(latency − TTFT) / (output tokens − 1): first token excluded (vLLM)",
    )
    c[2].metric("Latency", fmt_seconds(m.latency_s), help="request → last token")
    c[3].metric("Throughput", f"{m.tokens_per_s:.1f} tok/s", help="output tokens / latency (all sequences)")
    c[4].metric("Tokens in → out", f"{m.prompt_tokens} → {m.output_tokens}")
    c[5].metric("Peak memory", fmt_bytes(m.peak_memory_bytes), help=m.peak_memory_kind)
    if load is not None and load == load:
        n = cores()
        st.caption(
            f"All measured on this run, on this machine: load average {load:.1f} on {n} cores when it finished"
            + (": busy, so slower than it runs when quiet." if is_busy(load, n) else " (quiet).")
        )


def history_row(m, mode: str, stop_reason: str, decode: str = "eager") -> dict:
    return {
        "time (UTC)": m.started_at,
        "model": m.model,
        "dtype": m.dtype,
        "device": m.device,
        "mode": mode,
        "batch": m.batch_size,
        "kv cache": m.use_cache,
        "decode": decode,
        "prompt tokens": m.prompt_tokens,
        "output tokens": m.output_tokens,
        "TTFT (ms)": round(m.ttft_s * 1e3, 1),
        "TPOT (ms)": None if math.isnan(m.tpot_s) else round(m.tpot_s * 1e3, 2),
        "latency (s)": round(m.latency_s, 3),
        "tokens/s": round(m.tokens_per_s, 2),
        "peak memory (MB)": round(m.peak_memory_bytes / 1e6, 1),
        "stop": stop_reason,
    }


def run_single(lm, prompt: str, cfg: GenerationConfig, include_prompt: bool) -> None:
    """Stream one prompt with a Stop button, tokens so far / max, elapsed and live tok/s. The partial run lives in
    session state while it streams, so a Stop (which reruns the page) keeps its text."""
    # With the KV cache on, through the shared in-flight scheduler: sessions generating at the same time share
    # decode steps (one weight read serves every running request) instead of queueing. The scheduler always keeps
    # a KV cache, so "cache off" runs alone.
    s = (
        cached_scheduler(lm).submit(prompt, cfg)
        if cfg.use_cache
        else generation.stream(lm, prompt, cfg, record=False)
    )
    t0 = time.perf_counter()
    cur = {
        "model": lm.name,
        "use_cache": cfg.use_cache,
        "max_new": cfg.max_new_tokens,
        "tokens": 0,
        "elapsed": 0.0,
        "text": prompt if include_prompt else "",
        "request_t": t0,
        "status": "running",
        "row": {
            "time (UTC)": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime()),
            "model": lm.name,
            "dtype": lm.dtype,
            "device": lm.device,
            "mode": "single",
            "batch": 1,
            "kv cache": cfg.use_cache,
            "decode": "compiled" if cfg.compile else "eager",
        },
    }
    st.session_state[f"{NS}.running"] = cur
    stop_slot = st.empty()  # emptied when the run ends: a Stop button must not outlive its run
    stop_slot.button(
        "Stop",
        icon=":material/stop_circle:",
        key=f"{NS}.stop_btn",
        help="Stops generating at the next token; the text so far is kept, marked cancelled.",
    )
    status, box = st.empty(), st.empty()
    status.caption(progress_text(0, cfg.max_new_tokens, 0.0) + " · waiting for the first token (prefill)")
    # The stream is read in a helper thread so this script can redraw elapsed time and tok/s while no token
    # arrives (the prefill of a long prompt, a busy shared batch); chunks carry their arrival time.
    chunks: queue.Queue = queue.Queue()

    def pump() -> None:
        try:
            for chunk in s:
                chunks.put(("chunk", chunk, time.perf_counter()))
        except BaseException as exc:  # handed to the script thread
            chunks.put(("error", exc, 0.0))
        finally:
            chunks.put(("end", None, 0.0))

    threading.Thread(target=pump, name="playground-stream", daemon=True).start()
    shown_at = 0.0
    try:
        while True:
            try:
                kind, chunk, now = chunks.get(timeout=0.25)
            except queue.Empty:
                cur["elapsed"] = time.perf_counter() - t0
                compiling = compile_status_text(generation.compile_status(lm)) if cfg.compile else ""
                status.caption(
                    progress_text(cur["tokens"], cfg.max_new_tokens, cur["elapsed"])
                    + (
                        f" · {compiling}"
                        if compiling
                        else ("" if cur["tokens"] else " · waiting for the first token (prefill)")
                    )
                )
                continue
            if kind == "end":
                break
            if kind == "error":
                raise chunk
            k = len(lm.tokenizer(chunk, add_special_tokens=False)["input_ids"]) or 1
            cur["tokens"] += k
            cur["text"] += chunk
            cur["elapsed"] = now - t0
            if (
                now - shown_at > 0.15
            ):  # redraw at most ~7 times a second: the browser, not the model, is the limit
                status.caption(progress_text(cur["tokens"], cfg.max_new_tokens, cur["elapsed"]))
                box.code(cur["text"], language=None, wrap_lines=True)
                shown_at = now
    except EngineError:
        st.session_state[f"{NS}.running"] = None  # failed, not stopped: the error says why; nothing to keep
        raise
    finally:
        # A rerun (Stop, a widget change) or a closed tab stops this script mid-loop: stop generating for nobody.
        s.cancel()
    c = s.completion
    stop_slot.empty()
    st.session_state[f"{NS}.running"] = None
    if c is None:
        raise CancelledError("the generation was cancelled before it finished; generate again")
    status.empty()
    box.empty()
    runlog.record(c.measurement, source="playground", stop_reason=c.stop_reason)
    cur.update(
        status=c.stop_reason,
        text=c.shown(include_prompt),
        tokens=c.measurement.output_tokens,
        elapsed=c.measurement.latency_s,
        measurement=c.measurement,
        latency=token_latencies(c.measurement.ttft_s, c.token_times),
        load=loadavg_1m(),
        completion=c,
    )
    st.session_state[f"{NS}.last"] = cur
    if c.stop_reason != "cancelled":
        st.session_state[f"{NS}.curve"][cfg.use_cache] = cur
    st.session_state[f"{NS}.history"].append(history_row(c.measurement, "single", c.stop_reason, c.decode))


def run_batch(lm, prompts: list[str], cfg: GenerationConfig):
    """generate_batch on a thread of its own while this script says what it waits for (a compile, or the batch)."""
    box: dict = {}

    def work() -> None:
        try:
            box["result"] = generation.generate_batch(lm, prompts, cfg, record=False)
        except BaseException as exc:  # handed to the script thread
            box["error"] = exc

    t = threading.Thread(target=work, name="playground-batch", daemon=True)
    t0 = time.perf_counter()
    t.start()
    line = st.empty()
    while t.is_alive():
        compiling = compile_status_text(generation.compile_status(lm)) if cfg.compile else ""
        line.caption(
            f"Generating for {len(prompts)} prompts as one batch… {fmt_seconds(time.perf_counter() - t0)}"
            + (f" · {compiling}" if compiling else "")
        )
        t.join(0.25)
    line.empty()
    if "error" in box:
        raise box["error"]
    return box["result"]


if go and lm is not None:
    try:
        cfg = GenerationConfig(
            max_new_tokens=int(max_new),
            do_sample=sample,
            temperature=float(temperature),
            top_p=float(top_p),
            top_k=int(top_k),
            repetition_penalty=float(rep),
            seed=int(seed),
            stop=generation.parse_stops(stops),
            use_cache=use_cache,
            chat_template=chat,
            include_prompt=include_prompt,
            compile=compiled and use_cache,
        ).validate()
        if batch_mode:
            prompts = [p for p in prompt.splitlines() if p.strip()]
            result = run_batch(lm, prompts, cfg)
            runlog.record(result.measurement, source="playground")
            show_decode_path(result)
            for c in result.completions:
                st.markdown(f"**{c.prompt}**")
                st.code(c.shown(include_prompt), language=None, wrap_lines=True)
                st.caption(
                    f"{c.measurement.output_tokens} tokens · stopped by {c.stop_reason} · "
                    f"finished at {fmt_seconds(c.measurement.latency_s)}"
                )
            st.markdown("**The batch as a whole**")
            metrics_row(result.measurement, loadavg_1m())
            st.session_state[f"{NS}.history"].append(
                history_row(result.measurement, "batch", "mixed", result.decode)
            )
        else:
            run_single(lm, prompt, cfg, include_prompt)
    except EngineError as exc:
        show_error(exc)

last = st.session_state[f"{NS}.last"]
report: list = []
if last is not None and not batch_mode:
    st.code(last["text"], language=None, wrap_lines=True)
    report += [
        export.Heading(f"Last run: {last['model']}, KV cache {'on' if last['use_cache'] else 'off'}"),
        export.Text(f"Stopped by **{last['status']}** after {last['tokens']} of {last['max_new']} tokens."),
        export.Table([{"output": last["text"]}]),
    ]
    if last["status"] == "cancelled":
        st.warning(
            f"**Cancelled** after {last['tokens']} of {last['max_new']} tokens "
            f"({fmt_seconds(last['elapsed'])}). The text above is what was made; this run is kept out of the "
            "run log and the comparisons.",
            icon=":material/cancel:",
        )
    else:
        st.caption(
            f"Stopped by **{last['status']}**"
            + (" (max new tokens reached: the output is truncated)" if last["status"] == "length" else "")
        )
        if last.get("completion") is not None:
            show_decode_path(last["completion"])
        metrics_row(last["measurement"], last.get("load"))
    curves = {}
    for cache_on, run in sorted(st.session_state[f"{NS}.curve"].items(), reverse=True):
        if run["model"] == last["model"] and run.get("latency"):
            curves[f"KV cache {'on' if cache_on else 'off'} ({run['tokens']} tokens)"] = run["latency"]
    if curves:
        fig = latency_figure(curves)
        st.plotly_chart(fig, width="stretch", key=f"{NS}.latency_chart")
        st.caption(latency_sentence(st.session_state[f"{NS}.curve"], last["model"]))
        report += [export.Figure(fig, latency_sentence(st.session_state[f"{NS}.curve"], last["model"]))]

history = st.session_state[f"{NS}.history"]
st.subheader("Runs in this session")
if history:
    df = pd.DataFrame(history)
    st.dataframe(df, hide_index=True, width="stretch")
    c1, c2 = st.columns(2)
    c1.download_button(
        "Download runs (CSV)",
        df.to_csv(index=False).encode(),
        "playground_runs.csv",
        "text/csv",
        key=f"{NS}.csv",
    )
    report += [export.Heading("Runs in this session"), export.Table(df)]
    with c2:
        export.download_button(
            "Playground",
            report,
            key=f"{NS}.html",
            subtitle="TTFT, TPOT, latency and throughput measured on every run.",
        )
else:
    st.caption("No runs yet. Generate once with the KV cache on and once off to see what the cache buys.")

show_recorded_gpu_decode()

with st.expander("What the measurements mean"):
    st.markdown(
        "- **TTFT** (time to first token): from the request to the first generated token. It is dominated by "
        "*prefill*, one forward pass over the whole prompt, and by any wait for the shared model.\n"
        "- **TPOT** (time per output token): (latency − TTFT) / (output tokens − 1), as vLLM defines it; it "
        "excludes the first token and measures *decode*, one forward pass per token, which reads every weight "
        "once per step: that is why decode is memory-bandwidth bound.\n"
        "- **Latency**: request to last token. **Throughput**: output tokens / latency, summed over a batch.\n"
        "- **Peak memory**: on a GPU, `torch.cuda.max_memory_allocated`; on the CPU, the server process's "
        "resident memory (it includes every loaded model).\n"
        "- **KV cache**: with it, each step attends over stored keys/values of past tokens; without it, each "
        "step re-runs the whole sequence, so TPOT grows with length.\n"
        "- **Compiled decode**: the KV cache preallocated (static shapes) and the decode step compiled by "
        "`torch.compile`, which fuses the many small operations of a layer and, on a GPU, replays the whole step "
        "as one CUDA graph instead of launching each kernel from Python. The greedy tokens are the same. The first "
        "compiled run per model (and batch shape) compiles the step in its first decode step: its TPOT and latency "
        "include that, its TTFT (the prefill, eager) does not."
    )
