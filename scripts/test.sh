#!/usr/bin/env bash
# Install (if needed) and run the whole test suite: lint (ruff check, ruff format, mypy on engine/calc), then
# pytest (slow and browser tests included). Fast lane for iteration: bash scripts/test.sh -m "not slow".
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh --browser
bash scripts/install_peers.sh  # the race's peer engines, so CI proves their lanes (stamped: a second run is instant)
bash scripts/make_vllm_env.sh  # vLLM's side environment, so CI proves its backend and lane (stamped, as above)
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy engine/calc  # the pure calculators are fully typed
# Two test processes, one per core (pytest-xdist); tests/conftest.py keeps each torch op on one thread.
# --dist loadgroup: a module marked xdist_group runs on one process, so its module fixture (a whole race, a vLLM
# server) is paid once, not once per process. PYTEST_WORKERS=0 runs in this process alone (e.g. to debug).
exec .venv/bin/python -m pytest -n "${PYTEST_WORKERS:-2}" --dist loadgroup "$@"
