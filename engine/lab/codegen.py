"""Code generation with review aids (chapter 4, section 4.1.3).

A language model writes code the same way it writes prose: it continues the prompt token by token until
it emits end-of-sequence, hits a stop sequence, or runs into the `max_new_tokens` limit - the last is why
the chapter's example output is cut off mid-function. What comes back is a draft for a developer to
review, so two mechanical review aids run on it here:

- a syntax check with `ast.parse` (parsing only: nothing is compiled to bytecode or run);
- ruff, a real linter, run as a subprocess on a temporary file with JSON output (`ruff check
  --output-format json --isolated`), its findings listed as they are.

Generated code is never executed, imported or evaluated by this module or anything that calls it.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from engine.core.errors import InvalidParameterError
from engine.core.spec import Spec, option
from engine.runtime import run
from engine.runtime.generation import Completion
from engine.runtime.models import LoadedModel
from engine.runtime.settings import GenerationConfig

MAX_CODE_CHARS = 100_000
RUFF_TIMEOUT_S = 20.0
# Default rules: pyflakes (F: undefined names, unused imports), pycodestyle errors and warnings (E, W)
# and flake8-bugbear (B: likely bugs). E501 (line length) is left out: it is style, not review.
RUFF_SELECT: tuple[str, ...] = ("E", "F", "W", "B")
RUFF_IGNORE: tuple[str, ...] = ("E501",)

DEFAULT_PROMPT = (
    "def is_palindrome(text: str) -> bool:\n"
    '    """Return True if text reads the same forwards and backwards, ignoring case and spaces."""\n'
)
DEFAULT_INSTRUCTION = "Write a Python function that returns the n-th Fibonacci number."
# Stop at the next top-level definition: the completion of *this* function is what was asked for.
DEFAULT_STOP: tuple[str, ...] = ("\ndef ", "\nclass ", "\nif __name__")

MODES = ("instruct", "complete")


@dataclass(frozen=True)
class CodeSpec(Spec):
    """The code-generation experiment's options: the Code generation tab of page 4, `code_config` and
    `generate_code` take their defaults here. The bounds are what the page offers; the engine functions accept
    any length GenerationConfig does (a test asks for 4 tokens)."""

    mode: str = option(
        "complete",
        "Continue code: the prompt is the start of a Python file, as with GPT-Neo in the chapter. Ask in "
        "words: needs a model with a chat template (the bundled SmolLM2-Instruct has one).",
        choices=MODES,
        label="how to ask",
    )
    max_new_tokens: int = option(
        128,
        "The length limit. Hitting it truncates the code, as in the chapter's example.",
        lo=16,
        hi=512,
        label="max new tokens",
    )
    stop: tuple[str, ...] = option(DEFAULT_STOP, "stop sequences (continue mode only)", cli=False)


STOP_REASONS: dict[str, str] = {
    "eos": "end of sequence: the model emitted its end-of-text token and chose to stop.",
    "stop": "a stop sequence appeared (e.g. the start of the next top-level def); the text is cut before it.",
    "length": "max_new_tokens ran out before the model stopped, so the code may end mid-statement. This is why "
    "the chapter's example output is truncated; raise max new tokens to see more.",
    "cancelled": "the run was stopped before the model finished; the code is what it had made by then.",
}

WHY_REVIEW = (
    "A pretrained model that has not been customized for code predicts text that *looks like* the code it "
    "saw in training (GPT-Neo's Pile includes some GitHub; SmolLM2's data includes some code). Nothing makes "
    "it check that the code runs, is correct, or is safe: it can call functions that do not exist "
    "(hallucinations), miss edge cases, or stop mid-function at the length limit. Small models do this "
    "more. What helps: fine-tuning on code from your own domain, LoRA (fine-tuning a small set of added "
    "low-rank weights, far cheaper than full fine-tuning), and RAG (retrieving your real APIs and "
    "documentation into the prompt). None of those is done on this page: it shows the raw model. "
    "Treat every output as a draft for a developer to review, lint and test."
)


@dataclass(frozen=True)
class SyntaxReport:
    ok: bool
    message: str  # "" when ok
    line: int | None = None
    column: int | None = None


@dataclass(frozen=True)
class LintFinding:
    code: str  # e.g. "F821"; "invalid-syntax" for parse errors ruff reports itself
    message: str
    line: int
    column: int
    name: str = ""
    url: str = ""
    fixable: bool = False


@dataclass(frozen=True)
class LintReport:
    available: bool
    findings: tuple[LintFinding, ...]
    ruff_version: str
    reason: str = ""  # why the lint did not run, when unavailable
    rules: tuple[str, ...] = RUFF_SELECT


@dataclass(frozen=True)
class CodeResult:
    prompt: str
    mode: str  # "complete" (continue the code) | "instruct" (chat template, code taken from the reply)
    code: str  # what is checked: the prompt + completion in complete mode, the fenced block in instruct mode
    completion: Completion
    syntax: SyntaxReport
    lint: LintReport

    @property
    def stop_reason(self) -> str:
        return self.completion.stop_reason

    @property
    def stop_explanation(self) -> str:
        """Why it stopped, and what that did to the code under review: a reply cut by the length limit after its code
        block closed lost only the prose after it."""
        if self.stop_reason == "length" and self.mode == "instruct" and block_closed(self.completion.text):
            return (
                "max_new_tokens ran out after the code block had closed, so the code above is whole; only the "
                "reply's words after it were cut (see the raw output)."
            )
        return STOP_REASONS.get(self.stop_reason, self.stop_reason)


def _validate_code(code: str) -> str:
    if not isinstance(code, str):
        raise InvalidParameterError(f"code must be text, got {type(code).__name__}")
    if len(code) > MAX_CODE_CHARS:
        raise InvalidParameterError(f"the code has {len(code):,} characters; the limit is {MAX_CODE_CHARS:,}")
    return code.replace("\x00", "")


def check_syntax(code: str) -> SyntaxReport:
    """Parse only (`ast.parse` builds a tree; it does not compile to bytecode or run anything)."""
    code = _validate_code(code)
    if not code.strip():
        return SyntaxReport(False, "no code was generated")
    try:
        ast.parse(code, filename="<generated>", mode="exec")
    except SyntaxError as exc:
        return SyntaxReport(False, f"{exc.msg}", exc.lineno, exc.offset)
    except (ValueError, RecursionError, MemoryError) as exc:  # e.g. deeply nested brackets
        return SyntaxReport(False, f"could not parse: {type(exc).__name__}")
    return SyntaxReport(True, "")


def ruff_binary() -> Path | None:
    """The ruff executable: from the ruff package, else beside this Python, else on PATH."""
    try:
        import ruff

        path = Path(ruff.find_ruff_bin())
        if path.is_file():
            return path
    except (ImportError, FileNotFoundError):
        pass
    beside = Path(sys.executable).with_name("ruff")
    if beside.is_file():
        return beside
    found = shutil.which("ruff")
    return Path(found) if found else None


def ruff_version(binary: Path | None = None) -> str:
    binary = binary or ruff_binary()
    if binary is None:
        return ""
    try:
        out = subprocess.run(
            [str(binary), "--version"], capture_output=True, text=True, timeout=RUFF_TIMEOUT_S
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return out.stdout.strip()


def lint(
    code: str, select: tuple[str, ...] = RUFF_SELECT, ignore: tuple[str, ...] = RUFF_IGNORE
) -> LintReport:
    """Run ruff on `code` in a private temporary file; the project's own ruff config is not applied."""
    code = _validate_code(code)
    rule = re.compile(r"^[A-Z]{1,4}[0-9]{0,4}$")
    if any(not rule.match(r) for r in (*select, *ignore)):
        raise InvalidParameterError(
            "ruff rule selectors look like E, F401 or B; got " + ", ".join((*select, *ignore))
        )
    binary = ruff_binary()
    if binary is None:
        return LintReport(
            False, (), "", "ruff is not installed: pip install ruff (the lint is skipped)", select
        )
    with tempfile.TemporaryDirectory(prefix="lab-lint-") as tmp:
        path = Path(tmp) / "generated.py"
        path.write_text(code, encoding="utf-8")
        cmd = [str(binary), "check", "--isolated", "--no-cache", "--exit-zero", "--output-format", "json"]
        cmd += (
            ["--select", ",".join(select)] + (["--ignore", ",".join(ignore)] if ignore else []) + [str(path)]
        )
        try:
            out = subprocess.run(
                cmd,
                capture_output=True,
                text=True,
                timeout=RUFF_TIMEOUT_S,
                cwd=tmp,
                env={**os.environ, "RUFF_NO_CACHE": "true"},
            )
        except subprocess.TimeoutExpired:
            return LintReport(
                False, (), "", f"ruff took longer than {RUFF_TIMEOUT_S:.0f} s and was stopped", select
            )
        except OSError as exc:
            return LintReport(False, (), "", f"ruff could not be started ({exc})", select)
    if out.returncode != 0:
        return LintReport(
            False, (), "", f"ruff failed (exit {out.returncode}): {out.stderr.strip()[:300]}", select
        )
    try:
        raw = json.loads(out.stdout or "[]")
    except json.JSONDecodeError:
        return LintReport(False, (), "", "ruff printed something that is not JSON", select)
    findings = tuple(
        LintFinding(
            code=item.get("code") or item.get("name") or "?",
            message=item.get("message", ""),
            line=int((item.get("location") or {}).get("row") or 0),
            column=int((item.get("location") or {}).get("column") or 0),
            name=item.get("name") or "",
            url=item.get("url") or "",
            fixable=item.get("fix") is not None,
        )
        for item in raw
    )
    findings = tuple(sorted(findings, key=lambda f: (f.line, f.column, f.code)))
    return LintReport(True, findings, ruff_version(binary), "", select)


