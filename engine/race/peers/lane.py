"""One peer lane inside the race worker: check, convert (cached; vLLM loads the folder itself), load, then the
same work as vanilla.

Same work: the race's prompts rendered and tokenized by the model's own HF tokenizer exactly as vanilla's
generate() does (chat template when the race uses it), greedy decoding, the race's max new tokens, the same
warm-up and timed runs on the first prompt, the same EOS ids, TTFT/TPOT from engine.runtime.measurement's
summarize_steps, tokens counted as ids of that tokenizer, and bits per byte on the same documents.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from engine.race import quality
from engine.race.peers import base, cache
from engine.runtime.chat import chat_prompt_ids, user_turn


def _eos_ids(folder: Path) -> set[int]:
    """The EOS ids generate() stops on: generation_config.json's, else config.json's (as transformers)."""
    for name in ("generation_config.json", "config.json"):
        path = folder / name
        if path.is_file():
            eos = json.loads(path.read_text(encoding="utf-8")).get("eos_token_id")
            if eos is not None:
                return set(eos if isinstance(eos, list) else [eos])
    return set()


def prompt_ids(tokenizer, prompt: str, chat: bool) -> list[int]:
    """As engine.runtime.prompt.encode_prompt renders and encodes one prompt (chat template without special tokens
    added twice; a raw prompt with the tokenizer's own special tokens)."""
    if chat:
        return chat_prompt_ids(tokenizer, user_turn(prompt))[1]
    return list(tokenizer(prompt, add_special_tokens=True)["input_ids"])


def _measure(request_t: float, out: base.Generated) -> dict[str, Any]:
    from engine.runtime.metrics import summarize_steps

    n = len(out.ids)
    ttft, tpot, latency = summarize_steps(request_t, out.step_times, [n])
    return {
        "latency_s": latency,
        "ttft_s": ttft,
        "tpot_s": tpot,
        "output_tokens": n,
        "tokens_per_s": n / latency if latency > 0 else float("nan"),
        "peak_memory_bytes": quality.peak_rss_bytes(),
        "peak_memory_kind": "process RSS peak (CPU)",
    }


def run(job: dict, contender: dict, result: dict[str, Any], notes: list[str]) -> None:
    """Fill `result` (the worker's reply) for a peer contender; raises base.Skip-like errors via status."""
    from transformers import AutoTokenizer

    name = contender["peer"]
    b = base.backend(name)
    # a converting engine's lane names its weight format; vLLM runs the race's own precision
    precision = contender.get("precision") or (
        b.race_precision(job) if hasattr(b, "race_precision") else "fp32"
    )
    ok, version, why = base.availability(name)
    result.update(engine=name, engine_version=version, precision=precision, device="cpu", dtype=precision)
    if not ok:
        result.update(status="skipped" if version is None else "failed", reason=why)
        return
    if precision not in b.precisions:
        result.update(
            status="skipped",
            reason=f"{b.label} {version} has no {precision} lane here (offered: {', '.join(b.precisions)})",
        )
        return
    known = cache.family(job["model"])
    why = b.unsupported(*known) if known else ""
    if why:
        result.update(status="skipped", reason=f"not supported by {b.label} {version}: {why}")
        return
    try:
        source = cache.source_for(job["model"])
    except cache.Unsupported as exc:
        result.update(status="skipped", reason=f"not supported by {b.label} {version}: {exc}")
        return
    why = b.unsupported(source.architecture, source.model_type)
    if why:
        result.update(status="skipped", reason=f"not supported by {b.label} {version}: {why}")
        return
    result["architecture"] = source.architecture
    want_cuda = str(job.get("race_device") or job.get("device") or "cpu").startswith("cuda")
    cuda_why = b.cuda_note() if want_cuda else ""
    device = "cuda" if want_cuda and not cuda_why else "cpu"
    if cuda_why:
        notes.append(cuda_why)
    result["device"] = device
    if getattr(b, "converts", True):
        target = cache.target_dir(name, version or "unknown", source, precision)
        try:
            record, now = cache.ensure_converted(target, lambda tmp: b.convert(source.folder, tmp, precision))
        except (
            RuntimeError
        ) as exc:  # a converter that names the family as unsupported: a clear lane, not a crash
            if "support" not in str(exc).lower():
                raise
            result.update(status="skipped", reason=f"not supported by {b.label} {version}: {exc}")
            return
        result.update(
            conversion_s=record.get("seconds"),
            converted_now=now,
            conversion_dir=str(target),
            conversion_command=" ".join(record.get("command", [])),
        )
        notes.append(
            f"converted {'now' if now else 'earlier (cached)'} in {record.get('seconds', 0):.1f} s "
            f"from {source.folder.name} by {b.label}'s own converter"
        )
    else:  # the engine loads the HF folder itself
        target = source.folder
        notes.append(f"{b.label} loads {source.folder.name} as it is (no conversion)")
    tokenizer = AutoTokenizer.from_pretrained(source.folder)
    eos = _eos_ids(source.folder)
    chat = bool(tokenizer.chat_template) if job.get("chat_template") is None else bool(job["chat_template"])
    prompts = [prompt_ids(tokenizer, p, chat) for p in job["prompts"]]
    t0 = time.perf_counter()
    session = b.open(target, precision, base.threads(), device, eos, tokenizer)
    result["load_s"] = time.perf_counter() - t0
    kv = getattr(
        session, "kv_row", None
    )  # an engine that logs its KV pool (vLLM): logged beside the calculator
    if kv:
        result["kv_cache"] = kv
        notes.append(
            f"{kv['logged']['line']} (the calculator: {kv.get('predicted', {}).get('kv_cache_tokens')} tokens)"
        )
    max_new = int(job["max_new_tokens"])
    for _ in range(int(job.get("warmup", 1))):
        t0 = time.perf_counter()
        session.generate(prompts[0], max_new)
        result["warmup_s"].append(time.perf_counter() - t0)
    timed = []
    for _ in range(int(job["runs"])):
        request_t = time.perf_counter()
        out = session.generate(prompts[0], max_new)
        result["runs"].append(_measure(request_t, out))
        timed.append(out.ids)
    result["deterministic"] = all(ids == timed[0] for ids in timed)
    result["token_ids"] = [timed[0]] + [session.generate(p, max_new).ids for p in prompts[1:]]
    result["texts"] = [tokenizer.decode(ids, skip_special_tokens=True) for ids in result["token_ids"]]
    if b.logprobs_note:
        result["bits_per_byte_note"] = b.logprobs_note
    else:
        try:
            bpb = quality.bits_per_byte(session.token_logprobs, tokenizer)
            if bpb is None:
                result["bits_per_byte_note"] = f"not exposed by {b.label} {version} for a whole text"
            result["bits_per_byte"] = bpb
        except Exception as exc:  # speed still counts when scoring fails
            result["bits_per_byte_note"] = f"not measured: {type(exc).__name__}: {exc}"
    result["status"] = "ran"
