"""`python -m engine ...` with the race worker's shims applied first (engine.race.compat): on a lent GPU machine the
random-weight presets read the carried tokenizer (INFERENCE_LAB_TOKENIZER_DIR), since the bundled model's package
is not there. scripts/gpu_check.sh runs every engine command through it:

    python3 scripts/engine_with_shims.py race --model gpt-neo-125m-random --contenders vanilla,compiled
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine.race import compat

compat.install([])

from engine.cli import main  # noqa: E402

sys.exit(main(sys.argv[1:]))
