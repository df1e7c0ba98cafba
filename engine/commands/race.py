"""`python -m engine race`: the latency race (chapter 4.3.4) from the shell, one worker process per contender."""

from __future__ import annotations

from pathlib import Path

from engine.calc.format import number
from engine.core.errors import InvalidParameterError
from engine.race import contenders, runner, serialise

HELP = (
    "race vanilla generation against peer engines (OpenVINO GenAI, ONNX Runtime GenAI, CTranslate2, vLLM), DeepSpeed, "
    "KV cache off, precisions, SDPA and static cache + compile"
)


def add_arguments(parser) -> None:
    runner.RaceSpec.add_arguments(
        parser
    )  # --model, --dtype, --device, --runs, --warmup, --max-new-tokens, --timeout
    parser.add_argument(
        "--contenders",
        default=",".join(contenders.DEFAULT_CONTENDERS),
        help=f"comma-separated, from: {', '.join(contenders.CONTENDERS)} (vanilla, the baseline, is always run)",
    )
    parser.add_argument(
        "--no-baseline-recheck",
        action="store_true",
        help="do not re-run vanilla at the end (the re-run flags a machine whose speed drifted)",
    )
    parser.add_argument(
        "--chat",
        choices=("auto", "on", "off"),
        default="auto",
        help="wrap the prompts in the model's chat template (auto: when the model has one)",
    )
    parser.add_argument(
        "--python",
        action="append",
        default=[],
        metavar="NAME=PATH",
        help="run contender NAME's worker with interpreter PATH (repeatable), e.g. deepspeed=.venv-ds/bin/python",
    )
    parser.add_argument(
        "--save",
        nargs="?",
        const=str(runner.RESULTS_DIR),
        default=None,
        metavar="DIR",
        help=f"also write the result JSON under DIR (default {runner.RESULTS_DIR})",
    )
    parser.add_argument("--csv", metavar="FILE", help="also write the per-contender summary as CSV")


def _pythons(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise InvalidParameterError(f"--python takes NAME=PATH, got {item!r}")
        out[name.strip()] = path.strip()
    return out


def run(args) -> dict:
    chosen = contenders.resolve(args.contenders.split(","), _pythons(args.python))
    spec = runner.RaceSpec.from_args(
        args,
        contenders=tuple(chosen),
        chat_template={"auto": None, "on": True, "off": False}[args.chat],
        recheck_baseline=not args.no_baseline_recheck,
    )

    def checkpoint(partial: runner.RaceResult) -> None:
        runner.save(partial, Path(args.save))  # the same file each time (named by the fixed start time)

    result = runner.run_race(spec, checkpoint=checkpoint if args.save else None)
    out = serialise.to_dict(result)
    if args.save:
        out["saved_to"] = str(runner.save(result, Path(args.save)))
    if args.csv:
        Path(args.csv).write_text(serialise.to_csv(result), encoding="utf-8")
    out["summary"] = result.summary_rows()
    return out


def format_text(out: dict) -> str:
    hw = out["hardware"]
    load = out.get("load_avg_start")
    lines = [
        f"Race: {out['model']} on {hw.get('gpu') or hw.get('cpu')}, {out['runs']} timed runs (+{out['warmup']} warm-up), "
        f"{out['max_new_tokens']} new tokens, greedy"
        + (f"; load average at start {load[0]:.2f}" if load else ""),
        f"{'contender':<24}{'status':<9}{'engine':<28}{'latency ms':>11}{'TTFT ms':>9}{'TPOT ms':>9}{'tok/s':>9}"
        f"{'speedup [95% CI]':>22}{'match':>7}{'div@':>6}{'bpb':>7}{'RSS MB':>8}",
    ]
    for r in out["contenders"]:
        sp = (
            "n/a"
            if r["speedup_vs_vanilla"] is None
            else (
                f"{r['speedup_vs_vanilla']:.2f}x"
                + (
                    f" [{number(r['speedup_low'], '.2f')}-{number(r['speedup_high'], '.2f')}]"
                    if r.get("interval_shown")
                    else " (no CI)"
                )
            )
        )
        div = (
            "none"
            if r["status"] == "ran" and r["first_divergence_token"] is None
            else number(r["first_divergence_token"], "d")
        )
        engine = f"{r.get('engine') or '?'} {r.get('engine_version') or ''}".strip()
        lines.append(
            f"{r['name']:<24}{r['status']:<9}{engine[:27]:<28}{number(r['latency_s_median'], '.1f', 1e3):>11}"
            f"{number(r['ttft_s_median'], '.1f', 1e3):>9}{number(r['tpot_s_median'], '.2f', 1e3):>9}"
            f"{number(r['tokens_per_s_median'], '.1f'):>9} {sp:>21}{number(r['exact_match_rate'], '.0%'):>7}{div:>6}"
            f"{number(r.get('bits_per_byte'), '.3f'):>7}"
            f"{number(r.get('peak_rss_bytes') if r['status'] == 'ran' else None, '.0f', 1e-6):>8}"
        )
    for r in out["contenders"]:
        if r.get("verdict"):
            lines.append(f"- {r['name']}: {r['verdict']}")
        for n in r["notes"]:
            if not n.startswith("random weights"):
                lines.append(f"  {r['name']}: {n}")
    if out.get("winner"):
        lines.append(f"winner: {out['winner']}")
    lines.extend(f"note: {n}" for n in out["notes"])
    if out.get("saved_to"):
        lines.append(f"saved: {out['saved_to']}")
    return "\n".join(lines)
