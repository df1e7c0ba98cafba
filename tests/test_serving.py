"""The OpenAI-compatible server: official `openai` client and plain httpx round trips, solo-greedy outputs under
concurrency, disconnects, 429, 401, bad requests, /health while generating, /metrics.

Servers run in-process (uvicorn in a thread) on a port the OS picks. Waits are for the thing asserted, with
generous guards; nothing here depends on speed."""

from __future__ import annotations

import threading
import time

import httpx2 as httpx
import openai
import pytest

from engine.runtime.generation import generate
from engine.runtime.settings import GenerationConfig
from engine.serving.protocol import Limits, RequestError, parse_chat, parse_completion
from engine.serving.runner import API_KEY_ENV, ServerThread, ServeSpec, build

PROMPTS = ["The capital of France is", "Once upon a time", "def fibonacci(n):", "List three colours:"]
GUARD_S = 60  # failure guard only


def _server(lm, monkeypatch=None, **spec_kw):
    app, sched = build(ServeSpec(model=lm.name, **spec_kw), lm)
    return ServerThread(app, scheduler=sched).start()


@pytest.fixture(scope="module")
def tiny_server(tiny_lm):
    srv = _server(tiny_lm)
    yield srv
    srv.stop()


def _root(srv) -> str:
    return srv.base_url.removesuffix("/v1")


def _wait_idle(srv, timeout=GUARD_S):
    st = srv.server.config.app.state.serving
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        snap = srv.scheduler.snapshot()
        if not snap.running and not snap.waiting and st.in_system == 0:
            return
        time.sleep(0.05)
    raise AssertionError(
        f"server still busy after {timeout} s: {srv.scheduler.snapshot()}, admitted {st.in_system}"
    )


def _long_stream(srv, key=None, max_tokens=1000):
    """Open a streamed request that would run long; return (client, response, lines) after its first chunk.
    Keep `lines` referenced: a garbage-collected line iterator closes the response (a disconnect)."""
    client = httpx.Client(timeout=GUARD_S)
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    body = {
        "model": srv.scheduler.lm.name,
        "prompt": "Hello",
        "max_tokens": max_tokens,
        "temperature": 0,
        "ignore_eos": True,
        "stream": True,
    }
    resp = client.send(
        client.build_request("POST", srv.base_url + "/completions", json=body, headers=headers), stream=True
    )
    assert resp.status_code == 200
    lines = resp.iter_lines()
    assert next(line for line in lines if line.startswith("data:"))
    return client, resp, lines


# ---------------------------------------------------------------- request mapping (no server)
def test_openai_fields_map_to_generation_config():
    req = parse_completion(
        {
            "model": "m",
            "prompt": "hi",
            "max_tokens": 5,
            "temperature": 0,
            "top_k": -1,
            "stop": "x",
            "seed": 3,
            "repetition_penalty": 1.2,
        },
        Limits(),
    )
    assert req.cfg == GenerationConfig(
        max_new_tokens=5,
        do_sample=False,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        repetition_penalty=1.2,
        seed=3,
        stop=("x",),
    )
    sampled = parse_completion({"model": "m", "prompt": "hi", "temperature": 0.5, "top_p": 0.9}, Limits())
    assert sampled.cfg.do_sample and sampled.cfg.temperature == 0.5 and sampled.cfg.max_new_tokens == 16
    chat = parse_chat(
        {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 7}, Limits()
    )
    assert chat.cfg.max_new_tokens == 7 and chat.messages == ({"role": "user", "content": "hi"},)


@pytest.mark.parametrize(
    "body, param",
    [
        ({"model": "m", "prompt": "hi", "max_tokens": -1}, "max_tokens"),
        ({"model": "m", "prompt": "hi", "n": 2}, "n"),
        ({"model": "m", "prompt": "hi", "logprobs": 2}, "logprobs"),
        ({"model": "m", "prompt": "hi", "frequency_penalty": 0.5}, "frequency_penalty"),
        ({"model": "m", "prompt": "hi", "made_up": 1}, "made_up"),
        ({"model": "m", "prompt": ["a", "b"]}, "prompt"),
        ({"model": "m", "prompt": "hi", "temperature": float("nan")}, "temperature"),
    ],
)
def test_unsupported_or_bad_fields_are_refused_by_name(body, param):
    with pytest.raises(RequestError) as err:
        parse_completion(body, Limits())
    assert err.value.status == 400 and err.value.param == param and err.value.message


