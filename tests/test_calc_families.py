"""Coverage: for thirteen decoder families, the calculator's count equals the real transformers class built on
the meta device, per component, with hand-written config dicts (no downloads); the formula alone is exact too.

Configs are small (2 layers, hidden 64) so each meta build takes milliseconds; the flags that change the
layout (biases, MQA/GQA, gated MLP, parallel block, tied head, experts) are the families' real ones.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from engine.calc.hf_config import spec_from_hf_config
from engine.calc.memory import count_params, kv_bytes_per_token
from engine.calc.specs import ARCH_TRAITS

pytest.importorskip("transformers")
from engine.arch.meta import exact_spec, meta_count

SMALL = {"vocab_size": 100, "max_position_embeddings": 64}
FAMILIES = {
    "gpt2": {
        "model_type": "gpt2",
        "n_embd": 64,
        "n_layer": 2,
        "n_head": 4,
        "vocab_size": 100,
        "n_positions": 64,
    },
    "gpt_neo": {
        "model_type": "gpt_neo",
        "hidden_size": 64,
        "num_layers": 2,
        "num_heads": 4,
        "attention_types": [[["global", "local"], 1]],
        "window_size": 16,
        **SMALL,
    },
    "gpt_neox": {
        "model_type": "gpt_neox",
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "intermediate_size": 256,
        **SMALL,
    },
    "gptj": {
        "model_type": "gptj",
        "n_embd": 64,
        "n_layer": 2,
        "n_head": 4,
        "rotary_dim": 8,
        "vocab_size": 100,
        "n_positions": 64,
    },
    "opt": {
        "model_type": "opt",
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "ffn_dim": 256,
        **SMALL,
    },
    "opt-350m-style": {
        "model_type": "opt",
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "ffn_dim": 256,
        "word_embed_proj_dim": 32,
        "do_layer_norm_before": False,
        **SMALL,
    },
    "bloom": {"model_type": "bloom", "hidden_size": 64, "n_layer": 2, "n_head": 4, "vocab_size": 100},
    "falcon-7b-style": {
        "model_type": "falcon",
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "multi_query": True,
        "parallel_attn": True,
        "bias": False,
        "new_decoder_architecture": False,
        **SMALL,
    },
    "falcon-40b-style": {
        "model_type": "falcon",
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 8,
        "num_kv_heads": 2,
        "new_decoder_architecture": True,
        "parallel_attn": True,
        "bias": False,
        **SMALL,
    },
    "phi": {
        "model_type": "phi",
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "intermediate_size": 256,
        "partial_rotary_factor": 0.5,
        **SMALL,
    },
    "llama": {
        "model_type": "llama",
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "intermediate_size": 160,
        "tie_word_embeddings": False,
        **SMALL,
    },
    "mistral": {
        "model_type": "mistral",
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "intermediate_size": 160,
        "sliding_window": 32,
        **SMALL,
    },
    "mixtral": {
        "model_type": "mixtral",
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "intermediate_size": 160,
        "num_local_experts": 4,
        "num_experts_per_tok": 2,
        **SMALL,
    },
    "qwen2": {
        "model_type": "qwen2",
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "intermediate_size": 160,
        "tie_word_embeddings": True,
        **SMALL,
    },
    "gemma": {
        "model_type": "gemma",
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 1,
        "head_dim": 32,
        "intermediate_size": 160,
        **SMALL,
    },
    # Mixture-of-experts families beyond Mixtral, latent attention, q/k norms, four norms, sinks, multimodal
    "qwen3": {
        "model_type": "qwen3",
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "intermediate_size": 128,
        **SMALL,
    },
    "qwen2_moe": {  # a shared expert with its gate; experts every second layer
        "model_type": "qwen2_moe",
        "hidden_size": 64,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "intermediate_size": 128,
        "moe_intermediate_size": 32,
        "shared_expert_intermediate_size": 96,
        "num_experts": 8,
        "num_experts_per_tok": 2,
        "decoder_sparse_step": 2,
        **SMALL,
    },
    "qwen3_moe": {  # a dense first layer (mlp_only_layers)
        "model_type": "qwen3_moe",
        "hidden_size": 64,
        "num_hidden_layers": 3,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "intermediate_size": 128,
        "moe_intermediate_size": 32,
        "num_experts": 8,
        "num_experts_per_tok": 2,
        "mlp_only_layers": [0],
        **SMALL,
    },
    "deepseek_v2": {  # latent attention without a q latent, two shared experts, one dense layer
        "model_type": "deepseek_v2",
        "hidden_size": 64,
        "num_hidden_layers": 3,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "intermediate_size": 128,
        "moe_intermediate_size": 32,
        "n_routed_experts": 8,
        "n_shared_experts": 2,
        "num_experts_per_tok": 2,
        "first_k_dense_replace": 1,
        "kv_lora_rank": 16,
        "q_lora_rank": None,  # as DeepSeek-V2-Lite's config.json (the class's default is 1536)
        "qk_nope_head_dim": 16,
        "qk_rope_head_dim": 8,
        "v_head_dim": 16,
        "topk_method": "greedy",
        **SMALL,
    },
    "deepseek_v3": {  # a q latent too
        "model_type": "deepseek_v3",
        "hidden_size": 64,
        "num_hidden_layers": 3,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "intermediate_size": 128,
        "moe_intermediate_size": 32,
        "n_routed_experts": 8,
        "n_shared_experts": 1,
        "num_experts_per_tok": 2,
        "first_k_dense_replace": 1,
        "kv_lora_rank": 16,
        "q_lora_rank": 24,
        "qk_nope_head_dim": 16,
        "qk_rope_head_dim": 8,
        "v_head_dim": 16,
        "n_group": 2,
        "topk_group": 1,
        **SMALL,
    },
    "gpt_oss": {  # biased experts and router, attention sinks, alternating sliding window
        "model_type": "gpt_oss",
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "intermediate_size": 32,
        "num_local_experts": 4,
        "num_experts_per_tok": 2,
        "sliding_window": 16,
        "layer_types": ["sliding_attention", "full_attention"],
        **SMALL,
    },
    "gemma2": {  # four norms per layer, tied head by default
        "model_type": "gemma2",
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "intermediate_size": 128,
        **SMALL,
    },
    "phi3": {
        "model_type": "phi3",
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "intermediate_size": 128,
        "pad_token_id": 0,
        "bos_token_id": 0,
        "eos_token_id": 0,
        **SMALL,
    },
}
MULTIMODAL = {  # a LLaVA config: its language model sits in text_config
    "model_type": "llava",
    "text_config": {
        "model_type": "llama",
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "intermediate_size": 128,
        **SMALL,
    },
    "vision_config": {"model_type": "clip_vision_model"},
}
COMPONENTS = ("embedding", "attention", "mlp", "router", "norms", "head", "total", "active")


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_formula_equals_the_meta_device_count_per_component(family):
    cfg = FAMILIES[family]
    real = meta_count(cfg).components
    formula = count_params(spec_from_hf_config(cfg))
    assert real is not None and real.total == meta_count(cfg).params
    for part in COMPONENTS:
        assert getattr(formula, part) == getattr(real, part), (family, part, formula, real)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_calculator_uses_the_meta_device_count(family):
    spec = exact_spec(FAMILIES[family])
    assert spec.exact is not None and spec.exact.source == "meta device"
    assert spec.exact.total == meta_count(FAMILIES[family]).params
    assert not any("formula" in a for a in spec.assumptions)


@pytest.mark.parametrize("family", ["gpt_neox", "gptj", "opt", "bloom", "falcon-7b-style", "phi", "gpt2"])
def test_a_llama_layout_would_be_wrong_for_the_other_families(family):
    """A gated Llama MLP applied to these families over-counts them."""
    spec = spec_from_hf_config(FAMILIES[family])
    wrong = replace(spec, layout=ARCH_TRAITS["llama"])
    assert count_params(wrong).total != meta_count(FAMILIES[family]).params


def test_kv_bytes_per_token_follow_the_attention_layout():
    falcon = spec_from_hf_config(FAMILIES["falcon-7b-style"])  # multi-query: one KV head
    assert falcon.n_kv_head == 1 and kv_bytes_per_token(falcon, "fp16") == 2 * 2 * 1 * 16 * 2
    gemma = spec_from_hf_config(FAMILIES["gemma"])  # explicit head_dim 32, not hidden / heads = 16
    assert kv_bytes_per_token(gemma, "fp16") == 2 * 2 * 1 * 32 * 2
    mistral = spec_from_hf_config(FAMILIES["mistral"])
    assert mistral.n_kv_head == 2 and mistral.window_evicts and mistral.sliding_window == 32
    hybrid = spec_from_hf_config(
        {
            **FAMILIES["llama"],
            "num_hidden_layers": 4,
            "layer_types": ["full_attention", "mamba", "sliding_attention", "mamba"],
            "sliding_window": 8,
        }
    )
    assert hybrid.kv_layers == 2 and hybrid.window_layers == 1
    assert kv_bytes_per_token(hybrid, "fp16") == 2 * 2 * 2 * 16 * 2
    assert any("mamba" in a for a in hybrid.assumptions)


MIXTRAL_8X7B = {  # mistralai/Mixtral-8x7B-v0.1 config.json
    "_name_or_path": "mistralai/Mixtral-8x7B-v0.1",
    "architectures": ["MixtralForCausalLM"],
    "model_type": "mixtral",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "max_position_embeddings": 32768,
    "num_attention_heads": 32,
    "num_experts_per_tok": 2,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "num_local_experts": 8,
    "rms_norm_eps": 1e-05,
    "rope_theta": 1e6,
    "sliding_window": None,
    "tie_word_embeddings": False,
    "vocab_size": 32000,
}


def test_mixtral_8x7b_is_46_7b_total_and_12_9b_active():
    """Mistral AI's announcement: 46.7B total parameters, 12.9B used per token."""
    spec = exact_spec(MIXTRAL_8X7B)
    assert spec.name == "mistralai/Mixtral-8x7B-v0.1"
    assert spec.exact.total == count_params(spec).total == 46_702_792_704
    assert spec.exact.active == count_params(spec).active == 12_879_925_248
    assert round(spec.exact.total / 1e9, 1) == 46.7 and round(spec.exact.active / 1e9, 1) == 12.9


