"""This machine beside the calculator: its roofs (the calibration's, else the stored measurement), where they came
from, its measured runs, and the panel that shows and remeasures them (Home, Memory & cost, Roofline, Batching).

Every reader takes the calibration already read this render (`cal`), or reads it once itself."""

from __future__ import annotations

import math

import streamlit as st

from engine import calibration
from engine.calc import format as fmt
from engine.calc.roofline import measured_point
from engine.calc.specs import GPUSpec, ModelSpec, gpu_spec

_UNREAD = object()  # "read the calibration now": callers that already read it pass theirs

# The panel's buttons, one spelling for the page and for what names them (Home's tour, the tour benchmark)
MEASURE, MEASURE_AGAIN = "Measure this machine", "Measure this machine again"
CALIBRATE, CALIBRATE_AGAIN = "Calibrate this machine", "Calibrate this machine again"


def _measured_machine() -> GPUSpec:
    from ui.common import cached_machine_measurement  # the one cached measurement of this machine

    return cached_machine_measurement().gpu_spec()


def _read(cal):
    return calibration.load_calibration() if cal is _UNREAD else cal


def cached_machine(cal=_UNREAD) -> GPUSpec:
    """This machine's roofs: the stored calibration's (its efficiencies were fitted against them), else the stored
    measurement (engine.calibration.machine), else measured now. `cal`: the calibration already read."""
    return _roof(_read(cal))


def _roof(cal: calibration.Calibration | None) -> GPUSpec:
    return cal.machine_gpu() if cal is not None else _measured_machine()


def machine_known(cal=_UNREAD) -> bool:
    """Whether this machine's roofs are stored (a calibration or a measurement): reading them costs nothing."""
    return _known(_read(cal))


def _known(cal: calibration.Calibration | None) -> bool:
    from engine.calibration import machine

    return cal is not None or machine.latest() is not None


def machine_provenance(cal=_UNREAD) -> str:
    """Where 'this machine' figures come from, with the date and the load they were measured under: the line every
    page shows beside this machine's bandwidth and FLOP/s (the same source as cached_machine)."""
    return _provenance(_read(cal))


def _provenance(cal: calibration.Calibration | None) -> str:
    from engine.core.load import cores
    from ui.common import cached_machine_measurement

    if cal is not None:
        load = f"; {cal.load.describe()}" if cal.load is not None else ""
        return f"This machine's roofs: from its calibration of {cal.created_at[:16].replace('T', ' ')} UTC{load}."
    m = cached_machine_measurement()
    n = cores()
    quiet = "busy: roofs lower than when quiet" if m.busy else "quiet"
    others = (
        f"other programs took {m.others:.1f} of {n} cores while it ran"
        if m.others is not None
        else f"load average {m.loadavg_1m:.2f} on {n} cores"
    )
    return f"This machine's roofs: measured {m.measured_at[:16].replace('T', ' ')} UTC on {m.device}, {others} ({quiet})."


def measured_here_line(spec: ModelSpec, dtype: str, batch: int, cal=_UNREAD) -> str:
    """One line: the TPOT the engine measured on this machine for this model, precision and batch (the median of
    its recent runs, with where and when), beside the estimate by the one rule (engine.calibration.beside); ''
    when nothing was measured."""
    from engine.calibration import check as estimate_check

    runs = [r for r in load_runs() if r.use_cache and r.batch_size == batch and r.dtype == dtype]
    if not runs:
        return ""
    cal = _read(cal)
    same = [
        c
        for c in estimate_check.summarize(runs, cached_machine(cal), cal)
        if (s := calibration.spec_for_run_model(c.model)) is not None and s.name == spec.name
    ]
    if not same:
        return ""
    c = max(same, key=lambda c: c.n)
    return (
        f"On this machine ({c.model}, median of {c.n} runs: {c.source_text}; newest "
        f"{c.newest[:16].replace('T', ' ')} UTC): {c.beside().sentence()} More in *Estimate vs measurement* below."
    )


