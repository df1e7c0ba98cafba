"""Shared widgets: the model picker and the 'load with progress' helper every model-using page calls."""

from __future__ import annotations

import math
import re

import streamlit as st

from engine.core import dtypes
from engine.core.errors import EngineError
from engine.core.spec import span_words
from engine.runtime import models
from ui.common import REFUSALS, cached_hardware, cached_model, show_error

CUSTOM = "other (hub id or local folder)…"
REMOTE_CODE_HELP = (
    "Safetensors weights only, from the hub or a folder under the server's allowed model roots. "
    "Remote code is off: a model's own Python code never runs unless the server's operator allows it in the "
    "server's environment (the README says how); nothing in the browser can turn it on."
)


def model_picker(
    key: str, *, default: str = models.DEFAULT_MODEL, allow_custom: bool = True
) -> tuple[str, str]:
    """Preset/custom model name and dtype, with each preset's description. Returns (name, dtype)."""
    hw = cached_hardware()
    names = list(models.PRESETS) + ([CUSTOM] if allow_custom else [])
    linked = st.query_params.get("model")  # shareable demo links: /playground?model=tiny-gpt-neo
    if linked in models.PRESETS:
        default = linked
    choice = st.selectbox(
        "Model",
        names,
        index=names.index(default) if default in names else 0,
        key=f"{key}.model",
        format_func=lambda n: n if n == CUSTOM else f"{n} ({models.PRESETS[n].kind})",
        help="Offline: smollm2-135m-instruct (real text), tiny-gpt-neo and the *-random shapes (random weights). "
        "gpt-neo-* need the Hugging Face hub or a local cache.",
    )
    if choice == CUSTOM:
        choice = st.text_input(
            "Hub id or local folder",
            key=f"{key}.custom",
            placeholder="EleutherAI/gpt-neo-125m or my-model/",
            help=REMOTE_CODE_HELP,
        ).strip()
    else:
        st.caption(models.PRESETS[choice].description)
    options = [d for d in dtypes.LOADABLE if d != "fp16" or hw.fp16_supported]
    dtype = st.selectbox(
        "Precision",
        ["auto", *options],
        key=f"{key}.dtype",
        help="auto = fp16 on a GPU (as in the chapter), fp32 on the CPU. fp16 is offered on CUDA GPUs only.",
    )
    return choice, dtype


def load_with_progress(name: str, dtype: str, *, keep: str | None = None) -> models.LoadedModel | None:
    """The shared cached model, loading it with a status box the first time; None (with st.error) on failure.

    With `keep` (a session-state key), the model that loaded last under that key stays in use when the one now
    chosen fails to load (an id that cannot be loaded offline): the error says why in one sentence and a note
    says which model the page still uses, so a mistyped id does not drop a working model."""
    if not name:
        st.info("Enter a hub id or a local folder to load.")
        return _kept(keep)
    note = models.loading_note(name)
    try:
        with st.spinner(f"Loading {name} ({dtype})…" + (f" {note}" if note else "")):
            lm = cached_model(name, dtype)
    except EngineError as exc:
        show_error(exc)
        return _kept(keep)
    if keep:
        st.session_state[keep] = (name, dtype)
    return lm


def _kept(keep: str | None) -> models.LoadedModel | None:
    """The model that loaded last under `keep`, said on the page; None when there is none (or it fails now)."""
    before = st.session_state.get(keep) if keep else None
    if not before:
        return None
    try:
        lm = cached_model(*before)
    except EngineError:
        return None
    st.info(f"Still using {lm.name} ({lm.dtype}), the model loaded before.")
    return lm


NUMBER, SLIDER, SELECT, SELECT_SLIDER, RADIO = "number", "slider", "select", "select_slider", "radio"


