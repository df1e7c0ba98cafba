"""The article's levers, applied and measured: weight quantization, KV-cache quantization, speculative decoding."""
