"""Sentences built from the numbers they sit beside (pure Python, no Streamlit): flip the numbers and the
sentence flips. Each function takes the measured results and returns Markdown strings; the pages only print
them, and tests/test_narrative.py flips the inputs and checks the words change with them."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any

from engine.batching.scheduler import DEFAULT_PREFILL_CHUNK_TOKENS
from engine.batching.workload import interleaved
from engine.calc import format as fmt
from engine.core.load import busy_during
from engine.runtime.metrics import StepShape, step_shape

# Within this relative band two measured figures are called "about the same": timing on a shared CPU moves by a
# few percent between identical runs, so a 3% difference is not a result.
SAME_BAND = 0.05


def compare_word(a: float, b: float, *, higher: str, lower: str, same: str = "about the same as") -> str:
    """'higher' when a > b by more than SAME_BAND, 'lower' when below, else 'same'."""
    if not (math.isfinite(a) and math.isfinite(b)) or b == 0:
        return "not comparable with"
    r = a / b
    if r > 1 + SAME_BAND:
        return higher
    if r < 1 - SAME_BAND:
        return lower
    return same


def sweep_gain(points: Sequence[Any]) -> Any | None:
    """The batch that raised throughput over the first by more than SAME_BAND (the best one), or None: the one
    reading the sweep's sentence and its chart both show."""
    one = points[0]
    best = max(points, key=lambda p: p.tokens_per_s)
    if best.batch == one.batch or best.tokens_per_s <= one.tokens_per_s * (1 + SAME_BAND):
        return None
    return best


def sweep_mark(points: Sequence[Any]) -> str:
    """The chart's label for the same reading: where the best batch is, or that none beat the first."""
    best, one = sweep_gain(points), points[0]
    if best is None:
        return f"no batch beat batch {one.batch} by more than {SAME_BAND:.0%}"
    return f"best: batch {best.batch}, {best.tokens_per_s / one.tokens_per_s:.1f}× batch {one.batch}"


def sweep_sentence(points: Sequence[Any]) -> str:
    """Section 1: what a bigger static batch bought, from the sweep's measured points (batch, tokens_per_s,
    latency_s)."""
    one, last, best = points[0], points[-1], sweep_gain(points)
    if best is None:
        gain = (
            f"a bigger batch did **not** raise throughput here: batch {one.batch} made "
            f"**{one.tokens_per_s:.0f} tokens/s** and no larger batch did better by more than "
            f"{SAME_BAND:.0%} (batch {last.batch}: {last.tokens_per_s:.0f} tokens/s). The step was not "
            f"memory-bound at these sizes, or the machine was busy"
        )
    else:
        gain = (
            f"batch {one.batch} made **{one.tokens_per_s:.0f} tokens/s** and batch {best.batch} "
            f"**{best.tokens_per_s:.0f} tokens/s** ({best.tokens_per_s / one.tokens_per_s:.1f}×)"
        )
    lat = compare_word(
        last.latency_s, one.latency_s, higher="rose", lower="fell", same="stayed about the same"
    )
    return (
        f"Measured on this machine: {gain}. Each request's latency {lat} from batch {one.batch} to batch "
        f"{last.batch} ({fmt.seconds(one.latency_s)} → {fmt.seconds(last.latency_s)})."
    )


def bandwidth_words(effective_bytes_per_s: float, batch: int, roof_bytes_per_s: float | None = None) -> str:
    """Section 1's two bandwidths, each named: the sweep's effective one (the bytes a decode step at the first
    batch reads, weights + KV cache, over that step's measured time, so it also pays for everything else a step
    does) and this machine's measured read bandwidth, the roof a step that only streamed memory would reach; with
    both, the share of the roof the step reached, which says why the two differ."""
    effective = (
        f"bandwidth calibrated at batch {batch}: **{effective_bytes_per_s / 1e9:.1f} GB/s effective**, the "
        "bytes one decode step reads (weights + KV cache) divided by its measured time, so it also carries "
        "everything else a step spends time on (the matmuls' arithmetic, attention, the Python around them)"
    )
    if roof_bytes_per_s is None or not (math.isfinite(roof_bytes_per_s) and roof_bytes_per_s > 0):
        return effective
    share = effective_bytes_per_s / roof_bytes_per_s
    return (
        f"{effective}; this machine's **read bandwidth roof is {roof_bytes_per_s / 1e9:.1f} GB/s** (measured by "
        f"streaming a large array, nothing else to do), so the step reached {share:.0%} of its roof"
    )


REPLAYS_APART = (
    0.2  # a policy's replays further apart than this (slowest / fastest - 1): the machine was not steady
)


