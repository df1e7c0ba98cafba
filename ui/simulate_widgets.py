"""Streamlit sections for the serving simulator (engine.simulate): a simulated sweep on the Serving page, beside the
measured one when there is one, drawn with the page's own table and charts (ui.serving_widgets); and the inverse
questions on the Memory-and-cost page (engine.simulate.solve). Each page calls one function."""

from __future__ import annotations

import math
import time
from dataclasses import replace

import pandas as pd
import streamlit as st

from engine.arch.resolve import hub_presets
from engine.calc.report import ENGINE_CHOICES
from engine.calc.specs import THIS_MACHINE, GPUSpec, ModelSpec, load_gpu_catalog, load_model_presets
from engine.core.errors import EngineError
from engine.loadgen.sweep import SweepResult, at_level
from engine.loadgen.workload import SLO, LoadSpecError
from engine.simulate import solve
from engine.simulate.spec import SimulateSpec
from engine.simulate.sweep import SimulatedSweep, deployment, simulate
from ui.common import init_state, show_error
from ui.serving_widgets import latency_figure, level_unit, table_rows, throughput_figure
from ui.widgets import refused, shell_lines, spec_input, upper_first

NS = "simulate"
SLO_OFF = "0 turns this objective off (as on the command line)."
SLOW_S = 5.0  # a run past this shows its progress with the elapsed time


class _Progress:
    """A progress bar whose text carries the elapsed seconds (a run can take tens of seconds here)."""

    def __init__(self) -> None:
        self.t0 = time.perf_counter()
        self.bar = st.progress(0.0, text="starting…")

    def __call__(self, fraction: float, message: str) -> None:
        self.bar.progress(
            min(1.0, fraction), text=f"{message} · {time.perf_counter() - self.t0:.0f} s elapsed"
        )

    def done(self) -> None:
        self.bar.empty()
        took = time.perf_counter() - self.t0
        if took > SLOW_S:
            st.caption(f"Simulated in {took:.0f} s.")


def _gpu_label(key: str) -> str:
    catalog = load_gpu_catalog()
    return catalog[key].name if key in catalog else "this machine (its calibration)"


def _defaults(measured: SweepResult | None) -> dict:
    """The measured sweep's workload, so the simulated one is the same (when there is one)."""
    if measured is None or not measured.points:
        return {}
    first = measured.points[0]
    prompt = first.prompt_tokens_median
    return {
        "mode": "concurrency" if measured.spec.mode == "concurrency" else "rate",
        "sweep": ",".join(f"{p.level:g}" for p in measured.points),
        "n_requests": measured.spec.n_requests,
        "output_tokens": measured.spec.output_tokens,
        "prompt_tokens": int(prompt) if prompt and math.isfinite(prompt) else None,
    }


STARTS = ["spread", "together"]
STARTS_WORDS = {"spread": "spread (steady state)", "together": "together (as a load generator)"}


