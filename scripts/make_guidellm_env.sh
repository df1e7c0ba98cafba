#!/usr/bin/env bash
# Create .venv-guidellm: a side environment holding GuideLLM (vLLM project's serving benchmark), used to
# cross-check `python -m engine loadgen` against a peer tool on the same server (bench/serving.py --peer).
#
#   bash scripts/make_guidellm_env.sh                 # creates ./.venv-guidellm on top of ./.venv
#   BASE_VENV=/work/main/.venv bash scripts/make_guidellm_env.sh
#
# Why a second environment: guidellm 0.8.1 pins click~=8.4.0, httpx<1 and pulls sanic, uvloop and friends,
# which would move the main environment's pins. It also needs torch and transformers (for its tokenizer);
# instead of a second multi-GB copy, the side venv sees the base venv's packages through a .pth file placed
# *after* its own site-packages, so its own pins win and torch/transformers come from the base venv.
set -euo pipefail
cd "$(dirname "$0")/.."
ENV_DIR=${GUIDELLM_ENV:-.venv-guidellm}
BASE_VENV=${BASE_VENV:-.venv}
BASE_PY="$BASE_VENV/bin/python"
[ -x "$BASE_PY" ] || { echo "no base venv at $BASE_VENV (run scripts/install.sh first)" >&2; exit 1; }
BASE_SITE=$("$BASE_PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
"$BASE_PY" -m venv --without-pip "$ENV_DIR" 2>/dev/null || "$BASE_PY" -m venv "$ENV_DIR"
SITE=$("$ENV_DIR/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "$BASE_SITE" > "$SITE/zz_base_venv.pth"   # appended last: the side venv's own packages win
"$ENV_DIR/bin/python" -m pip --version >/dev/null 2>&1 || "$ENV_DIR/bin/python" -m ensurepip -q
"$ENV_DIR/bin/python" -m pip install -q "guidellm==0.8.1"
"$ENV_DIR/bin/python" -c "import guidellm, torch, transformers; print('ok: guidellm', guidellm.__version__ if hasattr(guidellm, '__version__') else '0.8.1', 'torch', torch.__version__)"
