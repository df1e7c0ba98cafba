"""Security checks: remote code, model folders, uploads, generated code, server config, secrets.

Some are grep-style (the property is "no line does X"), the rest drive the real code path with a hostile
input and check that nothing happened: no marker file, no unpickled checkpoint, no token in any output.
"""

from __future__ import annotations

import ast
import builtins
import inspect
import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from engine.calc.hf_config import MAX_CONFIG_BYTES, parse_config_text
from engine.core import paths
from engine.core.errors import InvalidParameterError, ModelLoadError, PathNotAllowedError, UnknownModelError
from engine.lab import codegen
from engine.runtime import generation, models
from engine.runtime.settings import GenerationConfig

ROOT = Path(__file__).resolve().parents[1]
TOKEN = "hf_secretTOKENdoNotLeak1234567890"


def sources(*folders: str) -> list[Path]:
    out: list[Path] = []
    for f in folders:
        p = ROOT / f
        out.extend([p] if p.is_file() else sorted(p.rglob("*.py")))
    return out


# --- trust_remote_code ---------------------------------------------------------------------------------
def test_no_page_or_ui_helper_mentions_trust_remote_code():
    for path in sources("app.py", "pages", "ui"):
        text = path.read_text(encoding="utf-8")
        assert "trust_remote_code=" not in text and '"trust_remote_code"' not in text, path


def test_engine_passes_trust_remote_code_only_from_the_server_setting():
    for path in sources("engine"):
        for line in path.read_text(encoding="utf-8").splitlines():
            if re.search(r"trust_remote_code\"?\s*[=:]", line) and "def " not in line:
                assert "paths.trust_remote_code_allowed()" in line, f"{path}: {line.strip()}"


def test_trust_remote_code_allowed_reads_only_the_environment(monkeypatch):
    fn = ast.parse(inspect.getsource(paths.trust_remote_code_allowed)).body[0]
    names = {n.id for n in ast.walk(fn) if isinstance(n, ast.Name)}
    assert names == {"os", "bool"} or names <= {"os", "bool"}, names  # no argument, no global, no file
    assert not fn.args.args  # nothing a caller (a page) could pass
    monkeypatch.setenv("INFERENCE_LAB_TRUST_REMOTE_CODE", "true")
    assert paths.trust_remote_code_allowed() is False  # exactly "1", nothing looser


@pytest.mark.slow
def test_playground_custom_model_help_says_remote_code_is_off():
    from streamlit.testing.v1 import AppTest

    from ui.widgets import CUSTOM

    at = AppTest.from_file(str(ROOT / "pages/1_Playground.py"), default_timeout=180)
    at.query_params["model"] = "tiny-gpt-neo"
    at.run()
    at.sidebar.selectbox(key="playground.model").set_value(CUSTOM).run()
    help_text = at.sidebar.text_input(key="playground.custom").help
    # in plain words (no environment variable on a page): remote code is off, and who can turn it on
    assert "Remote code is off" in help_text and "operator allows it" in help_text


# --- local model folders ------------------------------------------------------------------------------
def test_symlink_inside_a_root_cannot_escape_it(tmp_path, monkeypatch):
    root, outside = tmp_path / "models", tmp_path / "outside"
    root.mkdir()
    (outside / "model").mkdir(parents=True)
    (outside / "model" / "config.json").write_text('{"model_type": "gpt_neo"}')
    (root / "escape").symlink_to(outside / "model", target_is_directory=True)
    (root / "parent").symlink_to(tmp_path, target_is_directory=True)
    monkeypatch.setenv("INFERENCE_LAB_MODEL_ROOTS", str(root))
    for name in (
        "escape",
        str(root / "escape"),
        "./escape",
        "parent/outside/model",
        str(root / "parent" / "outside"),
    ):
        with pytest.raises(PathNotAllowedError):
            paths.resolve_local_model_path(name)
    for name in (str(root / "escape"), "./escape", "parent/outside/model"):
        with pytest.raises(PathNotAllowedError, match="outside the folders"):
            models.load_model(name)
    with pytest.raises(
        UnknownModelError
    ):  # a bare name is looked up under the roots only, never followed out
        models.load_model("escape")


