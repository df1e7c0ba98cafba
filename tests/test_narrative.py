"""Words follow numbers: every interpreting sentence is
built from the figures beside it, so flipping the figures flips the sentence."""

from __future__ import annotations

import statistics
from dataclasses import replace
from types import SimpleNamespace as NS

from engine.calc import format as fmt
from tests.factories import synthetic_run
from ui import narrative


def policy(throughput: float, p95: float, ttft: float, util: float = 0.7) -> NS:
    return NS(throughput_tokens_per_s=throughput, latency_s_p95=p95, ttft_s_p50=ttft, slot_utilization=util)


def test_tradeoff_flips_with_the_throughput_ratio():
    static = policy(100.0, 2.0, 0.5)
    won = " ".join(narrative.tradeoff_sentences(static, policy(150.0, 1.5, 0.2)))
    lost = " ".join(
        narrative.tradeoff_sentences(static, policy(91.0, 2.6, 0.8))
    )  # the 0.91 and worse p95
    assert "In-flight batching won on throughput" in won and "Static batching won" not in won
    assert "Static batching won on throughput" in lost and "In-flight batching won" not in lost
    assert "0.91×" in lost
    assert "Tail latency favoured in-flight" in won and "Tail latency favoured static" in lost
    assert "came sooner" in won and "came later" in lost
    same = " ".join(narrative.tradeoff_sentences(static, policy(102.0, 2.02, 0.5)))
    assert "about the same" in same and "won" not in same


def test_a_ratio_above_what_the_workload_allows_gives_no_throughput_verdict():
    """The walkthrough's 'Run both policies': the tile said '1.35× (invalid)' and the trade-off then said
    'In-flight batching won on throughput here: 1.35× static's'. Later the win was said by the step count alone,
    which a student read as calling static's computing of finished rows "not batching's". The most the workload
    allows now counts both regimes (engine.batching.workload.PolicyBound.most); a ratio above it gives no verdict
    on throughput, and one within it is the measurement's own."""
    static, inflight = policy(100.0, 2.0, 0.5), policy(135.0, 1.5, 0.2)
    above = " ".join(narrative.tradeoff_sentences(static, inflight, NS(valid=False, bound=1.26)))
    assert "No throughput verdict from this run" in above and "(1.26× at most)" in above and "1.35×" in above
    assert "won on" not in above
    valid = " ".join(narrative.tradeoff_sentences(static, inflight, NS(valid=True)))
    assert "In-flight batching won on throughput here" in valid


def test_sweep_sentence_says_when_a_bigger_batch_did_not_help():
    def pts(tps):
        return [NS(batch=b, tokens_per_s=t, latency_s=0.5 * b) for b, t in zip((1, 4, 16), tps, strict=True)]

    assert "did **not** raise throughput" in narrative.sweep_sentence(pts([100, 98, 97]))
    helped = narrative.sweep_sentence(pts([100, 300, 700]))
    assert "batch 16 **700 tokens/s** (7.0×)" in helped and "not" not in helped
    assert "latency rose" in helped


def test_kv_cache_sentence_flips():
    on = {"model": "m", "measurement": synthetic_run("m", "fp32", 0.1, 0.01)}
    off_slow = {"model": "m", "measurement": synthetic_run("m", "fp32", 0.1, 0.05, use_cache=False)}
    off_fast = {"model": "m", "measurement": synthetic_run("m", "fp32", 0.1, 0.005, use_cache=False)}
    assert "cache off was slower" in narrative.latency_sentence({True: on, False: off_slow}, "m")
    assert "cache off was faster" in narrative.latency_sentence({True: on, False: off_fast}, "m")
    assert "Only a KV cache on run" in narrative.latency_sentence({True: on}, "m")
    # the student's walk: 15.2x on a busy machine, 7.9x minutes later, and the sentence said neither was suspect
    assert "Caution" not in narrative.latency_sentence({True: on, False: off_slow}, "m")
    busy = narrative.latency_sentence({True: on, False: {**off_slow, "busy": True}}, "m")
    # the student's busy walk: 'not comparable' beside a 47x gap withheld the chapter's lesson; the measured ratio
    # is said now, marked rough, with the run other work shared
    assert (
        "the cache off measured 5.0× slower by the TPOT, rough: other work shared the CPU with the cache-off run"
        in (busy)
    )
    assert "The cache-off run: measured on a busy machine (load 0.5 at its end)" in busy
    both = narrative.latency_sentence({True: {**on, "busy": True}, False: {**off_slow, "busy": True}}, "m")
    assert "other work shared the CPU with the cache-on and cache-off runs" in both


