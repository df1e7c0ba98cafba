"""Compiled decode (engine.runtime.compiled.CompiledDecode): the static slot cache and the torch.compile'd step give the
eager path's greedy tokens through generate, generate_batch, stream and the shared scheduler, for GPT-Neo (its
local-attention layers too) and a Llama; cancellation and concurrent requests behave as in eager decoding; where
compiling is impossible the run decodes eagerly and says why. No timings are asserted here (bench/decode.py
measures the speed). Compiling takes tens of seconds per graph on a CPU: these tests share the session's models
so each graph compiles once."""

from __future__ import annotations

import threading

import pytest

from engine.batching.scheduler import Scheduler
from engine.core.errors import CancelledError, CompileUnavailableError, InvalidParameterError
from engine.runtime import compiled, generation, kvcache, streaming
from engine.runtime.settings import GenerationConfig

PROMPTS = ["def add(a, b):", "The GPU is", "Once upon a time, in a small village by the sea,"]
EAGER = GenerationConfig(max_new_tokens=16)
COMPILED = GenerationConfig(max_new_tokens=16, compile=True)


@pytest.fixture(scope="module")
def tiny_llama(tiny_lm):
    """A 2-layer Llama with random weights and grouped-query attention (4 heads, 2 KV heads), SDPA attention:
    the family of the bundled SmolLM2 in milliseconds. It borrows tiny-gpt-neo's tokenizer (same vocabulary)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from engine.runtime.models import LoadedModel

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tiny_lm.tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        pad_token_id=tiny_lm.tokenizer.pad_token_id,
        eos_token_id=tiny_lm.tokenizer.eos_token_id,
        attn_implementation="sdpa",
    )
    model = LlamaForCausalLM(config).eval()
    params = sum(p.numel() for p in model.parameters())
    return LoadedModel(
        name="tiny-llama",
        model=model,
        tokenizer=tiny_lm.tokenizer,
        dtype="fp32",
        device="cpu",
        params=params,
        footprint_bytes=params * 4,
        device_map={"": "cpu"},
        load_s=0.0,
        source="built in the test",
        context_length=512,
        architecture="LlamaForCausalLM",
    )


def _same_tokens(lm, cfg_eager: GenerationConfig, cfg_compiled: GenerationConfig) -> None:
    one = generation.generate(lm, PROMPTS[0], cfg_compiled, record=False)
    assert one.decode == "compiled" and not one.decode_note
    assert one.token_ids == generation.generate(lm, PROMPTS[0], cfg_eager, record=False).token_ids
    batch = generation.generate_batch(lm, PROMPTS, cfg_compiled, record=False)
    eager = generation.generate_batch(lm, PROMPTS, cfg_eager, record=False)
    assert batch.decode == "compiled"
    assert [c.token_ids for c in batch.completions] == [c.token_ids for c in eager.completions]
    assert [c.text for c in batch.completions] == [c.text for c in eager.completions]
    s = streaming.stream(lm, PROMPTS[2], cfg_compiled, record=False)
    streamed = "".join(s)
    assert s.completion is not None and s.completion.decode == "compiled"
    assert streamed == s.completion.text
    assert s.completion.token_ids == generation.generate(lm, PROMPTS[2], cfg_eager, record=False).token_ids


@pytest.mark.slow
def test_gpt_neo_generate_batch_and_stream_match_eager(tiny_lm):
    _same_tokens(tiny_lm, EAGER, COMPILED)
    status = generation.compile_status(tiny_lm)
    assert status is not None and status["state"] == "ready" and status["compile_s"]


@pytest.mark.slow
def test_llama_generate_batch_and_stream_match_eager(tiny_llama):
    _same_tokens(tiny_llama, EAGER, COMPILED)


@pytest.mark.slow
def test_gpt_neo_beyond_its_local_window_matches_eager(tiny_lm):
    """Past 256 columns GPT-Neo's local layers see only the last 256 tokens, relative to the last column the
    model is given: the compiled step then right-aligns its view (kv module doc). A long prompt crosses it."""
    prompt = " ".join(["word"] * 240)
    cfg = GenerationConfig(max_new_tokens=40)
    c = generation.generate(tiny_lm, prompt, GenerationConfig(max_new_tokens=40, compile=True), record=False)
    assert c.token_ids == generation.generate(tiny_lm, prompt, cfg, record=False).token_ids
    assert c.measurement.prompt_tokens + 40 > 256
    assert any("right-aligned" in shape for shape in generation.compile_status(tiny_lm)["compile_s"])


@pytest.mark.slow
@pytest.mark.parametrize("lm_name", ["tiny_lm", "tiny_llama"])
def test_scheduler_rows_joining_and_leaving_match_eager(lm_name, request):
    """Rows join and leave the compiled step (3 requests, 2 slots, different lengths): the same tokens as solo
    eager runs; the requests that asked for it say their steps ran compiled."""
    lm = request.getfixturevalue(lm_name)
    lengths = [12, 5, 9]
    solo = [
        generation.generate(lm, p, GenerationConfig(max_new_tokens=n), record=False).token_ids
        for p, n in zip(PROMPTS, lengths, strict=True)
    ]
    sched = Scheduler(lm, max_batch=2, record=False)
    try:
        handles = [
            sched.submit(p, GenerationConfig(max_new_tokens=n, compile=True))
            for p, n in zip(PROMPTS, lengths, strict=True)
        ]
        done = [h.result(900) for h in handles]
    finally:
        sched.close()
    assert [c.token_ids for c in done] == solo
    assert {c.decode for c in done} == {"compiled"}


@pytest.mark.slow
def test_server_flag_compiles_every_step(tiny_lm):
    """Scheduler(compile_decode=True), what `serve --compile-decode` builds: requests that did not ask for it run
    compiled too, with the eager tokens."""
    solo = generation.generate(tiny_lm, PROMPTS[1], EAGER, record=False).token_ids
    sched = Scheduler(tiny_lm, max_batch=2, record=False, compile_decode=True)
    try:
        c = sched.submit(PROMPTS[1], EAGER).result(900)
    finally:
        sched.close()
    assert c.token_ids == solo and c.decode == "compiled"


@pytest.mark.slow
def test_cancel_through_the_compiled_scheduler_leaves_the_others_running(tiny_lm):
    sched = Scheduler(tiny_lm, max_batch=4, record=False)
    keep_cfg = GenerationConfig(max_new_tokens=30, compile=True)
    solo = generation.generate(tiny_lm, "keep going", GenerationConfig(max_new_tokens=30), record=False)
    try:
        keep = sched.submit("keep going", keep_cfg, ignore_eos=True)
        drop = sched.submit("stop me", GenerationConfig(max_new_tokens=400, compile=True), ignore_eos=True)
        chunks = iter(drop)
        next(chunks)  # it is running
        drop.cancel()
        list(chunks)
        assert drop.completion is not None and drop.completion.stop_reason == "cancelled"
        assert len(drop.completion.token_ids) < 400
        kept = keep.result(900)
        assert len(kept.token_ids) == 30
        if solo.stop_reason == "length":  # random weights: compare whole runs only when EOS did not cut one
            assert kept.token_ids == solo.token_ids
        waiting = Scheduler(tiny_lm, max_batch=1, record=False)
        try:
            first = waiting.submit("first", keep_cfg, ignore_eos=True)
            queued = waiting.submit("second", keep_cfg)
            queued.cancel()
            with pytest.raises(CancelledError):
                queued.result(900)
            assert first.result(900).stop_reason == "length"
        finally:
            waiting.close()
    finally:
        sched.close()


@pytest.mark.slow
def test_concurrent_compiled_requests_get_their_own_outputs(tiny_lm):
    cfg = GenerationConfig(max_new_tokens=10, compile=True)
    prompts = [f"request number {i} says" for i in range(6)]
    solo = {
        p: generation.generate(tiny_lm, p, GenerationConfig(max_new_tokens=10), record=False).token_ids
        for p in prompts
    }
    sched = Scheduler(tiny_lm, max_batch=4, record=False)
    got: dict[str, tuple[int, ...]] = {}
    errors: list[BaseException] = []

    def user(p: str) -> None:
        try:
            h = sched.submit(p, cfg)
            text = "".join(h)
            assert text == h.completion.text
            got[p] = h.completion.token_ids
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=user, args=(p,)) for p in prompts]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(900)
    finally:
        sched.close()
    assert not errors
    assert got == solo


@pytest.mark.slow
def test_a_failing_compile_decodes_eagerly_and_says_why(monkeypatch):
    """torch.compile raising (a broken or missing compiler): the run finishes eagerly with the same tokens, and
    the completion, the status and the scheduler's completions carry the reason."""
    from engine.runtime.models import load_model

    lm = load_model("tiny-gpt-neo")  # a model object of its own: its compiled step is not the session's

    def broken(fn, mode):
        raise RuntimeError("simulated: InvalidCxxCompiler: No working C++ compiler found")

    monkeypatch.setattr(compiled, "_compile", broken)
    c = generation.generate(lm, PROMPTS[0], COMPILED, record=False)
    assert c.decode == "eager" and "No working C++ compiler" in c.decode_note
    assert c.token_ids == generation.generate(lm, PROMPTS[0], EAGER, record=False).token_ids
    status = generation.compile_status(lm)
    assert status["state"] == "failed" and "torch.compile failed" in status["reason"]
    sched = Scheduler(lm, max_batch=2, record=False)
    try:
        s = sched.submit(PROMPTS[1], COMPILED).result(120)
    finally:
        sched.close()
    assert s.decode == "eager" and "No working C++ compiler" in s.decode_note


