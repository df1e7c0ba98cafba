"""Every download button on every page carries the download icon: the Playground's CSV button had none beside the
report button's, and read as plain text to a student."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _download_calls():
    for path in [*sorted((ROOT / "ui").glob("*.py")), *sorted((ROOT / "pages").glob("*.py"))]:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            if node.func.attr != "download_button":
                continue
            receiver = node.func.value
            if isinstance(receiver, ast.Name) and receiver.id == "export":
                continue  # the report button (ui.export.download_button) sets its own icon
            yield path.relative_to(ROOT), node


def test_every_download_button_has_the_download_icon():
    calls = list(_download_calls())
    assert len(calls) >= 8  # the Playground's, the race's, the levers', the track record's, Serving's, ...
    bare = [
        f"{path}:{node.lineno}"
        for path, node in calls
        if not any(
            k.arg == "icon" and isinstance(k.value, ast.Constant) and k.value.value == ":material/download:"
            for k in node.keywords
        )
    ]
    assert bare == []