def test_users_sentence_follows_the_batch_seen():
    row = {"queued (s)": 0.0, "latency (s)": 1.0, "stop": "length"}
    assert "up to **3**" in narrative.users_sentence(3, [{**row, "batch seen": 3}] * 3)
    assert "never shared a decode step" in narrative.users_sentence(3, [{**row, "batch seen": 1}] * 3)


def test_users_sentence_says_what_a_wait_was_for():
    """8 users on 8 slots waited 3.99 s and the page called it 'the longest wait for a slot'."""
    rows = [{"queued (s)": w, "latency (s)": 5.0, "stop": "length", "batch seen": 7} for w in (0.0, 3.99)]
    free = narrative.users_sentence(8, rows, max_batch=8)
    assert (
        "wait to be admitted was 3.99 s, with slots free (8 users, 8 slots)" in free
        and "for a slot" not in free
    )
    full = narrative.users_sentence(12, rows, max_batch=8)
    assert "the longest wait for a slot was 3.99 s (12 users, 8 slots)" in full
    assert "no request waited" in narrative.users_sentence(8, [{**rows[0]}], max_batch=8)


def test_the_cache_off_sentence_says_how_its_own_steps_grew():
    """The sentence said the cache-off steps 'grow with length' beside a line that looked flat (a small model, a
    short run, a log axis): it now reads the run's own per-token times and says grew or stayed."""
    on = {"model": "m", "measurement": synthetic_run("m", "fp32", 0.1, 0.01)}
    measured = synthetic_run("m", "fp32", 0.1, 0.05, use_cache=False)
    grew = {"model": "m", "measurement": measured, "latency": [0.1] + [0.02 + 0.001 * k for k in range(60)]}
    flat = {"model": "m", "measurement": measured, "latency": [0.1] + [0.05] * 60}
    said = narrative.latency_sentence({True: on, False: grew}, "m")
    assert "grew from" in said and "by token 61" in said and "stayed" not in said
    said = narrative.latency_sentence({True: on, False: flat}, "m")
    assert "did not grow (50 ms near the start, 50 ms by the end)" in said and "grew from" not in said
    # steps that fell (a busy start) are said as measured, not as "near" one value beside a different TPOT
    fell = {**flat, "latency": [0.1] + [0.221] * 12 + [0.19] * 48}
    said = narrative.latency_sentence({True: on, False: fell}, "m")
    assert "fell from 221 ms near the start to 190 ms by the end" in said
    # a walkthrough on a busy machine: 'its steps cost about the same throughout (9.56 s near the start, 3.02 s by
    # the end)', three times apart; now said as a fall, and why
    busy = {**flat, "latency": [6.0] + [9.56] * 13 + [5.0] * 37 + [3.02] * 13}
    said = narrative.latency_sentence({True: on, False: busy}, "m")
    assert "fell from 9.56 s near the start to 3.02 s by the end (3.2× faster)" in said
    assert "other load changed during the run" in said and "about the same" not in said
    # after a long prompt the steps cost much but alike: said as the prompt's doing, not as "the re-run costs little"
    long = {**flat, "measurement": replace(measured, prompt_tokens=266), "latency": [0.5] + [0.4] * 63}
    # (the cache-on half read the same prompt: a pair of two prompts is not compared)
    on266 = {**on, "measurement": replace(on["measurement"], prompt_tokens=266)}
    said = narrative.latency_sentence({True: on266, False: long}, "m")
    # what a step re-runs, from the first step after the prefill (p + 1) to the last (p + 63): the presenter read
    # '64 new tokens lengthen by only 23%' and made 64 / 265 = 24%
    assert "grows only from 267 to 329 tokens (23% longer) over these 64 new tokens" in said
    # the off run's steps are known and the on run's are not: one statistic for both, the TPOTs
    assert "costs little" not in said and "5.0× faster per token here, TPOT against TPOT" in said


