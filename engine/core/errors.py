"""Typed failures of the engine. Every message says what went wrong *and what to do about it*,
because pages show it verbatim with `st.error` and the CLI prints it as the reason it exited."""

from __future__ import annotations


class EngineError(Exception):
    """Base class: a failure the user can act on. The loaded model stays usable after any of these."""


class InvalidParameterError(EngineError, ValueError):
    """A value outside its allowed range (max_new_tokens <= 0, temperature NaN, an empty prompt...)."""


class UnknownModelError(EngineError, ValueError):
    """A model name that is neither a preset, an allowed local folder, nor a hub id."""


class HubUnreachableError(EngineError):
    """The Hugging Face hub cannot be reached and the model is not in the local cache."""


class ModelLoadError(EngineError):
    """The files were found but transformers could not build a model from them."""


class PathNotAllowedError(EngineError, PermissionError):
    """A local path outside the folders the server allows models to be read from."""


class PromptTooLongError(EngineError, ValueError):
    """Prompt plus requested new tokens exceed the model's context window."""


class OutOfMemoryError(EngineError, MemoryError):
    """The device ran out of memory; the message says what to lower."""


class DependencyMissingError(EngineError, ImportError):
    """An optional package (deepspeed, lm-eval, NVML) is absent or broken; the page explains the skip."""


class CancelledError(EngineError):
    """The caller (a closed browser session, a stop button) cancelled the request."""


class CompileUnavailableError(EngineError):
    """torch.compile cannot build the decode step here (an unsupported model family, no C++ compiler, a failed
    compile); the message says why and what ran instead."""
