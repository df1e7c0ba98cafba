#!/usr/bin/env bash
# The one prepared GPU check: the engine's CUDA paths, its compiled decode (static KV cache + CUDA graphs) and the
# DeepSpeed race. Runs on a lent single-GPU machine in under 8 minutes, with no network: it installs only wheels
# carried in .gpu/ (make them here first with `bash scripts/gpu_prepare.sh`, then carry ".gpu" with the device call).
#
#   bash scripts/gpu_check.sh                  # writes bench/results/*.json (and copies them to $OUT if set)
#   ONLY=ds-build,race-125m bash scripts/gpu_check.sh    # some steps only (names as the log prints them), e.g. a
#                                              # second call for the steps the first one's budget skipped
#   DRY_RUN=1 bash scripts/gpu_check.sh        # here, on the CPU: every python step with tiny-gpt-neo, into a temp dir
#
# Steps in order of what they prove, each time-boxed with `timeout`; a failing step is recorded and the script goes
# on; once BUDGET_S is spent, the remaining steps are recorded as skipped (rerun them with ONLY=...):
#   nvidia-smi; install (carried wheels: DeepSpeed, the pinned transformers 4.42.4 side environment);
#   versions (torch, CUDA, triton, transformers as imported);
#   decode-1.3b: bench/decode.py on gpt-neo-1.3b-random fp16, batch 1 and 8, eager and compiled (generate and the
#     in-flight scheduler), tokens/s and the share of the read bandwidth measured in the same run (the
#     targets: compiled batch 1 at 50% of it, batch 8 at 5x batch 1);
#   ds-build: DeepSpeed's inference kernels compiled just in time for this GPU (TORCH_CUDA_ARCH_LIST=9.0), once,
#     into TORCH_EXTENSIONS_DIR, which both DeepSpeed lanes then load;
#   race-1.3b, race-125m: vanilla fp16 against DeepSpeed kernel injection in the pinned environment (transformers
#     4.42.4) and, at 125M, the engine's compiled decode: speedup with its interval, greedy equality and first
#     divergent token;
#   decode-125m: as decode-1.3b for gpt-neo-125m-random.
# Not run unless named in ONLY (they ran on the first lent GPU, bench/results/gpu_check-20261130T111410Z.json):
#   compile-widths (bench/compile_widths.py: one compiled step across buffer widths, under three compile settings),
#   hardware, generate-125m-fp16, generate-device-map-fp16, race-smollm2, quant-125m-cuda, speculate-1.3b-cuda,
#   race-125m-main (DeepSpeed under this image's transformers 5: expected to fail, GPT-Neo's Cache objects).
# Expected time (estimates, not yet measured here): setup 30 s, decode-1.3b 2-3 min (two compiles), ds-build 1-3 min,
# race-1.3b ~2 min; what the budget leaves out is recorded as skipped, for a second call with ONLY=....
# Results: bench/results/decode-cuda-*.json, race-*.json and gpu_check-<stamp>.json (every step's status and output).
set -uo pipefail
cd "$(dirname "$0")/.."
START=$(date +%s)
BUDGET_S=${BUDGET_S:-460}          # stop starting steps after this; the whole script stays under 8 minutes
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
LOG=$(mktemp -d)/steps
PY=${PYTHON:-python3}
DEFAULT_STEPS=nvidia-smi,install,versions,decode-1.3b,ds-build,race-1.3b,race-125m,decode-125m
if [ "${DRY_RUN:-0}" = 1 ]; then
    # The CPU rehearsal: the same python steps on tiny-gpt-neo, fp32, few tokens, results in a temp folder.
    RESULTS=${RESULTS:-$(mktemp -d)/results}
    PY=${PYTHON:-.venv/bin/python}
    DEVICE=cpu DTYPE=fp32 BIG=tiny-gpt-neo SMALL=tiny-gpt-neo TOKENS=8 RUNS=2 REPEATS=1
    DS_LANES=vanilla,deepspeed,compiled
else
    RESULTS=${RESULTS:-bench/results}
    DEVICE=cuda DTYPE=fp16 BIG=gpt-neo-1.3b-random SMALL=gpt-neo-125m-random TOKENS=64 RUNS=5 REPEATS=3
    DS_LANES=vanilla,deepspeed-pinned,compiled
