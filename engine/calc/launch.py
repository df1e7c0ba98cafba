"""From a plan that fits to the command that serves it: `vllm serve` and SGLang's `launch_server`, with the flags
the plan decided (parallel sizes, context, memory fraction, batch, dtype, quantization, KV-cache dtype), and for a
plan past one node the steps vLLM documents for a Ray cluster.

Flag names: vllm/engine/arg_utils.py (`--tensor-parallel-size`, `--pipeline-parallel-size`, `--max-model-len`,
`--gpu-memory-utilization`, `--max-num-seqs`, `--dtype`, `--quantization`, `--kv-cache-dtype`) and
sglang/srt/server_args.py (`--tp-size`, `--pp-size`, `--context-length`, `--mem-fraction-static`,
`--max-running-requests`, `--dtype`, `--quantization`, `--kv-cache-dtype`). Multi-node: vLLM's "Distributed
inference and serving" page: tensor parallel = GPUs per node, pipeline parallel = nodes, a Ray cluster started with
examples/online_serving/run_cluster.sh on every node, then one `vllm serve` on the head node.
Standard library only.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from engine.calc.quant import weight_format as weight_format_info

GPUS_PER_NODE = 8  # an HGX/DGX node; the steps say so when a plan needs more


@dataclass(frozen=True)
class LaunchPlan:
    model: str
    tensor_parallel: int
    pipeline_parallel: int
    max_model_len: int
    gpu_memory_utilization: float
    max_num_seqs: int  # 0: leave it to the server
    dtype: str  # fp16 | bf16 | fp32 (the activations' precision) | auto (the checkpoint's, from its config)
    weight_format: str | None
    kv_dtype: str | None  # None or the weights' precision: "auto"
    # weights quantized by the server as it loads a 16-bit checkpoint (vLLM's and SGLang's `--quantization fp8`,
    # "online dynamic quantization"): the plan's plain fp8 precision, with no quantized format named
    online_quantization: str | None = None


_DTYPES = {"fp16": "float16", "bf16": "bfloat16", "fp32": "float32"}
# engine -> (the command's start, then its flag for: tensor parallel, pipeline parallel, context length, memory
# fraction, running requests; and its name for an fp8 KV cache)
_ENGINES = {
    "vllm": (
        ("vllm", "serve"),
        ("--tensor-parallel-size", "--pipeline-parallel-size", "--max-model-len", "--gpu-memory-utilization"),
        "--max-num-seqs",
        "fp8",
    ),
    "sglang": (
        ("python", "-m", "sglang.launch_server", "--model-path"),
        ("--tp-size", "--pp-size", "--context-length", "--mem-fraction-static"),
        "--max-running-requests",
        "fp8_e4m3",
    ),
}

# engine -> its flag for the requests a server runs at once
CAP_FLAG = {engine: spec[2] for engine, spec in _ENGINES.items()}


def _command(engine: str, plan: LaunchPlan, memory_fraction: float) -> str:
    start, (tp, pp, length, memory), seqs, fp8 = _ENGINES[engine]
    args = [*start, plan.model]
    if plan.tensor_parallel > 1:
        args += [tp, str(plan.tensor_parallel)]
    if plan.pipeline_parallel > 1:
        args += [pp, str(plan.pipeline_parallel)]
    args += [length, str(plan.max_model_len), memory, f"{memory_fraction:g}"]
    if plan.max_num_seqs:  # 0: the server's own default
        args += [seqs, str(plan.max_num_seqs)]
    args += ["--dtype", _DTYPES.get(plan.dtype, "auto")]
    q = (
        weight_format_info(plan.weight_format).vllm_quantization
        if plan.weight_format
        else plan.online_quantization
    )
    if q and q != "gguf":
        args += ["--quantization", q]
    if plan.kv_dtype == "fp8":
        args += ["--kv-cache-dtype", fp8]
    return shlex.join(args)


def vllm_command(plan: LaunchPlan) -> str:
    """One `vllm serve` command line (tensor x pipeline GPUs; pipeline stages are nodes past one node)."""
    return _command("vllm", plan, plan.gpu_memory_utilization)


def vllm_cpu_command(plan: LaunchPlan, kv_space_gib: int | None) -> str:
    """vLLM on a CPU as the lab starts it (`python -m engine serve --backend vllm`): the pool from
    VLLM_CPU_KVCACHE_SPACE (GiB), eager (a compiled start takes minutes on a CPU), and the API server as a module
    (vllm-cpu's `vllm` console script fails: its distribution is not named vllm); no memory fraction, no parallel."""
    args = ["python", "-m", "vllm.entrypoints.openai.api_server", "--model", plan.model]
    args += ["--max-model-len", str(plan.max_model_len)]
    if plan.max_num_seqs > 0:  # 0: not asked, and vLLM's CPU default is its own to choose (never 0)
        args += ["--max-num-seqs", str(plan.max_num_seqs)]
    args += ["--dtype", _DTYPES.get(plan.dtype, "auto"), "--enforce-eager"]
    space = [f"VLLM_CPU_KVCACHE_SPACE={kv_space_gib}"] if kv_space_gib is not None else []
    return " ".join([*space, shlex.join(args)])


def sglang_command(plan: LaunchPlan, mem_fraction: float) -> str:
    return _command("sglang", plan, mem_fraction)


def multi_node_steps(plan: LaunchPlan) -> list[str]:
    """vLLM's documented steps for a plan past one node: tensor parallel within a node, pipeline across nodes."""
    gpus = plan.tensor_parallel * plan.pipeline_parallel
    if gpus <= GPUS_PER_NODE:
        return []
    return [
        f"The plan needs {gpus} GPUs: more than one node of {GPUS_PER_NODE}. vLLM's guide: tensor parallel = GPUs per "
        "node, pipeline parallel = nodes.",
        "On the head node: bash run_cluster.sh vllm/vllm-openai <HEAD_NODE_IP> --head /path/to/huggingface/home "
        "-e VLLM_HOST_IP=<HEAD_NODE_IP>  (examples/online_serving/run_cluster.sh in vLLM's repository)",
        "On every other node: bash run_cluster.sh vllm/vllm-openai <HEAD_NODE_IP> --worker /path/to/huggingface/home "
        "-e VLLM_HOST_IP=<WORKER_NODE_IP>",
        "Check with `ray status` that Ray sees every node and GPU; keep the shells open (closing one ends the cluster).",
        f"Then on the head node, once: {vllm_command(plan)}",
        "With InfiniBand add --privileged -e NCCL_IB_HCA=mlx5 to run_cluster.sh; NCCL_DEBUG=TRACE should show "
        "'[send] via NET/IB/GDRDMA', not NET/Socket.",
    ]
