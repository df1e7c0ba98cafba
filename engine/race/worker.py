"""One race contender in its own process: `python -m engine.race.worker` reads a JSON job on stdin and
writes one JSON result on stdout (everything else the libraries print goes to stderr).

Own process per contender, so GPU memory starts clean, a crash or a hung kernel cannot take the race
down, and each contender can run under its own interpreter (DeepSpeed's kernel injection needs an older
transformers than the dashboard's; see scripts/make_ds_env.sh). The worker imports only the engine's
loading and generation code, so it also runs under transformers 4.42.4 (engine/race/compat.py).

Job: {"model", "dtype", "device", "contender": Contender.to_dict(), "prompts": [...], "max_new_tokens",
      "runs", "warmup", "chat_template", "reference_text"}
Result: {"status": "ran"|"failed"|"skipped", "reason", "notes", "kernel_inject", "deepspeed_mode",
      "runs": [Measurement dicts], "warmup_s", "token_ids": per prompt, "perplexity", "bits_per_byte",
      "peak_rss_bytes" (VmHWM: the worker process's own peak resident set), "versions", ...}; a peer engine's lane
      (contender["peer"]) adds "engine_version", "precision", "conversion_s", "converted_now"
      (engine/race/peers/lane.py).
Chapter 4.3.4's setup is `_deepspeed`: init_inference(model, dtype=fp16, replace_with_kernel_inject=True,
tensor_parallel={"tp_size": 1}) on CUDA.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
import traceback
from importlib import metadata
from typing import Any

# DeepSpeed's kernel injection for GPT-Neo was last tested with transformers 4.42.4 (DeepSpeed PR #6002);
# transformers 4.45 moved GPT-Neo to Cache objects, which the injected attention does not return.
DS_LAST_KNOWN_GOOD_TRANSFORMERS = (4, 42, 4)
GPT_NEO_CACHE_CHANGE = (4, 45)


class Skip(Exception):
    """The contender's feature does not apply to this model or machine; the reason is the message."""


