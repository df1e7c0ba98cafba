"""Libraries the engine imports only when a run needs them.

transformers imports hqq at its first cache import whenever hqq is installed (transformers.cache_utils:
`if is_hqq_available(): from hqq.core.quantize import Quantizer`), and hqq's module applies `torch.compile` at
import, which loads torch._dynamo: about 4 s of every process that touches a cache (measured here: importing
engine.batching.kv took 7.2 s, 3.1-3.5 s with hqq deferred). The lab needs hqq for one thing, the HQQ backend of the
KV-cache lever (engine.levers.kvquant), which calls `hqq_quantizer()` before it builds that cache.

The hiding waits for transformers itself: a process that never imports it (the calculator's commands, the peer
engines' lanes) pays nothing, not even the second that transformers' own helpers take to import.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from collections.abc import Callable
from typing import Any

_IMPORT_UTILS = (
    "transformers.utils.import_utils"  # where is_hqq_available is defined; utils and cache_utils copy it
)
_hidden: dict[str, Callable[..., bool]] = {}  # transformers' own is_hqq_available, while it is hidden


def _not_available(*args: Any, **kwargs: Any) -> bool:
    return False


def _hide(import_utils: Any) -> None:
    """Swap is_hqq_available in the module that defines it, before transformers.utils copies the name."""
    _hidden["is_hqq_available"] = import_utils.is_hqq_available
    import_utils.is_hqq_available = _not_available


class _HideOnLoad(importlib.abc.MetaPathFinder):
    """Finds nothing itself: when transformers imports its import helpers, it lets the usual finder find them and
    runs `_hide` right after the module executes, then leaves sys.meta_path."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name != _IMPORT_UTILS:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module: Any) -> None:
            run(module)
            _hide(module)

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def defer_hqq() -> None:
    """Make transformers' first cache import skip hqq (a no-op where hqq is absent, or where transformers' caches
    are already imported)."""
    if _hidden or "transformers.cache_utils" in sys.modules or importlib.util.find_spec("hqq") is None:
        return
    if (
        _IMPORT_UTILS in sys.modules
    ):  # transformers is imported, its caches are not: hide it in both names now
        import transformers.utils as utils

        _hide(sys.modules[_IMPORT_UTILS])
        utils.is_hqq_available = _not_available
    elif not any(isinstance(f, _HideOnLoad) for f in sys.meta_path):
        sys.meta_path.insert(0, _HideOnLoad())


def hqq_quantizer() -> None:
    """Give transformers its hqq back (idempotent): the answer of is_hqq_available and the Quantizer its cache
    module would have imported."""
    original = _hidden.pop("is_hqq_available", None)
    if original is None:  # not hidden (yet): nothing to give back, and nothing to hide later
        sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _HideOnLoad)]
        return
    import transformers.cache_utils as cache_utils
    import transformers.utils as utils
    import transformers.utils.import_utils as import_utils
    from hqq.core.quantize import Quantizer

    utils.is_hqq_available = import_utils.is_hqq_available = cache_utils.is_hqq_available = original
    cache_utils.HQQQuantizer = Quantizer
