#!/usr/bin/env bash
# Install (if needed) and run the whole test suite: lint, then pytest (slow and browser tests included).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh --browser
bash scripts/install_peers.sh  # the race's peer engines, so CI proves their lanes (stamped: a second run is instant)
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
.venv/bin/ruff check .
exec .venv/bin/python -m pytest "$@"
