"""Run the app with uvicorn: in the foreground (`python -m engine serve`) or in a background thread on a free
port (tests, benchmarks). Binds 127.0.0.1 unless told otherwise; the API key comes from the environment only."""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field

import uvicorn

from engine.batching.scheduler import DEFAULT_MAX_BATCH, Scheduler
from engine.core.errors import InvalidParameterError
from engine.core.threads import run_in_thread
from engine.runtime.models import LoadedModel, load_model
from engine.serving.app import create_app
from engine.serving.protocol import Limits

API_KEY_ENV = "INFERENCE_LAB_API_KEY"
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000


@dataclass(frozen=True)
class ServeSpec:
    """What `python -m engine serve` takes; one source of the CLI's defaults."""

    model: str = "smollm2-135m-instruct"
    dtype: str = "auto"
    device: str = "auto"
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    served_name: str | None = None  # the id clients send as `model`; default: the engine's model name
    max_batch: int = DEFAULT_MAX_BATCH
    kv_budget_bytes: int | None = None
    limits: Limits = field(default_factory=Limits)

    def validate(self) -> ServeSpec:
        if not 0 <= self.port <= 65535:
            raise InvalidParameterError(f"--port must be 0..65535, got {self.port}")
        if self.limits.max_queue < 0 or self.limits.max_tokens < 1 or self.limits.max_body_bytes < 1024:
            raise InvalidParameterError(
                "--max-queue must be >= 0, --max-tokens >= 1 and --max-body-bytes >= 1024"
            )
        return self


def build(spec: ServeSpec, lm: LoadedModel | None = None):
    """(app, scheduler) for a spec; loads the model unless one is given."""
    spec.validate()
    # loaded on a thread that ends, so no OpenMP team stays behind to slow the scheduler's (engine.core.threads)
    lm = lm or run_in_thread(lambda: load_model(spec.model, dtype=spec.dtype, device=spec.device))
    scheduler = Scheduler(lm, max_batch=spec.max_batch, kv_budget_bytes=spec.kv_budget_bytes, record=False)
    app = create_app(
        lm,
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


def serve_forever(spec: ServeSpec) -> None:
    app, scheduler = build(spec)
    try:
        uvicorn.run(app, host=spec.host, port=spec.port, log_level="info", timeout_graceful_shutdown=5)
    finally:
        scheduler.close()
