"""engine.lab.codegen: syntax check, real ruff lint, code extraction, stop reasons; generated code never runs."""

from __future__ import annotations

import pytest

from engine.core.errors import InvalidParameterError
from engine.lab import codegen


def test_check_syntax_accepts_and_rejects_with_position():
    assert codegen.check_syntax("def f(x):\n    return x + 1\n").ok
    bad = codegen.check_syntax("def f(x):\n    return (x +\n")
    assert not bad.ok and bad.line is not None and bad.message
    assert not codegen.check_syntax("   \n").ok


def test_ruff_is_found_and_is_the_real_binary():
    binary = codegen.ruff_binary()
    assert binary is not None and binary.is_file()
    assert codegen.ruff_version(binary).startswith("ruff ")


def test_lint_reports_real_ruff_findings_with_lines():
    code = "import os\n\n\ndef f(items=[]):\n    return undefined_name + items\n"
    report = codegen.lint(code)
    assert report.available and report.ruff_version.startswith("ruff")
    codes = {(f.code, f.line) for f in report.findings}
    assert ("F401", 1) in codes  # unused import
    assert ("B006", 4) in codes  # mutable default argument (bugbear)
    assert ("F821", 5) in codes  # undefined name
    assert all(f.message for f in report.findings)
    assert [f.line for f in report.findings] == sorted(f.line for f in report.findings)


def test_lint_clean_code_has_no_findings_and_ignores_line_length():
    code = "def add(a: int, b: int) -> int:\n    return a + b  # " + "x" * 150 + "\n"
    assert codegen.lint(code).findings == ()


def test_lint_reports_syntax_errors_too():
    report = codegen.lint("def f(:\n")
    assert report.available and any(f.code == "invalid-syntax" for f in report.findings)


def test_lint_without_ruff_says_how_to_get_it(monkeypatch):
    monkeypatch.setattr(codegen, "ruff_binary", lambda: None)
    report = codegen.lint("x = 1\n")
    assert not report.available and "pip install ruff" in report.reason


def test_lint_rejects_odd_rule_selectors():
    with pytest.raises(InvalidParameterError):
        codegen.lint("x = 1\n", select=("E; rm -rf /",))


def test_generated_code_is_never_executed(tmp_path):
    marker = tmp_path / "executed"
    code = f"open({str(marker)!r}, 'w').write('ran')\nimport os\nos.system('touch {marker}')\n"
    codegen.check_syntax(code)
    codegen.lint(code)
    codegen.extract_code(f"```python\n{code}```")
    assert not marker.exists()


@pytest.mark.parametrize(
    ("reply", "code"),
    [
        ("Here you go:\n```python\ndef f():\n    return 1\n```\nEnjoy.", "def f():\n    return 1"),
        ("```\nx = 2\n```", "x = 2"),
        ("Sure:\n```py\ny = 3\nz = 4", "y = 3\nz = 4"),  # unclosed fence: cut by the length limit
        ("no fences here", "no fences here"),
    ],
)
def test_extract_code(reply, code):
    assert codegen.extract_code(reply) == code


def test_every_stop_reason_is_explained():
    for reason in ("eos", "stop", "length"):
        assert codegen.STOP_REASONS[reason]
    assert "truncated" in codegen.STOP_REASONS["length"]
    for word in ("fine-tuning", "LoRA", "RAG", "review"):
        assert word in codegen.WHY_REVIEW


def test_the_stop_line_does_not_repeat_its_reason():
    """The page read "Why it stopped: length: the length limit: max_new_tokens ran out": the explanation beside
    the reason's name no longer restates it."""
    from engine.runtime.generation import Completion
    from tests.factories import synthetic_run

    for reason, explanation in codegen.STOP_REASONS.items():
        assert not explanation.lower().startswith(("the length limit", reason)), explanation
    closed = "```python\ndef f():\n    return 1\n```\nThis"
    run = synthetic_run("m", "fp32", 0.1, 0.01)
    done = codegen.review(Completion("Write f.", closed, closed, (1,), "length", run), "instruct")
    shown = f"{done.stop_reason}: {done.stop_explanation}"  # as ui.lab_view draws it
    assert "length: the length limit" not in shown and "max_new_tokens ran out" in shown


def test_generate_code_complete_mode_on_tiny_model(tiny_lm):
    result = codegen.generate_code(tiny_lm, codegen.DEFAULT_PROMPT, max_new_tokens=8)
    assert result.mode == "complete"
    assert result.code.startswith(codegen.DEFAULT_PROMPT)  # the code under review includes the prompt
    assert result.stop_reason in ("eos", "stop", "length")
    assert result.stop_explanation == codegen.STOP_REASONS[result.stop_reason]
    assert result.lint.available
    assert result.completion.measurement.output_tokens <= 8


def test_generate_code_passes_stop_sequences_and_keeps_the_prompt(tiny_lm, monkeypatch):
    from engine.runtime import generation

    real = generation.generate

    def fake(lm, prompt, cfg, **kw):
        c = real(lm, prompt, cfg, **kw)
        assert cfg.stop == ("\ndef ",) and cfg.include_prompt
        return c

    monkeypatch.setattr(generation, "generate", fake)
    result = codegen.generate_code(tiny_lm, "x = 1\n", max_new_tokens=4, stop=("\ndef ",))
    assert result.code.startswith("x = 1")


def test_generate_code_validates(tiny_lm):
    with pytest.raises(InvalidParameterError, match="mode"):
        codegen.generate_code(tiny_lm, "x", mode="run")
    with pytest.raises(InvalidParameterError, match="max_new_tokens"):
        codegen.generate_code(tiny_lm, "x", max_new_tokens=0)


@pytest.mark.slow
def test_bundled_model_writes_parseable_code_when_asked(smol_lm):
    result = codegen.generate_code(smol_lm, codegen.DEFAULT_INSTRUCTION, mode="instruct", max_new_tokens=96)
    assert "def " in result.code
    assert result.lint.available
    assert result.stop_reason in ("eos", "length")


def test_repeated_lint_findings_collapse_into_one_row():
    """A model that repeats a line gets one row per finding with its lines, not ten rows."""
    code = "import os\n" + "print(undefined_name)\n" * 3
    report = codegen.lint(code)
    rows = codegen.collapse_findings(report.findings)
    f821 = [r for r in rows if r["code"] == "F821"]
    assert len(f821) == 1 and f821[0]["count"] == 3 and f821[0]["lines"] == "2:7, 3:7, 4:7"
    assert len(rows) == len({(f.code, f.message) for f in report.findings})


def test_a_reply_cut_after_its_code_block_says_the_code_is_whole():
    """The presenter's walk: 'Why it stopped: length ... the code may end mid-statement' above a complete block; the
    limit had cut the prose after it."""
    from engine.runtime.generation import Completion
    from tests.factories import synthetic_run

    def reply(text: str) -> Completion:
        return Completion("Write f.", text, text, (1,), "length", synthetic_run("m", "fp32", 0.1, 0.01))

    closed = "Here it is:\n```python\ndef f():\n    return 1\n```\nThis function returns"
    done = codegen.review(reply(closed), "instruct")
    assert done.code == "def f():\n    return 1\n" and "code above is whole" in done.stop_explanation
    cut = codegen.review(reply("```python\ndef f():\n    return"), "instruct")
    assert cut.stop_explanation == codegen.STOP_REASONS["length"] and "mid-statement" in cut.stop_explanation
    assert codegen.block_closed(closed) and not codegen.block_closed("```python\ndef f():")
