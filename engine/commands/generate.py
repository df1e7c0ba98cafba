"""`python -m engine generate`: one measured generation, the playground from the shell."""

from __future__ import annotations

import sys

from engine.runtime import generation, models
from engine.runtime.generation import GenerationConfig

HELP = "load a model and generate for one prompt (or several with repeated --prompt), with measurements"
_D = GenerationConfig()  # the one source of defaults, shared with the playground's widgets


def add_arguments(parser) -> None:
    parser.add_argument(
        "--model",
        default=models.DEFAULT_MODEL,
        help=f"preset, hub id or local folder (default {models.DEFAULT_MODEL})",
    )
    parser.add_argument("--dtype", default="auto", help="auto, fp32, bf16 or fp16 (fp16 on CUDA only)")
    parser.add_argument("--device", default="auto", help="auto, cpu or cuda")
    parser.add_argument("--prompt", action="append", required=True, help="the prompt; repeat for a batch")
    parser.add_argument("--max-new-tokens", type=int, default=_D.max_new_tokens)
    parser.add_argument("--sample", action="store_true", help="sample instead of greedy decoding")
    parser.add_argument("--temperature", type=float, default=_D.temperature)
    parser.add_argument("--top-p", type=float, default=_D.top_p)
    parser.add_argument("--top-k", type=int, default=_D.top_k)
    parser.add_argument("--repetition-penalty", type=float, default=_D.repetition_penalty)
    parser.add_argument("--seed", type=int, default=_D.seed)
    parser.add_argument("--stop", action="append", default=[], help="stop sequence; repeatable")
    parser.add_argument("--no-cache", action="store_true", help="generate without the KV cache")
    parser.add_argument("--chat", action="store_true", help="wrap the prompt in the model's chat template")
    parser.add_argument("--include-prompt", action="store_true", help="print the prompt with the completion")
    parser.add_argument("--stream", action="store_true", help="print tokens as they are made (single prompt)")


def run(args) -> dict | list[dict]:
    cfg = GenerationConfig(
        max_new_tokens=args.max_new_tokens,
        do_sample=args.sample,
        temperature=args.temperature,
        top_p=args.top_p,
        top_k=args.top_k,
        repetition_penalty=args.repetition_penalty,
        seed=args.seed,
        stop=tuple(args.stop),
        use_cache=not args.no_cache,
        chat_template=args.chat,
        include_prompt=args.include_prompt,
    ).validate()  # reject bad values before spending seconds on loading
    for p in args.prompt:
        generation.clean_prompt(p)
    lm = models.load_model(args.model, dtype=args.dtype, device=args.device)
    if len(args.prompt) == 1:
        if args.stream and not args.json:
            s = generation.stream(lm, args.prompt[0], cfg)
            for chunk in s:
                print(chunk, end="", flush=True)
            print(file=sys.stdout)
            completion = s.completion
        else:
            completion = generation.generate(lm, args.prompt[0], cfg)
        return _row(completion, cfg)
    batch = generation.generate_batch(lm, args.prompt, cfg)
    return {"batch": batch.measurement, "completions": [_row(c, cfg) for c in batch.completions]}


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
    }


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
    return "\n".join(out)
