"""Static and in-flight batching: exact tokens against solo runs, admission/retirement at token boundaries,
caps, cancellation, concurrency, workloads."""

from __future__ import annotations

import threading

import pytest

from engine.batching import kv
from engine.batching.scheduler import Scheduler
from engine.batching.sequence import Request
from engine.batching.static import run_static_batch
from engine.batching.workload import WorkloadSpec, generate_workload, replay, replay_inflight
from engine.core.errors import CancelledError, InvalidParameterError, OutOfMemoryError
from engine.runtime import kvcache
from engine.runtime.generation import generate
from engine.runtime.settings import GenerationConfig

PROMPTS = [
    "The capital of France is",
    "Once upon a time, in a land far away, there lived a",
    "def fibonacci(n):",
    "Hello",
    "List three colours:",
]


def _solo(lm, prompts, cfg):
    return [generate(lm, p, cfg, record=False).token_ids for p in prompts]


@pytest.fixture
def tiny_sched(tiny_lm):
    s = Scheduler(tiny_lm, max_batch=3, record=False)
    yield s
    s.close()


@pytest.mark.parametrize(
    ("lm_name", "chunk"),
    [
        ("tiny_lm", 256),
        ("tiny_lm", 3),
        pytest.param("smol_lm", 256, marks=pytest.mark.slow),
        pytest.param("smol_lm", 5, marks=pytest.mark.slow),
    ],
)
def test_inflight_matches_solo_token_for_token(lm_name, chunk, request):
    """Batched admission, chunked prefill (chunk tokens per step across the admitted rows) and slot reuse."""
    lm = request.getfixturevalue(lm_name)
    cfg = GenerationConfig(max_new_tokens=24)
    solo = _solo(lm, PROMPTS, cfg)
    # 5 requests through 3 slots: joins and leaves mid-batch
    sched = Scheduler(lm, max_batch=3, record=False, prefill_chunk_tokens=chunk)
    try:
        handles = [
            sched.submit(p, GenerationConfig(max_new_tokens=24 - 3 * i)) for i, p in enumerate(PROMPTS)
        ]
        got = [h.result(120).token_ids for h in handles]
    finally:
        sched.close()
    for i, (s, g) in enumerate(zip(solo, got, strict=True)):
        assert g == s[: len(g)], f"request {i} differs from its solo run"
        assert len(g) == min(len(s), 24 - 3 * i)  # same EOS stop as solo, or its own max_new_tokens


@pytest.mark.parametrize("lm_name", ["tiny_lm", pytest.param("smol_lm", marks=pytest.mark.slow)])
def test_static_matches_solo_token_for_token(lm_name, request):
    lm = request.getfixturevalue(lm_name)
    cfg = GenerationConfig(max_new_tokens=16)
    solo = _solo(lm, PROMPTS, cfg)
    seqs = []
    for i, p in enumerate(PROMPTS):
        ids = lm.tokenizer(p)["input_ids"]
        seqs.append(Request(i, lm, p, p, ids, cfg))
    run_static_batch(lm, seqs)
    for s, ref in zip(seqs, solo, strict=True):
        assert tuple(s.generated) == ref
        assert s.times.slot_released >= s.times.finished


@pytest.mark.slow  # loads the bundled model or runs a process of its own
def test_chat_template_request_matches_solo(smol_lm):
    cfg = GenerationConfig(max_new_tokens=12, chat_template=True)
    ref = generate(smol_lm, "What is the capital of France?", cfg, record=False)
    sched = Scheduler(smol_lm, max_batch=2, record=False)
    try:
        got = sched.submit("What is the capital of France?", cfg).result(120)
    finally:
        sched.close()
    assert got.token_ids == ref.token_ids and got.text == ref.text


def test_streamed_chunks_make_the_completion(tiny_sched):
    h = tiny_sched.submit("Hello there", GenerationConfig(max_new_tokens=20))
    text = "".join(h)
    assert h.completion is not None and text == h.completion.text
    m = h.completion.measurement
    assert m.output_tokens == len(h.completion.token_ids)
    assert 0 <= m.queue_s <= m.ttft_s <= m.latency_s