def test_a_later_first_token_with_the_cache_on_says_why():
    """A student and a presenter saw the first token come later with the cache on (1.06 s against 643 ms) beside a
    caption that says both runs start with the same prefill, unexplained."""
    on = {"model": "m", "measurement": synthetic_run("m", "fp32", 1.06, 0.075)}
    off = {"model": "m", "measurement": synthetic_run("m", "fp32", 0.643, 0.66, use_cache=False)}
    said = narrative.latency_sentence({True: on, False: off}, "m")
    assert "The first token came later with the cache on (1.06 s against 643 ms)" in said
    # the scheduler ran it alone and the machine was quiet: no one to blame, said so
    assert "the cause is not known from these runs" in said and "other sessions" not in said
    shared = {**on, "measurement": replace(on["measurement"], batch_size=3)}
    said = narrative.latency_sentence({True: shared, False: off}, "m")
    assert "shared scheduler, which prefills 256 tokens per step" in said
    assert "with up to 2 other request(s)" in said
    alike = {"model": "m", "measurement": synthetic_run("m", "fp32", 0.65, 0.075)}
    assert "first token came later" not in narrative.latency_sentence({True: alike, False: off}, "m")


def test_the_two_bandwidths_are_each_named_and_the_gap_between_them_follows_the_numbers():
    """Batching page: "8.4 GB/s" and "35.8 GB/s" stood apart unnamed; the sentence names the sweep's effective
    bandwidth and the machine's read roof, and the share of the roof the step reached moves with them."""
    from ui.narrative import bandwidth_words

    both = bandwidth_words(8.4e9, 1, 35.8e9)
    assert "**8.4 GB/s effective**" in both and "read bandwidth roof is 35.8 GB/s" in both
    assert "reached 23% of its roof" in both
    assert "reached 50% of its roof" in bandwidth_words(17.9e9, 1, 35.8e9)
    alone = bandwidth_words(8.4e9, 2, None)
    assert "calibrated at batch 2" in alone and "roof" not in alone


def test_the_playground_headline_carries_the_runs_figures_and_flips_with_the_cache_verdict():
    """The one line beside Generate: the run's TTFT, TPOT and throughput, and once the model ran both ways, what
    the cache bought per token, flipping with the numbers as the chart's sentence does."""
    on = {"model": "m", "measurement": synthetic_run("m", "fp32", 0.1, 0.01)}
    off_slow = {"model": "m", "measurement": synthetic_run("m", "fp32", 0.1, 0.05, use_cache=False)}
    off_fast = {"model": "m", "measurement": synthetic_run("m", "fp32", 0.1, 0.005, use_cache=False)}
    alone = narrative.run_headline(on["measurement"], True, {True: on}, "m")
    assert alone.startswith("**TTFT 100 ms · TPOT 10 ms · 1.0 tok/s**") and "KV cache on" in alone
    assert "cache off" not in alone
    slow = narrative.run_headline(off_slow["measurement"], False, {True: on, False: off_slow}, "m")
    assert "per token, the cache off was 5.0× slower" in slow
    fast = narrative.run_headline(off_fast["measurement"], False, {True: on, False: off_fast}, "m")
    assert "per token, the cache off was 2.0× faster" in fast
    other_model = narrative.run_headline(
        on["measurement"], True, {True: on, False: {**off_slow, "model": "x"}}, "m"
    )
    assert "cache off" not in other_model


def test_the_users_headline_follows_the_rows():
    row = {"queued (s)": 0.0, "latency (s)": 2.0, "batch seen": 1, "stop": "length"}
    alone = narrative.users_headline(2, [row, {**row, "latency (s)": 4.0}])
    assert alone.startswith(
        "**2 of 2 requests finished, up to 1 in one decode step**; longest wait to be admitted"
    )
    shared = narrative.users_headline(2, [{**row, "batch seen": 2}, {**row, "queued (s)": 1.5}])
    assert "up to 2 in one decode step" in shared and "admitted 1.5 s" in shared
    assert narrative.users_headline(1, [{**row, "stop": "error"}]).startswith("No request finished")


