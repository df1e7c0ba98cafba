#!/usr/bin/env bash
# Create .venv-guidellm: GuideLLM (the vLLM project's serving benchmark) in a side environment, to cross-check
# `python -m engine loadgen` against a peer tool on the same server (bench/serving.py --peer guidellm).
# guidellm 0.8.1 pins click~=8.4.0, httpx<1 and pulls sanic, uvloop and friends; see make_peer_env.sh.
#
#   bash scripts/make_guidellm_env.sh                 # creates ./.venv-guidellm on top of ./.venv
#   BASE_VENV=/work/main/.venv bash scripts/make_guidellm_env.sh
set -euo pipefail
exec bash "$(dirname "$0")/make_peer_env.sh" "${GUIDELLM_ENV:-.venv-guidellm}" "guidellm==0.8.1" guidellm