def _inputs(measured: SweepResult | None) -> tuple[SimulateSpec, SLO] | None:
    """The section's widgets as a SimulateSpec and the SLOs; None (with one sentence on the page) on bad input."""
    same = _defaults(measured)
    c = st.columns(4)
    presets = [*load_model_presets(), *hub_presets()]  # the calculator's presets, then the published configs
    model = c[0].selectbox(
        "Model", presets, index=presets.index("llama-3-8b"), key=f"{NS}.model",
        format_func=lambda n: n.split("/", 1)[-1],  # the whole id was cut in a box this narrow
        help="A calculator preset or a model by its Hugging Face id (its published config.json), shown without its "
        "organisation.",
    )  # fmt: skip
    keys = [*load_gpu_catalog(), THIS_MACHINE]
    gpu = c[1].selectbox("GPU", keys, index=keys.index("h100-sxm"), key=f"{NS}.gpu", format_func=_gpu_label)
    n_gpus = spec_input(c[2], SimulateSpec, "n_gpus", key=f"{NS}.gpus", label="GPUs (tensor parallel)")
    engine = c[3].selectbox(
        "Engine class", ENGINE_CHOICES, index=ENGINE_CHOICES.index("vllm"), key=f"{NS}.engine",
        help=SimulateSpec.help("engine"),
    )  # fmt: skip
    c = st.columns(4)
    dtype = c[0].selectbox("Precision", ["bf16", "fp16", "fp32", "fp8"], key=f"{NS}.dtype")
    modes = list(SimulateSpec.choices("mode") or ())
    mode = c[1].selectbox(
        "Load", modes, index=modes.index(same.get("mode", "concurrency")), key=f"{NS}.mode",
        format_func=lambda m: "fixed users" if m == "concurrency" else "Poisson rate",
    )  # fmt: skip
    levels = c[2].text_input(
        f"Levels ({level_unit('poisson' if mode == 'rate' else 'concurrency')})",
        same.get("sweep", SimulateSpec.default("sweep")),
        key=f"{NS}.levels",
    )
    requests = spec_input(c[3], SimulateSpec, "n_requests", key=f"{NS}.requests", label="Requests per level",
                          value=same.get("n_requests"))  # fmt: skip
    start = (
        st.radio(
            "Users start",
            STARTS,
            index=STARTS.index("together" if measured is not None else "spread"),
            horizontal=True,
            key=f"{NS}.start",
            format_func=STARTS_WORDS.get,
            help="Spread: the steady state a deployment's users reach, as the first-token time at a load and the "
            "most-users answer take it. Together: every user at once, as a load generator's sweep starts them "
            "(the measured sweep's way).",
        )
        if mode == "concurrency"
        else None
    )
    c = st.columns(4)
    prompt = spec_input(c[0], SimulateSpec, "prompt_tokens", key=f"{NS}.prompt", label="Prompt tokens",
                        value=same.get("prompt_tokens"))  # fmt: skip
    output = spec_input(c[1], SimulateSpec, "output_tokens", key=f"{NS}.output", label="Output tokens",
                        value=same.get("output_tokens"))  # fmt: skip
    # no bounds on the box: a value out of range reaches SLO.validate, which says so in a sentence
    ttft = c[2].number_input(
        "TTFT SLO (s; 0 = off)", value=float(SLO.default("ttft_s")), key=f"{NS}.slo_ttft", help=SLO_OFF
    )
    tpot = c[3].number_input(
        "TPOT SLO (ms; 0 = off)", value=float(SLO.default("tpot_s")) * 1e3, key=f"{NS}.slo_tpot", help=SLO_OFF
    )
    if refused(n_gpus, requests, prompt, output):
        return None
    try:
        slo = SLO.given(ttft, tpot / 1e3).validate()
        spec = SimulateSpec(
            model=model, gpu=gpu, n_gpus=n_gpus, dtype=dtype, engine=engine, mode=mode, sweep=levels,
            n_requests=requests, prompt_tokens=prompt, output_tokens=output, keep_going=True, start=start,
        ).validate()  # fmt: skip
    except (EngineError, LoadSpecError) as exc:
        show_error(exc)
        return None
    return spec, slo


def interval_rows(sim: SimulatedSweep) -> list[dict]:
    """Per level: TTFT p50, TPOT p50 and output tok/s from the fast run to the slow one."""
    unit = level_unit(sim.result.spec.mode)
    return [
        {
            unit: row["level"],
            "TTFT p50 (s)": f"{row['ttft_s']['p50'].low:.3f} to {row['ttft_s']['p50'].high:.3f}",
            "TPOT p50 (ms)": f"{row['tpot_s']['p50'].low * 1e3:.1f} to {row['tpot_s']['p50'].high * 1e3:.1f}",
            "output tok/s": f"{row['output_tokens_per_s'].low:.1f} to {row['output_tokens_per_s'].high:.1f}",
            "SLO attainment": f"{row['slo_attainment'].low:.0%} to {row['slo_attainment'].high:.0%}",
        }
        for row in sim.intervals()
    ]