def test_moe_memory_uses_total_and_decode_reads_active_plus_router():
    from engine.calc.report import Inputs, estimate
    from engine.calc.specs import gpu_spec

    spec = exact_spec(MIXTRAL_8X7B)
    est = estimate(
        spec, gpu_spec("a100-80gb"), Inputs(dtype="fp16", batch=1, prompt_tokens=128, output_tokens=128)
    )
    assert est.memory.weights_bytes == 2 * 46_702_792_704
    assert not est.fits  # 93 GB of fp16 weights on one 80 GB GPU
    step = est.timing.decode_step
    # batch 1 reads 2 of 8 experts: the active parameters (router included) minus the embedding table (a
    # lookup, not a matmul) and the norms (elementwise, left out of the operators)
    active_matmul = 12_879_925_248 - 32000 * 4096 - (2 * 32 + 1) * 4096
    assert step.weights_bytes == pytest.approx(2 * active_matmul, rel=1e-12)
    assert spec.exact.router == 32 * 4096 * 8


def test_a_multimodal_config_is_read_through_its_text_config():
    spec = exact_spec(MULTIMODAL)
    text = exact_spec(MULTIMODAL["text_config"])
    assert spec.exact is not None and spec.exact.total == text.exact.total
    assert spec.n_layer == 2 and spec.hidden == 64
    assert any("text_config" in a and "vision" in a for a in spec.assumptions)