# The student's walk on a busy machine: the passage prompt, 64 tokens, cache on then off. The cache-on run's steps
# took 60 ms to token ~26, then ~280 ms; the cache-off run's grew from ~760 ms to ~900 ms with spikes to ~10 s, so
# its mean (the TPOT) was 1.92 s; the load rule flagged the cache-off run only.
SMOOTH_ON = [0.7] + [0.06] * 63
SHIFTED_ON = [3.79] + [0.06] * 25 + [0.28] * 38
SMOOTH_OFF = [0.7] + [0.76 + 0.14 * k / 62 for k in range(63)]
SPIKY_OFF = [0.704] + [
    10.0 if k in (12, 20, 28, 35, 50, 58) else 2.5 if k % 9 == 4 else 0.76 + 0.14 * k / 62 for k in range(63)
]


def _run(lat: list[float], cache_on: bool, **extra) -> dict:
    steps = lat[1:]
    m = synthetic_run(
        "m", "fp32", lat[0], sum(steps) / len(steps), use_cache=cache_on, output_tokens=len(lat), batch_size=1
    )
    return {"model": "m", "measurement": m, "latency": lat, "load": 1.4, "cores": 2, "busy": False, **extra}


def test_step_shape_tells_spiky_and_shifted_steps_from_smooth_ones():
    from engine.runtime.metrics import step_shape

    assert step_shape(SMOOTH_ON, True).uneven == ""
    assert (
        step_shape(SMOOTH_OFF, False).uneven == ""
    )  # growth without the cache is the model's, not other work
    assert step_shape(SHIFTED_ON, True).uneven == "shift"
    spiky = step_shape(SPIKY_OFF, False)
    assert spiky.uneven == "spike" and spiky.max_s == 10.0 and spiky.mean_s > 2 * spiky.median_s
    assert step_shape(SMOOTH_ON[:5], True) is None  # too few steps to judge