def comparison_rows(measured: SweepResult, sim: SimulatedSweep) -> list[dict]:
    """Measured beside simulated per level both ran: TTFT p50 and output tok/s with the simulated interval."""
    unit = level_unit(measured.spec.mode)
    by_level = {p.level: (p, iv) for p, iv in zip(sim.result.points, sim.intervals(), strict=True)}
    rows = []
    for m in measured.points:
        if m.level not in by_level:
            continue
        s, iv = by_level[m.level]
        t, o = iv["ttft_s"]["p50"], iv["output_tokens_per_s"]
        rows.append(
            {
                unit: m.level,
                "TTFT p50 measured (s)": round(m.ttft_s.p50, 3),
                "TTFT p50 simulated (s)": round(s.ttft_s.p50, 3),
                "simulated interval (s)": f"{t.low:.3f} to {t.high:.3f}",
                "output tok/s measured": round(m.output_tokens_per_s, 1),
                "output tok/s simulated": round(s.output_tokens_per_s, 1),
                "simulated interval": f"{o.low:.1f} to {o.high:.1f}",
            }
        )
    return rows


def knee_words(k: dict, unit: str, every_level_met: bool = False) -> str:
    """The simulated knee and what it is with every step at its interval's ends, from the numbers; where every
    level met the SLOs the knee is only the highest level tried, and the sentence says so."""
    if k["central"] is None:
        return "No simulated level met the SLOs."
    if every_level_met:
        return (
            f"Every simulated level met the SLOs, up to **{at_level(k['central'], unit)}**, the highest tried: the "
            "simulated knee lies beyond it (add higher levels, or ask the most-users question on the Memory and cost page)."
        )

    def at(x: float | None) -> str:
        return "no level" if x is None else at_level(x, unit)

    ends = (
        "the same with every step at either end of its interval"
        if k["low"] == k["central"] == k["high"]
        else f"{at(k['low'])} to {at(k['high'])} with every step at its interval's slow and fast ends"
    )
    return f"The simulated knee is **{at_level(k['central'], unit)}**: {ends}."


