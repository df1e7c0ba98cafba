#!/usr/bin/env bash
# Install the latency race's peer engines (OpenVINO GenAI, ONNX Runtime GenAI, CTranslate2). Idempotent:
# stamped by the hash of the requirement files, like scripts/install.sh; a second run takes a second.
#
#   bash scripts/install_peers.sh                 # into ./.venv (made by scripts/install.sh) + ./.venv-peers
#   VENV=/path/.venv bash scripts/install_peers.sh
#
# 1. The runtimes (requirements-peers.txt) go into the main .venv when a pip dry run shows they leave torch and
#    transformers as pinned; otherwise into the side environment, which the race then starts those workers with.
# 2. OpenVINO's exporter, optimum-intel, pins transformers<5.6, so it always lives in the side environment
#    .venv-peers (requirements-peers-export.txt); only the offline conversion runs there. Its torchvision
#    breaks every transformers model import (`operator torchvision::nms does not exist`) and a text model does
#    not need it, so it is removed.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
PEERS=${PEERS_VENV:-.venv-peers}
PY="${PYTHON:-python3.11}"
command -v "$PY" >/dev/null || PY=python3
PIP=(--quiet --disable-pip-version-check)
[[ -x "$VENV/bin/python" ]] || { echo "!! $VENV does not exist: run bash scripts/install.sh first" >&2; exit 1; }

hash_of() { cat "$@" | sha256sum | cut -c1-16; }
t0=$SECONDS

# --- 2. the side environment (export tools; runtimes too when they do not fit the main .venv) ----------------
side_stamp="$PEERS/.installed-$(hash_of requirements-peers.txt requirements-peers-export.txt)"
if [[ ! -f "$side_stamp" ]]; then
  echo "== creating $PEERS (OpenVINO's exporter: optimum-intel, transformers 5.5.4)"
  rm -rf "$PEERS"
  "$PY" -m venv "$PEERS"
  "$PEERS/bin/pip" install "${PIP[@]}" torch==2.13.0
  "$PEERS/bin/pip" install "${PIP[@]}" -r requirements-peers-export.txt
  "$PEERS/bin/pip" uninstall "${PIP[@]}" -y torchvision || true
  touch "$side_stamp.pending"
fi

# --- 1. the runtimes ---------------------------------------------------------------------------------------
main_stamp="$VENV/.peers-$(hash_of requirements-peers.txt requirements.txt)"
if [[ ! -f "$main_stamp" && ! -f "$PEERS/.runtimes-in-side-env" ]]; then
  report=$(mktemp)
  "$VENV/bin/pip" install "${PIP[@]}" --dry-run --report "$report" -r requirements-peers.txt >/dev/null
  changed=$("$VENV/bin/python" - "$report" <<'PY'
import json, sys
pinned = {"torch", "transformers", "numpy", "tokenizers", "accelerate"}
names = [i["metadata"]["name"].lower() for i in json.load(open(sys.argv[1]))["install"]]
print(" ".join(sorted(pinned & set(names))))
PY
)
  rm -f "$report"
  if [[ -z "$changed" ]]; then
    echo "== installing the peer runtimes into $VENV (torch and transformers unchanged)"
    "$VENV/bin/pip" install "${PIP[@]}" -r requirements-peers.txt
    rm -f "$VENV"/.peers-*
    touch "$main_stamp"
  else
    echo "== the peer runtimes would change $changed in $VENV: installing them into $PEERS instead"
    "$PEERS/bin/pip" install "${PIP[@]}" -r requirements-peers.txt
    touch "$PEERS/.runtimes-in-side-env"
  fi
fi
if [[ -f "$side_stamp.pending" ]]; then
  rm -f "$PEERS"/.installed-*
  touch "$side_stamp"
fi
(( SECONDS - t0 > 1 )) && echo "== peers installed in $((SECONDS - t0)) s"
exit 0
