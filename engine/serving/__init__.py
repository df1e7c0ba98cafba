"""An OpenAI-compatible HTTP server over the engine's shared in-flight scheduler.

Modules: protocol (request parsing and validation into GenerationConfig; OpenAI response shapes),
metrics (Prometheus text format with prometheus-client), app (the FastAPI application), runner (uvicorn, in a
thread for tests and benchmarks or in the foreground for `python -m engine serve`).

The API follows OpenAI's Completions and Chat Completions references (https://platform.openai.com/docs/api-reference)
and the extensions vLLM accepts (`top_k`, `repetition_penalty`, `ignore_eos`), so clients and load generators
written for vLLM, TGI or SGLang speak to it unchanged.
"""