def simulated_section(measured: SweepResult | None = None) -> None:
    """The Serving page's simulated sweep: a GPU this machine lacks (or this machine from its calibration) under the
    same scheduler policy, with the page's table and charts; beside the measured sweep when there is one."""
    init_state(NS, result=None)
    st.header("Simulated sweep: a GPU you do not have")
    st.markdown(
        "The server's own in-flight scheduler policy (admission, batching, the KV budget) runs on a virtual clock, "
        "each step's duration predicted for the chosen GPU, GPU count, engine class and batch composition "
        "(decode rows, their context, prompt tokens in the step): the calculator's operators with the engine "
        "class's utilisation fitted on published runs. The workload is the load generator's. Each figure comes "
        "three times, with every step at the low end, the centre and the high end of its interval."
        + (" The inputs start at the measured sweep's workload." if measured is not None else "")
    )
    got = _inputs(measured)
    if got is None:
        return
    spec, slo = got
    if st.button("Simulate", key=f"{NS}.go", type="primary"):
        progress = _Progress()
        try:
            st.session_state[f"{NS}.result"] = simulate(spec, slo, progress=progress)
        except (EngineError, LoadSpecError) as exc:
            st.session_state[f"{NS}.result"] = None  # an older sweep under these inputs would mislead
            show_error(exc)
        progress.done()
    sim: SimulatedSweep | None = st.session_state[f"{NS}.result"]
    if sim is None:
        st.caption(
            "Press Simulate for the sweep; a first run also fits the engine classes on published runs."
        )
        return
    st.subheader(sim.deployment.label)
    unit = level_unit(sim.result.spec.mode)
    st.markdown(knee_words(sim.knee_interval(), unit, all(p.meets_slo for p in sim.result.points)))
    st.dataframe(table_rows(sim.result), hide_index=True, width="stretch")
    if sim.spec.mode == "concurrency" and not sim.spec.starts_together:
        st.caption(
            "The fixed users start spread over one round, as a deployment's users run (each sends its next request "
            "when its last ends), and each user's first request (the ramp, on a server not yet full) is left out: "
            "the steady state the calculator's first-token time at a load and the most-users answer also take. A "
            "load generator's sweep starts them all at once instead ('together' above)."
        )
    if sim.spec.lock_step:
        st.caption(
            "Every request here has the same prompt and output lengths, so the fixed users stay in lock step: they "
            "start together and finish together, and each round's first tokens wait for all of that round's "
            "prefills (TTFT's p50 and p99 alike). The calculator's first-token time at a load takes arrivals spread "
            "over the decode, as drawn lengths spread a real workload's; the two meet at one user."
        )
    st.caption(
        "The central run above; each figure again with every step at its interval's fast and slow ends "
        f"({sim.deployment.steps.describe().get('what', 'the step model')}; "
        f"{sim.deployment.steps.describe().get('rows')} observations behind the interval):"
    )
    st.dataframe(interval_rows(sim), hide_index=True, width="stretch")
    if measured is not None and measured.points:
        rows = comparison_rows(measured, sim)
        if rows:
            st.caption(
                f"Measured ({measured.spec.model}) beside {sim.deployment.label}, at the levels both ran. Measured "
                "and simulated agree only where the simulated hardware is the measured one (this machine)."
            )
            st.dataframe(rows, hide_index=True, width="stretch")
    st.plotly_chart(latency_figure(sim.result), width="stretch", key=f"{NS}.latency")
    st.plotly_chart(throughput_figure(sim.result), width="stretch", key=f"{NS}.throughput")
    for note in sim.deployment.notes:
        st.caption(note)


# ---------------------------------------------------------------- the inverse questions


QUESTIONS = {
    "max-context": "the longest context that fits",
    "max-users": "the most users at my SLOs on the GPUs above",
    "cheapest": "the cheapest GPU type and count for my load and SLOs",
}


def _answer(
    q: str,
    spec: ModelSpec,
    gpu: GPUSpec,
    sim: SimulateSpec,
    slo: SLO,
    users: int,
    progress,
    among=None,
    usd_per_gpu_hour: float | None = None,
) -> solve.Answer:
    if q == "max-context":
        serving = sim if sim.engine in ("vllm", "sglang") else replace(sim, engine="vllm")
        return solve.max_context_for(serving, spec, gpu)
    if q == "max-users":
        return solve.max_users(sim, slo, progress=progress, deploy=deployment(sim, spec, gpu))
    return solve.cheapest(
        sim,
        slo,
        users,
        gpus=among,
        progress=progress,
        model=spec,
        prices=own_price(gpu.key, usd_per_gpu_hour),
    )


def own_price(key: str, usd_per_gpu_hour: float | None) -> dict[str, float] | None:
    """The page's price box for its GPU as the search's price of that GPU, where the user changed it from the
    catalogue's list price (an A100 typed at $10 was searched at its list $1.59)."""
    from engine.calc.prices import price_for

    if usd_per_gpu_hour is None:
        return None
    listed = price_for(key)
    if listed is not None and abs(listed.usd_per_gpu_hour - usd_per_gpu_hour) < 1e-9:
        return None
    return {key: usd_per_gpu_hour}


