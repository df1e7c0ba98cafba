"""vLLM as a backend, the parts that need no vLLM: the flags translated from the serve spec, the environment's
discovery, the parsing of vLLM's own figures and errors, and the calculator's CPU branch of vLLM's memory model
(exact against the figures vLLM 0.32 logged here: 46,592 tokens / 22.75x fp32 and 93,184 / 45.50x bf16 at 2 GiB)."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.backends import vllm as V
from engine.backends import vllm_records as R
from engine.backends import vllm_server as S
from engine.backends.spec import BackendServeSpec
from engine.calc.serving_memory import (
    VLLM_CPU_BLOCK_SIZE,
    cpu_kv_space_bytes,
    is_cpu,
    serving_memory_of,
    vllm_cpu_memory,
)
from engine.calc.specs import GIB, THIS_MACHINE, GPUSpec, model_preset
from engine.calc.timing import Setup
from engine.core.errors import InvalidParameterError

CPU_BUILD = V.Build("/venv/bin/python", "vllm-cpu", "0.32.0", "cpu")
CUDA_BUILD = V.Build("/venv/bin/python", "vllm", "0.32.0", "cuda")
FOLDER = Path("/models/smollm2-135m-instruct")
# vLLM 0.32's own lines on this machine (VLLM_CPU_KVCACHE_SPACE=2, --max-model-len 2048, the bundled model)
LOGGED = {
    "fp32": "CPU KV cache size: 46,592 tokens, Maximum concurrency for 2,048 tokens per request: 22.75x",
    "bf16": "CPU KV cache size: 93,184 tokens, Maximum concurrency for 2,048 tokens per request: 45.50x",
}


def _launch(build=CPU_BUILD, environ=None, **spec) -> V.Launch:
    s = BackendServeSpec(model="smollm2-135m-instruct", backend="vllm", threads=1, **spec).validate()
    return V.launch(
        s,
        build,
        FOLDER,
        "smollm2-135m-instruct",
        8123,
        environ or {},
        allowed_cpus=[0, 1],
        available_bytes=16 * GIB,
    )


def _flag(argv: tuple[str, ...], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else None


def test_flags_come_from_the_serve_spec():
    la = _launch(dtype="bf16", max_batch=4, max_model_len=2048)
    assert la.argv[1:3] == (
        "-m",
        "vllm.entrypoints.openai.api_server",
    )  # the console script fails for vllm-cpu
    assert _flag(la.argv, "--model") == str(FOLDER)
    assert _flag(la.argv, "--served-model-name") == "smollm2-135m-instruct"
    assert _flag(la.argv, "--dtype") == "bfloat16"
    assert _flag(la.argv, "--max-num-seqs") == "4"
    assert _flag(la.argv, "--max-model-len") == "2048"
    assert _flag(la.argv, "--host") == "127.0.0.1" and _flag(la.argv, "--port") == "8123"
    assert "--enforce-eager" in la.argv  # a CPU start compiles for minutes otherwise
    assert la.env["VLLM_CPU_OMP_THREADS_BIND"] == "0" and la.threads == 1
    assert la.env["HF_HUB_OFFLINE"] == "1"


def test_auto_precision_is_the_engines_rule():
    assert _flag(_launch().argv, "--dtype") == "float32"  # auto on a CPU: fp32, as the engine loads it
    assert _flag(_launch(build=CUDA_BUILD).argv, "--dtype") == "float16"
    with pytest.raises(InvalidParameterError, match="fp16 is offered on CUDA GPUs only"):
        _launch(dtype="fp16")


def test_kv_space_flag_env_or_the_engines_default():
    la = _launch(kv_budget_bytes=3 * GIB)
    assert _flag(la.argv, "--kv-cache-memory-bytes") == str(3 * GIB) and la.kv_space_bytes == 3 * GIB
    assert "VLLM_CPU_KVCACHE_SPACE" in la.unset  # on a CPU the variable would replace the flag
    la = _launch(environ={"VLLM_CPU_KVCACHE_SPACE": "2"})
    assert la.kv_space_bytes == 2 * GIB and "VLLM_CPU_KVCACHE_SPACE" not in la.env  # inherited as it is
    la = (
        _launch()
    )  # neither: a quarter of the free memory (16 GiB here) in whole GiB, never vLLM's 0.92 of RAM
    assert la.env["VLLM_CPU_KVCACHE_SPACE"] == "4" and la.kv_space_bytes == 4 * GIB
    assert (
        "VLLM_CPU_KVCACHE_SPACE" not in _launch(build=CUDA_BUILD).env
        and _launch(build=CUDA_BUILD).kv_space_bytes is None
    )


def test_threads_bind_the_first_cores_and_the_key_stays_off_the_command_line():
    s = BackendServeSpec(model="m", backend="vllm", threads=2).validate()
    la = V.launch(s, CPU_BUILD, FOLDER, "m", 1, {"INFERENCE_LAB_API_KEY": "sekret"}, allowed_cpus=[3, 1, 2])
    assert la.env["VLLM_CPU_OMP_THREADS_BIND"] == "1,2"
    assert (
        la.env["VLLM_API_KEY"] == "sekret"
        and "sekret" not in " ".join(la.argv)
        and "sekret" not in la.shell()
    )
    assert "VLLM_CPU_OMP_THREADS_BIND=1,2 python -m vllm.entrypoints.openai.api_server" in la.shell()


def test_max_model_len_is_vllms_option():
    with pytest.raises(InvalidParameterError, match="--backend vllm"):
        BackendServeSpec(max_model_len=2048).validate()
    with pytest.raises(InvalidParameterError, match="choose from engine, vllm"):
        BackendServeSpec(backend="sglang").validate()
    assert BackendServeSpec(port=9).engine_spec().port == 9


def test_a_missing_environment_is_one_sentence(tmp_path, monkeypatch):
    monkeypatch.delenv(V.PYTHON_ENV, raising=False)
    monkeypatch.setattr(V, "VENV", tmp_path / ".venv-vllm")
    build, why = V.availability()
    assert build is None and "bash scripts/make_vllm_env.sh" in why and why.count(". ") == 0
    monkeypatch.setenv(V.PYTHON_ENV, str(tmp_path / "nope" / "python"))
    with pytest.raises(V.VllmUnavailableError, match="INFERENCE_LAB_VLLM_PYTHON points at"):
        V.find_build()


@pytest.mark.parametrize(("dist", "device"), [("vllm_cpu", "cpu"), ("vllm", "cuda")])
def test_the_build_is_read_from_the_environments_metadata(tmp_path, monkeypatch, dist, device):
    exe = tmp_path / "bin" / "python"
    exe.parent.mkdir()
    exe.write_text("")
    (tmp_path / "lib" / "python3.11" / "site-packages" / f"{dist}-0.32.0.dist-info").mkdir(parents=True)
    b = V.find_build(str(exe))
    assert (b.dist, b.version, b.device) == (dist.replace("_", "-"), "0.32.0", device)
    assert ("community CPU build" in b.label) == (device == "cpu")


def test_kv_line_and_cache_config_info_are_parsed():
    log = f"noise\n(EngineCore pid=1) INFO 12-02 06:07:41 [kv_cache_utils.py:2327] {LOGGED['fp32']}\nmore"
    f = R.parse_kv_line(log)
    assert (f.device, f.kv_cache_tokens, f.max_model_len, f.max_concurrency) == ("CPU", 46592, 2048, 22.75)
    assert R.parse_kv_line("nothing here") is None
    metrics = (
        '# HELP vllm:cache_config_info x\nvllm:cache_config_info{block_size="128",cache_dtype="auto",'
        'kv_cache_memory_bytes="2147483648",num_gpu_blocks="364"} 1.0\n'
    )
    f = R.with_cache_info(f, R.parse_cache_config_info(metrics))
    assert (f.block_size, f.blocks, f.kv_cache_memory_bytes) == (128, 364, 2 * GIB)
    assert R.parse_cache_config_info("") == {}


def test_the_reason_is_vllms_root_cause_in_one_line():
    log = """INFO starting