fi
mkdir -p "$RESULTS" "$LOG"
touch "$LOG.start"  # files newer than this are this run's
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_VERBOSITY=error
export INFERENCE_LAB_HOME=${INFERENCE_LAB_HOME:-/tmp/inference-lab-home}
export INFERENCE_LAB_RUNS_DIR=$INFERENCE_LAB_HOME/runs
[ -d .gpu/models ] && export INFERENCE_LAB_MODEL_ROOTS=$PWD/.gpu/models
[ -d .gpu/tokenizer ] && [ "${DRY_RUN:-0}" != 1 ] && export INFERENCE_LAB_TOKENIZER_DIR=$PWD/.gpu/tokenizer
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
# DeepSpeed compiles its inference kernels just in time: for this GPU only, on every core, into one folder both
# DeepSpeed environments load from. Set, not defaulted: DeepSpeed 0.19.8 reads each entry as integers major.minor,
# and an image's own "9.0a" (Hopper's arch-specific target) fails there with "invalid literal for int() with base
# 10: '0a'" (seen on the lent H200, 2026-11-30).
export TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=${MAX_JOBS:-16} TORCH_EXTENSIONS_DIR=${TORCH_EXTENSIONS_DIR:-/tmp/torch-ext}
if [ -z "${CUDA_HOME:-}" ]; then  # torch's extension builder looks for nvcc under CUDA_HOME
    NVCC=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc /usr/local/cuda-*/bin/nvcc 2>/dev/null | head -n 1)
    [ -n "$NVCC" ] && export CUDA_HOME=$(dirname "$(dirname "$NVCC")") PATH=$(dirname "$NVCC"):$PATH
fi

n=0
step() {  # step NAME MAX_SECONDS CMD...: run CMD under timeout, record rc/duration/output tail
    local name=$1 max=$2; shift 2
    local left=$(( BUDGET_S - ($(date +%s) - START) ))
    n=$((n + 1))
    local f="$LOG/$(printf %02d $n)-$name"
    if [ -n "${ONLY:-}" ] && [[ ",$ONLY," != *",$name,"* ]]; then
        echo "skipped: not in ONLY=$ONLY" > "$f.out"; echo "skipped 0" > "$f.rc"
        echo "== $name: skipped (ONLY)"; return
    fi
    if [ -z "${ONLY:-}" ] && [[ ",$DEFAULT_STEPS," != *",$name,"* ]]; then
        echo "skipped: not a default step (name it in ONLY to run it)" > "$f.out"; echo "skipped 0" > "$f.rc"
        return
    fi
    if (( left < 15 )); then
        echo "skipped: out of time budget (BUDGET_S=$BUDGET_S); rerun with ONLY=$name" > "$f.out"
        echo "skipped 0" > "$f.rc"; echo "== $name: skipped (budget)"; return
    fi
    (( max > left )) && max=$left
    echo "== $name (<= ${max}s; $(( $(date +%s) - START )) s so far)"
    local t0=$(date +%s)
    timeout --kill-after=10 "$max" "$@" > "$f.out" 2>&1
    local rc=$?
    echo "$rc $(( $(date +%s) - t0 ))" > "$f.rc"
    tail -n 30 "$f.out"
    echo "== $name: rc=$rc ($(( $(date +%s) - t0 )) s)"
}
# `python -m engine ARGS` with the random presets' carried tokenizer (engine.race.compat); a command, so `timeout`
# can run it
ENGINE=("$PY" scripts/engine_with_shims.py)

# -- the machine ------------------------------------------------------------------------------------
if [ "${DRY_RUN:-0}" = 1 ]; then
    step nvidia-smi 15 echo "dry run: no GPU"
else
    step nvidia-smi 15 nvidia-smi