def solvers_section(key: str, spec: ModelSpec, gpu: GPUSpec, inputs) -> None:
    """The Memory-and-cost page's inverse questions for its model, GPU and inputs (engine.calc.report.Inputs)."""
    st.subheader("The inverse questions")
    c = st.columns([2, 1, 1])
    q = c[0].radio("Ask", list(QUESTIONS), format_func=QUESTIONS.get, key=f"{key}.solve.q")
    # no bounds on the boxes (Streamlit's turn a field red and keep the old value): the SLO's own rule says what is
    # wrong at once, and no answer is shown for objectives that cannot be met
    # the longest context is a memory question: the objectives do not enter it, so they neither show nor block it
    memory_only = q == "max-context"
    unused = "Not used by the longest context that fits (a memory question)." if memory_only else None
    ttft = c[1].number_input(
        "TTFT SLO (s; 0 = off)", value=float(SLO.default("ttft_s")), key=f"{key}.solve.ttft", disabled=memory_only,
        help=unused or SLO_OFF,
    )  # fmt: skip
    tpot = c[2].number_input(
        "TPOT SLO (ms; 0 = off)", value=float(SLO.default("tpot_s")) * 1e3, key=f"{key}.solve.tpot", disabled=memory_only,
        help=unused or SLO_OFF,
    )  # fmt: skip
    try:
        slo = SLO() if memory_only else SLO.given(ttft, tpot / 1e3).validate()
    except LoadSpecError as exc:
        show_error(exc)
        return
    among = None
    if q == "cheapest":
        priced = solve.priced_gpus()
        picked = st.multiselect(
            "GPUs to search", list(priced), default=list(priced), format_func=priced.get, key=f"{key}.solve.gpus",
            help="The cheapest answer searches only these (every priced catalogue GPU to start with).",
        )  # fmt: skip
        if not picked:
            st.info("Pick at least one GPU to search: the cheapest answer has nothing to compare.")
            return
        among = None if len(picked) == len(priced) else picked
    if gpu.key not in load_gpu_catalog() and q != "cheapest":
        st.info(
            f"The simulator times catalogue GPUs; {gpu.name} has edited or measured figures. Pick a catalogue GPU "
            "(the cheapest option searches them all)."
        )
        return
    if st.button("Answer", key=f"{key}.solve.go"):
        progress = _Progress()
        try:
            sim = SimulateSpec(
                model=spec.name, gpu=gpu.key, n_gpus=inputs.n_gpus, dtype=inputs.dtype, kv_dtype=inputs.kv_dtype,
                engine=inputs.engine or "vllm", prompt_tokens=inputs.prompt_tokens, output_tokens=inputs.output_tokens,
                gpu_memory_utilization=inputs.gpu_memory_utilization,
            ).validate()  # fmt: skip
            st.session_state[f"{key}.solve.answer"] = _answer(
                q, spec, gpu, sim, slo, inputs.batch, progress, among, inputs.usd_per_gpu_hour
            )
        except (EngineError, LoadSpecError) as exc:
            st.session_state[f"{key}.solve.answer"] = None
            show_error(exc)
        progress.done()
    answer: solve.Answer | None = st.session_state.get(f"{key}.solve.answer")
    if answer is None or answer.question != q:
        st.caption(
            "max-context reproduces vLLM's --max-model-len auto; max-users is the simulator's knee; cheapest searches "
            f"the GPUs picked at 1, 2, 4 and 8 GPUs for {inputs.batch} users (the batch above)."
        )
        return
    value, note = answer_figures(answer)
    label = upper_first(QUESTIONS[q])
    if q == "cheapest":  # the GPU and count in the tile's own words, not only in the sentence below it
        b = answer.details["best"]
        label = f"Cheapest: {b['replicas']} replicas of " if b["replicas"] > 1 else "Cheapest: "
        label += f"{b['gpus']} x {b['name']}"
    st.metric(label, value, note, delta_color="off", delta_arrow="off")
    if q == "cheapest" and answer.details.get("margin_plan"):
        st.markdown(
            answer.details["margin_plan"]["sentence"]
        )  # the plan that meets them at the slow step times
    if q == "cheapest" and answer.details.get("runner_up"):
        st.markdown(answer.details["runner_up"]["sentence"])  # what came second, and why it lost
    show_answer_text(answer)
    if q == "cheapest":
        if answer.details.get("launch_command"):
            st.caption("The command for one replica of this plan:")
            st.code(shell_lines(answer.details["launch_command"]), language="bash")
        st.dataframe(options_table(answer.details["simulated"]), hide_index=True, width="stretch")
        for fewer in answer.details.get("larger_split_holds_fewer", ()):
            st.markdown(fewer["sentence"])  # a row above with more GPUs and fewer users, said why
        st.caption(answer.details["price_source"])


