"""Serving engines beside the lab's own: each backend starts, health-checks and stops another engine's
OpenAI-compatible server from its side environment, with the flags translated from the same ServeSpec
(engine/serving/runner.py), and reads that engine's own figures back. Knows processes and HTTP, never Streamlit.

- `vllm`: vLLM's OpenAI server from `.venv-vllm` (scripts/make_vllm_env.sh): engine/backends/vllm.py finds the
  environment and translates the flags, vllm_server.py runs the process, vllm_records.py reads vLLM's own figures
  back into this machine's track record.
"""
