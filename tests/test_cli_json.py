"""`--json` is only JSON: every command, run as a user runs it (a fresh subprocess), prints one JSON document on
stdout whatever its libraries print; their noise goes to stderr (engine.cli.json_only_stdout, quiet_libraries).
Each command runs with its cheapest arguments (tiny-gpt-neo, one run, the fewest tokens)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine.cli import COMMANDS

ROOT = Path(__file__).resolve().parents[1]
TINY = ("--model", "tiny-gpt-neo")

# The cheapest arguments of each command. `serve` has no document to print: it serves until stopped (its output
# is uvicorn's log, on stderr); `loadgen` is given a live server by the test.
CHEAPEST: dict[str, tuple[str, ...]] = {
    "hardware": (),
    "generate": (*TINY, "--prompt", "Hi", "--max-new-tokens", "2"),
    "estimate": ("--model", "gpt-neo-125m", "--gpu", "t4"),
    "gpus": (),
    # calibration fits two depths of a model cut to 8 layers: tiny-gpt-neo has fewer, so the bundled model
    "calibrate": ("--model", "smollm2-135m-instruct", "--dtypes", "fp32", "--repeats", "1"),
    "roofline": (
        "--model",
        "gpt-neo-125m",
        "--gpu",
        "t4",
        "--phase",
        "decode",
        "--seq-len",
        "64",
        "--batch",
        "1",
    ),
    "eval": (*TINY, "--limit", "1"),  # with the engine's cross-check, whose verdict is in the document
    "fewshot": (*TINY, "--k", "0", "--queries", "2"),
    "race": (
        *TINY,
        "--contenders",
        "vanilla",
        "--runs",
        "1",
        "--max-new-tokens",
        "2",
        "--no-baseline-recheck",
    ),
    "batch": (*TINY, "--requests", "2", "--prompt-tokens", "2", "4", "--output-tokens", "2", "4"),
    "loadgen": ("--mode", "concurrency", "--concurrency", "1", "--requests", "1", "--output-tokens", "2"),
    "quant": (*TINY, "--schemes", "fp32", "--runs", "1", "--max-new-tokens", "4", "--eval-docs", "1"),
    "speculate": (*TINY, "--methods", "prompt_lookup", "--runs", "1", "--max-new-tokens", "4"),
    "trackrecord": ("--no-machine",),
    "simulate": (
        "--model",
        "smollm2-135m",
        "--gpu",
        "l4",
        "--sweep",
        "1",
        "--requests",
        "2",
        "--output-tokens",
        "4",
    ),
}
NOT_A_DOCUMENT = {"serve"}


@pytest.fixture(scope="module")
def lab_home(tmp_path_factory) -> Path:
    """A lab home of its own (calibrate and the race write there, never into the user's), sharing the model cache:
    the bundled tokenizer that tiny-gpt-neo borrows is dequantized once per machine."""
    from engine.core import paths

    home = tmp_path_factory.mktemp("home")
    paths.models_dir().mkdir(parents=True, exist_ok=True)
    (home / "models").symlink_to(paths.models_dir(), target_is_directory=True)
    return home


# A Hugging Face token in the environment, as a user with one has it: no command may print it (tests/test_security.py
# also follows it into the files the race saves).
TOKEN = "hf_secretTOKENdoNotLeak1234567890"


def run_json(name: str, *args: str, home: Path) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "INFERENCE_LAB_HOME": str(home),
        "HF_TOKEN": TOKEN,
        "HUGGING_FACE_HUB_TOKEN": TOKEN,
    }
    return subprocess.run(
        [sys.executable, "-m", "engine", name, *args, "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )


def test_every_command_is_checked():
    assert set(COMMANDS) == set(CHEAPEST) | NOT_A_DOCUMENT, "add the new command's cheapest arguments here"


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(set(CHEAPEST) - {"loadgen"}))
def test_json_stdout_is_one_document(name, lab_home):
    r = run_json(name, *CHEAPEST[name], home=lab_home)
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads(r.stdout)  # the whole of stdout, nothing before or after the document
    assert TOKEN not in r.stdout and TOKEN not in r.stderr
    if name == "eval":  # the fields the evaluation's JSON promises (docs/CONTRACTS.md)
        assert {"word_perplexity", "byte_perplexity", "bits_per_byte", "task", "task_version", "model", "dtype",
                "device", "harness_version", "crosscheck"} <= set(doc)  # fmt: skip
        assert (doc["task"], doc["task_version"], doc["crosscheck"]["agrees"]) == (
            "pydoc_topics",
            "1.0",
            True,
        )


@pytest.mark.slow
def test_loadgen_json_is_one_document(tiny_lm, lab_home):
    from engine.serving.runner import ServerThread, ServeSpec, build

    app, scheduler = build(ServeSpec(model="tiny-gpt-neo"), lm=tiny_lm)
    with ServerThread(app, scheduler=scheduler) as srv:
        r = run_json("loadgen", "--url", srv.base_url, *CHEAPEST["loadgen"], home=lab_home)
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads(r.stdout)


def test_library_prints_go_to_stderr(capfd):
    """The mechanism itself: a print, a logger bound to sys.stdout and a C-level write to file descriptor 1 inside
    the block all reach stderr; only what is written to the yielded stream reaches stdout."""
    import logging

    from engine.cli import json_only_stdout

    with json_only_stdout() as out:
        print("a library's print")
        handler = logging.StreamHandler(sys.stdout)  # DeepSpeed's logger is made like this
        logger = logging.getLogger("test_cli_json.noisy")
        logger.addHandler(handler)
        logger.warning("[WARNING] Setting accelerator to CPU")
        logger.removeHandler(handler)
        os.write(1, b"a C library's printf\n")
        print('{"ok": true}', file=out)
    captured = capfd.readouterr()
    assert captured.out == '{"ok": true}\n'
    for noise in ("a library's print", "Setting accelerator to CPU", "a C library's printf"):
        assert noise in captured.err


def test_torchao_kernel_noise_is_one_line(capsys):
    import logging

    from engine.cli import quiet_libraries

    quiet_libraries()
    log = logging.getLogger("torchao")
    for lib in ("_C_mxfp8.so", "_C_cutlass_90a.abi3.so"):
        log.warning(f"Failed to load /x/torchao/{lib}: Could not load this library")
    err = capsys.readouterr().err
    assert "Failed to load" not in err
    assert err.count("torchao:") <= 1


def test_torchs_notice_about_torchaos_enums_is_dropped_and_other_pytree_warnings_kept(caplog):
    """Two 'W1204 ... <enum 'KernelPreference'> is an Enum subclass ... register_constant() on Enum subclasses is
    deprecated' lines reached every `estimate` that counts a model on the meta device."""
    import enum
    import logging

    from engine.cli import quiet_libraries

    quiet_libraries()
    log = logging.getLogger("torch.utils._pytree")

    class KernelPreference(enum.Enum):
        AUTO = 0

    with caplog.at_level(logging.WARNING, logger="torch.utils._pytree"):
        log.warning(
            "%s is an Enum subclass and is now natively supported by torch.compile as an opaque value type. Calling "
            "register_constant() on Enum subclasses is deprecated and will be an error in a future release.",
            KernelPreference,
        )
        log.warning("some other pytree warning")
    assert [r.getMessage() for r in caplog.records] == ["some other pytree warning"]


@pytest.mark.slow
def test_deepspeed_accelerator_is_named_not_probed_and_kept_off_stdout():
    """DeepSpeed's accelerator probe wrote '[WARNING] ... Setting accelerator to CPU' to stdout ahead of the JSON
    (tests/test_cli.py::test_generate_json_keys failed on it now and then): where no NVIDIA GPU exists the CLI names
    the accelerator (DS_ACCELERATOR=cpu), so there is no probe, and whatever DeepSpeed logs lands on stderr."""
    pytest.importorskip("deepspeed")
    code = (
        "from engine.cli import json_only_stdout, quiet_libraries\n"
        "quiet_libraries()\n"
        "with json_only_stdout() as out:\n"
        "    from deepspeed.accelerator import get_accelerator\n"
        '    print(\'{"accelerator": "%s"}\' % get_accelerator().device_name(), file=out)\n'
    )
    env = {k: v for k, v in os.environ.items() if k != "DS_ACCELERATOR"}
    r = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300, env=env
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads(r.stdout)["accelerator"]
    if not any(Path("/dev").glob("nvidia[0-9]*")):
        assert json.loads(r.stdout)["accelerator"] == "cpu"
        assert "Setting accelerator to CPU" not in r.stdout + r.stderr  # named, not probed
