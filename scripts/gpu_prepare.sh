#!/usr/bin/env bash
# Run HERE (the CPU machine, with network to PyPI) before a GPU session: builds .gpu/, the folder that
# scripts/gpu_check.sh needs on the lent GPU machine, which has no network and no DeepSpeed.
#
#   bash scripts/gpu_prepare.sh        # ~1 minute, ~40 MB; then carry ".gpu" with the device call
#
# .gpu/wheels         DeepSpeed 0.19.8 (built here from its sdist: pure Python, its CUDA ops are compiled
#                     just in time on the GPU machine with its nvcc: gpu_check.sh's ds-build step) and the
#                     dependencies the GPU image lacks, at the versions of scripts/ds_pins.sh (DS_SIDE)
# .gpu/wheels-pinned  transformers 4.42.4 + tokenizers 0.19.1 + huggingface-hub<1 + numpy<2: the pinned side
#                     environment for the `deepspeed-pinned` contender (DS_PINNED: DeepSpeed's last known good)
# Compiled decode needs nothing carried: torch.compile, inductor and triton are in the GPU image.
# .gpu/tokenizer      the bundled SmolLM2 tokenizer files only: the random-weight presets borrow it
#                     (INFERENCE_LAB_TOKENIZER_DIR); the bundled model itself (93 MB) is over the 64 MiB
#                     carry limit, so the GPU race for it runs only where the model is already installed
# .gpu/models/tiny-gpt-neo-local  a saved tiny GPT-Neo: exercises the device_map="auto" fp16 load on CUDA
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
GPU_PY=${GPU_PY:-3.12}   # the GPU image's python3 (KINDS.md: Python 3.12.3)
mkdir -p .gpu/wheels .gpu/wheels-pinned .gpu/tokenizer .gpu/models
EXCLUDE=$(git rev-parse --git-path info/exclude)  # a worktree's .git is a file: ask git where its exclude is
mkdir -p "$(dirname "$EXCLUDE")"
grep -qx '/.gpu/' "$EXCLUDE" 2>/dev/null || echo '/.gpu/' >> "$EXCLUDE"
PLAT=(--only-binary=:all: --python-version "$GPU_PY" --implementation cp --platform manylinux_2_28_x86_64
      --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_5_x86_64
      --platform manylinux1_x86_64)
# shellcheck source=scripts/ds_pins.sh
. scripts/ds_pins.sh
rm -f .gpu/wheels/*.whl .gpu/wheels-pinned/*.whl  # one version of each: two stop the whole install there
$PY -m pip wheel -q --no-deps -w .gpu/wheels "${DS_SIDE[0]}"  # DeepSpeed is an sdist: a pure-Python wheel
$PY -m pip download -q --no-deps -d .gpu/wheels "${PLAT[@]}" "${DS_SIDE[@]:1}"
$PY -m pip download -q --no-deps -d .gpu/wheels-pinned "${PLAT[@]}" "${DS_PINNED[@]}"
HF_HUB_OFFLINE=1 $PY - <<'PY'
import shutil
from pathlib import Path
from engine.runtime import models
from engine.race.compat import TOKENIZER_FILES
copy = models.ensure_bundled_copy()
for name in TOKENIZER_FILES:
    if (copy / name).is_file():
        shutil.copy(copy / name, Path(".gpu/tokenizer") / name)
lm = models.load_model("tiny-gpt-neo")
out = Path(".gpu/models/tiny-gpt-neo-local")
lm.model.half().save_pretrained(out)  # fp16: half the bytes to carry
lm.tokenizer.save_pretrained(out)
print("saved", out)
PY
du -sh .gpu .gpu/*