def test_a_listener_gets_every_chunk_once_in_order_then_the_end(tiny_sched):
    """The server's path (RequestHandle.listen): chunks queued before it listens are handed over first, the rest
    come from the scheduler's thread, and the end comes once, after the last chunk."""
    h = tiny_sched.submit("Hello there", GenerationConfig(max_new_tokens=20))
    first = h.poll(30.0)  # wait for the first chunk, so some text was queued before listening
    got: list[tuple] = []
    ended = threading.Event()

    def listener(item: tuple) -> None:
        got.append(item)
        if item[0] != "chunk":
            ended.set()

    h.listen(listener)
    assert ended.wait(60.0)
    assert [kind for kind, _ in got[:-1]] == ["chunk"] * (len(got) - 1) and got[-1] == ("end", None)
    assert (first or "") + "".join(text for _, text in got[:-1]) == h.result(0).text
    assert h.poll(0.0) is None  # poll still sees the end


def test_a_listener_added_after_the_end_gets_the_end_once(tiny_sched):
    h = tiny_sched.submit("Hello", GenerationConfig(max_new_tokens=4))
    text = h.result(60.0).text
    got: list[tuple] = []
    h.listen(got.append)
    assert "".join(t for k, t in got if k == "chunk") == text and got[-1] == ("end", None)
    assert sum(k != "chunk" for k, _ in got) == 1


def test_admission_and_retirement_at_token_boundaries(tiny_lm):
    """A short request admitted next to a long one finishes first; a queued one takes its slot at once."""
    sched = Scheduler(tiny_lm, max_batch=2, record=False)
    try:
        long = sched.submit("a long one", GenerationConfig(max_new_tokens=60), ignore_eos=True)
        short = sched.submit("a short one", GenerationConfig(max_new_tokens=5), ignore_eos=True)
        third = sched.submit("a third one", GenerationConfig(max_new_tokens=5), ignore_eos=True)
        for h in (long, short, third):
            h.result(60)
    finally:
        sched.close()
    assert short.times.finished < long.times.finished
    # the third request waited for a free slot, and got it while the long one was still decoding
    assert third.times.admitted >= short.times.finished
    assert third.times.finished < long.times.finished
    assert short.completion.measurement.batch_size == 2


def test_caps_on_rows_and_kv_memory(tiny_lm):
    per_token = kvcache.kv_bytes_per_token(tiny_lm)
    assert per_token == 2 * 4 * 4 * 16 * 4  # K and V x layers x heads x head_dim x fp32
    sched = Scheduler(tiny_lm, max_batch=2, record=False)
    seen: list[int] = []
    try:
        hs = [sched.submit(p, GenerationConfig(max_new_tokens=12), ignore_eos=True) for p in PROMPTS]
        while not all(h.done for h in hs):
            seen.append(len(sched.snapshot().running))
        [h.result(60) for h in hs]
    finally:
        sched.close()
    assert max(seen) <= 2
    # a budget that holds one sequence at a time admits one at a time
    one = (12 + 12 + 8) * per_token
    sched = Scheduler(tiny_lm, max_batch=8, kv_budget_bytes=one, record=False)
    try:
        hs = [sched.submit("x " * 10, GenerationConfig(max_new_tokens=12), ignore_eos=True) for _ in range(3)]
        done = [h.result(60) for h in hs]
        assert all(c.measurement.batch_size == 1 for c in done)
        with pytest.raises(OutOfMemoryError, match="KV cache"):
            sched.submit("x " * 10, GenerationConfig(max_new_tokens=200))
    finally:
        sched.close()


