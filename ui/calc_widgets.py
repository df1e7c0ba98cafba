"""Widgets and cached measurements shared by the Memory & cost and Roofline pages.

Each picker returns engine types (ModelSpec, GPUSpec) built from the widgets; defaults come from the
engine's own data (engine/data/*.toml, engine.calc.report.Inputs), so the CLI and the pages agree.
"""

from __future__ import annotations

import math

import streamlit as st

from engine import calibration
from engine.calc import format as fmt
from engine.calc.memory import count_params, formula_of
from engine.calc.report import Inputs
from engine.calc.roofline import measured_point
from engine.calc.specs import (
    PRECISIONS,
    THIS_MACHINE,
    GPUSpec,
    ModelSpec,
    custom_gpu,
    load_gpu_catalog,
    load_model_presets,
    parse_config_text,
    published_params,
    spec_from_numbers,
)
from engine.errors import EngineError

DEFAULTS = Inputs()


def _measured_machine() -> GPUSpec:
    from ui.common import cached_machine_measurement  # the one cached measurement of this machine

    return cached_machine_measurement().gpu_spec()


def cached_machine() -> GPUSpec:
    """This machine's roofs: the stored calibration's (its efficiencies were fitted against them), else measured
    once per server process."""
    cal = calibration.load_calibration()
    return cal.machine_gpu() if cal is not None else _measured_machine()


@st.cache_data(show_spinner="Fetching config.json…", max_entries=32)
def cached_hub_spec(repo_id: str) -> ModelSpec:
    from engine.calc_check import spec_from_hub

    return spec_from_hub(repo_id)


def cached_calibration() -> calibration.Calibration | None:
    # a small JSON read; not cached so a fresh `python -m engine calibrate` shows up at once
    return calibration.load_calibration()


def load_runs() -> list:
    """The engine's measured runs on this machine (engine.runlog); empty when there are none."""
    try:
        from engine import runlog
    except ImportError:
        return []
    return runlog.load()


def model_input(key: str, *, default: str = "gpt-neo-2.7b") -> ModelSpec | None:
    """A preset, an uploaded config.json (parsed with json only), a hub id or raw numbers. None (with st.error) on bad input."""
    presets = load_model_presets()
    source = st.radio(
        "Model from", ["preset", "config.json", "hub id", "raw numbers"], horizontal=True, key=f"{key}.source"
    )
    try:
        if source == "preset":
            names = list(presets)
            name = st.selectbox(
                "Model",
                names,
                index=names.index(default) if default in names else 0,
                key=f"{key}.preset",
                help="Shapes from each model's config.json; sources in `python -m engine gpus --models`.",
            )
            spec = presets[name]
            st.caption(
                f"{spec.attention_kind}; {count_params(spec).total:,} parameters. Source: {spec.source}"
            )
            return spec
        if source == "config.json":
            up = st.file_uploader(
                "A Hugging Face config.json (≤ 5 MB; read as JSON, nothing executed)",
                type=["json"],
                key=f"{key}.upload",
            )
            if up is None:
                st.info("Upload a config.json, e.g. from a model's 'Files' tab on the hub.")
                return None
            spec = parse_config_text(up.getvalue(), name=up.name.removesuffix(".json"))
            st.caption(
                f"{spec.attention_kind}; {count_params(spec).total:,} parameters (shape read from the config)"
            )
            for note in spec.notes:
                st.caption(note)
            return spec
        if source == "hub id":
            repo = st.text_input(
                "Hub id (config.json only)", placeholder="EleutherAI/gpt-neo-125m", key=f"{key}.hub"
            ).strip()
            if not repo:
                st.info("Type a hub id; only its config.json is fetched (or read from the local cache).")
                return None
            spec = cached_hub_spec(repo)
            st.caption(f"{spec.attention_kind}; {count_params(spec).total:,} parameters")
            return spec
        c1, c2, c3 = st.columns(3)
        n_layer = c1.number_input("layers", 1, 1000, 32, key=f"{key}.L")
        hidden = c2.number_input("hidden size", 1, 100_000, 4096, key=f"{key}.h")
        heads = c3.number_input("heads", 1, 1000, 32, key=f"{key}.H")
        kv = c1.number_input("KV heads", 1, 1000, 8, key=f"{key}.kv", help="= heads for MHA, 1 for MQA")
        head_dim = c2.number_input("head dim (0 = hidden/heads)", 0, 4096, 0, key=f"{key}.d")
        vocab = c3.number_input("vocabulary", 1, 2_000_000, 32000, key=f"{key}.V")
        ctx = c1.number_input("context length", 1, 10_000_000, 8192, key=f"{key}.ctx")
        window = c2.number_input(
            "sliding window (0 = none)",
            0,
            10_000_000,
            0,
            key=f"{key}.w",
            help="A window that evicts (rolling cache, as Mistral's) caps the KV cache.",
        )
        params = c3.number_input("parameters (0 = from shape)", 0, 10**13, 0, key=f"{key}.P")
        inter = st.number_input("MLP intermediate size (0 = 4 x hidden)", 0, 1_000_000, 14336, key=f"{key}.I")
        return spec_from_numbers(
            name="custom",
            n_layer=n_layer,
            hidden=hidden,
            n_head=heads,
            n_kv_head=kv,
            head_dim=head_dim or None,
            intermediate=inter or None,
            vocab=vocab,
            context_length=ctx,
            sliding_window=window or None,
            params=params or None,
        )
    except EngineError as exc:
        st.error(str(exc), icon=":material/error:")
        return None


