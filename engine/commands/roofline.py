"""`python -m engine roofline`: every operator's FLOPs, bytes, intensity and bound against a GPU's ridge."""

from __future__ import annotations

from engine.arch.resolve import resolve_gpu, resolve_model_spec
from engine.calc import format as fmt
from engine.calc.hf_config import load_config_file
from engine.calc.roofline import PHASES, RooflineResult, RooflineSpec, analyse, roof_for
from engine.calc.roofline_words import diagnose
from engine.calc.specs import PRECISIONS, THIS_MACHINE

HELP = "roofline of a model's operators (prefill or decode) on a GPU, with a diagnosis"


def add_arguments(parser) -> None:
    parser.add_argument(
        "--gpu", required=True, help=f"a catalog key (python -m engine gpus) or {THIS_MACHINE}"
    )
    src = parser.add_mutually_exclusive_group(required=True)
    src.add_argument("--model", help="a calculator preset or an engine preset")
    src.add_argument("--config", help="path of a Hugging Face config.json")
    parser.add_argument("--phase", required=True, choices=PHASES)
    # the page's starting shape (RooflineSpec's defaults), so the command and the page agree without flags
    seq, batch = RooflineSpec.default("seq_len"), RooflineSpec.default("batch")
    parser.add_argument(
        "--seq-len",
        type=int,
        default=seq,
        help=f"prompt length (prefill) or cached tokens (decode) (default: {seq})",
    )
    parser.add_argument("--batch", type=int, default=batch, help=f"sequences together (default: {batch})")
    parser.add_argument("--dtype", default="fp16", choices=PRECISIONS)


def run(args) -> RooflineResult | dict:
    spec = load_config_file(args.config) if args.config else resolve_model_spec(args.model)
    from engine.calibration import this_machine_gpu  # this machine's roofs: its calibration, else measured

    gpu = resolve_gpu(args.gpu, this_machine=this_machine_gpu)
    result = analyse(
        spec,
        roof_for(gpu, args.dtype),
        phase=args.phase,
        seq_len=args.seq_len,
        batch=args.batch,
        dtype=args.dtype,
        gpu_name=gpu.name,
    )
    return {**result.__dict__, "diagnosis": diagnose(result)}


def format_text(r: dict) -> str:
    lines = [
        f"{r['model']} {r['phase']} on {r['gpu']}: s={r['seq_len']}, batch {r['batch']}, {r['dtype']}; "
        f"ridge {fmt.ridge(r['ridge_ops_per_byte'])} ops/byte",
        f"{'operator':<20}{'FLOPs':>14}{'bytes':>12}{'ops/byte':>10}  bound     time",
    ]
    for op in r["operators"]:
        lines.append(
            f"{op.name:<20}{fmt.flops(op.flops):>14}{fmt.gb(op.bytes):>12}{op.intensity:>10.2f}  "
            f"{op.bound:<8}{fmt.seconds(op.attainable_s):>10}"
        )
    lines.append(f"total attainable time {fmt.seconds(r['attainable_s'])}")
    lines += [f"- {d}" for d in r["diagnosis"]]
    return "\n".join(lines)