(EngineCore pid=77) ERROR 12-02 [core.py:1] EngineCore failed to start.
Traceback (most recent call last):
  File "/work/x/.venv-vllm/lib/python3.11/site-packages/vllm/v1/executor/ray_utils.py", line 575, in init
    raise ValueError(
ValueError: current platform cpu does not support ray.
Traceback (most recent call last):
RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}
"""
    assert S.log_reason(log) == "ValueError: current platform cpu does not support ray."
    pydantic = """pydantic_core._pydantic_core.ValidationError: 1 validation error for ParallelConfig
  Value error, Total number of attention heads (9) must be divisible by tensor parallel size (2). [type=value_error, input_value=ArgsKwargs((), {}), input_type=ArgsKwargs]
"""
    assert S.log_reason(pydantic) == (
        "Total number of attention heads (9) must be divisible by tensor parallel size (2)."
    )
    assert "/work/x" not in S.log_reason("OSError: cannot open /work/x/secret/file.bin")
    pp = """(Worker_PP1 pid=2747) ERROR 12-02 07:13:25 [multiproc_executor.py:1063]     assert self.intermediate_tensors is not None
(Worker_PP1 pid=2747) ERROR 12-02 07:13:25 [multiproc_executor.py:1063]            ^^^^^^^^^^^^^^^^^^^^^^^^^
(Worker_PP1 pid=2747) ERROR 12-02 07:13:25 [multiproc_executor.py:1063] AssertionError
(EngineCore pid=2736) ERROR 12-02 07:13:25 [core.py:1512] KeyError: 'cmpl-850ba3811b90adb6-0-a012a785'
(APIServer pid=2724) ERROR 12-02 07:13:25 [async_llm.py:906] vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue.
"""
    assert S.log_reason(pp) == "AssertionError in Worker_PP1: assert self.intermediate_tensors is not None"
    arch = (
        "ValueError: Model architectures ['GPTNeoForCausalLM'] are not supported for now. Supported: "
        + "x" * 300
    )
    assert (
        S.log_reason(arch)
        == "ValueError: Model architectures ['GPTNeoForCausalLM'] are not supported for now."
    )
    assert S.command_reason("noise\nerror: vLLM exited (code 1) before it was ready: ValueError: no\n") == (
        "vLLM exited (code 1) before it was ready: ValueError: no"
    )


def test_kv_record_puts_the_prediction_beside_the_logged_figures():
    f = R.parse_kv_line(LOGGED["fp32"])
    folder = Path(__file__).parent / "data" / "smollm2_config"
    pred = R.predicted_kv(folder, "fp32", 2 * GIB, 2048)
    row = R.kv_record(
        f, pred, build=CPU_BUILD, model="m", dtype="fp32", kv_space_bytes=2 * GIB, started_by="serve"
    )
    assert row["tokens_off"] == 0 and row["predicted"]["blocks"] == 364
    assert R.predicted_kv(folder, "fp32", 2 * GIB, 2048, device="cuda") is None


def test_the_lane_says_how_to_make_the_environment(monkeypatch):
    """Without .venv-vllm the lane is skipped with the one sentence, not started."""
    from engine.race import contenders
    from engine.race.process import run_worker

    monkeypatch.setattr(contenders, "vllm_python", lambda: (None, V.missing_sentence()))
    lane = contenders.resolve(["vllm"])[1]
    r = run_worker(lane, {}, 5)
    assert r.status == "skipped" and "bash scripts/make_vllm_env.sh" in r.reason


# ---------------------------------------------------------------- the calculator's CPU branch


@pytest.mark.parametrize(
    ("dtype", "tokens", "concurrency", "blocks"), [("fp32", 46592, 22.75, 364), ("bf16", 93184, 45.5, 728)]
)
def test_cpu_pool_is_exactly_what_vllm_logged(dtype, tokens, concurrency, blocks):
    f = R.parse_kv_line(LOGGED[dtype])
    m = vllm_cpu_memory(
        model_preset("smollm2-135m"), dtype=dtype, kv_space_bytes=2 * GIB, ram_bytes=0.0, max_model_len=2048
    )
    assert (m.kv_cache_tokens, m.blocks, m.block_size) == (tokens, blocks, VLLM_CPU_BLOCK_SIZE)
    assert (
        m.kv_cache_tokens == f.kv_cache_tokens
        and round(m.max_concurrency, 2) == f.max_concurrency == concurrency
    )


def test_concurrency_counts_whole_blocks_per_request():
    # 2,000 tokens need ceil(2000 / 128) = 16 blocks, as 2,048 do: vLLM logs 364 / 16 x 2000 = 45,500 tokens
    m = vllm_cpu_memory(
        model_preset("smollm2-135m"), dtype="fp32", kv_space_bytes=2 * GIB, ram_bytes=0.0, max_model_len=2000
    )
    assert m.max_concurrency == 22.75 and m.kv_cache_tokens == 45500


def test_unset_space_is_vllms_default_and_says_it_is_an_estimate():
    m = vllm_cpu_memory(
        model_preset("smollm2-135m"),
        dtype="fp32",
        kv_space_bytes=None,
        ram_bytes=16 * GIB,
        max_model_len=2048,
    )
    assert m.kv_bytes == pytest.approx(16 * GIB * 0.92 - m.weights_bytes, abs=1)
    assert any("VLLM_CPU_KVCACHE_SPACE unset" in n for n in m.notes)


def test_the_environment_variable_as_vllm_reads_it():
    assert cpu_kv_space_bytes(None) is None and cpu_kv_space_bytes("") is None
    assert cpu_kv_space_bytes("2") == 2 * GIB
    with pytest.raises(InvalidParameterError, match="whole number of GiB"):
        cpu_kv_space_bytes("1.5")


def test_only_this_machines_cpu_takes_the_cpu_branch():
    cpu = GPUSpec(THIS_MACHINE, "this machine", 16 * GIB, 2e10, {"fp32": 1e11})
    gpu_here = GPUSpec(THIS_MACHINE, "this machine", 80 * GIB, 2e12, {"fp32": 1e13, "fp16": 1e14})
    assert is_cpu(cpu) and not is_cpu(gpu_here)
    spec = model_preset("smollm2-135m")
    setup = Setup(spec, cpu, "fp32", None, None, None, "fp32", 1, 1, 512, 512)
    m = serving_memory_of(setup, "vllm", cpu_kv_space_bytes=2 * GIB, max_model_len=2048)
    assert (m.device, m.kv_cache_tokens) == ("cpu", 46592)
    assert serving_memory_of(setup, "sglang").device == "gpu"


def test_ranks_past_one_get_a_core_list_each_and_the_parallel_flags():
    assert V.cpu_binding(1, [0, 1], ranks=2) == "0|1"
    assert V.cpu_binding(2, [0, 1, 2, 3], ranks=2) == "0,1|2,3"
    with pytest.raises(InvalidParameterError, match="need a core each"):
        V.cpu_binding(1, [0, 1], ranks=4)
    la = _launch(tensor_parallel_size=2, distributed_executor_backend="mp")
    assert (
        _flag(la.argv, "--tensor-parallel-size") == "2"
        and _flag(la.argv, "--distributed-executor-backend") == "mp"
    )
    assert la.env["VLLM_CPU_OMP_THREADS_BIND"] == "0|1" and "--pipeline-parallel-size" not in la.argv
    with pytest.raises(InvalidParameterError, match="--pipeline-parallel-size is vLLM's option"):
        BackendServeSpec(pipeline_parallel_size=2).validate()
    with pytest.raises(InvalidParameterError, match="choose from mp, ray"):
        BackendServeSpec(backend="vllm", distributed_executor_backend="nccl").validate()


class _FakeCommand:
    """A ServerProcess of `engine serve --backend vllm` whose /health answers at once: its log grows one line per
    read, and it may exit before its "ready:" line."""

    def __init__(self, lines: list[str], exits: bool = False):
        self.lines, self.reads, self.exits, self.stopped = lines, 0, exits, False
        self.proc = type("P", (), {"returncode": 1})()

    def wait_ready(self, timeout):
        return self

    def log_tail(self, n: int = 1500) -> str:
        self.reads += 1
        return "\n".join(self.lines[: self.reads])

    @property
    def alive(self) -> bool:
        return not (self.exits and self.reads >= len(self.lines))

    def stop(self, timeout=None):
        self.stopped = True


def test_the_command_is_ready_at_its_own_ready_line_not_at_health(monkeypatch):
    monkeypatch.setattr(S.time, "sleep", lambda s: None)
    srv = _FakeCommand(
        ["starting vllm-cpu 0.32.0: ...", "vLLM's log: x", "ready: http://127.0.0.1:1/v1 serving m"]
    )
    assert S.wait_command_ready(srv, timeout=60) is srv and srv.reads == 3  # /health alone was not enough
    dead = _FakeCommand(
        ["starting ...", "error: vLLM exited (code 1) before it was ready: ValueError: no"], exits=True
    )
    with pytest.raises(RuntimeError, match="exited with code 1"):
        S.wait_command_ready(dead, timeout=60)