def test_latent_attention_caches_one_latent_per_token_per_layer():
    """DeepSeek-V2's cache (as vLLM stores it): kv_lora_rank + qk_rope_head_dim values per token per layer."""
    spec = spec_from_hf_config(FAMILIES["deepseek_v2"])
    assert spec.is_mla and spec.head_dim == 24 and spec.v_head_dim == 16
    assert kv_bytes_per_token(spec, "bf16") == 3 * (16 + 8) * 2
    assert any("latent" in n for n in spec.notes)


@pytest.mark.parametrize("family", ["qwen2_moe", "qwen3_moe", "deepseek_v2", "deepseek_v3", "gpt_oss"])
def test_moe_experts_are_quantized_and_routing_applied(family):
    """Every expert is a quantized matrix (not left 16-bit), and a decode step at batch 1 reads k experts."""
    from engine.calc.memory import weights_bytes
    from engine.calc.roofline import operators

    spec = exact_spec(FAMILIES[family])
    bf16 = weights_bytes(spec, "bf16")
    int8 = weights_bytes(spec, "bf16", "int8")
    experts = spec.expert_layers * spec.n_experts * count_params(replace(spec, n_experts=1)).mlp
    assert spec.expert_layers and int8 < bf16 - 0.3 * experts  # the experts' bytes roughly halved
    ops = operators(spec, phase="decode", seq_len=8, batch=1, dtype="bf16")
    expert_ops = [o for o in ops if o.name.startswith("expert ")]
    assert expert_ops and all(o.count == spec.expert_layers for o in expert_ops)
    one = next(o for o in expert_ops if o.name.endswith("down"))
    assert one.weight_bytes == pytest.approx(
        spec.experts_per_token * spec.intermediate * 64 * 2
        + (spec.experts_per_token * 64 * 2 if spec.traits.mlp_bias else 0)
    )