def test_no_cpp_compiler_is_a_clear_reason(monkeypatch, tiny_lm):
    monkeypatch.setattr(compiled.shutil, "which", lambda name: None)
    with pytest.raises(CompileUnavailableError, match="C\\+\\+ compiler"):
        compiled.compiled_decode(tiny_lm)
    c = generation.generate(tiny_lm, "Hello", GenerationConfig(max_new_tokens=4, compile=True), record=False)
    assert c.decode == "eager" and "needs a C++ compiler" in c.decode_note
    assert (
        c.token_ids
        == generation.generate(tiny_lm, "Hello", GenerationConfig(max_new_tokens=4), record=False).token_ids
    )


def test_unsupported_family_is_refused_with_its_name(tiny_lm, monkeypatch):
    monkeypatch.setattr(tiny_lm.model.config, "model_type", "bloom")
    assert "bloom" in compiled.unsupported_reason(
        tiny_lm
    ) and "GPT-Neo and Llama" in compiled.unsupported_reason(tiny_lm)


def test_compile_needs_the_kv_cache():
    with pytest.raises(InvalidParameterError, match="KV cache"):
        GenerationConfig(compile=True, use_cache=False).validate()


def test_static_step_eager_matches_the_sliding_window_step(tiny_lm):
    """The static step's mask and cache semantics, without compiling: its greedy tokens equal the eager window
    step's, through a view wider than GPT-Neo's local window (right-aligned) and one narrower (left-aligned)."""
    import torch

    ids = tiny_lm.tokenizer("The history of the printing press begins")["input_ids"]

    class Eager:  # the compiled step's interface, run eagerly
        def __init__(self, window: int) -> None:
            self.window = window

        def right_aligned(self, columns: int) -> bool:
            return columns > self.window

        def __call__(self, cache, input_ids, position_ids, mask):
            return compiled.static_step(tiny_lm.model, torch.float32, cache, input_ids, position_ids, mask)

    def run(step, columns: int) -> list[int]:
        with torch.inference_mode():
            job = kvcache.Prefill(tiny_lm, [ids], 0)
            logits = job.run()
            cache = kvcache.SlotCache(1, slack=False)
            cache.insert(job, [0], columns)
            out = [int(logits.argmax())]
            for i in range(20):
                logits = cache.decode(tiny_lm, torch.tensor([out[-1]]), torch.tensor([len(ids) + i]), step)
                out.append(int(logits.argmax()))
        return out

    reference = run(None, 20)
    assert run(Eager(256), 20) == reference  # 64 columns: left-aligned
    assert run(Eager(16), 20) == reference  # a pretend 16-token window: right-aligned, the gather path