def replays_sentence(s: Any, i: Any) -> str:
    """How section 2's two policies were timed, from their PolicyResults' replay_walls: interleaved replays, the
    fastest of each shown, and whether one policy's replays disagree (other work took the cores during some)."""
    walls = {"static": tuple(s.replay_walls), "in-flight": tuple(i.replay_walls)}
    if min(len(w) for w in walls.values()) < 2:  # a run recorded before the replays were repeated
        return "One replay per policy, static first, each timed once."
    n = len(walls["static"])
    order = ", ".join("in-flight" if p == "inflight" else p for p in interleaved(n))
    each = "; ".join(f"{k} {', '.join(fmt.seconds(x) for x in w)}" for k, w in walls.items())
    apart = {k: max(w) / min(w) - 1 for k, w in walls.items() if min(w) > 0}
    worst = max(apart, key=apart.get) if apart else None
    shaky = (
        f" **{worst.capitalize()}'s replays differ by {apart[worst]:.0%}**: other work took the cores during some, "
        "so read the ratio as rough."
        if worst is not None and apart[worst] > REPLAYS_APART
        else ""
    )
    return (
        f"Each policy was replayed {n} times, interleaved ({order}), so a change in the "
        f"machine's load hits both alike; the faster replay of each is shown ({each}).{shaky}"
    )


def matmul_words(drawn: float, now: float | None) -> str:
    """The matmul rate the sweep's dashed line was drawn with, and this machine's stored one where they differ by more
    than SAME_BAND (a recorded sweep read 211 GFLOP/s beside a Home that said 106.59: two measurements, one unsaid)."""
    said = f"; and this machine's matmul ({drawn / 1e9:.0f} GFLOP/s"
    if now and abs(drawn / now - 1) > SAME_BAND:
        said += (
            f", as measured when the sweep ran; this machine's measurement now reads {now / 1e9:.0f} GFLOP/s"
        )
    return said + "). "


def bound_sentence(bound: Any, ratio: float) -> str:
    """Section 2's bound (engine.batching.workload.PolicyBound) in words, and where the measured in-flight /
    static `ratio` lands between its two regimes (every step costing the same; every row costing the same)."""
    step, row = bound.throughput_ratio, bound.row_ratio
    counts = (
        f"static batching needs {bound.static_steps} steps and computes {bound.static_row_steps} row-steps "
        f"(finished rows included), in-flight {bound.inflight_steps} steps and {bound.inflight_row_steps} row-steps"
        if math.isfinite(row)
        else f"static batching needs {bound.static_steps} steps, in-flight {bound.inflight_steps}"
    )
    regimes = (
        f"If every step costs the same, as when decode is memory-bound (a GPU at small batches), in-flight "
        f"batching can give at most **{step:.2f}×** static's throughput"
        + (
            f"; if every row costs the same, as when compute binds, **{row:.2f}×**."
            if math.isfinite(row)
            else "."
        )
    )
    none_waited = bound.waiting == 0
    if ratio > bound.most:
        where = "more than either allows (the warning above says why)"
    elif ratio < step * (1 - SAME_BAND):
        where = (
            "below both: every request started at once (max batch at least the requests), so in-flight admitted no "
            "one later and saved no steps; its per-step bookkeeping, or other work on the machine, cost it more than "
            "the finished rows it skipped"
            if none_waited
            else "below both: in-flight's admissions (each newcomer's prefill pauses the running rows) cost more than "
            "its fewer steps saved"
        )
    elif not math.isfinite(row) or row <= step * (1 + SAME_BAND) or ratio <= step * (1 + SAME_BAND):
        where = "at the memory-bound end: on this machine a step cost about the same whatever its rows"
    elif ratio >= row * (1 - SAME_BAND):
        where = (
            "at the compute-bound end: on this machine each row cost its share, so the rows static batching "
            "computes for finished requests cost it time as well as steps"
        )
    else:
        where = (
            f"{(ratio - step) / (row - step):.0%} of the way from the memory-bound end to the compute-bound end: on "
            "this machine a row costs part of a step, so in-flight's steps of few rows at the end cost less"
        )
    slots = (
        " No request waited: every one started at once (max batch at least the requests), so the two policies take "
        "the same steps and in-flight batching can only skip the rows static batching computes for requests "
        "already finished."
        if none_waited
        else f" In steps, with every slot busy every step it would be {bound.full_slots_ratio:.2f}× "
        f"({bound.full_slots_steps} steps): the gap is the long requests admitted last, which decode with few "
        "companions at the end."
    )
    return (
        f"**What batching can give this workload**, counted from its output lengths (every request waiting at the "
        f"start, first come first served): {counts}. {regimes} Measured **{ratio:.2f}×**: {where}.{slots}"
    )