def test_cancel_leaves_the_others_running(tiny_lm):
    sched = Scheduler(tiny_lm, max_batch=4, record=False)
    try:
        keep = sched.submit("keep going", GenerationConfig(max_new_tokens=40), ignore_eos=True)
        drop = sched.submit("stop me", GenerationConfig(max_new_tokens=400), ignore_eos=True)
        chunks = iter(drop)
        next(chunks)  # it is running
        drop.cancel()
        rest = list(chunks)
        assert drop.completion is not None and drop.completion.stop_reason == "cancelled"
        assert len(drop.completion.token_ids) < 400 and isinstance(rest, list)
        assert keep.result(60).stop_reason == "length" and len(keep.completion.token_ids) == 40
        queued = Scheduler(tiny_lm, max_batch=1, record=False)
        try:
            first = queued.submit("first", GenerationConfig(max_new_tokens=30), ignore_eos=True)
            waiting = queued.submit("second", GenerationConfig(max_new_tokens=30))
            waiting.cancel()
            with pytest.raises(CancelledError):
                waiting.result(60)
            assert first.result(60).stop_reason == "length"
        finally:
            queued.close()
    finally:
        sched.close()


def test_concurrent_submits_get_their_own_outputs(tiny_lm):
    cfg = GenerationConfig(max_new_tokens=16)
    prompts = [f"request number {i} says" for i in range(8)]
    solo = dict(zip(prompts, _solo(tiny_lm, prompts, cfg), strict=True))
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
            t.join(120)
    finally:
        sched.close()
    assert not errors
    assert got == solo


def test_sampling_honours_the_request_seed_in_a_shared_batch(tiny_lm):
    cfg = GenerationConfig(max_new_tokens=12, do_sample=True, seed=7)
    alone = Scheduler(tiny_lm, max_batch=1, record=False)
    try:
        ref = alone.submit("seeded", cfg).result(60).token_ids
    finally:
        alone.close()
    shared = Scheduler(tiny_lm, max_batch=4, record=False)
    try:
        others = [
            shared.submit(f"noise {i}", GenerationConfig(max_new_tokens=12, do_sample=True, seed=i))
            for i in range(3)
        ]
        again = shared.submit("seeded", cfg).result(60).token_ids
        [h.result(60) for h in others]
    finally:
        shared.close()
    assert again == ref


def test_zero_request_workload_raises_clear_error(tiny_lm):
    with pytest.raises(InvalidParameterError, match="at least one request"):
        generate_workload(WorkloadSpec(n_requests=0), tiny_lm.tokenizer)
    with pytest.raises(InvalidParameterError, match="no requests"):
        replay(tiny_lm, (), "static", 4)
    with pytest.raises(InvalidParameterError, match="policy"):
        replay(tiny_lm, generate_workload(WorkloadSpec(n_requests=1), tiny_lm.tokenizer), "fifo", 4)


def test_workload_is_reproducible_and_policies_agree(tiny_lm):
    spec = WorkloadSpec(
        n_requests=6, output_tokens_min=4, output_tokens_max=40, arrival_rate_per_s=50.0, seed=3
    )
    a, b = generate_workload(spec, tiny_lm.tokenizer), generate_workload(spec, tiny_lm.tokenizer)
    assert a == b and all(spec.prompt_tokens_min <= len(r.prompt_ids) <= spec.prompt_tokens_max for r in a)
    static = replay(tiny_lm, a, "static", 3)
    inflight = replay_inflight(tiny_lm, a, 3)
    for s, i, r in zip(static.requests, inflight.requests, a, strict=True):
        assert s.token_ids == i.token_ids and len(s.token_ids) == r.max_new_tokens
    assert static.output_tokens == inflight.output_tokens == sum(r.max_new_tokens for r in a)
    assert inflight.slot_utilization == 1.0 and static.slot_utilization <= 1.0
    phases = {row.phase for row in static.timeline()}
    assert {"queued", "prefill", "decode"} <= phases
    assert all(row.end_s >= row.start_s for row in static.timeline() + inflight.timeline())


