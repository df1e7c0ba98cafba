"""Pure calculators: memory, KV cache, timing, cost, paged KV and roofline. Standard library only, typed,
base units (bytes, FLOPs, seconds, dollars) in frozen dataclasses; formatting lives in engine.calc.format.

Modules: specs (ModelSpec, GPUSpec, loaders), memory, timing, cost, paged, roofline, report (all in one call).
"""

from engine.calc.report import Estimate, Inputs, estimate
from engine.calc.specs import GPUSpec, ModelSpec, gpu_spec, load_gpu_catalog, load_model_presets, model_preset

__all__ = [
    "Estimate",
    "GPUSpec",
    "Inputs",
    "ModelSpec",
    "estimate",
    "gpu_spec",
    "load_gpu_catalog",
    "load_model_presets",
    "model_preset",
]
