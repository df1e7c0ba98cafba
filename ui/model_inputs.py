"""The model a calculator page asks about: a preset (the chapter's models, and every model with a published
config.json by its Hugging Face id), a config.json uploaded or pasted, a hub id, or raw numbers."""

from __future__ import annotations

from typing import TypeVar

import streamlit as st

from engine.arch.hub import hub_repo_id
from engine.arch.resolve import hub_presets
from engine.calc.memory import param_count
from engine.calc.specs import ARCH_TRAITS, ModelSpec, count_words, load_model_presets, spec_from_numbers
from engine.core.errors import EngineError


@st.cache_data(show_spinner="Fetching config.json…", max_entries=32)
def cached_hub_spec(repo_id: str) -> ModelSpec:
    from engine.arch.resolve import hub_spec

    return hub_spec(repo_id)


@st.cache_data(
    show_spinner="Building the model class on the meta device to count its parameters…", max_entries=64
)
def cached_preset_spec(hub_id: str) -> ModelSpec:
    """A published config's spec by its hub id, counted with the real class on the meta device."""
    from engine.arch.resolve import hub_preset_spec

    return hub_preset_spec(hub_id)


@st.cache_data(
    show_spinner="Building the model class on the meta device to count its parameters…", max_entries=32
)
def cached_config_spec(content: bytes) -> ModelSpec:
    """An uploaded config.json's spec, counted with the real class on the meta device (engine.arch.meta)."""
    from engine.arch.meta import exact_spec
    from engine.calc.hf_config import parse_config_json

    return exact_spec(parse_config_json(content))


def _count_caption(spec: ModelSpec) -> str:
    pc = param_count(spec)
    active = f" ({pc.active:,} active per token)" if pc.active != pc.total else ""
    how = count_words(pc.source)
    if (
        pc.source == "formula"
        and spec.source not in ("config.json", "raw numbers")
        and spec.params_override is None
    ):
        how += " (for every preset it equals the count from the model's own code, checked by the tests)"
    return f"{spec.attention_kind}; {pc.total:,} parameters{active}, {how}"


T = TypeVar("T")


def _kept(widget_key: str, default: T) -> T:
    """The value a widget hidden by a switch of 'Model from' comes back with: Streamlit forgets the state of a
    widget a run does not draw, so each mode's inputs keep their last value beside it (`_keep`)."""
    return st.session_state.get(f"{widget_key}.kept", default)


def _keep(widget_key: str, value: object) -> None:
    st.session_state[f"{widget_key}.kept"] = value


def preset_input(key: str, default: str) -> ModelSpec:
    """The calculator's presets (the chapter's models and their shapes), then every model with a published
    config.json, by its Hugging Face id (Llama 3.1-3.3, Qwen 2.5 and 3, Mistral, Mixtral, Gemma 2, Phi-3, ...)."""
    presets = load_model_presets()
    names = [*presets, *(n for n in hub_presets() if n not in presets)]
    name = st.selectbox(
        "Model",
        names,
        index=names.index(_kept(f"{key}.preset", default if default in names else names[0])),
        key=f"{key}.preset",
        persist_state="session",
        # the name without its organisation, which the model id field below and the result's header carry: the
        # whole id was cut in a box this wide ('meta-llama/Llama-3.1-70B-Instru')
        format_func=lambda n: n.split("/", 1)[-1],
        help="The chapter's models by short name, then models by their Hugging Face id (shown without the "
        "organisation, which the model id field below gives), each from its config.json (the source is under the "
        "box).",
    )
    _keep(f"{key}.preset", name)
    spec = presets[name] if name in presets else cached_preset_spec(name)
    st.caption(f"{_count_caption(spec)}. Source: {spec.source}")
    return spec


def config_input(key: str) -> ModelSpec | None:
    """A config.json uploaded or pasted (parsed as JSON only, nothing executed)."""
    up = st.file_uploader(
        "A Hugging Face config.json (≤ 5 MB; read as JSON, nothing executed)",
        type=["json"],
        key=f"{key}.upload",
    )
    pasted = st.text_area(
        "…or paste its text",
        value=_kept(f"{key}.paste", ""),
        key=f"{key}.paste",
        persist_state="session",
        height=120,
        placeholder='{"architectures": ["LlamaForCausalLM"], "hidden_size": 4096, ...}',
    ).strip()
    _keep(f"{key}.paste", pasted)
    if up is None and not pasted:
        st.info("Upload a config.json or paste it, e.g. from a model's 'Files' tab on the hub.")
        return None
    spec = cached_config_spec(up.getvalue() if up is not None else pasted.encode())
    st.caption(_count_caption(spec))
    for note in spec.notes:
        st.caption(note)
    return spec