def spec_input(
    container,
    spec,
    name: str,
    *,
    key: str,
    label: str | None = None,
    widget: str | None = None,
    value=None,
    lo=None,
    hi=None,
    choices=None,
    unit: float = 1,
    **kwargs,
):
    """One widget for one spec field (engine.core.spec): its default, bounds, choices, label and help come from
    the field, so a page never restates them. The widget follows the field's kind: a bool is a toggle, a tuple
    with choices a multiselect, a field with choices a select (or `widget=` radio / select_slider), a number a
    number box (or `widget="slider"`), text a text box.

    A page may narrow (never widen) the field: `lo`/`hi` for numbers, `choices` for a select, `value` for its
    own starting value, `label` for its own words, `unit` to ask a number in larger units than the field's (GB
    for a field in bytes: value, lo and hi are then in those units). A number box takes any number and checks it against the
    field's rule (Spec.problem): out of range, the field says what is allowed in one sentence and this returns
    None, so the page does not run with it (Streamlit's own bounds only turn the field red and keep the old
    value). `refused(*values)` tells a page whether any input was refused."""
    kind = spec.kind(name)
    label = label or upper_first(spec.label(name))
    help_text = kwargs.pop("help", None) or spec.help(name)
    options = _options(spec, name, choices)
    default = spec.default(name) if value is None else value
    if kind is bool:
        return container.toggle(label, value=bool(default), key=key, help=help_text, **kwargs)
    if kind is tuple:
        picked = container.multiselect(
            label,
            list(options or ()),
            default=[d for d in default if d in (options or ())],
            key=key,
            help=help_text,
            **kwargs,
        )
        return tuple(picked)
    if options is not None:
        index = options.index(default) if default in options else 0
        if widget == SELECT_SLIDER:
            return container.select_slider(
                label, options, value=options[index], key=key, help=help_text, **kwargs
            )
        draw = container.radio if widget == RADIO else container.selectbox
        return draw(label, options, index=index, key=key, help=help_text, **kwargs)
    if kind not in (int, float):
        return container.text_input(label, value=default, key=key, help=help_text, **kwargs)
    if unit != 1:
        return _scaled_number(container, spec, name, label, help_text, default, lo, hi, unit, key, kwargs)
    span = spec.span(name, lo, hi)
    if widget == SLIDER:
        low, high = _narrowed(spec, name, lo, hi)
        cast = int if kind is int else float
        return container.slider(
            label, cast(low), cast(high), cast(default), key=key, help=f"{help_text} ({span})", **kwargs
        )
    # started from the session, not from `value`: a box Streamlit draws with a value puts that value back when it
    # is emptied (letters typed, then Enter: 50 users became the default 8, silently); drawn without one, an empty
    # box reads None and is said below. A whole-number field is a float box too (step 1, shown without decimals):
    # the browser reads an int box's text with parseInt, so '1e9' users arrived as 1 and '2.5' as 2; read as a
    # number, they are refused below with the field's range.
    if key not in st.session_state:
        st.session_state[key] = float(default)
    if kind is int:
        kwargs = {"step": 1.0, "format": "%g", **kwargs}
        kwargs["step"] = float(kwargs["step"])
    number = container.number_input(
        label,
        value=None,
        key=key,
        help=f"{help_text} ({span})",
        **{"placeholder": digits_only(span), **kwargs},
    )
    if number is None:
        said = f"{label} is empty (a number box takes digits only): type {span}"
        container.error(f"{said}: nothing runs until it is given.")
        st.session_state.setdefault(REFUSALS, []).append(said)
        return None
    if kind is int and math.isfinite(number) and float(number).is_integer():
        number = int(
            number
        )  # the field's own kind; '2.5' and 'inf' stay as typed and are refused as not whole
    why = spec.problem(name, number, label=label, lo=lo, hi=hi)
    if why:
        refuse(container, why)
        return None
    return number


def refuse(container, why: str) -> None:
    """A field's value refused: `why` (one sentence) said under the field, in `container`, and kept for the page to
    repeat where its answer would be (refusals). The caller then treats the field as not given, so nothing runs
    with the old value."""
    # no icon: in a half-width column it took the room a word needed ("positiv e whole numbe r")
    container.error(f"{why}: nothing runs with it until it is changed.")
    st.session_state.setdefault(REFUSALS, []).append(why)