def test_the_kv_cache_comparison_on_a_busy_machine_judges_each_run_and_marks_the_ratio_rough():
    """Headline 'TPOT 1.92 s' beside a sentence saying the steps grew from 759 ms to 900 ms and a chart spiking to
    10 s; the caution blamed only the cache-off run though the cache-on run's steps jumped too, and a 9.8x ratio
    was drawn from both."""
    on, off = _run(SHIFTED_ON, True), _run(SPIKY_OFF, False, busy=True, load=3.1)
    curves = {True: on, False: off}
    said = narrative.latency_sentence(curves, "m")
    head = narrative.run_headline(off["measurement"], False, curves, "m")
    mean, med = off["measurement"].tpot_s, statistics.median(SPIKY_OFF[1:])
    # the headline and the sentence quote the same statistics: the mean (the TPOT tile) and the median step
    quoted = f"{fmt.seconds(mean)} (mean; median step {fmt.seconds(med)})"
    assert f"TPOT {quoted}" in head and quoted in said
    # no ratio from contaminated runs, in either place; both runs are named
    # contaminated runs give a ratio marked rough, both runs named, in either place, and never a clean verdict (a
    # later student's walk read 'not comparable' beside a 47x gap as the lesson withheld)
    assert "(rough: other work shared the cache-on and cache-off runs)" in head
    assert (
        "rough: other work shared the CPU with the cache-on and cache-off runs" in said
        and "faster per token" not in said
        and "cache off was slower" not in said
    )
    # each run's own note: the cache-on run was not flagged by the load rule, but its own steps show other work
    assert "The cache-on run: the load rule did not flag it (load 1.4 on 2 cores at its end)" in said
    assert "its steps moved from 60 ms near the start to 280 ms by the end" in said
    assert "The cache-off run: measured on a busy machine (load 3.1 on 2 cores at its end)" in said
    assert "a step took 10 s against a median step of" in said
    # the later first token: the scheduler ran no one else, so it is the machine's other work, not other sessions
    assert "the scheduler ran no other request beside it" in said and "other sessions" not in said
    assert "machine's other work (load 1.4 on 2 cores at its end)" in said
    # flip: two smooth quiet runs give the ratio, in the headline and the sentence alike
    calm = {True: _run(SMOOTH_ON, True), False: _run(SMOOTH_OFF, False)}
    ratio = statistics.median(SMOOTH_OFF[1:]) / statistics.median(SMOOTH_ON[1:])
    said = narrative.latency_sentence(calm, "m")
    head = narrative.run_headline(calm[False]["measurement"], False, calm, "m")
    assert f"the cache off was {ratio:.1f}× slower" in head
    assert f"({ratio:.1f}× faster per token here, median step against median step)" in said
    assert "not comparable" not in said + head
    assert (
        "The cache-on run: not busy by the load rule (load 1.4 on 2 cores at its end); its steps are even (median 60 ms)"
        in said
    )
    # one spiky run alone is enough to withhold it
    one = narrative.run_headline(
        calm[True]["measurement"], True, {**calm, False: _run(SPIKY_OFF, False)}, "m"
    )
    # one spiky run on a quiet machine: a few spikes lift its mean, not its median, so the ratio is drawn on the
    # median steps and its note says so; a run whose steps' level moved (or the load rule's busy) withholds it
    spiky = {**calm, False: _run(SPIKY_OFF, False)}
    one = narrative.run_headline(calm[True]["measurement"], True, spiky, "m")
    med_ratio = statistics.median(SPIKY_OFF[1:]) / statistics.median(SMOOTH_ON[1:])
    assert f"the cache off was {med_ratio:.1f}× slower" in one and "not comparable" not in one
    said = narrative.latency_sentence(spiky, "m")
    assert (
        "its mean is lifted, so the comparison reads its median step" in said and "not comparable" not in said
    )
    shifted = {**calm, True: _run(SHIFTED_ON, True)}
    one = narrative.run_headline(shifted[True]["measurement"], True, shifted, "m")
    shifted_ratio = narrative._per_token(shifted)
    assert "(rough: other work shared the cache-on run)" in one and "per token, the cache off measured" in one
    assert f"{shifted_ratio[1] / shifted_ratio[0]:.1f}× slower" in one


def test_generated_text_is_said_to_loop_only_when_it_does_and_was_greedy():
    """A 135M model's greedy text said the same sentence four times with nothing on the page to say why; the note
    follows the text: a run of words said twice makes it, varied or sampled text does not."""
    from ui.narrative import greedy_text_note, repeats_itself

    loop = "In-flight batching lets new requests join a batch while others are still running. " * 2
    plain = "In-flight batching lets new requests join a batch while others are still running, step by step."
    assert repeats_itself(loop) and not repeats_itself(plain)
    one = greedy_text_note([loop], "smollm2-135m-instruct", 134_515_008, greedy=True, measures="speed")
    assert one.startswith(
        "This text repeats itself: smollm2-135m-instruct (134.52M parameters) decodes greedily"
    )
    assert one.endswith("The page measures speed, not the quality of the text.")
    assert greedy_text_note([plain], "m", None, greedy=True, measures="speed") == ""
    assert greedy_text_note([loop], "m", None, greedy=False, measures="speed") == ""
    many = greedy_text_note([loop, plain, loop], "m", None, greedy=True, measures="how requests share steps")
    assert many.startswith("2 of these 3 replies repeat: m decodes greedily")


def _prompted(prompt: str, n_prompt: int, cache_on: bool, **extra) -> dict:
    """A finished Playground run of `prompt` (its token count `n_prompt`), as the page keeps it."""
    lat = [0.6 if cache_on else 0.13] + ([0.06] * 29 if cache_on else [0.2] * 29)
    run = _run(lat, cache_on, **extra)
    run["measurement"] = replace(run["measurement"], prompt_tokens=n_prompt, ttft_s=lat[0])
    run.update(use_cache=cache_on, status="length", tokens=len(lat))
    run["ran_with"] = {"model": "m", "prompt": prompt, "KV cache": cache_on, "compiled decode": False}
    return run


