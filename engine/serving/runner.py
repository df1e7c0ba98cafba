"""Run the app with uvicorn: in the foreground (`python -m engine serve`) or in a background thread on a free
port (tests, benchmarks). Binds 127.0.0.1 unless told otherwise; the API key comes from the environment only."""

from __future__ import annotations

import os
import sys
import threading
import time
from dataclasses import dataclass

import uvicorn

from engine.batching.scheduler import DEFAULT_MAX_BATCH, MAX_BATCH_LIMIT, Scheduler
from engine.core.spec import Spec, option
from engine.core.threads import run_in_thread
from engine.runtime.models import LoadedModel, ModelArgs, load_model
from engine.serving.app import create_app
from engine.serving.protocol import Limits

API_KEY_ENV = "INFERENCE_LAB_API_KEY"
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000
_LIMITS = Limits()  # the server's refusals by default


@dataclass(frozen=True)
class ServeSpec(ModelArgs, Spec):
    """What `python -m engine serve` takes: each option once, with its default, bounds and help (the CLI's flags
    are built from it). The request limits are the server's refusals (engine.serving.protocol.Limits)."""

    served_name: str | None = option(
        None, "the model id clients send as `model` (default: the model's name)", kind=str
    )
    host: str = option(
        DEFAULT_HOST,
        "address to bind (127.0.0.1: this machine only; 0.0.0.0 serves the network, set an API key then)",
    )
    port: int = option(DEFAULT_PORT, "port to listen on (0: a free one)", lo=0, hi=65535)
    max_batch: int = option(DEFAULT_MAX_BATCH, "requests decoded together", lo=1, hi=MAX_BATCH_LIMIT)
    kv_budget_bytes: int | None = option(
        None, "KV cache budget in bytes (default: a quarter of free memory)", kind=int, lo=1
    )
    compile_decode: bool = option(
        False,
        "run every decode step through the compiled step (torch.compile; CUDA graphs on a GPU); where the "
        "model or machine cannot compile, it decodes eagerly and says why",
    )
    max_tokens: int = option(_LIMITS.max_tokens, "largest max_tokens a request may ask for", lo=1)
    max_prompt_tokens: int | None = option(
        None, "longest prompt in tokens (default: the context window)", kind=int, lo=1
    )
    max_body_bytes: int = option(_LIMITS.max_body_bytes, "largest request body in bytes", lo=1024)
    max_queue: int = option(_LIMITS.max_queue, "requests waiting beyond the batch; more get 429", lo=0)
    packed_weights: bool = option(
        True,
        "on a CPU in fp32, pack the linear layers' weights once for oneDNN (engine.runtime.packed: a few-row decode "
        "step stays as fast as one row; the same greedy tokens); --no-packed-weights keeps nn.Linear's products",
    )
    threads: int | None = option(
        None,
        "torch CPU threads of the server process (default: OMP_NUM_THREADS if set, else one fewer than the "
        "CPU cores, at least 1, so the HTTP side keeps a core)",
        kind=int,
        lo=1,
    )

    @property
    def limits(self) -> Limits:
        return Limits(
            max_tokens=self.max_tokens,
            max_prompt_tokens=self.max_prompt_tokens,
            max_body_bytes=self.max_body_bytes,
            max_queue=self.max_queue,
        )


def build(spec: ServeSpec, lm: LoadedModel | None = None):
    """(app, scheduler) for a spec; loads the model unless one is given."""
    spec.validate()
    # loaded on a thread that ends, so no OpenMP team stays behind to slow the scheduler's (engine.core.threads)
    if lm is None:
        lm = run_in_thread(lambda: load_model(spec.model, dtype=spec.dtype, device=spec.device))
        # this process owns the model: pack it for its steps (not under --compile-decode: untested with torch.compile)
        if spec.packed_weights and not spec.compile_decode:
            from engine.runtime.packed import pack_linears

            report = pack_linears(lm.model, rows=spec.max_batch)
            lm.notes = (*lm.notes, report.note())
            print(f"engine serve: {report.note()}", file=sys.stderr, flush=True)
    scheduler = Scheduler(
        lm,
        max_batch=spec.max_batch,
        kv_budget_bytes=spec.kv_budget_bytes,
        record=False,
        compile_decode=spec.compile_decode,
    )
    app = create_app(
        scheduler,
        served_name=spec.served_name,
        limits=spec.limits,
        api_key=os.environ.get(API_KEY_ENV) or None,
    )
    return app, scheduler


class ServerThread:
    """uvicorn in a daemon thread; `port=0` takes a free port from the OS. Use as a context manager."""

    def __init__(
        self, app, host: str = DEFAULT_HOST, port: int = 0, scheduler: Scheduler | None = None
    ) -> None:
        self.scheduler = scheduler
        config = uvicorn.Config(
            app, host=host, port=port, log_level="warning", lifespan="off", timeout_graceful_shutdown=2
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name="uvicorn", daemon=True)
        self.host = host

    def start(self, timeout: float = 60.0) -> ServerThread:
        self.thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the server did not start (is the port taken?)")
            time.sleep(0.02)
        return self

    @property
    def port(self) -> int:
        return int(self.server.servers[0].sockets[0].getsockname()[1])

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)
        if self.scheduler is not None:
            self.scheduler.close()

    def __enter__(self) -> ServerThread:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def server_threads(spec: ServeSpec) -> int:
    """The torch threads `python -m engine serve` runs with. One core is left to the event loop, the pump threads
    and the tokenizer: with an OpenMP team as wide as the machine, the team's threads spin at every barrier while
    the event loop waits for a core to write the chunks, and on a busy machine each parallel region also waits
    for both its threads to be scheduled (bench/serving_itl.py measured tiny-gpt-neo on 2 cores, 4 users, load
    about 5: ITL p50 610 ms with 2 threads, 10 ms with 1)."""
    if spec.threads is not None:
        return spec.threads
    env = os.environ.get("OMP_NUM_THREADS", "")
    if env.isdigit() and int(env) >= 1:
        return int(env)
    return max(1, (os.cpu_count() or 1) - 1)


def serve_forever(spec: ServeSpec) -> None:
    import torch

    torch.set_num_threads(server_threads(spec))  # this process is the server's own: its setting to choose
    app, scheduler = build(spec)
    try:
        uvicorn.run(app, host=spec.host, port=spec.port, log_level="info", timeout_graceful_shutdown=5)
    finally:
        scheduler.close()