def tradeoff_sentences(s: Any, i: Any, headline: Any = None, bound: Any = None) -> list[str]:
    """Section 2: static (s) against in-flight (i) on the same workload, from their PolicyResults. A headline
    (engine.batching.workload.throughput_headline) above the most the workload allows gives no verdict on
    throughput: the replays ran at different speeds."""
    ratio = i.throughput_tokens_per_s / s.throughput_tokens_per_s if s.throughput_tokens_per_s else math.nan
    idle = 1 - s.slot_utilization
    none_waited = bound is not None and getattr(bound, "waiting", -1) == 0
    out = []
    if headline is not None and not headline.valid:
        if not math.isfinite(headline.bound):
            out.append(f"**No throughput ratio**: {headline.why}.")
        else:
            out.append(
                f"**No throughput verdict from this run**: the measured {ratio:.2f}× is more than batching can give "
                f"this workload ({headline.bound:.2f}× at most), so the two replays ran at different speeds (the "
                "warning above says why). Run it again on a quieter machine."
            )
    elif ratio > 1 + SAME_BAND:
        out.append(
            f"**In-flight batching won on throughput here**: {ratio:.2f}× static's. Static kept {idle:.0%} of its "
            "row-steps on sequences that had already finished; in-flight "
            + (
                "stopped computing them (no request was waiting for their slots: all started at once)."
                if none_waited
                else "gave those slots to waiting requests."
            )
        )
    elif ratio < 1 - SAME_BAND:
        out.append(
            f"**Static batching won on throughput here**: in-flight made only {ratio:.2f}× static's. Static's idle "
            f"slots cost {idle:.0%} of its row-steps, but in-flight paid more than that back: "
            + (
                "every request started at once, so it admitted no one later and took the same steps; its per-step "
                "bookkeeping, or other work on the machine during its replay, cost it more."
                if none_waited
                else "each admitted prompt's prefill pauses the running rows, and its per-step bookkeeping is not "
                "free on a small model."
            )
        )
    else:
        out.append(
            f"**Throughput was about the same** ({ratio:.2f}×, within ±{SAME_BAND:.0%}): static's idle slots "
            f"({idle:.0%} of its row-steps) cost about what in-flight's per-step admissions cost."
        )
    p95 = compare_word(
        i.latency_s_p95, s.latency_s_p95, higher="worse", lower="better", same="about the same"
    )
    if p95 == "better":
        out.append(
            f"**Tail latency favoured in-flight**: p95 {fmt.seconds(i.latency_s_p95)} against static's "
            f"{fmt.seconds(s.latency_s_p95)}; no request waited for a whole batch's longest member."
        )
    elif p95 == "worse":
        out.append(
            f"**Tail latency favoured static**: in-flight's p95 was {fmt.seconds(i.latency_s_p95)} against "
            f"static's {fmt.seconds(s.latency_s_p95)}: its slowest requests shared more steps with "
            f"prefills of newcomers than static's did."
        )
    else:
        out.append(
            f"**Tail latency was about the same**: p95 {fmt.seconds(i.latency_s_p95)} in-flight, "
            f"{fmt.seconds(s.latency_s_p95)} static."
        )
    ttft = compare_word(i.ttft_s_p50, s.ttft_s_p50, higher="later", lower="sooner", same="about as soon")
    out.append(
        f"**First tokens came {ttft}** with in-flight batching (TTFT p50 {fmt.seconds(i.ttft_s_p50)} against "
        f"static's {fmt.seconds(s.ttft_s_p50)}): "
        + (
            "a static batch makes every newcomer wait for the running batch to end."
            if ttft == "sooner"
            else "every request started at once under both policies, so the gap is the replays' own timing (which "
            "ran its prefills more slowly), not a wait."
            if none_waited and ttft == "later"
            else "here waiting for a static batch cost less than sharing steps with running rows."
            if ttft == "later"
            else "queueing and sharing cost about the same here."
        )
    )
    out.append(
        "**Memory caps the batch**: every running row holds its KV cache; section 1 shows the largest batch "
        "that fits, and the scheduler below stops admitting when its KV budget would be exceeded."
    )
    return out


def users_sentence(n: int, results: Sequence[dict], max_batch: int | None = None) -> str:
    """Simulate-N-users summary from per-request rows (queued_s, ttft_s, latency_s, shared_with); `max_batch`
    (the scheduler's slots) says whether a wait was for a slot or for the prefill in progress."""
    done = [r for r in results if r.get("stop") != "error"]
    if not done:
        return "No request finished."
    shared = max(r["batch seen"] for r in done)
    waits = sorted(r["queued (s)"] for r in done)
    lat = [r["latency (s)"] for r in done]
    if shared > 1:
        share = (
            f"The scheduler ran up to **{shared}** of the {n} requests in one decode step, so they shared each "
            f"weight read rather than each running alone"
        )
    else:
        share = (
            "The requests never shared a decode step (largest batch seen: 1): they ran one after another, "
            "as a server without batching would"
        )
    if waits[-1] <= 0.05:
        queued = (
            f"; no request waited longer than a step to be admitted (the longest, {fmt.seconds(waits[-1])}, is the "
            "step in progress: a newcomer joins at the next)"
        )
    elif max_batch is not None and n <= max_batch:
        queued = (
            f"; the longest wait to be admitted was {fmt.seconds(waits[-1])}, with slots free ({n} users, "
            f"{max_batch} slots): the scheduler admits newcomers between steps, and a batch's prefill runs to its "
            "end before the next newcomers are admitted"
        )
    else:
        slots = f" ({n} users, {max_batch} slots)" if max_batch is not None else ""
        queued = f"; the longest wait for a slot was {fmt.seconds(waits[-1])}{slots}"
    ttfts = [r["TTFT (s)"] for r in done if isinstance(r.get("TTFT (s)"), int | float)]
    together = ""
    if len(ttfts) > 1 and min(ttfts) > 0.8 * max(ttfts):
        together = (
            f" Their first tokens came together (TTFT {fmt.seconds(min(ttfts))} to {fmt.seconds(max(ttfts))}): the "
            "prompts that arrive together are prefilled together, in chunks, before any of them decodes, so each "
            "first token waits for all of those prompts; users who arrive apart (seconds between arrivals) each wait "
            "for their own."
        )
    return (
        f"{share}{queued}.{together} Latency ranged from {fmt.seconds(min(lat))} to {fmt.seconds(max(lat))} "
        f"across {len(done)} finished request(s)."
    )