def machine_matmul(lm) -> float | None:
    """This machine's matmul FLOP/s at a loaded model's precision from the one source (cached_machine), where the
    model runs on the device that source measured (the GPU when torch sees one, else the CPU); else None."""
    import torch

    measured_on = "cuda" if torch.cuda.is_available() else "cpu"
    return cached_machine().flops_for(lm.dtype) if str(lm.device).startswith(measured_on) else None


def machine_read_bandwidth(lm) -> float | None:
    """This machine's measured read bandwidth (bytes/s) from the one source (cached_machine), where the model runs on
    the device that source measured; else None (as machine_matmul)."""
    import torch

    measured_on = "cuda" if torch.cuda.is_available() else "cpu"
    return cached_machine().bandwidth_bytes_per_s if str(lm.device).startswith(measured_on) else None


def precision_words(roof) -> str:
    """Why the two matmul figures differ, from their ratio: a CPU without bf16 matrix instructions (AVX-512 BF16,
    AMX) multiplies bf16 through a conversion path, well under its fp32 rate; on a GPU's tensor cores the order
    is the other way round. Empty when the two are within 1.5x of each other."""
    fp32, bf16 = roof.flops_for("fp32"), roof.flops_for("bf16")
    if not fp32 or not bf16:
        return ""
    import torch

    native = torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()
    if bf16 * 1.5 <= fp32:
        t4 = gpu_spec("t4").peak_flops  # the datasheet's figures, from the catalogue
        why = (
            "this CPU has no bf16 matrix instructions (AVX-512 BF16 or AMX), so each bf16 product goes through a "
            "conversion"
            if not native
            else "PyTorch's bf16 kernels do not reach this CPU's bf16 instructions at this size"
        )
        return (
            f"bf16 multiplies at 1/{fp32 / bf16:.0f} of the fp32 rate here: {why}; that is why the lab's CPU models "
            "run in fp32. A GPU's tensor cores turn this round: a T4 multiplies fp16 at "
            f"{t4['fp16'] / 1e12:g} TFLOPS against {t4['fp32'] / 1e12:g} in fp32."
        )
    if fp32 * 1.5 <= bf16:
        return f"bf16 multiplies at {bf16 / fp32:.1f}x the fp32 rate here: this CPU has bf16 matrix instructions."
    return ""


def machine_panel(key: str, *, compact: bool = False, cal=_UNREAD) -> None:
    """This machine's roofs (read bandwidth, matmul FLOP/s) from the one source, with its date and load, and a
    button that measures it (again): the same panel on Home and the calculator (`compact`: one line of text, for
    a narrow column where metric tiles would cut their numbers)."""
    from engine.core.load import cores
    from ui.common import remeasure_machine

    # read once: the roofs, their provenance and the button all follow this calibration
    cal = _read(cal)
    known = _known(cal)
    if known:
        roof = _roof(cal)
        figures = [("Read bandwidth (measured)", f"{roof.bandwidth_bytes_per_s / 1e9:.1f} GB/s")] + [
            (f"Matmul {dt} (measured)", fmt.flops(roof.flops_for(dt), "FLOP/s")) for dt in ("fp32", "bf16")
        ]
        if compact:
            st.markdown(" · ".join(f"{label}: **{value}**" for label, value in figures))
        else:
            for col, (label, value) in zip(st.columns(len(figures)), figures, strict=True):
                col.metric(label, value)
        st.caption(" ".join(filter(None, (_provenance(cal), precision_words(roof)))))
    else:
        st.info(
            "This machine is not measured yet: its read bandwidth and matmul FLOP/s are the roofs of the "
            "calculator's and the roofline's 'this machine'. Measuring takes a few seconds.",
            icon=":material/speed:",
        )
    if cal is not None:
        st.caption("Its calibration fixes these roofs; calibrating again measures them again.")
        calibrate_button(key, again=True)
    elif st.button(
        MEASURE_AGAIN if known else MEASURE,
        key=f"{key}.measure",
        icon=":material/speed:",
        help="A read (sum) and a copy over a 268 MB buffer and a 1024³ matmul per precision, best of 5; stored "
        "with its date and load, and read by every page.",
    ):
        new, stored = remeasure_machine()
        if stored:
            st.rerun()
        else:
            st.session_state[f"{key}.unstored"] = new
    unstored = st.session_state.pop(f"{key}.unstored", None)
    if unstored is not None:
        st.warning(
            f"Measured while other programs took {unstored.others:.1f} of {cores()} cores: "
            f"{unstored.read_bytes_per_s / 1e9:.1f} GB/s and {fmt.flops(unstored.matmul_flops_per_s.get('fp32', 0), 'FLOP/s')}"
            " fp32, lower than this machine reaches when quiet. Not stored: every page keeps the quiet measurement "
            "above. Measure again once the other work has finished.",
            icon=":material/speed:",
        )