def digits_only(span: str) -> str:
    """A number box's placeholder: the browser drops letters typed into it (an <input type="number">) and, on
    Enter, puts the last number back; while the box is empty this says why, where the eye is."""
    return f"digits only: {span}"


def _scaled_number(container, spec, name, label, help_text, default, lo, hi, unit, key, kwargs):
    """A number asked in `unit`s of the field (GB of a field in bytes), checked by the field's rule once scaled
    back; returns the number in the page's units, or None (refused, with the sentence)."""
    number = container.number_input(
        label,
        value=float(default),
        key=key,
        help=help_text,
        **{"placeholder": digits_only(span_words(float, lo, hi)), **kwargs},
    )
    low, high = (None if lo is None else lo * unit), (None if hi is None else hi * unit)
    value = round(number * unit) if spec.kind(name) is int else number * unit
    why = spec.problem(name, value, label=label, lo=low, hi=high)
    if why:  # said in the page's units: the field's own sentence would speak in bytes
        said = f"{label} must be {span_words(float, lo, hi)}, got {number:g}"
        container.error(f"{said}: nothing runs with it until it is changed.")
        st.session_state.setdefault(REFUSALS, []).append(said)
        return None
    return number


def _narrowed(spec, name: str, lo, hi) -> tuple:
    flo, fhi = spec.bounds(name)
    low, high = (flo if lo is None else lo), (fhi if hi is None else hi)
    if low is None or high is None:
        raise ValueError(f"a slider needs both bounds: {spec.__name__}.{name} has {low}..{high}")
    spec.span(name, lo, hi)  # raises when the page's range is wider than the spec's
    return low, high


def _options(spec, name: str, choices) -> list | None:
    """The field's choices, or the page's narrower list: each of them a valid value of the field."""
    own = spec.choices(name)
    if choices is None:
        return None if own is None else list(own)
    bad = [c for c in choices if spec.problem(name, (c,) if spec.kind(name) is tuple else c)]
    if bad:
        raise ValueError(f"{spec.__name__}.{name}: {bad} are not valid values of the field")
    return list(choices)


def refusals() -> list[str]:
    """This run's refused inputs, each as its sentence says it (without the closing clause), for a page to
    repeat where its answer would be: a field's own sentence sits in a narrow input column."""
    return list(st.session_state.get(REFUSALS, []))


def refused(*values) -> bool:
    """Whether any of a page's spec inputs was refused (spec_input returned None and said why)."""
    return any(v is None for v in values)


NOT_RUN = "Nothing ran: a field above is out of range (it says what is allowed)."


def sent_in_range(sent: bool, *values) -> bool:
    """Whether a form was sent with none of its spec inputs refused; sent with one refused, the page says in one
    sentence that nothing ran (the refused field itself says what is allowed)."""
    if sent and refused(*values):
        st.error(NOT_RUN, icon=":material/block:")
        return False
    return sent


def button_why(container, label: str, *, key: str, why: str = "", **kwargs) -> bool:
    """A button that, when it cannot be pressed, says why beside it (Streamlit's disabled button says nothing):
    disabled while `why` is non-empty, with `why` as its tooltip and as a caption under it. True when pressed."""
    pressed = container.button(
        label, key=key, disabled=bool(why), help=why or kwargs.pop("help", None), **kwargs
    )
    if why:
        container.caption(f"{label}: {why}")
    return pressed and not why


def word_table(container, rows) -> None:
    """A table whose cells hold words (verdicts, reasons, statuses): drawn as a static table whose cells wrap,
    where st.dataframe's fixed-width columns would cut a sentence short at 1280 px."""
    rows = [{k: _plain_cell(v) for k, v in r.items()} for r in rows]
    container.table(rows, hide_index=True, border="horizontal")


