"""Inference Lab's engine: loading, generation, measurement, calculators. No Streamlit below this line."""

from engine.core import libs as _libs

_libs.defer_hqq()  # transformers would import hqq (and torch._dynamo) at its first cache import: ~4 s a process