def test_slot_cache_reuses_rows_without_copying_the_batch(tiny_lm):
    """Joining writes only the newcomer's KV; leaving moves one row; the window trims to the rows left."""
    import torch

    pad = tiny_lm.tokenizer.pad_token_id
    with torch.inference_mode():
        cache = kvcache.SlotCache(4)
        first = kvcache.Prefill(tiny_lm, [[5, 6, 7, 8, 9], [5, 6]], pad)
        first.run()
        cache.insert(first, [0, 1], remaining=8)
        assert cache.n == 2 and cache.length == 5
        buffers = [la.keys.data_ptr() for la in cache.layers]
        copied = cache.copied_bytes
        late = kvcache.Prefill(tiny_lm, [[11, 12, 13]], pad, chunk=2)  # chunked: two steps
        assert late.step() is None and late.step() is not None
        cache.insert(late, [0], remaining=8)
        assert (
            cache.n == 3 and [la.keys.data_ptr() for la in cache.layers] == buffers
        )  # same buffers, no realloc
        per_token = kvcache.kv_bytes_per_token(tiny_lm)
        assert cache.copied_bytes - copied == 3 * per_token  # only the newcomer's 3 tokens were written
        order = cache.retire([0])
        assert order == [2, 1] and cache.n == 2 and cache.length == 3  # last row moved into the hole; trimmed
        assert cache.window_bytes() == 2 * 3 * per_token
        cache.retire([0, 1])
        assert cache.n == 0 and cache.length == 0


def test_scheduler_reports_a_step_time_breakdown(tiny_lm):
    sched = Scheduler(tiny_lm, max_batch=4, record=False, prefill_chunk_tokens=4)
    try:
        hs = [sched.submit(p, GenerationConfig(max_new_tokens=6), ignore_eos=True) for p in PROMPTS]
        [h.result(60) for h in hs]
    finally:
        sched.close()
    # read once the thread has stopped: mid-step, a part's seconds are counted before the loop's own
    parts = sched.breakdown()
    assert set(parts) == {"prefill", "decode_forward", "sampling", "cache_surgery", "other", "total"}
    assert parts["prefill"] > 0 and parts["decode_forward"] > 0
    assert sum(v for k, v in parts.items() if k != "total") == pytest.approx(parts["total"])


def test_request_peak_memory_is_the_largest_value_seen(tiny_lm):
    from engine.batching.sequence import Request

    r = Request(1, tiny_lm, "x", "x", [5, 6], GenerationConfig(max_new_tokens=2), ignore_eos=True)
    r.mark_admitted()
    r.see_memory(10**15)  # a step's sample far above the current RSS
    r.append(7, r.times.admitted + 0.1, 1)
    r.append(8, r.times.admitted + 0.2, 1)
    assert r.completion().measurement.peak_memory_bytes == 10**15


def test_bad_max_batch_is_rejected(tiny_lm):
    with pytest.raises(InvalidParameterError, match="max batch"):
        Scheduler(tiny_lm, max_batch=0)


def test_policy_bound_counts_steps_by_hand():
    """[10, 1, 1, 1] in batches of 2: static runs 10 + 1 steps; in-flight refills the short row's slot twice
    while the long one runs, 10 steps; every slot busy would be ceil(13 / 2) = 7. In rows computed, static runs
    2 x 10 + 2 x 1 = 22 row-steps (the finished 1-token row rides along for 9 steps), in-flight the 13 tokens."""
    from engine.batching.workload import WorkloadRequest, policy_bound

    work = [WorkloadRequest(i, 0.0, "x", (1,), n) for i, n in enumerate([10, 1, 1, 1])]
    bound = policy_bound(work, 2)
    assert (bound.static_steps, bound.inflight_steps, bound.full_slots_steps) == (11, 10, 7)
    assert bound.throughput_ratio == pytest.approx(1.1)
    assert (bound.static_row_steps, bound.inflight_row_steps) == (22, 13)
    assert bound.row_ratio == pytest.approx(22 / 13) and bound.most == pytest.approx(22 / 13)
    assert bound.waiting == 2 and policy_bound(work, 4).waiting == 0  # 4 requests, 2 slots: 2 wait