@pytest.mark.slow
def test_a_pickled_checkpoint_from_a_user_folder_is_never_unpickled(tmp_path, monkeypatch, tiny_lm):
    """A pytorch_model.bin whose unpickling would create a marker file: loading refuses, the marker never appears."""
    monkeypatch.setenv("INFERENCE_LAB_MODEL_ROOTS", str(tmp_path))
    marker = tmp_path / "unpickled"
    folder = tmp_path / "hostile"
    tiny_lm.model.config.save_pretrained(folder)
    tiny_lm.tokenizer.save_pretrained(folder)

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    import pickle

    (folder / "pytorch_model.bin").write_bytes(pickle.dumps(Payload()))
    with pytest.raises(ModelLoadError):
        models.load_model("hostile")
    assert not marker.exists()


def test_user_supplied_models_load_with_safetensors_only():
    src = inspect.getsource(models._from_pretrained)
    assert 'kwargs["use_safetensors"] = True' in src
    load_src = inspect.getsource(models.load_model)
    assert "user_supplied=preset is None" in load_src  # hub ids and local folders are user-supplied


# --- uploads --------------------------------------------------------------------------------------------
def test_server_caps_upload_size():
    cfg = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())
    assert 0 < cfg["server"]["maxUploadSize"] <= 5  # MB: config.json and CSV files only


def test_config_upload_is_size_checked_and_parsed_as_json_only():
    with pytest.raises(InvalidParameterError, match="a few KB"):
        parse_config_text(b"{" + b" " * MAX_CONFIG_BYTES + b"}")
    from engine.calc.hf_config import parse_config_json

    assert "parse_config_json" in inspect.getsource(parse_config_text)
    assert "json.loads" in inspect.getsource(parse_config_json)


def test_uploaded_config_never_runs_remote_code():
    """The meta-device count drops auto_map, so a config cannot point transformers at its own code."""
    from engine.arch.meta import exact_spec

    spec = exact_spec(
        {
            "model_type": "evil",
            "auto_map": {"AutoModelForCausalLM": "evil.Model"},
            "hidden_size": 64,
            "num_hidden_layers": 1,
            "num_attention_heads": 4,
            "vocab_size": 10,
        }
    )
    assert spec.exact is None and any("could not be built offline" in a for a in spec.assumptions)


def test_fewshot_upload_is_size_checked_on_the_page():
    page = (ROOT / "pages" / "4_Few-shot_code_and_eval.py").read_text()
    assert "up.size > MAX_UPLOAD_BYTES" in page


DANGEROUS = re.compile(
    r"pickle\.loads?\(|torch\.load\(|(?<![\w.])exec\(|(?<![\w.])eval\(|marshal\.loads?\(|yaml\.load\(|"
    r"dill\.loads?\(|joblib\.load\(|shelve\.open\(|__import__\(|os\.system\("
)
# The one dynamic import: engine/lab/evaluation.py reads the shipped task's corpus.py from engine/data, a file of
# this repository, never a user's.
ALLOWED = {
    (
        "engine/lab/evaluation.py",
        'spec = importlib.util.spec_from_file_location("_lab_pydoc_corpus", TASK_DIR / "corpus.py")',
    )
}


def test_nothing_user_supplied_is_unpickled_executed_or_evaluated():
    for path in sources("app.py", "engine", "pages", "ui"):
        rel = path.relative_to(ROOT).as_posix()
        for line in path.read_text(encoding="utf-8").splitlines():
            assert not DANGEROUS.search(line), f"{rel}: {line.strip()}"
            if "exec_module" in line or "spec_from_file_location" in line:
                if "exec_module" in line:
                    continue  # checked through its spec line below
                assert (rel, line.strip()) in ALLOWED, f"{rel}: {line.strip()}"


