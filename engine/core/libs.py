"""Libraries the engine imports only when a run needs them.

transformers imports hqq at its first cache import whenever hqq is installed (transformers.cache_utils:
`if is_hqq_available(): from hqq.core.quantize import Quantizer`), and hqq's module applies `torch.compile` at
import, which loads torch._dynamo: about 4 s of every process that touches a cache (measured here: importing
engine.batching.kv took 7.2 s, 3.1-3.5 s with hqq deferred). The lab needs hqq for one thing, the HQQ backend of the
KV-cache lever (engine.levers.kvquant), which calls `hqq_quantizer()` before it builds that cache.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from typing import Any

_hidden: dict[str, Callable[..., bool]] = {}  # transformers' own is_hqq_available, while it is hidden


def defer_hqq() -> None:
    """Make transformers' first cache import skip hqq (a no-op where transformers or hqq is absent, or where
    transformers' caches are already imported)."""
    if _hidden or "transformers.cache_utils" in sys.modules:
        return
    if importlib.util.find_spec("transformers") is None or importlib.util.find_spec("hqq") is None:
        return
    import transformers.utils as utils
    import transformers.utils.import_utils as import_utils

    original = import_utils.is_hqq_available
    _hidden["is_hqq_available"] = original

    def hidden(*args: Any, **kwargs: Any) -> bool:
        return False

    utils.is_hqq_available = import_utils.is_hqq_available = hidden


def hqq_quantizer() -> None:
    """Give transformers its hqq back (idempotent): the answer of is_hqq_available and the Quantizer its cache
    module would have imported."""
    original = _hidden.pop("is_hqq_available", None)
    if original is None:
        return
    import transformers.cache_utils as cache_utils
    import transformers.utils as utils
    import transformers.utils.import_utils as import_utils
    from hqq.core.quantize import Quantizer

    utils.is_hqq_available = import_utils.is_hqq_available = cache_utils.is_hqq_available = original
    cache_utils.HQQQuantizer = Quantizer
