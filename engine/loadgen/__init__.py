"""A load generator for any OpenAI-compatible endpoint (the engine's own server, vLLM, TGI, SGLang, a cloud API).

It knows nothing of the engine: it speaks HTTP to a base URL with an optional key, and takes its statistics from
engine.core.stats (the project's one percentile definition). Modules: workload (prompts, output lengths, arrivals;
seeded), client (one streamed request, timed on the client), metrics (one function derives every figure of a run,
as vLLM's benchmark_serving `calculate_metrics` does), sweep (rates or concurrencies, and the knee under SLOs).

Metric definitions (vLLM `bench serve`): TTFT = request sent -> first content chunk; TPOT = (E2E - TTFT) /
(output tokens - 1); ITL = gaps between successive content chunks, pooled over requests; E2E = request sent ->
last byte; goodput = requests meeting every SLO per second of the run.
"""