def split_table(rows, key: str, parts) -> list[tuple[str, list[dict]]]:
    """A table too wide for the page's column at 1280 px (818 px beside the open sidebar) as narrower ones, each led
    by the `key` column so a row reads across them: `parts` is (caption, columns) each, in order. A column named in
    no part joins the last, so none is lost; a part whose columns the rows lack is left out. (caption, rows) each."""
    present = list(dict.fromkeys(c for r in rows for c in r if c != key))
    named = {c for _, cols in parts for c in cols}
    out = []
    for i, (caption, cols) in enumerate(parts):
        cols = [c for c in cols if c in present]
        if i == len(parts) - 1:
            cols += [c for c in present if c not in named]
        if cols:
            out.append((caption, [{key: r.get(key), **{c: r.get(c) for c in cols}} for r in rows]))
    return out


# cells that hold a verdict in words, cut short in a dataframe's fixed-width column at 1280 px ('no measurable
# differe', 'no: machine was b': a presenter's walk): a part holding one is drawn as a table whose cells wrap
VERDICT_COLUMNS = frozenset({"speed vs fp32", "speed vs plain", "comparable"})


def split_dataframes(rows, key: str, parts) -> None:
    """`split_table`'s tables, each under its caption; a part with a verdict column (VERDICT_COLUMNS) as a table
    whose cells wrap (word_table)."""
    for caption, part in split_table(rows, key, parts):
        st.caption(caption)
        if part and VERDICT_COLUMNS & set(part[0]):
            # numbers as rounded: a static table draws 37.5 as "37.5000" (a presenter's walk)
            word_table(
                st, [{k: f"{v:,.6g}" if isinstance(v, float) else v for k, v in r.items()} for r in part]
            )
        else:
            st.dataframe(part, hide_index=True, width="stretch")


# st.table draws a text cell as Markdown: a cell starting with a list, heading or quote mark ("1. ...", "- ...",
# "# ...") became a list or a heading inside the cell. Escaped, the mark reads as itself.
_BLOCK_MARK = re.compile(r"^(\s*)(\d+)([.)])(?=\s|$)|^(\s*)([-*+#>])(?=\s|$)")


def _plain_cell(value):
    if not isinstance(value, str):
        return value
    if value == "-":
        return "—"  # 'none': a dash that is not an empty bullet
    return _BLOCK_MARK.sub(_escape_mark, value, count=1)


def _escape_mark(m: re.Match) -> str:
    if m.group(2) is not None:  # "1." -> "1\."
        return f"{m.group(1)}{m.group(2)}\\{m.group(3)}"
    return f"{m.group(4)}\\{m.group(5)}"  # "-" -> "\-"


def upper_first(text: str) -> str:
    """The first letter upper case and the rest as written ('memory budget (GB)' -> 'Memory budget (GB)';
    str.capitalize would lower 'GB' and 'SLOs')."""
    return text[:1].upper() + text[1:]


def note_metric(container, label: str, value, note=None, **kwargs) -> None:
    """A metric whose second line is a note (a range, a unit, a limit), not a change: drawn without colour or
    arrow, so it never reads as better or worse."""
    container.metric(label, value, note, delta_color="off", delta_arrow="off", **kwargs)


def sidebar_model(namespace: str, **picker) -> models.LoadedModel | None:
    """A page's model: picked in the sidebar under 'Model', then loaded with progress (one copy per server);
    None while it cannot load (the reason is on the page)."""
    with st.sidebar:
        st.subheader("Model")
        name, dtype = model_picker(namespace, **picker)
    return load_with_progress(name, dtype, keep=f"{namespace}.loaded")


def shell_lines(command: str) -> str:
    """A command as a shell reads it over several lines, one flag with its value per line (' \\' continues the
    line): the whole command in view at any width, pasted as it is, never broken inside a flag as a wrapped line
    breaks at its hyphens ('--max-' / 'model-len')."""
    head, *flags = command.split(" --")
    return " \\\n  --".join([head, *flags])