def panel_button(cal=_UNREAD) -> str:
    """The label of the button machine_panel shows now: calibrate again where a calibration fixes the roofs, else
    measure (again, once a measurement is stored)."""
    cal = _read(cal)
    if cal is not None:
        return CALIBRATE_AGAIN
    return MEASURE_AGAIN if _known(cal) else MEASURE


def load_runs() -> list:
    """The engine's measured runs on this machine (engine.runtime.runlog); empty when there are none."""
    try:
        from engine.runtime import runlog
    except ImportError:
        return []
    return runlog.load()


def measured_roofline_points(runs: list) -> list[dict]:
    """Measured runs as roofline points: decode from TPOT (one forward per step for the whole batch), prefill from
    TTFT (one forward over all prompt tokens). A run measured busy (engine.calibration.beside: the one rule) says
    so in its hover: its distance from the roof measures the neighbours too."""
    from engine.calibration.beside import beside, run_load

    points = []
    for m in runs[-40:]:
        if not m.params or not m.weights_bytes or not m.use_cache:
            continue
        label = f"{m.model} {m.dtype} b={m.batch_size} ({m.started_at[:16]})"
        load, share, flag = run_load(m)
        b = beside("TPOT", measured_s=m.tpot_s, predicted=None, loadavg_1m=load, cpu_share=share, busy=flag)
        busy = f"<br>measured under {b.load_text()}: not comparable with the roof" if b.busy else ""
        # decode: one forward per step for the whole batch; prefill: one forward over all prompt tokens
        for phase, tokens, seconds in (
            ("decode", m.batch_size, m.tpot_s),
            ("prefill", m.prompt_tokens, m.ttft_s),
        ):
            if not (math.isfinite(seconds) and seconds > 0 and tokens):
                continue
            p = measured_point(
                phase, params=m.params, weights_bytes=m.weights_bytes, tokens=tokens, seconds=seconds
            )
            points.append(
                {
                    "intensity": p.intensity,
                    "flops_per_s": p.flops_per_s,
                    "hover": f"<b>measured {phase}</b> {label}<br>{fmt.flops(p.flops_per_s, 'FLOP/s')}, "
                    f"{fmt.gb(p.bytes_per_s)}/s of weights, I={p.intensity:.3g}{busy}",
                    "busy": b.busy,
                }
            )
    return points


CALIBRATION_EXPERIMENT = "calibration"  # the run log's name: the clock's estimate for the next calibration


def calibrate_button(key: str, *, again: bool = False) -> None:
    """The calibration from the page, as the command line's `calibrate` runs it: this machine's roofs before and
    after, the bundled model timed at the calibration's shapes in each precision, the fit; under the page clock
    (its estimate from the last calibration here), stored for every page, then the page redrawn with it."""
    from engine.calibration.build import calibrate
    from ui import pace

    if not st.button(
        CALIBRATE_AGAIN if again else CALIBRATE,
        key=f"{key}.calibrate",
        icon=":material/tune:",
        help="Times the bundled model at a few prompt lengths, batch sizes and precisions, measures the read "
        "bandwidth and matmul FLOP/s before and after, and fits the calculator's per-step cost to them: minutes on "
        "a busy 2-core machine. Stored with its date; every page reads it.",
    ):
        return
    cal = pace.run_experiment(
        CALIBRATION_EXPERIMENT,
        "Calibrating this machine",
        lambda report: calibrate(),
        store=lambda c: {"model": c.model},
    )
    if cal is not None:
        st.rerun()
