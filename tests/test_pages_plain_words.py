"""Plain words on every page (issue 33 item 7): no file, module or environment name, no server path, no traceback
reaches the screen, in anything a page draws (text, alerts, tables, tiles, widget labels, help and options), on
its first view and on a stored run shown again. Every page's error goes through the one scrubbed helper."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parents[1]
PAGES = ["app.py", *sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "pages").glob("*.py"))]

# What a person should never read on a page: this code's own modules and folders, file names, environment
# folders and variables, server paths, and the marks of a traceback. A Hugging Face model folder's config.json
# and tokenizer.json are what a user gives the calculator, so they are words here.
INTERNALS = {
    "module or folder of this code": r"\b(?:engine|ui|bench|tests|pages|scripts)[./]\w[\w/.]*",
    "file name": r"\b[\w-]+\.(?:py|jsonl?|toml|sh|csv|safetensors|gguf|ya?ml|log|ipynb|jinja|so)\b",
    "library attribute": r"\btorch\.version\.\w+",  # a build dump; how a figure is measured may name its API
    "environment": r"(?:\.venv[\w-]*|~/\.pyenv|\.pyenv/|site-packages|\bINFERENCE_LAB_\w+)",
    "server path": r"(?<![\w:/.~-])/(?:home|root|work|opt|tmp|usr|var|etc)/\S*",
    "traceback": r"Traceback \(most recent call last\)|File \"[^\"]+\", line \d+",
}
WORDS_OK = ("config.json", "tokenizer.json")
_URL = re.compile(r"https?://\S+")


def internals(text: str) -> list[str]:
    """The internals `text` shows, as 'kind: match' (URLs are sources, not internals)."""
    text = _URL.sub(" ", text)
    for ok in WORDS_OK:
        text = text.replace(ok, " ")
    return [f"{kind}: {m.group(0)}" for kind, rx in INTERNALS.items() for m in re.finditer(rx, text)]


def on_screen(at: AppTest) -> str:
    """Everything the page draws as text: markdown, headings, captions, alerts, code, expander and tab labels,
    tables, tiles, and every widget's label, help, options and value."""
    parts: list[object] = []
    for kind in ("title", "header", "subheader", "markdown", "caption", "code", "latex"):
        parts += [e.value for e in getattr(at, kind)]
    for kind in ("info", "warning", "error", "success", "exception"):
        parts += [e.value for e in getattr(at, kind)]
    parts += [e.label for e in at.expander] + [t.label for t in at.tabs]
    parts += [d.value.to_csv() for d in at.dataframe] + [t.value.to_csv() for t in at.table]
    parts += [f"{m.label} {m.value} {m.help or ''}" for m in at.metric]
    for kind in (
        "button", "checkbox", "toggle", "radio", "selectbox", "multiselect", "slider", "select_slider",
        "number_input", "text_input", "text_area",
    ):  # fmt: skip
        for w in getattr(at, kind):
            parts += [getattr(w, "label", ""), getattr(w, "help", "") or ""]
            parts += [str(o) for o in getattr(w, "options", []) or []]
    return "\n".join(str(p) for p in parts if p)


def test_the_check_sees_what_the_issue_saw():
    seen = internals(
        "see tests/test_calc_params.py; engine.batching.workload.policy_bound; race-x-20261130.json; "
        "~/.pyenv/versions/3.11/bin/python; /work/main/.venv-ds/bin/python; "
        # a presenter read these on Home: 'NVML library (libnvidia-ml.so) not found ... torch.version.cuda is None'
        "NVML library (libnvidia-ml.so) not found; torch.version.cuda is None"
    )
    assert len(seen) >= 7, seen
    assert any("libnvidia-ml.so" in s for s in seen) and any("torch.version.cuda" in s for s in seen)
    assert internals("upload a config.json; https://github.com/x/y/blob/main/a.py; 2.04× faster") == []


@pytest.mark.slow
@pytest.mark.parametrize("page", PAGES)
def test_no_page_shows_a_file_module_or_environment_name(page):
    at = AppTest.from_file(str(ROOT / page), default_timeout=300).run()
    assert not at.exception, [e.value for e in at.exception]
    found = sorted(set(internals(on_screen(at))))
    assert found == []


def test_the_race_shows_no_internals_on_its_recorded_runs():
    """The race page draws every recorded race (failed lanes with tracebacks, side environments included)."""
    at = AppTest.from_file(str(ROOT / "pages/5_Latency_race.py"), default_timeout=300).run()
    assert not at.exception
    assert internals(on_screen(at)) == []


def _shows_an_exception_unscrubbed(tree: ast.AST) -> list[int]:
    """Lines where an `except ... as exc` handler puts the exception on the page other than via show_error."""
    bad = []
    for handler in ast.walk(tree):
        if not (isinstance(handler, ast.ExceptHandler) and handler.name):
            continue
        for call in ast.walk(handler):
            if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)):
                continue
            if call.func.attr not in {
                "error",
                "warning",
                "info",
                "markdown",
                "write",
                "caption",
                "exception",
            }:
                continue
            names = {n.id for a in call.args for n in ast.walk(a) if isinstance(n, ast.Name)}
            if handler.name in names:
                bad.append(call.lineno)
    return bad


@pytest.mark.parametrize(
    "path", [*PAGES[1:], *sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "ui").glob("*.py"))]
)
def test_every_error_goes_through_the_one_scrubbed_helper(path):
    tree = ast.parse((ROOT / path).read_text(encoding="utf-8"))
    assert _shows_an_exception_unscrubbed(tree) == [], "use ui.common.show_error(exc)"


def test_dead_names_are_gone():
    """page_setup's icon was accepted and thrown away (the navigation owns the icons); NAV_ICONS was never read."""
    import inspect

    from ui import common

    assert "icon" not in inspect.signature(common.page_setup).parameters
    assert not hasattr(common, "NAV_ICONS")


def test_a_machine_without_the_peer_engines_is_told_where_to_install_them_in_plain_words(monkeypatch):
    """On a machine without the side environments the race page listed `bash scripts/install_peers.sh` and
    `.venv-vllm` (a worktree, or an install that skipped the optional steps): the page points at the README's
    sections instead."""
    from engine.backends import vllm as vllm_backend
    from engine.race.peers import base
    from ui.serving_server import vllm_status

    monkeypatch.setattr(base, "version", lambda dist: None)
    monkeypatch.setattr(base, "export_cli", lambda: (None, "run `bash scripts/install_peers.sh`"))
    monkeypatch.setattr(
        vllm_backend, "availability", lambda: (None, "make it with `bash scripts/make_vllm_env.sh`")
    )
    rows = base.installed()
    notes = " ".join(r["note"] for r in rows)
    assert internals(notes) == [] and "README" in notes
    assert all(r["version"] == "not installed" for r in rows)
    label, why = vllm_status()
    assert label is None and internals(why) == [] and "README" in why
