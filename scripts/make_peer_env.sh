#!/usr/bin/env bash
# Create a side environment for a peer serving benchmark (GuideLLM, AIPerf) used to cross-check
# `python -m engine loadgen` on the same server (bench/serving.py --peer). Called by make_guidellm_env.sh and
# make_aiperf_env.sh:
#
#   bash scripts/make_peer_env.sh ENV_DIR PIP_REQUIREMENT IMPORT_NAME     # e.g. .venv-aiperf aiperf==0.13.0 aiperf
#   BASE_VENV=/work/main/.venv bash scripts/make_peer_env.sh ...
#
# Why a second environment: the peers pin their own click, httpx, pydantic and friends, which would move the main
# environment's pins. They also need transformers (for a tokenizer) and GuideLLM needs torch; instead of a second
# multi-GB copy, the side venv sees the base venv's packages through a .pth file placed *after* its own
# site-packages, so its own pins win and torch/transformers come from the base venv.
set -euo pipefail
cd "$(dirname "$0")/.."
ENV_DIR=$1
REQUIREMENT=$2
IMPORT_NAME=$3
BASE_VENV=${BASE_VENV:-.venv}
BASE_PY="$BASE_VENV/bin/python"
[ -x "$BASE_PY" ] || { echo "no base venv at $BASE_VENV (run scripts/install.sh first)" >&2; exit 1; }
BASE_SITE=$("$BASE_PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
"$BASE_PY" -m venv --without-pip "$ENV_DIR" 2>/dev/null || "$BASE_PY" -m venv "$ENV_DIR"
SITE=$("$ENV_DIR/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "$BASE_SITE" > "$SITE/zz_base_venv.pth"   # appended last: the side venv's own packages win
"$ENV_DIR/bin/python" -m pip --version >/dev/null 2>&1 || "$ENV_DIR/bin/python" -m ensurepip -q
"$ENV_DIR/bin/python" -m pip install -q "$REQUIREMENT"
"$ENV_DIR/bin/python" -c "import $IMPORT_NAME, transformers; print('ok: $REQUIREMENT')"