def test_the_cache_comparison_pairs_runs_of_the_same_prompt_only():
    """The student's walk: passage (265 tokens) cache on, then off, then the short question (5 tokens) cache off.
    The chart overlaid the passage's cache-on run with the question's cache-off run, and the sentence said 'the
    first token came later with the cache on (595 ms against 133 ms), though both runs do the same prefill'."""
    from ui.playground_widgets import cache_curve

    p_on, p_off = _prompted("passage", 265, True), _prompted("passage", 265, False)
    q_off = _prompted("question", 5, False)
    curve = cache_curve([p_on, p_off, q_off])
    assert curve == {True: p_on, False: p_off}  # the newest pair of one prompt, not the newest of each cache
    said = narrative.latency_sentence(curve, "m", q_off)
    assert said.startswith("The last run (KV cache off, a 5-token prompt) has no run with the cache on")
    assert "cache off was slower" in said  # the passage pair, compared
    assert narrative.run_headline(q_off["measurement"], False, curve, "m").count("per token") == 0
    # no pair of the newest prompt at all: said plainly, nothing compared
    alone = cache_curve([p_on, q_off])
    assert alone == {False: q_off}
    assert "no run with the cache on of the same prompt exists yet" in narrative.latency_sentence(
        alone, "m", q_off
    )
    # a pair of two prompts (a stored one) is never compared, nor its prefills called the same
    mixed = narrative.latency_sentence({True: p_on, False: q_off}, "m")
    assert mixed.startswith(
        "No cache comparison: the cache-on run read a 265-token prompt and the cache-off run a 5"
    )
    assert "same prefill" not in mixed and "slower" not in mixed
    assert "per token" not in narrative.run_headline(
        q_off["measurement"], False, {True: p_on, False: q_off}, "m"
    )
    # the same prompt's pair still explains a later first token with the cache on
    assert "though both runs do the same prefill" in narrative.latency_sentence(
        {True: p_on, False: p_off}, "m", p_off
    )


def test_one_busy_verdict_per_run_in_the_tile_the_forecast_line_and_the_explanation():
    """The student's walk: one cache-off run's tile said 'about 1.6 of it other work ... it may have run slower',
    its forecast line 'other work on the machine took its share of the CPU', and the sentence under the chart 'not
    busy by the load rule (load 3.6 on 2 cores at its end)'. Each now reads the run's one verdict: by the CPU other
    processes took while it ran where stored, else the load-average rule."""
    from ui.forecast_view import forecast_outcome
    from ui.playground_widgets import _shared_words

    def said(others: float) -> tuple[str, str, str]:
        # stored as an old page kept it: its own 'busy' from the load average disagrees with what others took
        off = _prompted("passage", 265, False, load=3.6, cores=2, others=others, busy=others < 0.5)
        on = _prompted("passage", 265, True)
        tile = _shared_words(narrative.was_busy(off), narrative.others_of(off))
        forecast = forecast_outcome(10.0, 23.0, narrative.was_busy(off))
        explained = narrative.latency_sentence({True: on, False: off}, "m", off)
        return tile, forecast, explained

    tile, forecast, explained = said(1.6)
    assert "so slower than it runs when quiet" in tile and "took 1.6 cores' worth" in tile
    assert "other work on the machine took its share" in forecast
    assert "The cache-off run: measured on a busy machine (other programs took 1.6 cores' worth" in explained
    tile, forecast, explained = said(0.1)
    assert tile.endswith("(quiet otherwise).") and "slower" not in tile
    assert forecast.endswith("2.3× the forecast.")
    assert "The cache-off run: not busy by the load rule (other programs took 0.1 cores' worth" in explained
    assert "measured on a busy machine" not in explained