def show_answer_text(answer: solve.Answer) -> None:
    """The answer's sentence as a paragraph for the answer and a list for how it was found and what it rests on
    (one paragraph of ten sentences was hard to read at 1280 px)."""
    parts = [p.strip() for p in answer.parts if p.strip()]
    if len(parts) < 2:
        st.markdown(answer.sentence)
        return
    st.markdown(parts[0])
    st.markdown("\n".join(f"- {p}" for p in parts[1:]))


def answer_figures(answer: solve.Answer) -> tuple[str, str]:
    """The answer's value and its interval as a tile shows them: dollars as dollars, counts as whole numbers, and
    an answer without spread (memory arithmetic) said to be exact rather than '1.00x wide'."""
    v = answer.value

    def show(x: float) -> str:
        if not math.isfinite(x):
            return "unbounded"
        return f"${x:,.2f}" if answer.question == "cheapest" else f"{x:,.0f}"

    unit = "per hour" if answer.question == "cheapest" else answer.unit
    value = f"{show(v.central)} {unit}"
    margin = answer.details.get("margin_plan")
    if answer.question == "cheapest" and margin is not None:  # the plan with margin, searched at the slow end
        if margin.get("usd_per_hour") is None:
            return value, "with margin: no plan meets them at the slow step times"
        if (margin["gpu"], margin["gpus"], margin["replicas"]) == tuple(
            answer.details["best"][k] for k in ("gpu", "gpus", "replicas")
        ):
            return value, "with margin: the same plan meets them at the slow step times"
        each = f"{margin['replicas']} replicas of " if margin["replicas"] > 1 else ""
        likely = next((o for o in answer.details.get("odds", ()) if o["odds"] == "3 in 4"), None)
        between = (  # named, as the margin is: the plan a budget at 3 in 4 odds buys (an engineer's walk)
            f"3 in 4 odds: {likely['plan']}; " if likely and likely.get("usd_per_hour") is not None else ""
        )
        return value, f"{between}with margin: {show(v.high)} ({each}{margin['gpus']} x {margin['name']})"
    if answer.question == "max-users" and "ends" in answer.details and v.low != v.high:
        return value, f"{show(v.low)} at the slow step times (margin), {show(v.high)} at the quick"
    if v.low == v.high == v.central:
        if answer.question == "max-context":
            return value, "exact: memory arithmetic, no interval"
        return value, "the same at both ends of the step times' interval"
    width = f", {v.width:.2f}x wide" if math.isfinite(v.width) else ""
    return value, f"{show(v.low)} to {show(v.high)}{width}"


OPTION_COLUMNS = {
    "name": "GPU",
    "gpus": "GPUs per replica",
    "replicas": "replicas",
    "users_per_replica": "users per replica",
    "usd_per_gpu_hour": "$ per GPU-hour",
    "usd_per_hour": "$ per hour",
}


def options_table(rows: list[dict]) -> pd.DataFrame:
    """The simulated options under plain headers, dollars as dollars."""
    df = pd.DataFrame(rows)[list(OPTION_COLUMNS)].rename(columns=OPTION_COLUMNS)
    for col in ("$ per GPU-hour", "$ per hour"):
        df[col] = df[col].map(lambda x: f"${x:,.2f}")
    return df