def test_idle_thread_ends_and_the_next_submit_starts_one(tiny_lm):
    """An idle scheduler gives back its thread (and the OpenMP team torch made for it: engine.core.threads); a
    request submitted afterwards gets a new thread and the same tokens. Waits for the thread to end, however
    long that takes on a busy machine; asserts nothing about speed."""
    import time

    cfg = GenerationConfig(max_new_tokens=6)
    sched = Scheduler(tiny_lm, max_batch=2, record=False, idle_exit_s=0.0)
    try:
        first = sched.submit(PROMPTS[0], cfg).result(120).token_ids
        deadline = time.monotonic() + 120
        while sched.snapshot().alive:
            assert time.monotonic() < deadline, "the idle scheduler thread did not end"
            time.sleep(0.01)
        assert sched.submit(PROMPTS[0], cfg).result(120).token_ids == first
    finally:
        sched.close()


def test_many_requests_across_idle_exits_all_finish(tiny_lm):
    """Submits racing the thread's decision to end: each must still be served (the loop clears its thread under
    the same lock submit starts one with)."""
    cfg = GenerationConfig(max_new_tokens=2)
    sched = Scheduler(tiny_lm, max_batch=2, record=False, idle_exit_s=0.0)
    try:
        for i in range(20):
            assert (
                len(sched.submit(PROMPTS[i % len(PROMPTS)], cfg, ignore_eos=True).result(120).token_ids) == 2
            )
    finally:
        sched.close()


def test_bad_idle_exit_is_rejected(tiny_lm):
    with pytest.raises(InvalidParameterError, match="idle_exit_s"):
        Scheduler(tiny_lm, idle_exit_s=float("nan"))


def test_run_in_thread_returns_and_raises():
    from engine.core.threads import run_in_thread

    assert run_in_thread(lambda: threading.current_thread().name, name="x-work") == "x-work"
    with pytest.raises(ZeroDivisionError):
        run_in_thread(lambda: 1 / 0)


@pytest.mark.parametrize(
    ("lm_name", "budget"),
    [("tiny_lm", 16), ("tiny_lm", 1), pytest.param("smol_lm", 16, marks=pytest.mark.slow)],
)
def test_newcomers_ride_in_the_running_rows_decode_step(lm_name, budget, request):
    """A request admitted while others decode joins in their decode step (one forward, not a prefill plus a
    step) and every request's greedy tokens still equal its solo run. A step carries newcomers' prompts up to
    `mixed_prompt_tokens` together (one prompt at least); the others wait for the next steps."""
    lm = request.getfixturevalue(lm_name)
    solo = _solo(lm, PROMPTS, GenerationConfig(max_new_tokens=12))
    sched = Scheduler(lm, max_batch=4, record=False, mixed_prompt_tokens=budget)
    try:
        first = sched.submit(PROMPTS[0], GenerationConfig(max_new_tokens=12))
        next(iter(first))  # running: its first token is out
        late = [sched.submit(p, GenerationConfig(max_new_tokens=12)) for p in PROMPTS[1:]]
        got = [h.result(120).token_ids for h in [first, *late]]
    finally:
        sched.close()
    assert sched.mixed_steps >= (1 if budget > 1 else len(late) - 1)  # one prompt per step (4 slots: 3 join)
    for i, (s, g) in enumerate(zip(solo, got, strict=True)):
        assert g == s, f"request {i} differs from its solo run"