_FENCE = re.compile(r"```[ \t]*(?:python|py|python3)?[ \t]*\n(.*?)(?:```|\Z)", re.DOTALL | re.IGNORECASE)


def extract_code(reply: str) -> str:
    """The first fenced code block of a chat reply (an unclosed one runs to the end); else the whole reply."""
    match = _FENCE.search(reply)
    return (match.group(1) if match else reply).strip("\n")


def block_closed(reply: str) -> bool:
    """Whether the reply's first fenced code block has its closing fence."""
    match = _FENCE.search(reply)
    return match is not None and match.group(0).rstrip().endswith("```")


def collapse_findings(findings: tuple[LintFinding, ...]) -> list[dict]:
    """One row per (rule, message), with every line it occurs on: a model that repeats a line ten times gets one
    row saying so, not ten identical ones."""
    rows: dict[tuple[str, str], dict] = {}
    for f in findings:
        row = rows.setdefault(
            (f.code, f.message),
            {"code": f.code, "rule": f.name, "message": f.message, "count": 0, "lines": []},
        )
        row["count"] += 1
        row["lines"].append(f"{f.line}:{f.column}")
    return [{**r, "lines": ", ".join(r["lines"])} for r in rows.values()]


def code_config(
    max_new_tokens: int = CodeSpec.default("max_new_tokens"),
    mode: str = CodeSpec.default("mode"),
    stop: tuple[str, ...] = CodeSpec.default("stop"),
) -> GenerationConfig:
    """The generation settings of a code request (greedy; stop sequences only when continuing code)."""
    if mode not in MODES:
        raise InvalidParameterError(f"mode must be 'complete' or 'instruct', got {mode!r}")
    return GenerationConfig(
        max_new_tokens=max_new_tokens,
        stop=tuple(stop) if mode == "complete" else (),
        chat_template=mode == "instruct",
        include_prompt=mode == "complete",
    ).validate()


def review(completion: Completion, mode: str) -> CodeResult:
    """Syntax and lint of a finished code completion (from generate_code, or streamed by the page)."""
    code = completion.prompt + completion.text if mode == "complete" else extract_code(completion.text)
    code = code.rstrip() + "\n"  # a file ends with a newline; without it every result would carry W292
    return CodeResult(
        prompt=completion.prompt,
        mode=mode,
        code=code,
        completion=completion,
        syntax=check_syntax(code),
        lint=lint(code),
    )


def generate_code(
    lm: LoadedModel,
    prompt: str,
    *,
    max_new_tokens: int = CodeSpec.default("max_new_tokens"),
    mode: str = CodeSpec.default("mode"),
    stop: tuple[str, ...] = CodeSpec.default("stop"),
) -> CodeResult:
    """Generate code greedily and review it (syntax + ruff). The code is only ever treated as text.

    mode "complete": the prompt is the start of a Python file (the chapter's way); the code under review is
    the prompt followed by the completion. mode "instruct": the prompt is a request sent through the
    model's chat template; the code under review is the first fenced block of the reply.
    """
    cfg = code_config(max_new_tokens, mode, stop)
    return review(run.run(lm, prompt, cfg, source="lab").completion, mode)
