"""`python -m engine fewshot`: few-shot accuracy for k = 0, 1, 2, 4, 8 on a labelled set, by label
log-likelihood (the harness way). Also runnable as `python -m engine.commands.fewshot`."""

from __future__ import annotations

from engine.core.errors import InvalidParameterError
from engine.lab import fewshot
from engine.runtime import models

HELP = "few-shot classification accuracy vs k on the shipped (or a CSV) labelled set, with confusion matrices"


def add_arguments(parser) -> None:
    models.ModelArgs.add_arguments(parser)
    parser.add_argument(
        "--csv",
        default=None,
        help=f"a CSV with text,label columns (default: the shipped '{fewshot.DEFAULT_SET}' set)",
    )
    FS = fewshot.FewShotSpec
    parser.add_argument(  # repeatable (--k 0 --k 4), where the spec's other tuples are comma lists
        "--k",
        dest="ks",
        type=int,
        action="append",
        default=None,
        help=f"a k to measure; repeatable (default {' '.join(map(str, FS.default('ks')))}; "
        f"from {', '.join(map(str, FS.choices('ks')))})",
    )
    FS.add_arguments(parser, only=("max_queries", "seed"))


def spec_of(args) -> fewshot.FewShotSpec:
    """The validated FewShotSpec from the flags: refused before any model loads, in the page's sentences."""
    ks = tuple(args.ks) if args.ks else fewshot.FewShotSpec.default("ks")
    return fewshot.FewShotSpec.from_args(args, ks=ks)


def run(args) -> dict:
    spec = spec_of(args)
    if args.csv:
        try:
            with open(args.csv, "rb") as f:
                raw = f.read(fewshot.MAX_CSV_BYTES + 1)
        except OSError as exc:
            raise InvalidParameterError(
                f"cannot read {args.csv}: {exc.strerror}; give the path of a CSV file"
            ) from None
        data = fewshot.parse_csv(raw, name=args.csv)
    else:
        data = fewshot.load_shipped()
    lm = models.ModelArgs.from_args(args).load()
    results = fewshot.accuracy_by_k(lm, data, spec.ks, seed=spec.seed, max_queries=spec.max_queries)
    return {
        "model": lm.name,
        "dtype": lm.dtype,
        "device": lm.device,
        "dataset": data.name,
        "labels": list(data.labels),
        "majority_baseline": fewshot.majority_baseline(data, spec.max_queries),
        "results": [
            {
                "k": r.k,
                "accuracy": r.accuracy,
                "correct": r.correct,
                "total": r.total,
                "confusion": [list(row) for row in r.confusion],
                "mean_prompt_tokens": r.mean_prompt_tokens,
                "runtime_s": r.runtime_s,
            }
            for r in results
        ],
    }


def format_text(out: dict) -> str:
    lines = [
        f"{out['model']} [{out['dtype']}, {out['device']}] on '{out['dataset']}' "
        f"(majority baseline {out['majority_baseline']:.0%}); confusion rows = true {out['labels']}"
    ]
    for r in out["results"]:
        lines.append(
            f"  k={r['k']:<2} accuracy {r['accuracy']:.1%} ({r['correct']}/{r['total']})  confusion {r['confusion']}  "
            f"~{r['mean_prompt_tokens']:.0f} prompt tokens, {r['runtime_s']:.1f} s"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    import argparse
    import json
    import sys

    from engine.core.errors import EngineError
    from engine.core.jsonsafe import to_jsonable

    parser = argparse.ArgumentParser(prog="python -m engine.commands.fewshot", description=HELP)
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    add_arguments(parser)
    ns = parser.parse_args()
    try:
        result = run(ns)
    except EngineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    print(json.dumps(to_jsonable(result), indent=2) if ns.json else format_text(result))