def test_a_finished_run_is_judged_by_what_other_processes_took_while_it_ran():
    """Runs at load 2.4 / 2.1 on 2 cores, the lab's own last run still in the 1-minute average, read 'measured on a
    busy machine'; the CPU other processes took while the run ran decides where it was measured."""
    from engine.runtime.run import RunReport

    def report(others: float) -> RunReport:
        return RunReport(
            completions=(), measurement=None, route="stream", source=None, load=4.4, cores=2,
            ended_at_once=False, load_before=2.4, own_threads=2, others=others,
        )  # fmt: skip

    assert not report(0.1).busy and not report(0.1).shared
    assert report(1.6).busy and report(1.6).shared
    assert report(float("nan")).busy  # unmeasured: the load-average rule (2.4 on 2 cores when it started)


def test_a_cache_off_runs_step_growth_is_set_against_how_much_longer_its_sequence_grew():
    """A student's busy walk: 'its steps grew from 421 ms near the start to 3.74 s by token 64 (8.9×)' was taught as
    the cache's doing, where the 265-token prompt and 64 new tokens make the re-run only about 1.2× longer. The
    growth is now set against the sequence's, and what the length does not explain is said to be other work."""
    steps = [0.5] + [0.421 * (1 + 8 * j / 62) for j in range(63)]  # a prefill, then steps rising ~9x
    busy = narrative._growth(steps, 265, shared=True)
    assert (
        "so its steps grew from" in busy
        and "the sequence it re-runs grew only 1.18× (272 → 322 tokens)" in busy
    )
    assert "most of that growth came from other work on the machine" in busy
    calm = [0.5] + [
        0.421 * (1 + 0.5 * j / 62) for j in range(63)
    ]  # within 1.5x of what the length makes them
    said = narrative._growth(calm, 265, shared=False)
    assert "as the sequence it re-runs grew" in said and "other work" not in said


def test_simulated_users_words_agree_with_their_waits_and_say_why_first_tokens_came_together():
    """A student's walk: 'longest wait to be admitted 34 ms' in the headline beside 'no request waited to be admitted'
    in the sentence; and six users arriving together all read TTFT 3.19 s with nothing to say why."""
    row = {"queued (s)": 0.034, "TTFT (s)": 3.193, "latency (s)": 4.882, "batch seen": 6, "stop": "length"}
    said = narrative.users_sentence(6, [row] * 6, 8)
    assert "no request waited longer than a step to be admitted (the longest, 34 ms" in said
    assert "Their first tokens came together (TTFT 3.19 s to 3.19 s)" in said and "prefilled together" in said
    apart = [{**row, "TTFT (s)": t} for t in (0.13, 0.15, 0.17)]
    assert "came together" not in narrative.users_sentence(3, apart, 8)


def test_a_recorded_sweeps_matmul_is_said_as_measured_then_when_the_machine_now_reads_otherwise():
    """The presenter's walk: Batching said 'this machine's matmul (211 GFLOP/s)' from a recorded sweep while Home
    said 106.59 GFLOP/s; the sentence now says which is which where they differ."""
    assert narrative.matmul_words(211e9, 210e9) == "; and this machine's matmul (211 GFLOP/s). "
    said = narrative.matmul_words(211e9, 106.59e9)
    assert (
        "211 GFLOP/s, as measured when the sweep ran; this machine's measurement now reads 107 GFLOP/s"
        in said
    )


def test_later_first_tokens_with_no_one_waiting_are_not_said_to_be_a_wait():
    """A student's walk at max batch 8 over 8 requests: 'No request waited', then 'here waiting for a static batch
    cost less than sharing steps with running rows'."""
    from engine.batching.workload import PolicyBound

    static, inflight = policy(100.0, 2.0, 0.5), policy(110.0, 1.9, 0.5)
    static = NS(**{**static.__dict__, "ttft_s_p50": 0.5})
    inflight = NS(**{**inflight.__dict__, "ttft_s_p50": 0.9})
    said = " ".join(
        narrative.tradeoff_sentences(static, inflight, NS(valid=True), PolicyBound(44, 44, 23, 352, 184, 0))
    )
    assert "First tokens came later" in said and "waiting for a static batch" not in said
    assert "every request started at once under both policies" in said
