"""Former home of the parameter check and the hub client, split by concern (kept so older imports work):
the meta-device count is engine.arch, the config.json client engine.hub_config."""

from engine.arch import MetaCount, ParamCheck, check_params, meta_count, meta_model
from engine.arch import config_of_spec as hf_config_of
from engine.hub_config import config_from_hub, spec_from_hub

__all__ = [
    "MetaCount",
    "ParamCheck",
    "check_params",
    "config_from_hub",
    "hf_config_of",
    "meta_count",
    "meta_model",
    "spec_from_hub",
]