# The raw-numbers form, in its order over three columns: (ModelSpec field, label, lowest, highest, starting value,
# key under the page's, help). 0 in a field that allows it means none (window) or derived from the shape.
RAW_NUMBERS: tuple[tuple[str, str, int, int, int, str, str | None], ...] = (
    ("n_layer", "layers", 1, 1000, 32, "L", None),
    ("hidden", "hidden size", 1, 100_000, 4096, "h", None),
    ("n_head", "heads", 1, 1000, 32, "H", None),
    ("n_kv_head", "KV heads", 1, 1000, 8, "kv", "= heads for MHA, 1 for MQA"),
    ("head_dim", "head dim (0 = hidden/heads)", 0, 4096, 0, "d", None),
    ("vocab", "vocabulary", 1, 2_000_000, 32000, "V", None),
    ("context_length", "context length", 1, 10_000_000, 8192, "ctx", None),
    (
        "sliding_window",
        "sliding window (0 = none)",
        0,
        10_000_000,
        0,
        "w",
        "A window that evicts (rolling cache, as Mistral's) caps the KV cache.",
    ),
    ("params", "parameters (0 = from shape)", 0, 10**13, 0, "P", None),
    ("intermediate", "MLP intermediate size (0 = 4 x hidden)", 0, 1_000_000, 14336, "I", None),
)


def model_input(key: str, *, default: str = "gpt-neo-2.7b") -> ModelSpec | None:
    """A preset, a config.json (uploaded or pasted; parsed with json only), a hub id or raw numbers. None (with
    st.error) on bad input."""
    source = st.radio(
        "Model from",
        ["preset", "config.json", "hub id", "raw numbers"],
        horizontal=True,
        key=f"{key}.source",
        persist_state="session",
    )
    try:
        if source == "preset":
            return preset_input(key, default)
        if source == "config.json":
            return config_input(key)
        if source == "hub id":
            typed = st.text_input(
                "Hub id (config.json only)",
                value=_kept(f"{key}.hub", ""),
                placeholder="EleutherAI/gpt-neo-125m",
                key=f"{key}.hub",
                help="owner/name, or the model's page address (https://huggingface.co/owner/name).",
                persist_state="session",
            ).strip()
            _keep(f"{key}.hub", typed)
            if not typed:
                st.info("Type a hub id; only its config.json is fetched (or read from the local cache).")
                return None
            repo = hub_repo_id(typed)  # a page address pasted from the browser reads as its owner/name
            if repo != typed:
                st.caption(f"Read as {repo}.")
            spec = cached_preset_spec(repo) if repo in hub_presets() else cached_hub_spec(repo)
            st.caption(_count_caption(spec))
            return spec
        c1, c2, c3 = st.columns(3)
        numbers = {
            field: (c1, c2, c3)[k % 3].number_input(
                label,
                lo,
                hi,
                _kept(f"{key}.{short}", value),
                key=f"{key}.{short}",
                persist_state="session",
                help=why,
            )
            for k, (field, label, lo, hi, value, short, why) in enumerate(RAW_NUMBERS)
        }
        for field, _label, _lo, _hi, _value, short, _why in RAW_NUMBERS:
            _keep(f"{key}.{short}", numbers[field])
        layouts = list(ARCH_TRAITS)
        arch = c2.selectbox(
            "layer layout",
            layouts,
            index=layouts.index("llama"),
            key=f"{key}.arch",
            persist_state="session",
            help="Whose layer: biases, LayerNorm or RMSNorm, gated MLP or not, parallel block (each family's modelling code).",
        )
        experts = c3.number_input(
            "MLP experts (1 = dense)", 1, 1024, 1, key=f"{key}.E", persist_state="session"
        )
        per_token = (
            c3.number_input("experts per token", 1, 1024, 1, key=f"{key}.k", persist_state="session")
            if experts > 1
            else 1
        )
        # a field that takes 0 reads it as "none" or "derived" (the others start at 1)
        spec = spec_from_numbers(
            name="custom",
            arch=arch,
            n_experts=experts,
            experts_per_token=per_token,
            **{field: v or None for field, v in numbers.items()},
        )
        st.caption(_count_caption(spec))
        return spec
    except EngineError as exc:
        from ui.common import show_error  # the one scrubbed error path

        show_error(exc)
        return None
