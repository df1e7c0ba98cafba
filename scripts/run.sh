#!/usr/bin/env bash
# Install (if needed) and serve the dashboard on http://127.0.0.1:8501 with the bundled model, offline.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
exec .venv/bin/streamlit run app.py "$@"
