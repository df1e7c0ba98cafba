"""`python -m engine speculate`: prompt lookup decoding and assisted generation against plain greedy, on
input-grounded and open-ended workloads (acceptance, tokens per target forward, speedup, Leviathan et al.)."""

from __future__ import annotations

import dataclasses

from engine import models
from engine.calc.format import number
from engine.levers import speculative as S

HELP = "speculative decoding (prompt lookup, draft model) measured against plain greedy on two workloads"


def add_arguments(parser) -> None:
    parser.add_argument(
        "--model", default=models.DEFAULT_MODEL, help=f"target model (default {models.DEFAULT_MODEL})"
    )
    parser.add_argument("--dtype", default="fp32", help="fp32, bf16 or fp16 (fp16 on CUDA only)")
    parser.add_argument("--device", default="auto", help="auto, cpu or cuda")
    parser.add_argument(
        "--methods", default=",".join(S.METHODS), help=f"comma-separated: {', '.join(S.METHODS)}"
    )
    parser.add_argument(
        "--workloads", default=",".join(S.WORKLOADS), help=f"comma-separated: {', '.join(S.WORKLOADS)}"
    )
    parser.add_argument(
        "--draft",
        default=S.DEFAULT_DRAFT,
        help="draft model: layers:N (the target's first N layers), bf16 (a bf16 copy) or a model "
        "name with the same tokenizer (e.g. gpt-neo-125m for gpt-neo-1.3b, hub)",
    )
    parser.add_argument(
        "--draft-length",
        type=int,
        default=S.DEFAULT_DRAFT_LENGTH,
        help=f"tokens drafted per target forward, gamma (1..{S.MAX_DRAFT})",
    )
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--runs", type=int, default=3, help="timed runs (3+ gives a 95%% interval)")


def rows(report: S.SpecReport) -> list[dict]:
    return [
        {"model": report.model, "device": report.device, **dataclasses.asdict(r), "verdict": S.verdict(r)}
        for r in report.rows
    ]


def run(args) -> list[dict]:
    S.check_draft_length(args.draft_length)  # fail before loading anything
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    workloads = [w.strip() for w in args.workloads.split(",") if w.strip()]
    for m in methods:
        if m not in S.METHODS:
            from engine.errors import InvalidParameterError

            raise InvalidParameterError(f"unknown method {m!r}; choose from {', '.join(S.METHODS)}")
    lm = models.load_model(args.model, dtype=args.dtype, device=args.device)
    report = S.run_speculate(
        lm,
        methods,
        workloads,
        draft=args.draft,
        draft_length=args.draft_length,
        max_new_tokens=args.max_new_tokens,
        runs=args.runs,
    )
    return rows(report)


def _f(x, spec: str) -> str:
    return number(x, spec, missing="-")


def format_text(entries: list[dict]) -> str:
    lines = [
        f"{'method':<15}{'workload':<16}{'alpha':>7}{'tok/fwd':>9}{'speedup':>9}{'95% CI':>13}{'expected':>10}"
        f"{'c':>6}{'same':>6}"
    ]
    for e in entries:
        ci = e["speedup_ci"]
        lines.append(
            f"{e['method']:<15}{e['workload']:<16}{_f(e['acceptance_rate'], '.2f'):>7}"
            f"{_f(e['tokens_per_target_forward'], '.2f'):>9}{_f(e['speedup_vs_plain'], '.2f'):>9}"
            f"{(f'{ci[0]:.2f}-{ci[1]:.2f}' if ci else '-'):>13}{_f(e['expected_speedup'], '.2f'):>10}"
            f"{_f(e['cost_ratio'], '.2f'):>6}{e['identical_to_greedy']!s:>6}"
        )
    lines += ["", *[f"- {e['verdict']}" for e in entries]]
    return "\n".join(lines)