# --- generated code --------------------------------------------------------------------------------------
def test_codegen_never_runs_generated_code(tiny_lm, monkeypatch, tmp_path):
    """The model 'answers' with code that would create marker files; codegen reviews it and runs only ruff."""
    marker = tmp_path / "ran"
    hostile = (
        f"import os, subprocess\nos.system('touch {marker}')\nopen({str(marker)!r}, 'w').write('x')\n"
        f"subprocess.run(['touch', {str(marker)!r}])\nexec('print(1)')\neval('1+1')\n"
    )
    real_generate = generation.generate

    def fake_generate(lm, prompt, cfg, **kw):
        c = real_generate(lm, "x", GenerationConfig(max_new_tokens=1))
        return generation.Completion(prompt, hostile, prompt + hostile, c.token_ids, "length", c.measurement)

    calls: list[tuple[str, object]] = []
    real_exec, real_eval, real_popen = builtins.exec, builtins.eval, subprocess.Popen

    def spy(name, real):
        def wrapper(*args, **kwargs):
            calls.append((name, args[0] if args else kwargs.get("args")))
            return real(*args, **kwargs)

        return wrapper

    monkeypatch.setattr(
        codegen.run.generation, "generate", fake_generate
    )  # the one run call (engine.runtime.run)
    monkeypatch.setattr(builtins, "exec", spy("exec", real_exec))
    monkeypatch.setattr(builtins, "eval", spy("eval", real_eval))
    monkeypatch.setattr(subprocess, "Popen", spy("Popen", real_popen))
    monkeypatch.setattr(os, "system", spy("os.system", lambda cmd: 0))
    result = codegen.generate_code(tiny_lm, "# write code\n", max_new_tokens=16, mode="complete")
    assert "os.system" in result.code and result.syntax.ok
    assert not marker.exists()
    ruff = str(codegen.ruff_binary())
    for name, arg in calls:
        if name in ("exec", "eval"):  # library internals may call these; never on the generated text
            assert not (isinstance(arg, str) and "touch" in arg), (name, arg)
        else:  # processes: ruff on a file, and harmless probes (platform's `uname -p`); no interpreter, no shell
            assert name == "Popen", (name, arg)
            argv = [str(a) for a in ([arg] if isinstance(arg, str) else arg)]
            assert "touch" not in " ".join(argv), argv
            assert Path(argv[0]).name not in {"python", "python3", Path(sys.executable).name, "sh", "bash"}, (
                argv
            )
    assert any(name == "Popen" and str(next(iter(arg))) == ruff for name, arg in calls)  # the lint did run


# --- the server's configuration --------------------------------------------------------------------------
def test_streamlit_config_is_safe_by_default():
    cfg = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())
    assert cfg["server"]["enableXsrfProtection"] is True
    assert cfg["server"]["address"] == "127.0.0.1"
    assert cfg["browser"]["gatherUsageStats"] is False


def test_readme_documents_the_one_flag_to_serve_a_network():
    readme = (ROOT / "README.md").read_text()
    assert "--server.address 0.0.0.0" in readme
    assert "INFERENCE_LAB_TRUST_REMOTE_CODE" in readme


# --- secrets ---------------------------------------------------------------------------------------------
def test_hf_token_never_reaches_the_run_log(tiny_lm, monkeypatch, tmp_path):
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    monkeypatch.setenv("HUGGING_FACE_HUB_TOKEN", TOKEN)
    monkeypatch.setenv("INFERENCE_LAB_RUNS_DIR", str(tmp_path / "runs"))
    generation.generate(tiny_lm, f"my token is not {TOKEN[:3]}", GenerationConfig(max_new_tokens=3))
    logs = list((tmp_path / "runs").rglob("*"))
    assert any(p.is_file() for p in logs)
    for p in logs:
        if p.is_file():
            assert TOKEN not in p.read_text(encoding="utf-8", errors="replace")


def _cli(*args: str, tmp_path: Path) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "HF_TOKEN": TOKEN,
        "HUGGING_FACE_HUB_TOKEN": TOKEN,
        "INFERENCE_LAB_RUNS_DIR": str(tmp_path / "runs"),
    }
    return subprocess.run(
        [sys.executable, "-m", "engine", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )


# Every command's output is checked with a token set in tests/test_cli_json.py; the race also saves files.
RACE_SAVING = ("race", "--model", "tiny-gpt-neo", "--contenders", "vanilla", "--runs", "1", "--warmup", "0",
               "--max-new-tokens", "2", "--device", "cpu", "--save", "{tmp}/race", "--csv", "{tmp}/race.csv", "--json")  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("args", [RACE_SAVING], ids=["race"])
def test_hf_token_never_reaches_cli_output_or_saved_files(args, tmp_path):
    r = _cli(*(a.replace("{tmp}", str(tmp_path)) for a in args), tmp_path=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    json.loads(r.stdout)
    assert TOKEN not in r.stdout and TOKEN not in r.stderr
    for p in tmp_path.rglob("*"):
        if p.is_file():
            assert TOKEN not in p.read_text(encoding="utf-8", errors="replace"), p


@pytest.mark.slow
def test_hf_token_never_reaches_the_evaluation_download(tiny_lm, monkeypatch):
    from engine.lab import evaluation
    from ui.lab_widgets import runs_json

    monkeypatch.setenv("HF_TOKEN", TOKEN)
    res = evaluation.run_eval(tiny_lm, evaluation.LOCAL_TASK, limit=1, crosscheck=True)
    payload = runs_json([res.summary()])
    assert TOKEN not in payload and TOKEN not in repr(res)