def test_slot_cache_reuses_its_buffers_when_empty(tiny_lm):
    """A pooled generate cache keeps its buffers (their addresses are what a CUDA graph replays on)."""
    import torch

    ids = tiny_lm.tokenizer("reuse me")["input_ids"]
    cache = kvcache.SlotCache(1, slack=False)
    with torch.inference_mode():
        for _ in range(2):
            job = kvcache.Prefill(tiny_lm, [ids], 0)
            job.run()
            cache.reset()
            cache.insert(job, [0], 16)
            if _ == 0:
                first = cache.layers[0].keys.data_ptr()
    assert cache.layers[0].keys.data_ptr() == first
    assert cache.capacity == (1, 64)  # what the request needs, rounded up to 64 columns: no slack


@pytest.mark.slow
def test_race_lane_compiles_outside_the_timed_runs_and_matches_vanilla():
    """The race's `compiled` lane: its own worker process compiles during the warm-up (reported as init_s and a
    note), then its timed runs decode compiled with vanilla's greedy tokens (the race's quality columns)."""
    from engine.race import runner
    from engine.race.contenders import CONTENDERS

    spec = runner.RaceSpec(
        model="tiny-gpt-neo",
        contenders=(CONTENDERS["vanilla"], CONTENDERS["compiled"]),
        runs=2,
        warmup=1,
        max_new_tokens=8,
        timeout_s=600,
        recheck_baseline=False,
    )
    by_name = {c.name: c for c in runner.run_race(spec).contenders}
    lane = by_name["compiled"]
    assert lane.status == "ran", lane.reason + lane.traceback
    assert len(lane.latencies_s) == 2 and lane.exact_match_rate == 1.0 and lane.first_divergence_token is None
    assert any("compiled decode" in n for n in lane.notes)