fi
install_wheels() {  # DeepSpeed for this machine's python; the pinned side environment beside it
    set -e
    if [ "${DRY_RUN:-0}" = 1 ]; then
        "$PY" -c "import deepspeed; print('dry run: deepspeed', deepspeed.__version__, 'from the main environment')"
        return
    fi
    if ! "$PY" -c "import deepspeed" 2>/dev/null; then
        "$PY" -m pip install -q --no-index --no-deps --no-compile --target /tmp/ds-site .gpu/wheels/*.whl
    fi
    "$PY" -m pip install -q --no-index --no-deps --no-compile --target /tmp/ds-pinned .gpu/wheels-pinned/*.whl
    # USE_FLAX=0 USE_TF=0: transformers 4.42.4 otherwise imports the image's jax (built against NumPy 2) under the
    # pinned numpy<2 when it decodes tokens, and the lane dies after DeepSpeed's kernels loaded (seen on the lent
    # H200, 2026-12-04: "ImportError: Encountered an error while initializing the extension").
    printf '#!/bin/sh\nUSE_FLAX=0 USE_TF=0 PYTHONPATH=/tmp/ds-pinned:/tmp/ds-site:$PYTHONPATH exec %s "$@"\n' \
        "$(command -v "$PY")" > /tmp/ds-python
    chmod +x /tmp/ds-python
    PYTHONPATH=$PYTHONPATH:/tmp/ds-site "$PY" -c \
        "import deepspeed, transformers; print('main env: deepspeed', deepspeed.__version__, 'transformers', transformers.__version__)"
    /tmp/ds-python -c \
        "import deepspeed, transformers; print('pinned env: deepspeed', deepspeed.__version__, 'transformers', transformers.__version__)"
}
export PY DRY_RUN
step install 60 bash -c "$(declare -f install_wheels); install_wheels"
[ -d /tmp/ds-site ] && export PYTHONPATH=$PYTHONPATH:/tmp/ds-site
[ -x /tmp/ds-python ] && export INFERENCE_LAB_DS_PYTHON=/tmp/ds-python
step versions 30 $PY -c '
import os, platform, shutil, sys, torch, transformers
print("python", platform.python_version(), sys.executable)
print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())
if torch.cuda.is_available():
    print("gpu", torch.cuda.get_device_name(0), "capability", torch.cuda.get_device_capability(0))
try:
    import triton
    print("triton", triton.__version__)
except ImportError as exc:
    print("triton: not importable:", exc)
print("transformers", transformers.__version__)
print("nvcc", shutil.which("nvcc"), "CUDA_HOME", os.environ.get("CUDA_HOME"))
print("c++", shutil.which("c++") or shutil.which("g++"))
print("TORCH_CUDA_ARCH_LIST", os.environ.get("TORCH_CUDA_ARCH_LIST"))'

# -- compiled decode against eager: tokens/s and bandwidth share, batch 1 and 8 ------------------------------
decode() {  # decode NAME MAX_SECONDS MODEL: bench/decode.py, eager and compiled lanes, batch 1 and 8
    # recompiles and CUDA-graph skips are logged with their reasons (the step's output keeps them)
    step "$1" "$2" env TORCH_LOGS=recompiles,graph_breaks,cudagraphs \
        $PY -m bench.decode --models "$3" --device "$DEVICE" --dtype "$DTYPE" --batches 1 8 --compile \
        --lanes generate scheduler --repeats "$REPEATS" --warmup 1 --max-new-tokens "$TOKENS" \
        --out "$RESULTS/decode-$DEVICE-$3-$STAMP.json"
}
decode decode-1.3b 210 "$BIG"

# -- DeepSpeed's kernels, built once for this GPU ------------------------------------------------------
ds_build() {
    set -e
    if [ "${DRY_RUN:-0}" = 1 ]; then
        "$PY" -c "from deepspeed.ops.op_builder import InferenceBuilder; print('dry run: the builder imports;', \
'its CUDA build needs a GPU:', InferenceBuilder().NAME)"
        return
    fi
    command -v nvcc && nvcc --version | tail -n 2
    "$PY" -c "import sysconfig; print('Python.h under', sysconfig.get_paths()['include'])"
    "$PY" - <<'PY'
import time
from deepspeed.ops.op_builder import InferenceBuilder

builder = InferenceBuilder()
print("compatible:", builder.is_compatible(verbose=True))
t0 = time.perf_counter()
builder.load(verbose=True)  # the JIT build (ninja, nvcc) into TORCH_EXTENSIONS_DIR; a later load reuses it
print(f"transformer_inference built and loaded in {time.perf_counter() - t0:.0f} s")
PY
}
step ds-build 170 bash -c "$(declare -f ds_build); ds_build"

# -- the race (chapter 4.3.4): kernel injection and compiled decode against vanilla fp16 ---------------------
race() {  # race NAME MAX_SECONDS MODEL CONTENDERS RUNS TOKENS [FLAGS...]
    local name=$1 secs=$2 model=$3 who=$4 runs=$5 tokens=$6; shift 6
    step "$name" "$secs" "${ENGINE[@]}" race --model "$model" --contenders "$who" --runs "$runs" \
        --max-new-tokens "$tokens" --device "$DEVICE" --dtype "$DTYPE" --timeout 150 --save "$RESULTS" "$@"
}
if [ "${DRY_RUN:-0}" = 1 ]; then
    race race-1.3b 130 "$BIG" vanilla,deepspeed "$RUNS" "$TOKENS" --no-baseline-recheck
else
    race race-1.3b 130 "$BIG" vanilla,deepspeed-pinned "$RUNS" "$TOKENS" --no-baseline-recheck
fi
race race-125m 170 "$SMALL" "$DS_LANES" "$RUNS" "$TOKENS"
decode decode-125m 150 "$SMALL"
race race-125m-main 120 "$SMALL" vanilla,deepspeed "$RUNS" "$TOKENS" --no-baseline-recheck

# -- earlier checks, run only when named in ONLY ------------------------------------------------------
step hardware 60 "${ENGINE[@]}" hardware --json --measure
step generate-125m-fp16 60 "${ENGINE[@]}" generate --model gpt-neo-125m-random --device "$DEVICE" --dtype "$DTYPE" \
    --prompt "DeepSpeed makes" --max-new-tokens 32 --json
step generate-device-map-fp16 60 "${ENGINE[@]}" generate --model "$PWD/.gpu/models/tiny-gpt-neo-local" \
    --dtype "$DTYPE" --prompt "The GPU" --max-new-tokens 16 --json
step race-smollm2 90 "${ENGINE[@]}" race --model smollm2-135m-instruct \
    --contenders vanilla,deepspeed-pinned,sdpa,static-compile,compiled,ctranslate2 --runs 5 --max-new-tokens 64 \
    --timeout 150 --save "$RESULTS"
step quant-125m-cuda 150 "${ENGINE[@]}" quant --model gpt-neo-125m-random --device cuda \
    --schemes fp32,fp16,bf16,int8,int4,bnb-int8,bnb-nf4 --max-new-tokens 32 --runs 3 --eval-docs 2 --json
step compile-widths 240 $PY -m bench.compile_widths --model "$SMALL" --device "$DEVICE" --dtype "$DTYPE" \
    --out "$RESULTS/compile-widths-$DEVICE-$SMALL-$STAMP.json"
step speculate-1.3b-cuda 150 "${ENGINE[@]}" speculate --model gpt-neo-1.3b-random --device cuda --dtype fp16 \
    --draft layers:4 --draft-length 4 --max-new-tokens 32 --runs 3 --json

# -- one JSON summary: hardware, versions, date, every step's status ------------------------------------
$PY - "$LOG" "$RESULTS/gpu_check-$STAMP.json" "$START" "${DRY_RUN:-0}" <<'PY'
import json, platform, subprocess, sys, time
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path

log, out, start, dry = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
def version(name):
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None
steps = []
for rc_file in sorted(log.glob("*.rc")):
    rc, seconds = rc_file.read_text().split()
    text = rc_file.with_suffix(".out").read_text(errors="replace")
    steps.append({"step": rc_file.stem.split("-", 1)[1], "rc": rc, "seconds": int(seconds),
                  "status": "ok" if rc == "0" else ("skipped" if rc == "skipped" else
                            "timeout" if rc in ("124", "137") else "failed"),
                  "output_tail": text[-6000:]})
try:
    smi = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
                         capture_output=True, text=True, timeout=10).stdout.strip()
except (OSError, subprocess.SubprocessError) as exc:
    smi = f"nvidia-smi failed: {exc}"
summary = {
    "kind": "gpu_check", "date": datetime.now(UTC).isoformat(timespec="seconds"), "gpu": smi, "dry_run": dry,
    "host": platform.node(), "python": platform.python_version(), "total_s": int(time.time()) - start,
    "versions": {n: version(n) for n in ("torch", "transformers", "triton", "deepspeed", "accelerate")},
    "steps": steps,
}
out.write_text(json.dumps(summary, indent=2) + "\n")
print(f"wrote {out}")
for s in steps:
    if not s["output_tail"].startswith("skipped: not a default step"):
        print(f"{s['step']:<28}{s['status']:<9}{s['seconds']:>5} s")
PY
if [ -n "${OUT:-}" ]; then  # the lent machine's way back: at most 8 files
    find "$RESULTS" -maxdepth 1 -newer "$LOG.start" \( -name 'race-*.json' -o -name 'decode-*.json' -o -name 'compile-widths-*.json' \) \
        | head -n 6 | xargs -r cp -t "$OUT"  # this run's files only
    cp "$RESULTS/gpu_check-$STAMP.json" "$OUT"/
fi
echo "total $(( $(date +%s) - START )) s"