def _version_tuple(v: str) -> tuple[int, ...]:
    parts = []
    for p in v.split("+")[0].split(".")[:3]:
        digits = "".join(ch for ch in p if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


def _pkg_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def versions() -> dict[str, Any]:
    import torch

    out: dict[str, Any] = {
        "python": sys.version.split()[0],
        "executable": sys.executable,
        "torch": torch.__version__,
        "transformers": _pkg_version("transformers"),
        "deepspeed": _pkg_version("deepspeed"),
        "cuda": torch.version.cuda,
    }
    if torch.cuda.is_available():
        out["gpu"] = torch.cuda.get_device_name(0)
    return out


def kernel_inject_compatibility(architecture: str, transformers_version: str) -> str:
    """Empty when the versions are ones DeepSpeed tested; otherwise what to expect and why."""
    tv = _version_tuple(transformers_version)
    if tv <= DS_LAST_KNOWN_GOOD_TRANSFORMERS:
        return ""
    pinned = ".".join(map(str, DS_LAST_KNOWN_GOOD_TRANSFORMERS))
    if "GPTNeo" in architecture and tv >= GPT_NEO_CACHE_CHANGE:
        return (
            f"version mismatch: transformers {transformers_version} is newer than DeepSpeed kernel injection "
            f"supports for GPT-Neo. DeepSpeed's own tests pin transformers {pinned}; GPT-Neo moved to Cache "
            "objects in 4.45, and DeepSpeed's injected attention still returns (key, value) tuples with its own "
            "cache, so generate() is expected to fail. Run this contender under the pinned environment "
            "(bash scripts/make_ds_env.sh, then the `deepspeed-pinned` contender). Trying anyway."
        )
    return (
        f"transformers {transformers_version} is newer than DeepSpeed's last tested {pinned} for kernel "
        "injection; it may fail or fall back. Trying anyway."
    )


def _resolve_dtype(token: str, chosen: str, device: str) -> str:
    if token == "chosen":
        return chosen
    if token == "half":
        return "fp16" if device.startswith("cuda") else "bf16"
    return token


def _distributed_env() -> None:
    """What the `deepspeed` launcher sets for a single process. A notebook (the chapter's setting) has no
    launcher, so it sets these by hand; this worker is not launched by `deepspeed` either."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for key, value in {
        "RANK": "0",
        "LOCAL_RANK": "0",
        "WORLD_SIZE": "1",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
    }.items():
        os.environ.setdefault(key, value)


def _deepspeed(lm, contender: dict, result: dict, notes: list[str]):
    """Wrap lm.model with deepspeed.init_inference; return the module to generate with."""
    from engine.runtime import hardware

    try:
        import deepspeed
    except Exception as exc:  # deepspeed fails to import in many ways (missing ops, CUDA mismatch)
        raise RuntimeError(
            f"deepspeed is not importable in {sys.executable}: {type(exc).__name__}: {exc}"
        ) from exc
    _distributed_env()
    on_cuda = lm.device.startswith("cuda")
    inject = bool(contender.get("kernel_inject")) and on_cuda
    if contender.get("kernel_inject") and not on_cuda:
        result["kernel_inject_reason"] = (
            "no CUDA GPU: DeepSpeed's inference kernels are CUDA kernels (replace_with_kernel_inject=True on the "
            "CPU raises 'This op had not been implemented on CPU backend'), so this ran DeepSpeed's pass-through "
            "engine (replace_with_kernel_inject=False): the same PyTorch modules, wrapped, no kernels replaced"
        )
        result["deepspeed_mode"] = "pass-through (CPU)"
    if inject:
        warning = kernel_inject_compatibility(lm.architecture, _pkg_version("transformers") or "0")
        if warning:
            notes.append(warning)
            result["version_mismatch"] = warning
        result["deepspeed_mode"] = "kernel injection"
    dtype = next(lm.model.parameters()).dtype
    t0 = time.perf_counter()
    engine = deepspeed.init_inference(
        lm.model,
        dtype=dtype,
        replace_with_kernel_inject=inject,
        tensor_parallel={"tp_size": 1},
        max_out_tokens=2048,  # counts prompt + output; DeepSpeed's default 1024 is below GPT-Neo's context
    )
    result["init_s"] = time.perf_counter() - t0
    result["kernel_inject"] = inject
    hardware.sync(lm.device)
    return engine.module


def _share_weights(lm, path: str, notes: list[str]) -> None:
    """Random-weight presets: the first contender saves its weights, the others load them. Seeding gives
    identical weights only within one transformers version (4.42.4 initialises GPT-Neo differently), and
    the quality comparison needs every contender to start from the very same weights."""
    from pathlib import Path

    from safetensors.torch import load_model, save_model

    target = Path(path)
    if target.is_file():
        load_model(lm.model, str(target), strict=True, device=str(next(lm.model.parameters()).device))
        notes.append("random weights loaded from the race's shared file (the same weights as vanilla)")
        return
    tmp = target.with_name(f".{target.name}.{os.getpid()}")
    save_model(lm.model, str(tmp))  # handles the tied embedding/lm_head pair
    tmp.replace(target)


def _apply_features(lm, contender: dict, notes: list[str]) -> None:
    model = lm.model
    attn = contender.get("attn_implementation")
    if attn:
        supported = attn == "eager" or bool(getattr(model, f"_supports_{attn}", False))
        if not supported:
            raise Skip(
                f"{lm.architecture} does not support {attn} attention in this transformers "
                f"(its class sets _supports_{attn} = False)"
            )
        if not hasattr(model, "set_attn_implementation"):
            raise Skip(
                "choosing the attention implementation after loading needs transformers 5 in this worker"
            )
        if getattr(model.config, "_attn_implementation", None) == attn:
            notes.append(
                f"the model already loads with {attn} attention (transformers' default where supported), "
                "so this contender runs vanilla's path; compare with `eager` to see what it buys"
            )
        model.set_attn_implementation(attn)
    if contender.get("compiled_decode"):
        from engine.core.errors import CompileUnavailableError
        from engine.runtime import generation

        try:
            decoder = generation.compiled_decoder(lm)
        except CompileUnavailableError as exc:  # a compiled lane that ran eagerly would be mislabelled
            raise Skip(str(exc)) from None
        notes.append(
            f"compiled decode (torch.compile mode {decoder.status.mode!r}): the first warm-up run compiles the "
            "step; its time is in warmup_s and compile_s, not in the timed runs"
        )
    if contender.get("static_cache"):
        if not getattr(model, "_can_compile_fullgraph", False):
            raise Skip(
                f"{lm.architecture} does not support a static cache with torch.compile in this transformers "
                "(its class sets _can_compile_fullgraph = False; GPT-Neo's code says it needs a hybrid cache "
                "for its local-attention layers)"
            )
        model.generation_config.cache_implementation = "static"
        if not contender.get("compile"):
            model.generation_config.disable_compile = True
        elif not lm.device.startswith("cuda"):
            notes.append(
                "static cache only: transformers compiles a static-cache forward automatically on GPUs only; on "
                "this CPU torch.compile took ~53 s and gave no gain when tried here, so it is not run"
            )
        else:
            notes.append("torch.compile happens during the warm-up runs (their times are in warmup_s)")


def _check_decode(cfg, completion, result: dict) -> None:
    """A compiled lane must have decoded compiled: a compile that failed mid-race ends the lane with its reason
    rather than timing eager steps under the compiled label."""
    if not cfg.compile:
        return
    if completion.decode != "compiled":
        raise RuntimeError(f"the step did not run compiled: {completion.decode_note}")
    if completion.compile_s:
        result["compile_s"] = result.get("compile_s", 0.0) + completion.compile_s


def run_job(job: dict) -> dict:
    import torch

    from engine.race import compat, quality
    from engine.runtime import models, settings
    from engine.runtime.run import run as run_once

    notes: list[str] = []
    contender = job["contender"]
    result: dict[str, Any] = {
        "name": contender["name"],
        "status": "failed",
        "reason": "",
        "notes": notes,
        "kernel_inject": False,
        "deepspeed_mode": None,
        "versions": versions(),
        "runs": [],
        "warmup_s": [],
        "token_ids": [],
        "perplexity": None,
        "python": sys.executable,
    }
    if contender.get("peer"):
        return _peer_job(job, contender, result, notes)
    phase = "setup"
    try:
        compat.install(notes)
        device = models.resolve_device(job.get("device", "auto"))
        chosen = models.resolve_dtype(job.get("dtype", "auto"), device)
        dtype = _resolve_dtype(contender.get("dtype", "chosen"), chosen, device)
        phase = "load"
        lm = models.load_model(job["model"], dtype=dtype, device=device)
        want = torch.float32 if dtype == "fp32" else (torch.float16 if dtype == "fp16" else torch.bfloat16)
        if next(lm.model.parameters()).dtype != want:  # transformers 4.x ignores the `dtype=` keyword
            lm.model.to(want)
            notes.append(f"cast to {dtype} after loading (this transformers ignored the dtype keyword)")
        if job.get("weights_file"):
            _share_weights(lm, job["weights_file"], notes)
        result.update(
            device=lm.device,
            dtype=lm.dtype,
            architecture=lm.architecture,
            load_s=lm.load_s,
            params=lm.params,
            attn_implementation=getattr(lm.model.config, "_attn_implementation", None),
        )
        notes.extend(lm.notes)
        if device.startswith("cuda"):
            result["weights_memory_bytes"] = int(torch.cuda.memory_allocated())
        phase = "configure"
        _apply_features(lm, contender, notes)
        if contender.get("deepspeed"):
            phase = "deepspeed.init_inference"
            lm.model = _deepspeed(lm, contender, result, notes)
        result["attn_implementation"] = getattr(lm.model.config, "_attn_implementation", None)
        cfg = settings.GenerationConfig(
            max_new_tokens=int(job["max_new_tokens"]),
            use_cache=bool(contender.get("use_cache", True)),
            compile=bool(contender.get("compiled_decode")),
            chat_template=lm.has_chat_template
            if job.get("chat_template") is None
            else bool(job["chat_template"]),
        )
        prompts = list(job["prompts"])
        phase = "warm-up"
        for _ in range(int(job.get("warmup", 1))):
            t0 = time.perf_counter()
            warm = run_once(lm, prompts[0], cfg, source="race", record=False).completion
            result["warmup_s"].append(time.perf_counter() - t0)
            _check_decode(cfg, warm, result)
        if result.get("compile_s"):  # the lane's one-time setup, as init_inference is DeepSpeed's
            result["init_s"] = result["compile_s"]
            notes.append(f"the warm-up compiled the decode step in {result['compile_s']:.1f} s")
        phase = "timed runs"
        timed_ids = []
        for _ in range(int(job["runs"])):
            c = run_once(lm, prompts[0], cfg, source="race", record=False).completion
            _check_decode(cfg, c, result)
            result["runs"].append(c.measurement.to_dict())
            timed_ids.append(list(c.token_ids))
        result["deterministic"] = all(ids == timed_ids[0] for ids in timed_ids)
        phase = "quality"
        others = [] if job.get("timing_only") else prompts[1:]  # the baseline re-check needs only timings
        result["token_ids"] = [timed_ids[0]] + [
            list(run_once(lm, p, cfg, source="race", record=False).completion.token_ids) for p in others
        ]
        result["texts"] = [lm.tokenizer.decode(ids, skip_special_tokens=True) for ids in result["token_ids"]]
        if not job.get("timing_only"):  # the baseline re-check needs only timings
            try:
                result["perplexity"] = quality.perplexity(
                    lm.model, lm.tokenizer, job.get("reference_text") or quality.REFERENCE_TEXT
                )
            except Exception as exc:  # an injected model may not support a plain forward; speed still counts
                result["perplexity_error"] = f"{type(exc).__name__}: {exc}"
            try:
                result["bits_per_byte"] = quality.bits_per_byte(
                    quality.torch_logprobs(lm.model), lm.tokenizer
                )
            except Exception as exc:  # as above
                result["bits_per_byte_note"] = f"not measured: {type(exc).__name__}: {exc}"
        result["status"] = "ran"
        if result.get("kernel_inject_reason"):
            result["reason"] = result["kernel_inject_reason"]
    except Skip as exc:
        result.update(status="skipped", reason=str(exc))
    except Exception as exc:  # reported, with the phase, so the race goes on and the page can explain it
        mismatch = result.get("version_mismatch", "")
        result.update(
            status="failed",
            reason=f"{phase} failed: {type(exc).__name__}: {exc}" + (f" [{mismatch}]" if mismatch else ""),
            traceback=traceback.format_exc(limit=12)[-4000:],
        )
    result["peak_rss_bytes"] = quality.peak_rss_bytes()
    return result


def _peer_job(job: dict, contender: dict, result: dict, notes: list[str]) -> dict:
    """A peer engine's lane (engine/race/peers/lane.py), reported like the others."""
    from engine.race import quality
    from engine.race.peers import lane

    try:
        lane.run(job, contender, result, notes)
    except Exception as exc:  # conversion or engine failure: the lane says why, the race goes on
        result.update(
            status="failed",
            reason=f"{contender['peer']}: {type(exc).__name__}: {exc}",
            traceback=traceback.format_exc(limit=12)[-4000:],
        )
    result["peak_rss_bytes"] = quality.peak_rss_bytes()
    return result


def _die_with_parent() -> None:
    """The runner starts each worker in its own session (so a timeout can kill the worker's whole group);
    the price is that killing the runner (an outer `timeout`, a closed page) would leave the worker running,
    holding the GPU. On Linux, ask the kernel to SIGKILL this worker when its parent dies."""
    parent = os.environ.get("INFERENCE_LAB_RACE_PARENT")
    if not sys.platform.startswith("linux") or not parent:
        return
    import ctypes
    import signal

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if str(os.getppid()) != parent:  # the parent died before the prctl call took effect
        os._exit(1)


def main() -> int:
    _die_with_parent()
    # Keep stdout for the one JSON line: libraries (DeepSpeed especially) print to fd 1 freely.
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    t0 = time.perf_counter()
    try:
        job = json.loads(sys.stdin.read())
    except json.JSONDecodeError as exc:
        out.write(json.dumps({"status": "failed", "reason": f"bad job JSON: {exc}"}) + "\n")
        return 2
    result = run_job(job)
    result["wall_s"] = time.perf_counter() - t0
    out.write(json.dumps(result, default=str) + "\n")  # NaN is written as NaN; the runner reads it back
    out.flush()
    sys.stderr.flush()
    # The result is out: skip the interpreter's teardown, where a library's threads can abort the process (vLLM's
    # CPU engine: "terminate called without an active exception", SIGABRT) and the runner would read a crash.
    os._exit(0)


if __name__ == "__main__":
    raise SystemExit(main())
