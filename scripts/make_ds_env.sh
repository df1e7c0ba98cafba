#!/usr/bin/env bash
# Create .venv-ds: a side environment pinned to what DeepSpeed's kernel injection for GPT-Neo was last
# known to work with, for the latency race's `deepspeed` contender (pages/5_Latency_race.py, `python -m
# engine race --ds-python .venv-ds/bin/python`).
#
#   bash scripts/make_ds_env.sh            # creates ./.venv-ds (about 1 minute, ~1 GB)
#   DS_ENV=/somewhere bash scripts/make_ds_env.sh
#
# Why a second environment: DeepSpeed's own nightly inference tests pin transformers 4.42.4 as the last
# known good version for kernel injection (DeepSpeed PR #6002). transformers 4.45 moved GPT-Neo to Cache
# objects, which DeepSpeed's injected attention does not speak, so with the main environment's
# transformers 5.x kernel injection for GPT-Neo is expected to fail. The race runs each contender in its
# own worker process, and the worker's interpreter is chosen per contender: point it at this one.
#
# torch: the same 2.13.0 as the main environment (the CPU wheel on this workplace's disk; on a GPU
# machine, pass TORCH_SPEC="" to keep the torch already installed there, e.g. with --system-site-packages).
# Measured here (2-core CPU, 2026-11-30): about 65 s; resolves transformers 4.42.4, tokenizers 0.19.1,
# huggingface-hub 0.36.2, accelerate 0.33.0, numpy 1.26.4 (4.42.4 insists on numpy<2 at import).
# The engine's own code runs under it for what the race worker needs (load + generate + timing) through
# the worker's shims (engine/race/compat.py): tokenizer.json saved by transformers 5 is converted to the
# 4.x format (same token ids), rope_theta is read from 5.x's `rope_parameters`, dtype= becomes torch_dtype=.
# With those, tiny-gpt-neo and the bundled SmolLM2 give the same greedy tokens and perplexity as the main
# environment (tests/test_race.py checks tiny-gpt-neo). The bundled SmolLM2 loads only from the safetensors
# copy the main environment made on first load (4.42.4 has no Q4_1 GGUF reader), so load it once there first.
# On the CPU the DeepSpeed contender is pass-through either way; kernel injection needs a CUDA GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
DS_ENV=${DS_ENV:-.venv-ds}
PYTHON=${PYTHON:-python3.11}
TORCH_SPEC=${TORCH_SPEC-torch==2.13.0}
command -v "$PYTHON" >/dev/null || PYTHON=python3
VENV_ARGS=()
[ "${SYSTEM_SITE:-0}" = 1 ] && VENV_ARGS+=(--system-site-packages)
"$PYTHON" -m venv "${VENV_ARGS[@]}" "$DS_ENV"
"$DS_ENV/bin/python" -m pip install -q --upgrade pip
# shellcheck source=scripts/ds_pins.sh
. scripts/ds_pins.sh
# shellcheck disable=SC2086
"$DS_ENV/bin/python" -m pip install -q $TORCH_SPEC "${DS_SIDE[@]}" "${DS_PINNED[@]}" \
    "accelerate==0.33.0" "psutil" "nvidia-ml-py" "safetensors"
"$DS_ENV/bin/python" - <<'PY'
import deepspeed, torch, transformers
print(f"ok: {__import__('sys').executable}: torch {torch.__version__}, transformers {transformers.__version__}, "
      f"deepspeed {deepspeed.__version__}")
PY