def test_mixed_step_places_newcomers_like_insert(tiny_lm):
    """SlotCache.mixed writes the running rows' column and each newcomer's prompt right-aligned at `end`: the
    same layout, mask and next-token logits as a separate prefill + insert + decode step."""
    import torch

    pad = tiny_lm.tokenizer.pad_token_id
    with torch.inference_mode():
        a, b = kvcache.SlotCache(4), kvcache.SlotCache(4)
        for cache in (a, b):
            first = kvcache.Prefill(tiny_lm, [[5, 6, 7, 8, 9], [5, 6]], pad)
            first.run()
            cache.insert(first, [0, 1], remaining=8)
        tokens, positions = torch.tensor([20, 21]), torch.tensor([5, 2])
        prompts = [[11, 12, 13], [14, 15, 16, 17, 18, 19, 30]]  # the second is longer than the window
        assert kv.mixed_reason(tiny_lm, a, [len(p) for p in prompts]) == ""
        mixed = kv.mixed_step(a, tiny_lm, tokens, positions, prompts, remaining=8)  # [4, V]
        step = b.decode(tiny_lm, tokens, positions)  # the running rows' step ...
        late = kvcache.Prefill(
            tiny_lm, prompts, pad
        )  # ... then the newcomers' prefill, inserted at the new end
        first_logits = late.run()
        b.insert(late, [0, 1], remaining=8)
        assert (a.n, a.window.start, a.window.end) == (b.n, b.window.start, b.window.end)
        w = a.window
        assert torch.equal(a.mask[: a.n, w.start : w.end], b.mask[: b.n, w.start : w.end])
        torch.testing.assert_close(mixed[:2], step, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(mixed[2:], first_logits, rtol=1e-4, atol=1e-4)
        real = a.mask[: a.n, w.start : w.end].bool()
        for la, lb in zip(a.layers, b.layers, strict=True):
            ka, kb = la.keys[: a.n, :, w.start : w.end], lb.keys[: b.n, :, w.start : w.end]
            torch.testing.assert_close(ka.permute(0, 2, 1, 3)[real], kb.permute(0, 2, 1, 3)[real])


def test_long_windows_on_gpt_neo_are_not_mixed(tiny_lm):
    """GPT-Neo masks by position in the key sequence (a local window every other layer): a mixed step whose
    flattened keys exceed that window is refused with the reason, and the scheduler prefills separately."""
    cache = kvcache.SlotCache(4)
    window = tiny_lm.model.config.window_size
    assert kv.mixed_reason(tiny_lm, cache, [window + 1]) != ""


def test_the_live_tables_latest_text_starts_on_a_whole_word():
    """The presenter's walk: the live batch table showed a reply as 'n-flight batching…': the last 60 characters
    cut 'In-flight' in two. The latest text now starts after an ellipsis on a whole word."""
    from engine.batching.handle import PREVIEW_CHARS, tail

    reply = "In-flight batching lets new requests join the running batch!!"
    assert len(reply) == PREVIEW_CHARS + 1 and reply[-PREVIEW_CHARS:].startswith("n-flight")  # the walk's cut
    shown = tail(reply)
    assert shown == "…batching lets new requests join the running batch!!"
    assert len(shown) <= PREVIEW_CHARS and reply.endswith(shown[1:])
    assert tail("short reply") == "short reply"
    assert tail("x" * 100) == "…" + "x" * (PREVIEW_CHARS - 1)  # one long word: its end, marked cut
    assert (
        tail("a " * 40) == "…" + ("a " * 40)[-(PREVIEW_CHARS - 1) :].lstrip()
    )  # cut between words: kept whole


def test_compare_interleaves_the_replays_and_keeps_each_policys_fastest(monkeypatch):
    """A student's walk on a busy machine: one replay per policy, static first, read 6.99x one time and a recorded
    run of the same workload 1.70x while a rerun gave 0.64x, as other work came and went between the two replays.
    The policies now replay in the order static, in-flight, in-flight, static, and each keeps its fastest replay (the
    one least disturbed), every replay's time beside it."""
    from dataclasses import replace

    from engine.batching import workload as W

    walls = iter([5.0, 4.0, 3.0, 2.5])  # static, in-flight, in-flight, static
    order: list[str] = []

    def fake(lm, work, policy, max_batch):
        order.append(policy)
        wall = next(walls)
        return W.PolicyResult(
            policy, "m", max_batch, 1, 100, wall, 100 / wall, 1 / wall, 0, 0, 0, 0, 0, 1.0, ()
        )

    monkeypatch.setattr(W, "replay", fake)
    monkeypatch.setattr(W, "warm_up", lambda *a: None)
    got = W.compare(None, [W.WorkloadRequest(0, 0.0, "x", (1,), 4)], 2)
    assert order == ["static", "inflight", "inflight", "static"] == W.interleaved(2)
    assert (got["static"].wall_s, got["static"].replay_walls) == (2.5, (5.0, 2.5))
    assert (got["inflight"].wall_s, got["inflight"].replay_walls) == (3.0, (4.0, 3.0))
    assert replace(got["static"], replay_walls=()).replay_walls == ()