def users_headline(n: int, results: Sequence[dict]) -> str:
    """Simulate N users in one line for under its button (the sentence and table land below the fold at 900 px):
    how many finished, the largest decode step they shared, the longest wait to be admitted and the latency span,
    from the rows `users_sentence` words in full."""
    done = [r for r in results if r.get("stop") != "error"]
    if not done:
        return "No request finished: the table below says why."
    lat = [r["latency (s)"] for r in done]
    return (
        f"**{len(done)} of {n} requests finished, up to {max(r['batch seen'] for r in done)} in one decode step**; "
        f"longest wait to be admitted {fmt.seconds(max(r['queued (s)'] for r in done))}, latency "
        f"{fmt.seconds(min(lat))} to {fmt.seconds(max(lat))}. The sentence and the table below have the rest."
    )


def _growth(latencies: list[float] | None, prompt_tokens: int = 0, shared: bool = False) -> str:
    """How the cache-off run's steps grew, from its own per-token times (the first token, the prefill, left out):
    the median of its first and of its last fifth of steps. Said so where they did not grow, with the reason the
    run's shape gives: a long prompt that the new tokens lengthen little (each step re-runs all of it, so every step
    costs much but about the same), or a short run of a small model, whose re-run costs little beside each step's
    fixed work (the line looks flat on the chart's log axis)."""
    steps = list(latencies or ())[1:]
    if len(steps) < 10:
        return ", so its steps grow with length"
    k = max(2, len(steps) // 5)
    early, late = statistics.median(steps[:k]), statistics.median(steps[-k:])
    if late * 1.15 < early:  # fell: not the cache's doing; said so rather than "about the same"
        return (
            f", yet its steps fell from {fmt.seconds(early)} near the start to {fmt.seconds(late)} by the end "
            f"({early / late:.1f}× faster): the re-run grows little over {len(steps) + 1} tokens, and the machine's "
            "other load changed during the run and moved a step by more"
        )
    if late < 1.15 * early:
        seen = f"({fmt.seconds(early)} near the start, {fmt.seconds(late)} by the end)"
        if prompt_tokens >= len(steps):  # the new tokens at most double the sequence each step re-runs
            # the first step after the prefill runs over p + 1 tokens, the last over p + n - 1
            longer = (len(steps) - 1) / (prompt_tokens + 1)
            return (
                f", the {prompt_tokens}-token prompt included: what a step re-runs grows only from "
                f"{prompt_tokens + 1} to {prompt_tokens + len(steps)} tokens ({longer:.0%} longer) over these "
                f"{len(steps) + 1} new tokens, so its steps cost about the same throughout {seen}"
            )
        return (
            f", yet over these {len(steps) + 1} tokens its steps did not grow {seen}: at this length the re-run costs "
            "little beside each step's fixed work, and other load moves a step by more; a longer output shows the "
            "growth"
        )
    grew = (
        f", so its steps grew from {fmt.seconds(early)} near the start to {fmt.seconds(late)} by token "
        f"{len(steps) + 1} ({late / early:.1f}×; the chart's axis is logarithmic)"
    )
    if prompt_tokens <= 0:
        return grew
    # what a step re-runs: the prompt and the tokens so far, from the first fifth's middle to the last fifth's
    first, last = prompt_tokens + 1 + k // 2, prompt_tokens + len(steps) - k // 2
    longer = last / first
    if late / early <= 1.5 * longer:
        return grew + f", as the sequence it re-runs grew ({first:,} → {last:,} tokens, {longer:.2f}×)"
    return grew + (
        f"; the sequence it re-runs grew only {longer:.2f}× ({first:,} → {last:,} tokens), so most of that growth "
        + (
            "came from other work on the machine"
            if shared
            else "is not the length's: other work, or the cache of a "
            "longer re-run no longer fitting the CPU's caches"
        )
    )


def _load_of(run: dict) -> tuple[float, int | None]:
    """The 1-minute load average a Playground run ended under, and the cores: its live report's, the ones stored
    with it, or its measurement's (NaN, None where unknown)."""
    report = run.get("report")
    if report is not None:
        return report.load, report.cores
    load = run.get("load")
    if not isinstance(load, int | float):
        load = getattr(run.get("measurement"), "loadavg_1m", math.nan)
    return load, run.get("cores")


def others_of(run: dict) -> float | None:
    """The cores' worth of CPU other processes took while a Playground run ran (its live report's, or the figure
    stored with it); None where it was not measured."""
    report = run.get("report")
    others = report.others if report is not None else run.get("others")
    return float(others) if isinstance(others, int | float) and math.isfinite(others) else None


def was_busy(run: dict) -> bool:
    """A Playground run measured on a busy machine: the one verdict (engine.core.load.busy_during) that its tiles'
    caption, the forecast line and the sentence under the chart all read. Its live report's; for a stored run, the
    CPU other processes took while it ran where that was stored, else the verdict stored with it."""
    report = run.get("report")
    if report is not None:
        return bool(report.busy)
    others = others_of(run)
    return busy_during(others) if others is not None else bool(run.get("busy"))


def _load_words(run: dict) -> str:
    load, n = _load_of(run)
    others = others_of(run)
    took = f"other programs took {others:.1f} cores' worth of CPU while it ran" if others is not None else ""
    if not math.isfinite(load):
        return took or "no load recorded"
    end = f"load {load:.1f}{f' on {n} cores' if n else ''} at its end"
    return f"{took}; {end}" if took else end


def _shape(run: dict, cache_on: bool) -> StepShape | None:
    return step_shape(run.get("latency"), cache_on)


# what a run's own steps show that a median cannot mend: the level of every step moved (a spike or a skew lifts the
# mean, and the comparison is drawn on the median steps instead)
SUSTAINED = ("shift", "fall")


def clean(run: dict, cache_on: bool) -> bool:
    """A run to show a room: not disturbed, and no step stalled (step_shape's spike) either, which a median mends
    for the ratio but a note under the chart still reports."""
    shape = _shape(run, cache_on)
    return not disturbed(run, cache_on) and not (shape and shape.uneven == "spike")


def disturbed(run: dict, cache_on: bool) -> bool:
    """Other work shared this run's CPU for long: the load rule said busy, or its own steps' level moved
    (step_shape's shift or fall). A few spikes are not enough: the comparison reads the median steps."""
    shape = _shape(run, cache_on)
    return was_busy(run) or bool(shape and shape.uneven in SUSTAINED)


def _per_token(runs: dict[bool, dict]) -> tuple[float, float, str]:
    """The per-token times the cache comparison reads (cache on, cache off, what they are): the median steps where
    both runs have enough steps to judge (a few spikes from other work lift a mean, not a median), else both TPOTs
    (the mean step): one statistic for both, never one of each."""
    on, off = _shape(runs[True], True), _shape(runs[False], False)
    if on is not None and off is not None and on.median_s > 0:
        return on.median_s, off.median_s, "median step"
    return runs[True]["measurement"].tpot_s, runs[False]["measurement"].tpot_s, "TPOT"


def _steps_words(shape: StepShape) -> str:
    """What a run's own steps show of other work, from the numbers step_shape judged them by."""
    med = fmt.seconds(shape.median_s)
    if shape.uneven == "spike":
        return f"a step took {fmt.seconds(shape.max_s)} against a median step of {med}"
    if shape.uneven == "shift":
        return (
            f"its steps moved from {fmt.seconds(shape.early_s)} near the start to {fmt.seconds(shape.late_s)} by the "
            "end, where each step with the cache does the same work"
        )
    if shape.uneven == "fall":
        return (
            f"its steps fell from {fmt.seconds(shape.early_s)} near the start to {fmt.seconds(shape.late_s)} by the "
            "end, where each step without the cache re-runs more than the last"
        )
    if shape.uneven == "skew":
        return f"its mean step ({fmt.seconds(shape.mean_s)}) is {shape.mean_s / shape.median_s:.1f}× its median ({med})"
    return f"its steps are even (median {med})"


def _run_note(run: dict, cache_on: bool) -> str:
    """One run's own load note: the load it ended under, the load rule's verdict, and what its steps show."""
    name = f"The cache-{'on' if cache_on else 'off'} run"
    shape = _shape(run, cache_on)
    steps = f"; {_steps_words(shape)}" if shape is not None else ""
    if was_busy(run):
        return f"{name}: measured on a busy machine ({_load_words(run)}){steps}."
    if shape is not None and shape.uneven in SUSTAINED:
        return f"{name}: the load rule did not flag it ({_load_words(run)}), but {_steps_words(shape)}."
    if shape is not None and shape.uneven:
        return (
            f"{name}: not busy by the load rule ({_load_words(run)}), but {_steps_words(shape)}: its mean is "
            "lifted, so the comparison reads its median step."
        )
    return f"{name}: not busy by the load rule ({_load_words(run)}){steps}."


def _tpot_words(m: Any, shape: StepShape | None) -> str:
    """TPOT as the headline and the tiles give it (the mean step), with the median step beside it."""
    if shape is None:
        return f"TPOT {fmt.seconds(m.tpot_s)}"
    return f"TPOT {fmt.seconds(m.tpot_s)} (mean; median step {fmt.seconds(shape.median_s)})"


def _first_token(on_run: dict, off_run: dict) -> str:
    """Why the first token came later with the cache on, from what was seen: both runs do the same prefill, but a
    single prompt with the cache on goes through the shared scheduler. Other sessions are blamed only where the
    request shared a step with them (its batch above 1); else the machine's other work where the load or the run's
    own steps show it; else the cause is said to be unknown."""
    on, off = on_run["measurement"], off_run["measurement"]
    if not (math.isfinite(on.ttft_s) and math.isfinite(off.ttft_s)) or on.ttft_s <= 1.2 * off.ttft_s:
        return ""
    if on.prompt_tokens != off.prompt_tokens:  # not the same prefill: nothing to explain by the scheduler
        return ""
    head = (
        f" The first token came later with the cache on ({fmt.seconds(on.ttft_s)} against "
        f"{fmt.seconds(off.ttft_s)}), though both runs do the same prefill"
    )
    waited = f", and it waited {fmt.seconds(on.queue_s)} to be admitted" if on.queue_s >= 0.05 else ""
    if on.batch_size > 1:
        return (
            f"{head}: with the cache on the prompt went through the shared scheduler, which prefills "
            f"{DEFAULT_PREFILL_CHUNK_TOKENS} tokens per step and let other sessions' steps in between (it shared a "
            f"step with up to {on.batch_size - 1} other request(s){waited}), where the cache-off run is one direct "
            "forward pass."
        )
    if disturbed(on_run, True):
        return (
            f"{head}: the scheduler ran no other request beside it{waited}, so it was the machine's other work "
            f"({_load_words(on_run)}) that took the CPU from it."
        )
    return (
        f"{head}: the scheduler ran no other request beside it{waited}, and the load rule saw the machine quiet "
        f"({_load_words(on_run)}), so the cause is not known from these runs; rerun both to see whether it repeats."
    )


# What a cache on/off pair may differ in: the cache itself, and the compiled decode, which needs it.
PAIR_FREE = ("KV cache", "compiled decode")


def pair_setup(run: dict | None) -> str | None:
    """What a run must share with its other half to be compared with it: everything it was run with (its prompt
    included) but PAIR_FREE, as one comparable key; None for a run that cannot be half of a pair (cancelled, no
    per-token times, stored before its inputs were)."""
    if not isinstance(run, dict) or run.get("status") == "cancelled" or not run.get("latency"):
        return None
    kept = run.get("ran_with")
    if not isinstance(kept, dict):
        return None
    return repr(sorted((k, repr(v)) for k, v in kept.items() if k not in PAIR_FREE))


def _unpaired(runs: dict[bool, dict]) -> str:
    """Why a cache-on and a cache-off run are not a pair ('' when they are): another prompt (their prompt token
    counts differ) or other settings; each run's prefill and steps then differ by more than the cache."""
    on, off = runs[True]["measurement"], runs[False]["measurement"]
    if on.prompt_tokens != off.prompt_tokens:
        return (
            f"the cache-on run read a {on.prompt_tokens}-token prompt and the cache-off run a "
            f"{off.prompt_tokens}-token one"
        )
    a, b = pair_setup(runs[True]), pair_setup(runs[False])
    if a is not None and b is not None and a != b:
        return "they were run with different prompts or settings"
    return ""


def _rough_ratio(runs: dict[bool, dict]) -> str:
    """The cache comparison's measured ratio where other work shared a run: said, as measured, for the sentence to
    mark rough (a student's busy walk read 'not comparable' beside 2.29 s against 48.5 ms, a 47x gap)."""
    t_on, t_off, read = _per_token(runs)
    if not (t_on > 0 and t_off > 0):
        return "no ratio"
    return f"the cache off measured {_cache_ratio(t_on, t_off)} by the {read}"


def _cache_ratio(t_on: float, t_off: float) -> str:
    """The cache-off run's per-token time against the cache-on run's in words: '22.3× slower', '1.2× faster',
    'about as fast' (within SAME_BAND), 'not comparable with' where either is not a number."""
    verdict = compare_word(t_off, t_on, higher="slower", lower="faster", same="about as fast")
    ratio = t_off / t_on if verdict == "slower" else t_on / t_off if verdict == "faster" else None
    return f"{f'{ratio:.1f}× ' if ratio else ''}{verdict}"


def _not_comparable(curves: dict[bool, dict]) -> list[str]:
    """Which of the two runs other work shared the CPU with ("on", "off"): any, and the ratio is withheld."""
    return [name for on, name in ((True, "on"), (False, "off")) if disturbed(curves[on], on)]


def run_headline(m: Any, use_cache: bool, curves: dict[bool, dict], model: str) -> str:
    """Playground: the run's key figures in one line beside the Generate button, where they are in view when it is
    pressed (its tiles land below the fold at 900 px), the TPOT said as the mean with the median step beside it
    (a few spikes from other work lift a mean), and, once the model ran both ways, what the cache bought per token:
    the verdict `latency_sentence` explains under the chart, withheld where other work shared either run's CPU."""
    mine = curves.get(use_cache)
    shape = _shape(mine, use_cache) if _is_half(mine, m) else None
    line = (
        f"**TTFT {fmt.seconds(m.ttft_s)} · {_tpot_words(m, shape)} · {m.tokens_per_s:.1f} tok/s** "
        f"({m.output_tokens} tokens, KV cache {'on' if use_cache else 'off'})"
    )
    runs = {on: r for on, r in curves.items() if r["model"] == model and r.get("measurement")}
    paired = True in runs and False in runs and _is_half(mine, m) and not _unpaired(runs)
    if paired and math.isfinite(runs[True]["measurement"].tpot_s):
        on, off, _ = _per_token(runs)
        shared = _not_comparable(runs)
        said = _cache_ratio(on, off)
        if shared:
            which = " and cache-".join(shared)
            line += (
                f"; per token, {_rough_ratio(runs)} (rough: other work shared the cache-{which} "
                f"run{'s' if len(shared) > 1 else ''})"
            )
        elif said != "not comparable with" and on > 0:
            line += f"; per token, the cache off was {said}"
    return line + ". The tiles and the chart below have the rest."


def _is_half(mine: dict | None, m: Any) -> bool:
    """The run shown (its measurement `m`) is the chart's half of its cache setting: the same object for a live run,
    the same figures for a reloaded one (kept apart in storage; repr, as a measurement may hold NaN)."""
    if mine is None or mine.get("measurement") is None:
        return False
    return mine["measurement"] is m or repr(mine["measurement"]) == repr(m)


def latency_sentence(curves: dict[bool, dict], model: str, last: dict | None = None) -> str:
    """Playground: what the KV cache bought, from the newest cache-on and cache-off runs of the same prompt and
    settings (the page's chart pair), each run with its own load note; the ratio only where neither run shared the
    CPU with other work. `last`: the run shown above the chart; where it is not one of the pair, said first."""
    runs = {on: r for on, r in curves.items() if r["model"] == model and r.get("measurement") is not None}
    lead = ""
    shown = last.get("measurement") if last is not None else None
    if (
        shown is not None
        and True in runs
        and False in runs
        and not any(_is_half(r, shown) for r in runs.values())
    ):
        lead = (
            f"The last run (KV cache {'on' if last.get('use_cache') else 'off'}, a {shown.prompt_tokens}-token prompt) "
            f"has no run with the cache {'off' if last.get('use_cache') else 'on'} of the same prompt and settings "
            "yet: generate it to compare them. The chart compares the newest pair that has both: "
        )
    return lead + _pair_sentence(runs)


def _pair_sentence(runs: dict[bool, dict]) -> str:
    if True in runs and False in runs and (why := _unpaired(runs)):
        return (
            f"No cache comparison: {why}, so the two runs do not do the same work. Generate with the cache on and "
            "off with the same prompt and settings to compare them."
        )
    if True in runs and False in runs:
        on, off = runs[True]["measurement"], runs[False]["measurement"]
        if not (math.isfinite(on.tpot_s) and math.isfinite(off.tpot_s)) or on.tpot_s <= 0:
            return "One of the two runs made a single token: no TPOT to compare."
        both = (
            f"{_tpot_words(on, _shape(runs[True], True))} with the KV cache ({on.output_tokens} tokens) against "
            f"{_tpot_words(off, _shape(runs[False], False)).removeprefix('TPOT ')} without "
            f"({off.output_tokens} tokens)"
        )
        notes = " " + " ".join(_run_note(runs[c], c) for c in (True, False))
        shared = _not_comparable(runs)
        growth = _growth(runs[False].get("latency"), off.prompt_tokens, bool(shared))
        if shared:
            which = " and cache-".join(shared)
            return (
                f"{both}: {_rough_ratio(runs)}, rough: other work shared the CPU with the cache-{which} "
                f"run{'s' if len(shared) > 1 else ''}, so rerun both on a quiet machine before quoting it. Without "
                f"the cache every step re-runs the whole sequence so far{growth}."
                + notes
                + _first_token(runs[True], runs[False])
            )
        t_on, t_off, read = _per_token(runs)
        r = t_off / t_on
        verdict = compare_word(t_off, t_on, higher="slower", lower="faster", same="about as fast")
        if verdict == "slower":
            why = (
                f"without the cache every step re-runs the whole sequence so far{growth}; "
                f"with it, each step reads the stored keys and values ({r:.1f}× faster per token here, "
                f"{read} against {read})"
            )
        elif verdict == "faster":
            why = (
                f"the cache-off run was {1 / r:.1f}× faster per token: at these lengths re-running a short "
                "sequence costs less than the cache's bookkeeping"
            )
        else:
            why = "at these lengths re-running the sequence costs about what reading the cache does"
        return f"{both}: cache off was {verdict}; {why}." + notes + _first_token(runs[True], runs[False])
    only = "on" if True in runs else "off"
    other = "off" if only == "on" else "on"
    return (
        f"Only a KV cache {only} run of this prompt and these settings so far: no run with the cache {other} of the "
        f"same prompt exists yet. Generate again with the cache {other} (sidebar) and the same prompt to overlay it "
        "and see what the cache buys."
    )


def compile_advice_sentence(advice: Any, default_tokens: int, payback_limit: int) -> str:
    """Why compiled decode starts on or off here, from the recorded measurement that decided it
    (engine.runtime.recorded.compile_advice): its speedup, its compile time and the tokens it takes to pay back."""
    if advice.speedup is None:
        return (
            "No compiled-decode measurement is recorded for this device yet (the decode benchmark with --compile), so "
            "compiled decode starts **off**. Its first run per model compiles the step (25-65 s on a 2-core CPU)."
        )
    where = f"{advice.model} on {advice.machine}, {advice.date[:10]}"
    if advice.speedup <= 1:
        return (
            f"Compiled decode was **not faster** when measured ({advice.speedup:.2f}× eager at batch 1; {where}), "
            "so it starts **off**."
        )
    runs = advice.payback_tokens / default_tokens
    verdict = (
        f"within a session's {payback_limit:,} tokens, so it starts **on**"
        if advice.on
        else f"more than a session's {payback_limit:,} tokens, so it starts **off**"
    )
    return (
        f"Compiled decode measured **{advice.speedup:.2f}×** eager at batch 1 ({where}); its compile took "
        f"{fmt.seconds(advice.compile_s)} once per model, which the faster steps pay back after about "
        f"**{advice.payback_tokens:,.0f} tokens** ({runs:,.0f} runs of {default_tokens}): {verdict}."
    )


def gpu_decode_sentences(rows: Sequence[Any]) -> list[str]:
    """One sentence per (model, batch) of a recorded decode run: each lane's share of the read bandwidth measured
    in the same run, and compiled against eager where both were recorded."""
    out = []
    groups: dict[tuple[str, str, int], list[Any]] = {}
    for r in rows:
        groups.setdefault((r.model, r.dtype, r.batch), []).append(r)
    for (model, dtype, batch), lanes in groups.items():
        engine = [r for r in lanes if r.decode != "plain" and r.fraction_of_read_bandwidth is not None]
        if not engine:
            continue
        # a compiled lane whose compile failed ran eagerly: it is neither eager decode's figure nor compiled's
        fell_back = [r for r in engine if "compiled" in r.lane and r.decode != "compiled"]
        eager = max(
            (r for r in engine if r.decode == "eager" and r not in fell_back),
            key=lambda r: r.tokens_per_s,
            default=None,
        )
        comp = max((r for r in engine if r.decode == "compiled"), key=lambda r: r.tokens_per_s, default=None)
        bw = (eager or comp).read_bandwidth_bytes_per_s
        head = f"{model} {dtype}, batch {batch}: "
        parts = []
        if eager is not None:
            parts.append(
                f"eager decode reached **{eager.fraction_of_read_bandwidth:.1%}** of the "
                f"{fmt.gb(bw) if bw else '?'}/s read bandwidth measured in the same run "
                f"({eager.tokens_per_s:,.0f} tokens/s)"
            )
        if comp is not None:
            word = (
                ""
                if eager is None
                else "; compiled decode was "
                + compare_word(
                    comp.tokens_per_s, eager.tokens_per_s, higher="faster", lower="slower", same="no faster"
                )
                + f" ({comp.tokens_per_s / eager.tokens_per_s:.2f}× eager)"
            )
            parts.append(
                f"compiled decode reached **{comp.fraction_of_read_bandwidth:.1%}** "
                f"({comp.tokens_per_s:,.0f} tokens/s){word}"
            )
        elif fell_back:
            parts.append("compiled decode did not compile in this run (its lanes ran the step eagerly)")
        else:
            parts.append("compiled decode was not recorded in this run")
        out.append(head + "; ".join(parts) + ".")
    return out


# A run of this many words found twice in one output: the text loops (a sentence said again, not a shared phrase).
REPEAT_WORDS = 8


def repeats_itself(text: str, n: int = REPEAT_WORDS) -> bool:
    """Whether some run of `n` words occurs twice in `text` (case and punctuation kept: a loop repeats exactly)."""
    words = text.split()
    seen: set[tuple[str, ...]] = set()
    for i in range(len(words) - n + 1):
        gram = tuple(words[i : i + n])
        if gram in seen:
            return True
        seen.add(gram)
    return False


def greedy_text_note(
    texts: Sequence[str], model: str, params: int | None, *, greedy: bool, measures: str
) -> str:
    """One caption under generated text that repeats itself: greedy decoding of a small model loops, and the page
    measures `measures`, not the text's quality. '' when no text repeats, or when it was sampled (then the
    repetition is the sampler's, not greedy decoding's)."""
    looped = [t for t in texts if repeats_itself(t)]
    if not looped or not greedy:
        return ""
    size = f" ({fmt.compact(params)} parameters)" if params else ""
    which = (
        "This text repeats itself"
        if len(texts) == 1
        else f"{len(looped)} of these {len(texts)} replies repeat"
    )
    return (
        f"{which}: {model}{size} decodes greedily here (the likeliest token at every step), and a model this size "
        f"falls into loops that way. The page measures {measures}, not the quality of the text."
    )