# ---------------------------------------------------------------- round trips
def test_openai_client_completion_round_trip_is_solo_greedy(tiny_server, tiny_lm):
    client = openai.OpenAI(base_url=tiny_server.base_url, api_key="unused", max_retries=0)
    assert [m.id for m in client.models.list().data] == [tiny_lm.name]
    solo = generate(tiny_lm, PROMPTS[0], GenerationConfig(max_new_tokens=12), record=False)
    got = client.completions.create(model=tiny_lm.name, prompt=PROMPTS[0], max_tokens=12, temperature=0)
    assert got.choices[0].text == solo.text
    assert got.usage.completion_tokens == len(solo.token_ids)
    assert got.usage.prompt_tokens == solo.measurement.prompt_tokens
    stream = client.completions.create(
        model=tiny_lm.name,
        prompt=PROMPTS[0],
        max_tokens=12,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    events = list(stream)
    assert "".join(e.choices[0].text for e in events if e.choices) == solo.text
    assert events[-1].usage.completion_tokens == len(solo.token_ids)
    assert [e.choices[0].finish_reason for e in events if e.choices][-1] in ("length", "stop")


def test_openai_client_chat_round_trip_matches_the_chat_template(tiny_server, tiny_lm):
    client = openai.OpenAI(base_url=tiny_server.base_url, api_key="unused", max_retries=0)
    solo = generate(
        tiny_lm, "What is 2+2?", GenerationConfig(max_new_tokens=10, chat_template=True), record=False
    )
    msgs = [{"role": "user", "content": "What is 2+2?"}]
    got = client.chat.completions.create(model=tiny_lm.name, messages=msgs, max_tokens=10, temperature=0)
    assert got.choices[0].message.content == solo.text and got.choices[0].message.role == "assistant"
    stream = client.chat.completions.create(
        model=tiny_lm.name, messages=msgs, max_tokens=10, temperature=0, stream=True
    )
    assert "".join(e.choices[0].delta.content or "" for e in stream if e.choices) == solo.text


@pytest.mark.slow
def test_smollm2_chat_through_the_server_is_real_text(smol_lm):
    """The bundled instruct model through the chat endpoint gives what the engine gives for the same template."""
    srv = _server(smol_lm)
    try:
        client = openai.OpenAI(base_url=srv.base_url, api_key="unused", max_retries=0)
        solo = generate(
            smol_lm,
            "What is the capital of France?",
            GenerationConfig(max_new_tokens=12, chat_template=True),
            record=False,
        )
        got = client.chat.completions.create(
            model=smol_lm.name,
            max_tokens=12,
            temperature=0,
            messages=[{"role": "user", "content": "What is the capital of France?"}],
        )
        assert got.choices[0].message.content == solo.text
        assert "Paris" in solo.text
    finally:
        srv.stop()


def test_concurrent_requests_get_their_own_solo_outputs(tiny_server, tiny_lm):
    solos = {
        p: generate(tiny_lm, p, GenerationConfig(max_new_tokens=20 + i), record=False).text
        for i, p in enumerate(PROMPTS)
    }
    results: dict[str, str] = {}  # the second answer for a prompt overwrites the first: both must equal solo

    def ask(i: int, p: str) -> None:
        r = httpx.post(
            tiny_server.base_url + "/completions",
            timeout=GUARD_S,
            json={"model": tiny_lm.name, "prompt": p, "max_tokens": 20 + i, "temperature": 0},
        )
        text = r.json()["choices"][0]["text"]
        results[p] = text if results.get(p, text) == text else "<the two answers differ>"

    # each prompt twice, all at once: eight requests through the batch of eight
    threads = [threading.Thread(target=ask, args=(i, p)) for _ in range(2) for i, p in enumerate(PROMPTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(GUARD_S)
    assert results == solos


# ---------------------------------------------------------------- limits and failures
@pytest.fixture(scope="module")
def smol_server(smol_lm):
    """The bundled 135M model: decoding 1000 tokens takes many seconds on a CPU, so streams stay open while the
    tests look at them (tiny-gpt-neo would finish them in about a second)."""
    srv = _server(smol_lm)
    yield srv
    srv.stop()


@pytest.mark.slow
def test_disconnect_mid_stream_frees_the_slot(smol_server):
    before = smol_server.scheduler.snapshot().tokens_generated
    client, resp, _lines = _long_stream(smol_server)
    assert len(smol_server.scheduler.snapshot().running) == 1
    with smol_server.scheduler.lm.lock:  # pause decoding so the disconnect lands mid-stream on any machine
        resp.close()
        client.close()
        time.sleep(1)  # the server notices the closed socket while the batch is paused
    _wait_idle(smol_server)
    assert smol_server.scheduler.snapshot().tokens_generated - before < 1000  # cancelled, not run to the end


@pytest.mark.slow
def test_health_answers_while_four_streams_generate(smol_server):
    """A health endpoint once stopped answering while the server generated on 2 cores. Here generation is
    off the event loop, so /health answers within 10 s (a correctness bound, not a speed claim)."""
    opened = [_long_stream(smol_server) for _ in range(4)]
    try:
        t = time.perf_counter()
        r = httpx.get(_root(smol_server) + "/health", timeout=10)
        assert r.status_code == 200 and r.json()["status"] == "ok"
        assert r.json()["running"] + r.json()["waiting"] == 4
        assert time.perf_counter() - t < 10
        metrics = httpx.get(_root(smol_server) + "/metrics", timeout=10).text
        name = smol_server.scheduler.lm.name
        assert f'inference_lab_requests_running{{model="{name}"}} 4.0' in metrics
        kv = next(
            line for line in metrics.splitlines() if line.startswith("inference_lab_kv_cache_bytes_in_use{")
        )
        assert float(kv.split()[-1]) > 0
    finally:
        for client, resp, _ in opened:
            resp.close()
            client.close()
    _wait_idle(smol_server)


def test_metrics_count_requests_tokens_and_latencies(tiny_server, tiny_lm):
    httpx.post(
        tiny_server.base_url + "/completions",
        timeout=GUARD_S,
        json={"model": tiny_lm.name, "prompt": "Hi", "max_tokens": 4, "temperature": 0, "ignore_eos": True},
    )
    text = httpx.get(_root(tiny_server) + "/metrics", timeout=10).text
    assert 'inference_lab_requests_total{endpoint="completions",status="200"}' in text
    assert "inference_lab_output_tokens_total" in text
    for name in ("time_to_first_token_seconds", "inter_token_latency_seconds", "e2e_request_latency_seconds"):
        count = next(line for line in text.splitlines() if line.startswith(f"inference_lab_{name}_count"))
        assert float(count.split()[-1]) >= 1 or name == "inter_token_latency_seconds"
    assert "inference_lab_requests_waiting" in text


@pytest.mark.parametrize(
    "content, status, words",
    [
        (b'{"model": "tiny-gpt-neo", "prompt": ', 400, "not valid JSON"),
        (b'{"model": "tiny-gpt-neo", "prompt": "hi", "max_tokens": -3}', 400, "max_tokens"),
        (b'{"model": "gpt-4o", "prompt": "hi"}', 404, "not served here"),
        (b'{"model": "tiny-gpt-neo", "prompt": "hi", "max_tokens": 5000}', 400, "max_tokens"),
        (
            b'{"model": "tiny-gpt-neo", "prompt": "' + b"word " * 3000 + b'", "max_tokens": 8}',
            400,
            "context window",
        ),
        (b'{"model": "tiny-gpt-neo", "prompt": "' + b"x" * 1_100_000 + b'"}', 413, "at most"),
        (b"[1, 2]", 400, "JSON object"),
        (b'{"model": "tiny-gpt-neo", "prompt": "hi", "logprobs": 2}', 400, "logprobs"),
    ],
)
def test_bad_requests_get_4xx_with_a_message_and_the_server_stays_healthy(
    tiny_server, tiny_lm, content, status, words
):
    r = httpx.post(
        tiny_server.base_url + "/completions",
        content=content,
        timeout=GUARD_S,
        headers={"content-type": "application/json"},
    )
    assert r.status_code == status, r.text
    assert words in r.json()["error"]["message"]
    assert httpx.get(_root(tiny_server) + "/health", timeout=10).json()["status"] == "ok"
    ok = httpx.post(
        tiny_server.base_url + "/completions",
        timeout=GUARD_S,
        json={"model": tiny_lm.name, "prompt": "Hi", "max_tokens": 2, "temperature": 0},
    )
    assert ok.status_code == 200


def test_api_key_and_full_queue(tiny_lm, monkeypatch):
    """With INFERENCE_LAB_API_KEY set: 401 without it (openai raises AuthenticationError); with one slot and no
    queue, a second request while the first streams gets 429 with Retry-After, and the slot frees afterwards."""
    monkeypatch.setenv(API_KEY_ENV, "s3cret")
    srv = _server(tiny_lm, max_batch=1, max_queue=0)
    try:
        assert httpx.get(srv.base_url + "/models", timeout=10).status_code == 401
        r = httpx.post(
            srv.base_url + "/completions", json={"model": tiny_lm.name, "prompt": "hi"}, timeout=10
        )
        assert r.status_code == 401 and "API key" in r.json()["error"]["message"]
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=srv.base_url, api_key="wrong", max_retries=0).completions.create(
                model=tiny_lm.name, prompt="hi", max_tokens=2
            )
        good = openai.OpenAI(base_url=srv.base_url, api_key="s3cret", max_retries=0)
        assert good.completions.create(model=tiny_lm.name, prompt="hi", max_tokens=2, temperature=0).choices
        auth = {"Authorization": "Bearer s3cret"}
        first: dict = {}
        with tiny_lm.lock:  # the one slot's request cannot finish while the test holds the model
            t = threading.Thread(
                target=lambda: first.update(
                    r=httpx.post(
                        srv.base_url + "/completions",
                        headers=auth,
                        timeout=GUARD_S,
                        json={"model": tiny_lm.name, "prompt": "hi", "max_tokens": 2, "temperature": 0},
                    )
                )
            )
            t.start()
            st = srv.server.config.app.state.serving
            deadline = time.monotonic() + GUARD_S
            while st.in_system < 1 and time.monotonic() < deadline:
                time.sleep(0.02)
            busy = httpx.post(
                srv.base_url + "/completions",
                headers=auth,
                timeout=10,
                json={"model": tiny_lm.name, "prompt": "hi", "max_tokens": 2},
            )
            assert busy.status_code == 429 and busy.headers["retry-after"] == "1"
            assert "full" in busy.json()["error"]["message"]
        t.join(GUARD_S)
        assert first["r"].status_code == 200
        _wait_idle(srv)
        assert good.completions.create(model=tiny_lm.name, prompt="hi", max_tokens=2, temperature=0).choices
    finally:
        srv.stop()


def test_serve_binds_loopback_by_default():
    assert ServeSpec().host == "127.0.0.1"
    from engine.cli import build_parser

    parser, _ = build_parser()
    assert parser.parse_args(["serve"]).host == "127.0.0.1"


def test_serve_flags_come_from_the_spec_and_bad_values_are_named():
    from engine.cli import build_parser
    from engine.core.errors import InvalidParameterError

    parser, _ = build_parser()
    args = parser.parse_args(["serve", "--compile-decode", "--max-queue", "0", "--port", "0"])
    spec = ServeSpec.from_args(args)
    assert spec.compile_decode and spec.limits.max_queue == 0 and spec.port == 0
    assert not ServeSpec.from_args(parser.parse_args(["serve"])).compile_decode  # off by default
    with pytest.raises(InvalidParameterError, match="port must be from 0 to 65535"):
        ServeSpec.from_args(parser.parse_args(["serve", "--port", "70000"]))
    with pytest.raises(InvalidParameterError, match="max body bytes must be at least 1024"):
        ServeSpec.from_args(parser.parse_args(["serve", "--max-body-bytes", "10"]))


@pytest.mark.slow
def test_compiled_decode_server_answers_greedy_like_the_eager_one(tiny_server):
    """`serve --compile-decode`: every decode step of the server's scheduler runs the compiled step, and a greedy
    completion is token-for-token the eager server's. The server gets a model object of its own (the compiled
    step is kept per model object, and the session's shared tiny model is compiled at other shapes by other
    tests), so the status checked is this server's compile."""
    from engine.runtime.models import load_model

    own = load_model("tiny-gpt-neo")
    srv = _server(own, compile_decode=True)
    try:
        assert srv.scheduler.compile_decode
        body = {"model": own.name, "prompt": PROMPTS[0], "max_tokens": 12, "temperature": 0}
        with httpx.Client(timeout=600) as client:  # the first request pays the compile
            compiled = client.post(f"{srv.base_url}/completions", json=body).json()
            eager = client.post(f"{tiny_server.base_url}/completions", json=body).json()
        assert compiled["choices"][0]["text"] == eager["choices"][0]["text"]
        status = srv.scheduler._decoder.status if srv.scheduler._decoder else None
        assert status is not None and status.state == "ready", status
    finally:
        srv.stop()


def test_the_server_process_leaves_a_core_to_the_http_side(monkeypatch):
    from engine.serving.runner import server_threads

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    assert server_threads(ServeSpec(model="tiny-gpt-neo")) == 1
    monkeypatch.setattr("os.cpu_count", lambda: 16)
    assert server_threads(ServeSpec(model="tiny-gpt-neo")) == 15
    monkeypatch.setattr("os.cpu_count", lambda: 1)
    assert server_threads(ServeSpec(model="tiny-gpt-neo")) == 1
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert server_threads(ServeSpec(model="tiny-gpt-neo")) == 3
    assert server_threads(ServeSpec(model="tiny-gpt-neo", threads=2)) == 2