@pytest.mark.slow
def test_the_scheduler_does_not_recompile_as_rows_and_widths_change(tiny_lm):
    """Once each shape class is compiled, rows joining and leaving and the window growing reuse the graphs:
    dynamo compiles no new graph (a recompile per step would be a compile per token)."""
    from torch._dynamo.utils import counters

    def run(lengths: list[int]) -> None:
        sched = Scheduler(tiny_lm, max_batch=3, record=False)
        try:
            handles = [
                sched.submit(p, GenerationConfig(max_new_tokens=n, compile=True), ignore_eos=True)
                for p, n in zip(PROMPTS, lengths, strict=True)
            ]
            [h.result(900) for h in handles]
        finally:
            sched.close()

    run([6, 3, 9])  # compiles what this scheduler's shapes need
    graphs = counters["stats"]["unique_graphs"]
    run([20, 7, 33])  # other lengths, other widths, rows leaving at other steps
    assert counters["stats"]["unique_graphs"] == graphs


def test_graph_steps_run_on_the_decoders_one_thread_whoever_calls(monkeypatch):
    """CUDA graph trees live in the thread that recorded them (the lent H200: a run from a second thread failed
    `assert torch._C._is_key_in_tls(...)` and fell back to eager for good). In the graphs mode every step runs on
    the decoder's one thread, whichever thread calls, and gives the eager step's tokens; the CPU mode runs in place.
    The compiler is replaced by the eager step itself (no CUDA here): what is checked is where the step runs."""
    import threading

    from engine.runtime.models import load_model

    lm = load_model("tiny-gpt-neo")  # a model object of its own: its decoder is not the session's
    ran_on: list[int] = []

    def recording(fn, mode):
        def step(*args):
            ran_on.append(threading.get_ident())
            return fn(*args)

        return step

    monkeypatch.setattr(compiled, "_compile", recording)
    monkeypatch.setattr(compiled, "compile_mode", lambda device: "reduce-overhead")
    eager = generation.generate(lm, PROMPTS[0], EAGER, record=False).token_ids
    callers: list[int] = []
    outputs: list[list[int]] = []

    def run() -> None:
        callers.append(threading.get_ident())
        outputs.append(generation.generate(lm, PROMPTS[0], COMPILED, record=False).token_ids)

    for _ in range(2):  # two caller threads, one after the other, as two requests' workers would be
        t = threading.Thread(target=run)
        t.start()
        t.join(600)
    assert outputs == [eager, eager]
    assert generation.compile_status(lm)["state"] == "ready"
    assert ran_on and len(set(ran_on)) == 1 and not set(ran_on) & set(callers)