def precision_inputs(key: str) -> tuple[str, str]:
    c1, c2 = st.columns(2)
    dtype = c1.selectbox(
        "Weights",
        PRECISIONS,
        index=PRECISIONS.index(DEFAULTS.dtype),
        key=f"{key}.dtype",
        help="int8/int4: weight-only storage (scales not counted); math in fp16.",
    )
    kv = c2.selectbox("KV cache", ["same", *PRECISIONS], key=f"{key}.kv_dtype")
    return dtype, (dtype if kv == "same" else kv)


def gpu_input(key: str, *, default: str = "t4", dtype: str = "fp16") -> GPUSpec:
    """Catalog GPU or this machine, with every figure editable and its source beside it."""
    catalog = load_gpu_catalog()
    keys = [*catalog, THIS_MACHINE]
    choice = st.selectbox(
        "GPU",
        keys,
        index=keys.index(default),
        key=f"{key}.gpu",
        format_func=lambda k: catalog[k].name if k in catalog else "this machine (measured)",
    )
    base = cached_machine() if choice == THIS_MACHINE else catalog[choice]
    math_dtype = "fp16" if dtype in ("int8", "int4") else dtype
    with st.expander(f"{base.name}: figures and sources (editable)"):
        c1, c2, c3 = st.columns(3)
        mem = c1.number_input(
            "memory (GB)", 0.1, 10_000.0, base.memory_bytes / 1e9, key=f"{key}.{choice}.mem"
        )
        bw = c2.number_input(
            "bandwidth (GB/s)", 0.1, 100_000.0, base.bandwidth_bytes_per_s / 1e9, key=f"{key}.{choice}.bw"
        )
        tf = c3.number_input(
            f"{math_dtype} peak (TFLOP/s)",
            0.0001,
            100_000.0,
            base.flops_for(math_dtype) / 1e12,
            format="%.4g",
            key=f"{key}.{choice}.{math_dtype}",
        )
        st.caption(f"memory: {base.sources.get('memory', '')}")
        st.caption(f"bandwidth: {base.sources.get('bandwidth', '')}")
        st.caption(f"{math_dtype}: {base.flops_source(math_dtype)}")
        if base.notes:
            st.caption(base.notes)
    return custom_gpu(
        base, memory_bytes=mem * 1e9, bandwidth_bytes_per_s=bw * 1e9, flops={math_dtype: tf * 1e12}
    )


def formula_expander(title: str, *fns: object, extra: str = "") -> None:
    with st.expander(title):
        for fn in fns:
            st.markdown(f"`{getattr(fn, '__name__', '')}`: {formula_of(fn)}")
        if extra:
            st.markdown(extra)


def measured_roofline_points(runs: list) -> list[dict]:
    """Measured runs as roofline points: decode from TPOT (one forward per step for the whole batch),
    prefill from TTFT (one forward over all prompt tokens)."""
    points = []
    for m in runs[-40:]:
        if not m.params or not m.weights_bytes or not m.use_cache:
            continue
        label = f"{m.model} {m.dtype} b={m.batch_size} ({m.started_at[:16]})"
        if math.isfinite(m.tpot_s) and m.tpot_s > 0:
            p = measured_point(
                "decode",
                params=m.params,
                weights_bytes=m.weights_bytes,
                tokens=m.batch_size,
                seconds=m.tpot_s,
            )
            points.append(
                {
                    "intensity": p.intensity,
                    "flops_per_s": p.flops_per_s,
                    "hover": f"<b>measured decode</b> {label}<br>{fmt.flops(p.flops_per_s, 'FLOP/s')}, "
                    f"{fmt.gb(p.bytes_per_s)}/s of weights, I={p.intensity:.3g}",
                }
            )
        if m.ttft_s > 0 and m.prompt_tokens:
            p = measured_point(
                "prefill",
                params=m.params,
                weights_bytes=m.weights_bytes,
                tokens=m.prompt_tokens,
                seconds=m.ttft_s,
            )
            points.append(
                {
                    "intensity": p.intensity,
                    "flops_per_s": p.flops_per_s,
                    "hover": f"<b>measured prefill</b> {label}<br>{fmt.flops(p.flops_per_s, 'FLOP/s')}, "
                    f"{fmt.gb(p.bytes_per_s)}/s of weights, I={p.intensity:.3g}",
                }
            )
    return points


def params_check_caption(spec: ModelSpec, key: str | None) -> None:
    """Say whether the preset's count matches the count its source publishes."""
    if key and (pub := published_params(key)):
        ok = count_params(spec).total == pub
        st.caption(
            f"{'✓' if ok else '✗'} {count_params(spec).total:,} parameters vs {pub:,} published "
            "(and the real transformers model on the meta device, in the tests)"
        )
