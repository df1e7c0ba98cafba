#!/usr/bin/env bash
# Create .venv-aiperf: AIPerf (NVIDIA's serving benchmark, GenAI-Perf's successor) in a side environment, to
# cross-check `python -m engine loadgen` against a peer tool on the same server (bench/serving.py --peer aiperf).
# aiperf 0.13.0 brings its own pydantic-settings, pyzmq, dash, kubernetes_asyncio and friends; see make_peer_env.sh.
#
#   bash scripts/make_aiperf_env.sh                   # creates ./.venv-aiperf on top of ./.venv
#   BASE_VENV=/work/main/.venv bash scripts/make_aiperf_env.sh
set -euo pipefail
exec bash "$(dirname "$0")/make_peer_env.sh" "${AIPERF_ENV:-.venv-aiperf}" "aiperf==0.13.0" aiperf
