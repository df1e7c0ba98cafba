"""`python -m engine generate`: one measured generation, the playground from the shell.

Its flags come from the specs: the model selection from engine.runtime.models.ModelArgs, the decoding settings
(--max-new-tokens, --sample, --compile, ...) from engine.runtime.settings.GenerationConfig, so a default lives in
one line of the engine."""

from __future__ import annotations

import sys
import threading

from engine.runtime import generation
from engine.runtime import run as one_run
from engine.runtime.models import ModelArgs
from engine.runtime.prompt import clean_prompt
from engine.runtime.settings import GenerationConfig, parse_stops

HELP = "load a model and generate for one prompt (or several with repeated --prompt), with measurements"
COMPILE_TICK_S = 5.0  # how often a compile under way prints its elapsed time on stderr


def add_arguments(parser) -> None:
    ModelArgs.add_arguments(parser)
    GenerationConfig.add_arguments(parser)
    parser.add_argument("--prompt", action="append", required=True, help="the prompt; repeat for a batch")
    parser.add_argument(
        "--stop",
        action="append",
        default=[],
        help="stop sequence; repeatable (one flag per sequence, so a sequence may hold a comma)",
    )
    parser.add_argument("--stream", action="store_true", help="print tokens as they are made (single prompt)")


def run(args) -> dict | list[dict]:
    cfg = GenerationConfig.from_args(
        args, stop=parse_stops(args.stop)
    )  # bad values fail before seconds of loading
    for p in args.prompt:
        clean_prompt(p)
    lm = ModelArgs.from_args(args).load()
    watcher = _CompileWatcher(lm) if cfg.compile else None
    try:
        if len(args.prompt) == 1 and args.stream and not args.json:
            live = one_run.start(lm, args.prompt[0], cfg, source="cli")
            for event in live.events():
                print(event.text, end="", flush=True)
            print(file=sys.stdout)
            report = live.report()
        else:
            report = one_run.run(lm, args.prompt, cfg, source="cli")
        note = one_run.ended_at_once_note(report, lm, cfg, "--chat")
        if len(args.prompt) == 1:
            return {**_row(report.completion, cfg), "note": note}
        return {
            "batch": report.measurement,
            **_decode_fields(report),
            "note": note,
            "completions": [_row(c, cfg) for c in report.completions],
        }
    finally:
        if watcher is not None:
            watcher.stop()


class _CompileWatcher:
    """While the compiled step compiles (the first --compile run per model: tens of seconds on a CPU), say so on
    stderr every few seconds, so a silent terminal is not taken for a hang."""

    def __init__(self, lm) -> None:
        self._lm, self._done = lm, threading.Event()
        self._thread = threading.Thread(target=self._watch, name="compile-watcher", daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while not self._done.wait(COMPILE_TICK_S):
            status = generation.compile_status(self._lm)
            if status and status["state"] == "compiling" and status["compiling_s"] is not None:
                print(
                    f"compiling the decode step ({status['compiling_shape']}): {status['compiling_s']:.0f} s so far",
                    file=sys.stderr,
                    flush=True,
                )

    def stop(self) -> None:
        self._done.set()
        self._thread.join(1.0)


def _decode_fields(c) -> dict:
    """How the decode ran; with a compile, its seconds (left out of the timings above) and the run's real wall."""
    return {"decode": c.decode, "decode_note": c.decode_note, "compile_s": c.compile_s, "wall_s": c.wall_s}


def _row(c: generation.Completion, cfg: GenerationConfig) -> dict:
    m = c.measurement
    return {
        "text": c.shown(cfg.include_prompt),
        "completion": c.text,
        "stop_reason": c.stop_reason,
        "prompt_tokens": m.prompt_tokens,
        "output_tokens": m.output_tokens,
        "ttft_s": m.ttft_s,
        "tpot_s": m.tpot_s,
        "latency_s": m.latency_s,
        "tokens_per_s": m.tokens_per_s,
        "peak_memory_bytes": m.peak_memory_bytes,
        "model": m.model,
        "dtype": m.dtype,
        "device": m.device,
        **_decode_fields(c),
    }


def decode_line(r: dict) -> str:
    """How the decode steps ran, in words: compiled (and what the compile cost this run) or eager and why."""
    if r.get("decode") == "compiled":
        paid, wall = r.get("compile_s"), r.get("wall_s")
        return "compiled decode" + (
            f" (this run compiled the step first: {paid:.1f} s, once per model and shape, left out of the figures "
            f"above; the run's wall time with it {wall:.2f} s)"
            if paid and wall
            else " (already compiled: no wait)"
        )
    return r.get("decode_note") or ""


def format_text(result) -> str:
    rows = result.get("completions", [result])
    out = []
    for r in rows:
        out.append(r["text"])
        out.append(
            f"-- {r['output_tokens']} tokens ({r['stop_reason']}), TTFT {r['ttft_s'] * 1e3:.0f} ms, "
            f"TPOT {(r['tpot_s'] or float('nan')) * 1e3:.1f} ms, latency {r['latency_s']:.2f} s, "
            f"{r['tokens_per_s']:.1f} tok/s"
        )
    line = decode_line(rows[0])
    if line:
        out.append(f"-- {line}")
    if result.get("note"):
        out.append(f"-- {result['note']}")
    return "\n".join(out)
