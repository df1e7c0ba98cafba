"""The inverse questions, each answered with its interval:

- max-context: the longest context that fits, as vLLM's `--max-model-len auto` (-1) finds it: after the profile
  run sizes the KV cache (engine.calc.serving_memory), vllm/v1/core/kv_cache_utils.py `_auto_fit_max_model_len`
  binary-searches the largest length L in [1, the model's context] whose blocks, ceil(L / block size) x bytes per
  block, fit the KV memory less one block (the null block the pool holds back). The interval scales that memory by
  how far vLLM's published KV capacities landed from this calculator's (the track record's kv_cache_tokens rows).
- max-users: the most users at the SLOs on this deployment: the simulator's knee (engine.simulate), found by
  doubling the users until a level misses the SLOs and bisecting between with short runs (3 requests per user),
  then confirmed with runs long enough to reach steady state (20 per user, CONFIRM_REQUESTS_PER_USER says why),
  walked from the short runs' answer to a level that holds beside one that misses; once per end of the step-time
  interval, whose slow end is the answer with margin.
- cheapest: the cheapest GPU type and count for a load of N users at the SLOs: every catalogue GPU with a published
  price (engine/data/prices.toml) at 1, 2, 4 and 8 GPUs in tensor parallel, with as many replicas as the load
  needs (each replica serving its share of the users, confirmed as the most users are); cheapest first, so a
  configuration whose one replica already costs more than the best found is never simulated. The same search with
  every step at the slow end of its 80% interval gives a plan with margin, which may be another GPU or count. The
  answer names its runner-up and why it lost, and where a replica of more GPUs holds fewer users than one of fewer
  GPUs of the same type, why, from each one's decode step.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cache

from engine.calc import format as fmt
from engine.calc.launch import CAP_FLAG
from engine.calc.plan import held_at
from engine.calc.prices import instance_words, price_for
from engine.calc.serving_memory import serving_memory
from engine.calc.specs import GPUSpec, ModelSpec, load_gpu_catalog
from engine.calc.step_model import StepParts, step_parts
from engine.core.errors import EngineError, InvalidParameterError
from engine.core.interval import Interval
from engine.core.stats import quantile
from engine.loadgen.client import RequestRecord
from engine.loadgen.metrics import meets
from engine.loadgen.workload import SLO
from engine.simulate.spec import SimulateSpec
from engine.simulate.steps import PublishedSteps
from engine.simulate.sweep import (
    STEADY_REQUESTS_PER_USER,
    Deployment,
    anchored_words,
    counted_records,
    deployment,
    model_spec,
    requests_of,
    steady_stagger_s,
    workload,
)
from engine.simulate.sweep import prompt_lengths as lengths_of

QUESTIONS = ("max-context", "max-users", "cheapest")
TP_COUNTS = (1, 2, 4, 8)
MAX_USERS = 4096  # the search's ceiling: past it the answer reads "at least"
Progress = Callable[[float, str], None]


@dataclass(frozen=True)
class Answer:
    question: str
    value: Interval  # the answer, its low and high ends
    unit: str
    sentence: str  # built from the numbers beside it
    details: dict
    parts: tuple[str, ...] = ()  # the sentence's parts, the answer first (a page shows the rest as a list)

    def to_json(self) -> dict:
        from engine.core.jsonsafe import to_jsonable

        return to_jsonable(
            {
                "solve": self.question,
                "answer": self.value.to_json(),
                "unit": self.unit,
                "sentence": self.sentence,
            }
            | {"details": self.details}
        )


# ---------------------------------------------------------------- the longest context that fits


def auto_fit_max_model_len(kv_bytes: float, bytes_per_block: float, block_size: int, model_max: int) -> int:
    """vLLM's `_estimate_max_model_len_from_groups` for one full-attention group: the largest L in [1, model_max]
    with ceil(L / block_size) x bytes_per_block <= kv_bytes - bytes_per_block, by the same binary search;
    0 when not even one token fits."""
    check = kv_bytes - bytes_per_block  # the null block

    def fits(n: int) -> bool:
        return math.ceil(n / block_size) * bytes_per_block <= check

    left, right = 1, model_max
    if not fits(left):
        return 0
    result = 1
    while left <= right:
        mid = (left + right) // 2
        if fits(mid):
            result, left = mid, mid + 1
        else:
            right = mid - 1
    return result


@cache
def kv_capacity_ratios() -> tuple[float, ...]:
    """published / predicted vLLM KV capacity (blocks, tokens, GiB, maximum concurrency: each proportional to the
    cache) over the track record's memory rows (engine.trackrecord, its "kv capacity" group). Only the memory rows
    are built: a fraction of a second, where the whole track record also predicts every speed row (seconds)."""
    from engine.trackrecord import _memory_rows

    return tuple(
        r.published / r.predicted
        for r in _memory_rows()
        if r.group == "kv capacity" and r.predicted and r.published and not r.why  # the scored rows only
    )


def max_context(
    spec: ModelSpec,
    gpu: GPUSpec,
    *,
    dtype: str,
    kv_dtype: str | None = None,
    n_gpus: int = 1,
    engine: str = "vllm",
    gpu_memory_utilization: float | None = None,
    max_num_seqs: int | None = None,
) -> Answer:
    if engine not in ("vllm", "sglang"):
        raise InvalidParameterError(
            "the longest context that fits is how vLLM (--max-model-len auto) or SGLang size their cache: choose "
            "--engine vllm or sglang"
        )
    sm = serving_memory(
        spec,
        gpu,
        engine=engine,
        dtype=dtype,
        kv_dtype=kv_dtype,
        tensor_parallel=n_gpus,
        gpu_memory_utilization=gpu_memory_utilization,
        max_num_seqs=max_num_seqs,
    )
    per_block = sm.block_size * sm.kv_bytes_per_token
    ratios = kv_capacity_ratios()
    lo, hi = (quantile(ratios, 0.025), quantile(ratios, 0.975)) if len(ratios) >= 2 else (1.0, 1.0)
    top = spec.context_length

    def at(scale: float) -> int:
        if engine == "sglang":  # no auto mode: the pool's tokens, capped at the model's context
            return max(0, min(top, math.floor(max(0.0, sm.kv_bytes) * scale / sm.kv_bytes_per_token)))
        return auto_fit_max_model_len(max(0.0, sm.kv_bytes) * scale, per_block, sm.block_size, top)

    value = Interval(at(min(lo, 1.0)), at(1.0), at(max(hi, 1.0)), bound=top, rows=len(ratios))
    where = f"{n_gpus} x {gpu.name}" if n_gpus > 1 else gpu.name
    if value.central == 0:
        # raising the utilisation helps only while the weights leave room in the whole GPU
        whole = sm.weights_bytes < sm.total_bytes * 0.95
        fix = (
            "add GPUs or raise the utilisation" if whole else "add GPUs (tensor parallel splits the weights)"
        )
        sentence = (
            f"Not even one token of KV cache fits on {where}: the weights ({sm.weights_bytes / 1e9:.1f} GB per GPU), "
            f"the profile run and the runtime need more than the {sm.budget_bytes / 1e9:.1f} GB vLLM may use ({sm.utilization:.0%} of "
            f"the memory). vLLM refuses to start; {fix}."
        )
    elif value.central >= top:
        low = (
            f" At the low end of the KV-capacity interval it would be cut to {value.low:,}."
            if value.low < top
            else ""
        )
        sentence = (
            f"The model's whole context of {top:,} tokens fits on {where} ({sm.kv_cache_tokens:,} tokens of KV cache "
            f"at {sm.utilization:.0%} utilisation); vLLM's auto fit keeps it.{low}"
        )
    else:
        pool = (
            f"the pool's {sm.kv_cache_tokens:,} tokens less the block vLLM keeps empty (its null block)"
            if engine == "vllm"
            else f"the pool's {sm.kv_cache_tokens:,} tokens"
        )
        sentence = (
            f"The longest context that fits on {where} is {value.central:,} tokens ({pool}; interval "
            f"{value.low:,} to {value.high:,} from the published KV-capacity errors), below the model's {top:,}: "
            f"{sm.kv_bytes / 1e9:.2f} GB per GPU is left for the KV cache after {sm.weights_bytes / 1e9:.2f} GB of "
            f"weights and {sm.activation_bytes / 1e9:.2f} GB for the profile run's activations, as vLLM's "
            "--max-model-len auto would find it."
        )
    return Answer(
        "max-context",
        value,
        "tokens",
        sentence,
        {
            "kv_cache_tokens": sm.kv_cache_tokens,
            "kv_bytes_per_gpu": sm.kv_bytes,
            "bytes_per_block": per_block,
            "block_size": sm.block_size,
            "model_context": top,
            "kv_capacity_ratio_interval": [lo, hi],
            "method": "vLLM's --max-model-len auto: binary search over ceil(L / block) x bytes per block <= KV "
            "memory - one block (vllm/v1/core/kv_cache_utils.py); interval: published / predicted KV capacity",
            "notes": list(sm.notes),
        },
    )


# ---------------------------------------------------------------- the most users at the SLOs


# A search probe of u users simulates at least 3u requests: the first u are the ramp, left out.
PROBE_REQUESTS_PER_USER = 3
# A confirming run simulates at least 20 requests per user. A run of fixed users ends one user at a time, so each
# user's last request runs while the others leave, on a lighter machine than in steady state (its first, the ramp, is
# left out). Of the R - 1 requests a user has counted, one is light: at 3 per user half of them, at 20 one in 19
# (5%), so a run's 90% attainment stands for at least 89.4% in steady state where at 3 it stood for 80%
# (`steady_attainment`). Llama-3.1-8B on one H100, vLLM, 2048 + 256 tokens, TPOT <= 50 ms: the knee with 3, 5, 8, 12,
# 20 and 40 requests per user was 129, 122, 121, 121, 121, 121 at the central step times and 157, 154 (8), 144 (20),
# 143 (40) at the quick end; 20 lands within one user of 40, where 3 was 7% over (tests/test_simulate_solve.py).
CONFIRM_REQUESTS_PER_USER = STEADY_REQUESTS_PER_USER


def probe_requests(s: SimulateSpec, users: int, per_user: int = PROBE_REQUESTS_PER_USER) -> int:
    """Requests one probe of `users` users simulates: the spec's, raised to `per_user` per user where fewer (each
    user's first request is the ramp and is left out of the count, so fewer leave too few to judge); a confirming
    run asks CONFIRM_REQUESTS_PER_USER."""
    return max(s.n_requests, per_user * users)


def steady_attainment(min_attainment: float, requests_per_user: float) -> float:
    """The least steady-state attainment a run's `min_attainment` stands for when, of the R - 1 requests a user has
    counted (the first is the ramp), the last runs on a lighter machine and meets the objectives whatever the load:
    (a - L) / (1 - L) with L = 1 / (R - 1)."""
    light = 1 / max(1.0, requests_per_user - 1)
    return max(0.0, (min_attainment - light) / (1 - light)) if light < 1 else 0.0


def _capital(text: str) -> str:
    """A label that opens a sentence ("simulated for ...") with its first letter raised."""
    return text[:1].upper() + text[1:]


def _priced(prices: Mapping[str, float] | None, gpus: Sequence[str] | None) -> str:
    """Which prices the search compared: the user's own where given, list prices for the rest."""
    if not prices:
        return " Prices: the catalogue's list prices (give your own with the price box or --usd-per-hour)."
    catalog = load_gpu_catalog()
    own = ", ".join(f"${v:,.2f} per {catalog[k].name if k in catalog else k} hour" for k, v in prices.items())
    rest = "" if gpus is not None and set(gpus) <= set(prices) else "; list prices for the others"
    return f" Prices: your own {own}{rest}."


def requests_raised(s: SimulateSpec, users: int) -> str:
    """A sentence when the requests asked were fewer than a probe of `users` needs, saying what was used."""
    used = probe_requests(s, users)
    if used == s.n_requests:
        return ""
    return (
        f" Each probe simulated {PROBE_REQUESTS_PER_USER} requests per user ({used:,} at {users:,} users) rather "
        f"than {s.n_requests:,} in all, as each user's first request is left out as the ramp."
    )


def _meets(
    s: SimulateSpec,
    d,
    users: int,
    slo: SLO,
    which: str,
    lengths: Sequence[int],
    per_user: int = PROBE_REQUESTS_PER_USER,
) -> bool:
    """Whether `users` users meet the objectives in steady state (`steady_records`); only whether, not the figures
    (their percentiles over every token's gap took half of a solver's probe)."""
    return meets(steady_records(s, d, users, which, lengths, per_user), slo)


def steady_records(
    s: SimulateSpec,
    d,
    users: int,
    which: str,
    lengths: Sequence[int] = (),
    per_user: int = PROBE_REQUESTS_PER_USER,
) -> list[RequestRecord]:
    """`users` users in steady state: started `steady_stagger_s` apart, at least `per_user` requests each, their
    first requests (the ramp, on a machine not yet full) left out; prompt lengths `lengths`, then the probe's own."""
    probe = replace(s, mode="concurrency", n_requests=probe_requests(s, users, per_user))
    load, planned = workload(probe, users)
    longer = list(lengths) + lengths_of(probe)[len(lengths) :]
    stagger = steady_stagger_s(s, d, users, which)
    return counted_records(d, load, requests_of(planned, longer), which, stagger, users)


def judge(
    s: SimulateSpec,
    d,
    slo: SLO,
    which: str,
    lengths: Sequence[int],
    per_user: int = PROBE_REQUESTS_PER_USER,
) -> Callable[[int], bool]:
    """`_meets` at one end of the step times and one run length as a function of the users, each level simulated
    once (the searches ask some twice: replicas of 50 users take 25 each at 2 replicas and at 3 of 49)."""

    @cache
    def meets(users: int) -> bool:
        return _meets(s, d, users, slo, which, lengths, per_user)

    return meets


def knee_search(meets: Callable[[int], bool], ceiling: int = MAX_USERS) -> int:
    """The most users that meet the SLOs: double until a level misses, then bisect (0: even one user misses)."""
    if not meets(1):
        return 0
    good = 1
    while good < ceiling:
        nxt = min(ceiling, good * 2)
        if not meets(nxt):
            bad = nxt
            break
        good = nxt
    else:
        return good
    while bad - good > 1:
        mid = (good + bad) // 2
        good, bad = (mid, bad) if meets(mid) else (good, mid)
    return good


def walk_to_edge(holds: Callable[[int], bool], start: int, lo: int, hi: int) -> int:
    """The last x in [lo, hi] where `holds` is true (lo - 1 where it holds nowhere), for a test true up to a point and
    false after it, searched outwards from `start`: steps of 1, 2, 4, ... until the answer flips, then bisection.
    From a nearby search's answer (a confirmation) it takes a few probes where a search from scratch takes
    2 log2(hi); the answer is always bracketed: `holds` at it and not one past it (unless it is hi or lo - 1)."""
    x = min(max(start, lo), hi)
    step = 1
    if holds(x):
        good = x
        while True:
            if good == hi:
                return hi
            nxt = min(hi, good + step)
            if not holds(nxt):
                bad = nxt
                break
            good, step = nxt, step * 2
    else:
        bad = x
        while True:
            if bad == lo:
                return lo - 1
            nxt = max(lo, bad - step)
            if holds(nxt):
                good = nxt
                break
            bad, step = nxt, step * 2
    while bad - good > 1:
        mid = (good + bad) // 2
        good, bad = (mid, bad) if holds(mid) else (good, mid)
    return good


def _replica_command(s: SimulateSpec, spec: ModelSpec, best: Option, max_batch: int) -> str | None:
    """The launch command of one replica of the cheapest plan, as the estimate writes it for that GPU, count and
    share of the users, with the max batch the simulation ran as its cap on running requests (None when the
    estimate gives none)."""
    from engine.calc.report import Inputs, estimate

    inputs = Inputs(
        batch=best.users_per_replica, n_gpus=best.gpus, dtype=s.dtype, kv_dtype=s.kv_dtype,
        prompt_tokens=s.prompt_tokens, output_tokens=s.output_tokens,
        engine=s.engine if s.engine in ("vllm", "sglang") else "vllm",
        gpu_memory_utilization=s.gpu_memory_utilization, max_num_seqs=max_batch,
    )  # fmt: skip
    try:
        est = estimate(spec, load_gpu_catalog()[best.gpu], inputs)
    except InvalidParameterError:
        return None
    if est.launch is None:
        return None
    return est.launch.sglang if s.engine == "sglang" else est.launch.vllm


def batch_limit(s: SimulateSpec, d: Deployment, users: int) -> tuple[str, dict]:
    """Which limit binds one server of the plan first: the requests it runs at once (the simulated max batch, the
    launch command's --max-num-seqs) or the requests of full length its KV cache holds. A sentence and the figures
    for the answer's details; nothing for this machine's own server (no launch command, no allocation)."""
    if d.memory is None:
        return "", {}
    engine = "sglang" if s.engine == "sglang" else "vllm"  # the command's server (_replica_command)
    flag, cap = CAP_FLAG[engine], d.limits.max_batch
    if s.max_batch:
        source = "as asked"
    elif d.memory.max_num_seqs:
        source = f"vLLM's default on the {d.gpu.name}"
    else:
        source = "SGLang's own default is not modelled, so the simulation and the command use this one"
    length = (s.prompt_tokens_max or s.prompt_tokens) + (s.output_tokens_max or s.output_tokens)
    held = held_at(d.memory, length)
    cache_binds = held < cap
    if not cache_binds:
        binding = f"{flag} binds first"
    elif held:
        binding = f"the cache binds first (past {held:,} running requests of full length, more wait for free blocks)"
    else:
        binding = "the cache binds first (it holds less than one request of full length)"
    if users <= min(cap, held):
        tail = f"; the {users:,} users per server stay below both"
    elif users > cap:
        tail = f"; of the {users:,} users per server, those past {cap:,} wait in its queue"
    else:
        tail = ""
    sentence = (
        f" Each server runs at most {cap:,} requests at once ({flag} {cap}: {source}) and its cache holds "
        f"{held:,} requests of {length:,} tokens: {binding}{tail}."
    )
    return sentence, {
        "max_num_seqs": cap,
        "max_num_seqs_flag": flag,
        "kv_cache_holds_requests": held,
        "request_tokens": length,
        "binding_limit": "kv_cache" if cache_binds else "max_num_seqs",
    }


def _beside_estimate(s: SimulateSpec, d: Deployment, users: int, slo: SLO) -> tuple[str, dict]:
    """The simulated time per output token at `users` on the deployment, the figure a TPOT verdict reads, said
    beside the estimate's for the same load, with why the two differ: the estimate prices a round's prompts as a
    prefill pass of their own, the simulated engine runs them in chunks inside the decode steps. 70B on 4 x H100,
    50 users: simulated 49.9 ms (every request alike in steady state), estimated 50.7 ms, so near an objective
    they can fall on either side of it; the answer says which one its verdict reads, and how far apart they are."""
    if (
        slo.tpot_s is None
        or users < 1
        or s.engine not in ("vllm", "sglang", "tgi", "tensorrt-llm", "lmdeploy")
    ):
        return "", {}
    from engine.calc.report import Inputs, estimate

    try:
        est = estimate(
            d.spec,
            d.gpu,
            Inputs(
                dtype=s.dtype,
                kv_dtype=s.kv_dtype,
                batch=users,
                n_gpus=d.n_gpus,
                engine=s.engine,
                prompt_tokens=s.prompt_tokens,
                output_tokens=s.output_tokens,
                gpu_memory_utilization=s.gpu_memory_utilization,
            ),
        )
    except EngineError:
        return "", {}
    records = steady_records(s, d, users, "central", per_user=CONFIRM_REQUESTS_PER_USER)
    tpots = [r.tpot_s for r in records if r.ok and math.isfinite(r.tpot_s)]
    simulated = quantile(tpots, slo.min_attainment)
    if not math.isfinite(simulated):
        return "", {}
    estimated = est.tpot_at_load_s
    span = est.tpot_at_load_interval
    within = f" ({fmt.seconds(span[0])}–{fmt.seconds(span[1])})" if span else ""
    gap = estimated / simulated - 1
    side = "under" if simulated <= slo.tpot_s else "over"
    est_side = "under" if estimated <= slo.tpot_s else "over"
    sentence = (
        f" The verdict on time per output token reads the simulation: at {users:,} users, "
        f"{slo.min_attainment:.0%} of the simulated requests take {fmt.seconds(simulated)} or less per output token "
        f"(all steps at their central times), {side} the objective's {fmt.seconds(slo.tpot_s)}. The estimate for the "
        f"same load gives {fmt.seconds(estimated)}{within}, {abs(gap):.1%} {'more' if gap >= 0 else 'less'}"
        + (f" and {est_side} the objective" if est_side != side else "")
        + ": it prices each round's prompts as a prefill pass of their own, where the simulated engine runs them in "
        f"chunks of up to {d.limits.prefill_chunk_tokens:,} tokens inside the decode steps, as chunked prefill does."
        + (
            " The two fall on either side of the objective: budget with the plan with margin."
            if est_side != side
            else ""
        )
    )
    return sentence, {
        "tpot_at_load": {
            "users": users,
            "simulated_s": simulated,
            "simulated_share": slo.min_attainment,
            "estimated_s": estimated,
            "estimated_interval_s": list(span) if span else None,
            "verdict_reads": "simulated_s",
        }
    }


def _anchored(d: Deployment) -> str:
    """The sentence's last words where the step times rest on a published run of the setup."""
    steps = d.steps
    if isinstance(steps, PublishedSteps) and steps.anchor is not None:
        return f" With {anchored_words(steps)}."
    return ""


def _users_ends(value: Interval) -> str:
    """The most-users answer's ends in words, each labelled with the step times that give it: the slow end (every
    step at the slow end of its 80% interval) is the answer with margin, where even one user may miss."""
    slow = "not even one" if value.low == 0 else f"{value.low}, the answer with margin,"
    return f"{slow} with every step at the slow end of its 80% interval; {value.high} at the quick end"


def _confirmed(s: SimulateSpec, slo: SLO, searched: Mapping[str, int], knees: Mapping[str, int]) -> str:
    """How the answers were confirmed: searched with short runs, then walked with long ones to a level that holds
    beside one that misses, and what the short runs had said."""
    users = knees["central"]
    n = probe_requests(s, max(users, 1), CONFIRM_REQUESTS_PER_USER)
    per_user = n / max(users, 1)
    short = PROBE_REQUESTS_PER_USER
    if users == 0:
        held = "even one user misses them there"
    elif users >= MAX_USERS:
        held = f"{users:,} users, the search's ceiling, meet them there"
    else:
        held = f"{users:,} users meet them there and {users + 1:,} miss"
    said = searched["central"]
    if said == users:
        before = f"the runs of {short} requests per user found the same"
    else:
        before = (
            f"the runs of {short} requests per user said {said:,}: each user's last request runs while the others "
            f"leave, on a lighter machine, so their {slo.min_attainment:.0%} stood for "
            f"{steady_attainment(slo.min_attainment, short):.0%} in steady state; at {per_user:,.0f} per user it "
            f"stands for {steady_attainment(slo.min_attainment, per_user):.1%}"
        )
    moved = [
        f"the {name} end from {searched[w]:,} to {knees[w]:,}"
        for name, w in (("slow", "high"), ("quick", "low"))
        if searched[w] != knees[w]
    ]
    ends = f"; confirming moved {' and '.join(moved)}" if moved else ""
    return (
        f" Confirmed with runs long enough to reach steady state: each answer was searched with runs of {short} "
        f"requests per user, then simulated again with at least {CONFIRM_REQUESTS_PER_USER} per user ({n:,} "
        f"requests at {max(users, 1):,} users) and moved until one level held and the next missed: {held} "
        f"({before}){ends}."
    )


def _need_slo(slo: SLO) -> None:
    if slo.ttft_s is None and slo.tpot_s is None and slo.e2e_s is None:
        raise InvalidParameterError(
            "give an objective to meet: a TTFT and/or a TPOT objective (an objective set to 0 is off, and every "
            "one is off now)"
        )


def max_context_for(s: SimulateSpec, spec: ModelSpec, gpu: GPUSpec) -> Answer:
    """max_context for a simulation's deployment (its dtype, KV dtype, GPU count, engine, utilisation and max
    batch): the one mapping the CLI and the page share."""
    return max_context(
        spec,
        gpu,
        dtype=s.dtype,
        kv_dtype=s.kv_dtype,
        n_gpus=s.n_gpus,
        engine=s.engine,
        gpu_memory_utilization=s.gpu_memory_utilization,
        max_num_seqs=s.max_batch,
    )


def max_users(
    s: SimulateSpec, slo: SLO, *, progress: Progress | None = None, deploy: Deployment | None = None
) -> Answer:
    """`deploy`: a resolved deployment (tests and bench/simulate.py pass their own step times)."""
    s.validate()
    slo.validate()
    _need_slo(slo)
    if progress and deploy is None:
        progress(0.0, f"reading {s.model or s.config}'s shape and sizing its memory")
    d = deploy or deployment(s)
    lengths = lengths_of(s)
    knees: dict[str, int] = {}
    searched: dict[str, int] = {}
    for i, which in enumerate(("central", "high", "low")):  # a slow step (high) gives the low end
        if progress:
            progress(i / 3, f"searching the knee with {which} step times")
        searched[which] = knee_search(judge(s, d, slo, which, lengths))
        if progress:
            progress(
                (i + 0.5) / 3,
                f"confirming {searched[which]:,} users with {which} step times and runs of "
                f"{CONFIRM_REQUESTS_PER_USER} requests per user",
            )
        long = judge(s, d, slo, which, lengths, CONFIRM_REQUESTS_PER_USER)
        knees[which] = walk_to_edge(long, searched[which], 1, MAX_USERS)
    value = Interval(knees["high"], knees["central"], knees["low"], rows=d.steps.describe().get("rows"))
    objectives = slo.words()
    at_least = " at least" if value.central >= MAX_USERS else ""
    limit, limits = batch_limit(s, d, value.central)
    beside, beside_details = _beside_estimate(s, d, value.central, slo)
    parts = [
        (
            f"{_capital(d.label)}: at most{at_least} {value.central} concurrent users at the central step times "
            f"({_users_ends(value)}) meet "
            f"{objectives} for {slo.min_attainment:.0%} of their requests ({s.prompt_tokens} prompt + "
            f"{s.output_tokens} output tokens each), in steady state: each user sends its next request when the "
            "last ends, the users spread over a request's duration (not all at once), their first requests left out. "
            "A user's TPOT here counts the steps that carry the other users' prompts, as the estimate's time per "
            "output token at this load does; its decode-step TPOT leaves them out, so read the objective against "
            "the former."
            if value.central
            else f"{_capital(d.label)}: even one user misses {objectives}; relax them or pick a faster deployment."
        ),
        _confirmed(s, slo, searched, knees),
        _beyond_full_length(d, value.central, s.prompt_tokens + s.output_tokens),
        limit,
        _anchored(d),
        beside,
        requests_raised(s, max(value.central, 1)),
    ]
    return Answer(
        "max-users",
        value,
        "users",
        "".join(parts),
        {
            "label": d.label,
            "step_model": d.steps.describe(),
            "max_batch": d.limits.max_batch,
            "search_ceiling": MAX_USERS,
            "requests_per_probe_at_answer": probe_requests(s, max(value.central, 1)),
            # the interval's ends, labelled: the users that meet the objectives with every step at that end
            "ends": {"slow_steps": value.low, "central_steps": value.central, "quick_steps": value.high},
            "margin_users": value.low,  # the answer with margin: every step at the slow end of its 80% interval
            "confirmed": {
                "requests_per_user": CONFIRM_REQUESTS_PER_USER,
                "requests_at_answer": probe_requests(s, max(value.central, 1), CONFIRM_REQUESTS_PER_USER),
                "search_requests_per_user": PROBE_REQUESTS_PER_USER,
                "searched": {
                    "slow_steps": searched["high"],
                    "central_steps": searched["central"],
                    "quick_steps": searched["low"],
                },
            },
        }
        | limits
        | beside_details,
        tuple(p for p in parts if p),
    )


def _beyond_full_length(d: Deployment, users: int, seq_len: int) -> str:
    """Why more users can meet the SLOs than the calculator's max batch of full-length requests: a sentence when
    they do (the two numbers sit side by side on the Memory and cost page)."""
    held = held_at(d.memory, seq_len) if d.memory is not None else 0
    if not held or users <= held:
        return ""
    return (
        f" That is more than the {held:,} requests of {seq_len:,} tokens its cache holds at once (the calculator's "
        "max batch): at any moment users' requests are at different lengths, and a paged cache holds only the tokens "
        "each has so far."
    )


# ---------------------------------------------------------------- the cheapest GPU type and count


@dataclass(frozen=True)
class Option:
    gpu: str  # catalogue key
    name: str
    gpus: int  # per replica (tensor parallel)
    replicas: int
    usd_per_gpu_hour: float
    users_per_replica: int

    @property
    def usd_per_hour(self) -> float:
        return self.replicas * self.gpus * self.usd_per_gpu_hour


def _replicas(meets: Callable[[int], bool], users: int) -> int | None:
    """Fewest replicas r whose share ceil(users / r) meets the SLOs (None: one user per replica still misses)."""
    if meets(users):
        return 1
    if not meets(1):
        return None
    lo, hi = 1, users  # replicas: lo fails, hi meets (one user each)
    r = 2
    while r < users and not meets(math.ceil(users / r)):
        lo, r = r, r * 2
    hi = min(r, users)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if meets(math.ceil(users / mid)) else (mid, hi)
    return hi


def priced_gpus() -> dict[str, str]:
    """{catalogue key: name} of the GPUs with a price: the ones `cheapest` can search."""
    return {key: gpu.name for key, gpu in load_gpu_catalog().items() if price_for(key) is not None}


def gpu_hour(key: str, prices: Mapping[str, float] | None = None) -> float | None:
    """A GPU's $ per hour: the user's own where given (their cloud's), else the catalogue's list price."""
    if prices and key in prices:
        return prices[key]
    listed = price_for(key)
    return listed.usd_per_gpu_hour if listed is not None else None


def candidates(
    spec: ModelSpec,
    s: SimulateSpec,
    gpus: Sequence[str] | None = None,
    prices: Mapping[str, float] | None = None,
) -> list[tuple[float, str, int]]:
    """(dollars per hour of one replica, GPU key, GPUs) for every priced GPU and count the model splits into and
    fits on, cheapest first."""
    from engine.simulate.sweep import check_split

    out = []
    for key, gpu in load_gpu_catalog().items():
        if gpus is not None and key not in gpus:
            continue
        hourly = gpu_hour(key, prices)
        if hourly is None:
            continue
        for n in TP_COUNTS:
            try:
                check_split(spec, n)
                sm = serving_memory(
                    spec, gpu, dtype=s.dtype, kv_dtype=s.kv_dtype, tensor_parallel=n,
                    gpu_memory_utilization=s.gpu_memory_utilization,
                    max_model_len=(s.prompt_tokens_max or s.prompt_tokens) + (s.output_tokens_max or s.output_tokens),
                )  # fmt: skip
            except InvalidParameterError:
                continue
            if sm.fits:
                out.append((n * hourly, key, n))
    return sorted(out)


def cheapest(
    s: SimulateSpec,
    slo: SLO,
    users: int,
    *,
    gpus: Sequence[str] | None = None,
    progress: Progress | None = None,
    model: ModelSpec | None = None,
    prices: Mapping[str, float] | None = None,
) -> Answer:
    """`model`: a model shape given directly (the Memory-and-cost page's); default: the spec's preset or config.
    `prices`: $ per GPU-hour by catalogue key where the user gave their own (the rest at list prices)."""
    s.validate()
    slo.validate()
    _need_slo(slo)
    if not isinstance(users, int) or users < 1:
        raise InvalidParameterError(f"the load is a whole number of users >= 1, got {users!r}")
    if progress and model is None:
        progress(0.0, f"reading {s.model or s.config}'s shape")
    spec = model or model_spec(s)
    if gpus is not None:
        unknown = sorted(set(gpus) - set(priced_gpus()))
        if unknown or not gpus:
            raise InvalidParameterError(
                f"the GPUs to search are priced catalogue keys ({', '.join(priced_gpus())}); "
                + (f"got {', '.join(unknown)}" if unknown else "none was given")
            )
    cands = candidates(spec, s, gpus, prices)
    if not cands:
        catalog = load_gpu_catalog()
        among = (
            "priced GPU of the catalogue"
            if gpus is None
            else " or ".join(catalog[g].name if g in catalog else g for g in gpus)
        )
        raise InvalidParameterError(f"{spec.name} fits on no {among} at 1 to 8 GPUs")
    lengths = lengths_of(s)
    deploys: dict[tuple[str, int], Deployment] = {}
    best, tried = _plan(s, spec, slo, users, cands, prices, lengths, "central", deploys, progress, (0.0, 0.5))
    if best is None:
        raise InvalidParameterError(
            f"no priced GPU meets {slo.words()} even with one user per replica; relax the objectives"
        )
    likely, _ = _plan(
        s, spec, slo, users, cands, prices, lengths, "likely_slow", deploys, progress, (0.5, 0.75)
    )
    margin, margin_tried = _plan(
        s, spec, slo, users, cands, prices, lengths, "high", deploys, progress, (0.75, 1.0)
    )
    d = deploys[(best.gpu, best.gpus)]
    value = Interval(
        best.usd_per_hour,
        best.usd_per_hour,
        margin.usd_per_hour if margin is not None else math.inf,
        rows=d.steps.describe().get("rows"),
    )
    each = f"{best.replicas} replicas of " if best.replicas > 1 else ""
    limit, limits = batch_limit(s, d, best.users_per_replica)
    beside, beside_details = _beside_estimate(s, d, best.users_per_replica, slo)
    price_note = _price_note(best, prices)
    margin_plan = _margin_plan(s, spec, margin, best, deploys, prices)
    odds = _odds(best, likely, margin)
    parts = [
        f"Cheapest for {users} users at {slo.words()}: {each}{best.gpus} x {best.name} at "
        f"${best.usd_per_hour:,.2f}/hour, {best.users_per_replica} users per replica, at the step times' "
        f"central estimates; {len(tried)} of the {len(cands)} priced options that fit "
        f"{'was' if len(tried) == 1 else 'were'} simulated (users in steady state, as the most-users answer "
        "counts them); each of the others costs more for one replica than the runner-up's whole plan.",
        odds["sentence"],
        f" Each option's replicas were searched with runs of {PROBE_REQUESTS_PER_USER} requests per user and "
        f"confirmed with runs of at least {CONFIRM_REQUESTS_PER_USER} per user, long enough to reach steady "
        "state, as the most-users answer confirms its own.",
        f" {price_note}" if price_note else "",
        _anchored(d),
        beside,
        requests_raised(s, best.users_per_replica),
        limit,
        _priced(prices, gpus),
    ]
    command = _replica_command(s, spec, best, d.limits.max_batch)
    fewer = [
        {"gpu": small.gpu, "smaller": small.gpus, "larger": large.gpus, "sentence": why}
        for small, large in larger_split_holds_fewer(tried)
        if (
            why := split_words(
                s, small, large, deploys[(small.gpu, small.gpus)], deploys[(large.gpu, large.gpus)]
            )
        )
    ]
    runner = runner_up(best, tried, cands, prices)
    if best.replicas > 1:
        parts.insert(
            1,
            f" Run it as {best.replicas} copies of the {best.gpus}-GPU server below, behind a load balancer, each "
            f"taking {best.users_per_replica} users.",
        )
    return Answer(
        "cheapest",
        value,
        "USD per hour",
        "".join(parts),
        {
            "launch_command": command,
            "best": best.__dict__ | {"usd_per_hour": best.usd_per_hour},
            **limits,
            "price_source": "your own price" if _own_price(best, prices) else price_for(best.gpu).label,  # type: ignore[union-attr]
            "price_note": price_note,
            "simulated": _rows(tried),
            "runner_up": runner,
            "larger_split_holds_fewer": fewer,
            "margin_plan": margin_plan,
            "margin_simulated": _rows(margin_tried),
            "confirmed": {
                "requests_per_user": CONFIRM_REQUESTS_PER_USER,
                "search_requests_per_user": PROBE_REQUESTS_PER_USER,
            },
            **beside_details,
            "odds": odds["plans"],
        },
        tuple(p for p in parts if p),
    )


def _own_price(o: Option, prices: Mapping[str, float] | None) -> bool:
    return prices is not None and o.gpu in prices


def _price_note(o: Option, prices: Mapping[str, float] | None) -> str:
    """How an option's servers are priced where the price is the catalogue's (a quote of an instance with fewer
    GPUs), empty where the user gave their own."""
    return "" if _own_price(o, prices) else instance_words(o.gpu, o.gpus, o.name)


def _rows(options: Sequence[Option]) -> list[dict]:
    """The options a search simulated, cheapest first, as the JSON and the page's table show them."""
    return sorted(
        ({**o.__dict__, "usd_per_hour": o.usd_per_hour} for o in options), key=lambda o: o["usd_per_hour"]
    )


def _plan(
    s: SimulateSpec,
    spec: ModelSpec,
    slo: SLO,
    users: int,
    cands: Sequence[tuple[float, str, int]],
    prices: Mapping[str, float] | None,
    lengths: Sequence[int],
    which: str,
    deploys: dict[tuple[str, int], Deployment],
    progress: Progress | None,
    span: tuple[float, float],
) -> tuple[Option | None, list[Option]]:
    """The cheapest plan with every step at `which` end of its interval ("central"; "high": the slow end, a plan
    with margin): the candidates cheapest first, each one's fewest replicas searched with short runs and confirmed
    with long ones (`confirmed_replicas`), until one replica of the next costs as much as the runner-up found (the
    search stopped at the best once, and a $18.00 plan was called runner-up where 4 x H100 at $13.96 also met
    the objectives, unsearched: an engineer's walk).
    Returns the plan (None where no option meets the objectives) and every option that met them."""
    best: Option | None = None
    second: Option | None = (
        None  # the runner-up: searched on until one replica of the next costs more than it
    )
    tried: list[Option] = []
    ends = {
        "central": "central step times",
        "likely_slow": "every step at its 75th percentile",
    }.get(which, "every step at its slow end")
    for i, (one, key, n) in enumerate(cands):
        if second is not None and one >= second.usd_per_hour:
            break  # every later option costs at least this much per replica: neither cheapest nor runner-up
        if progress:
            progress(
                span[0] + (span[1] - span[0]) * i / len(cands),
                f"{n} x {load_gpu_catalog()[key].name}, {ends}",
            )
        d = deploys.get((key, n)) or deployment(replace(s, gpu=key, n_gpus=n), spec)
        deploys[(key, n)] = d
        r = confirmed_replicas(
            judge(s, d, slo, which, lengths),
            judge(s, d, slo, which, lengths, CONFIRM_REQUESTS_PER_USER),
            users,
        )
        if r is None:
            continue
        hourly = gpu_hour(key, prices)
        assert hourly is not None
        opt = Option(key, d.gpu.name, n, r, hourly, math.ceil(users / r))
        tried.append(opt)
        if best is None or opt.usd_per_hour < best.usd_per_hour:
            best, second = opt, best
        elif second is None or opt.usd_per_hour < second.usd_per_hour:
            second = opt
    return best, tried


def confirmed_replicas(short: Callable[[int], bool], long: Callable[[int], bool], users: int) -> int | None:
    """Fewest replicas whose share of `users` meets the objectives in runs long enough to reach steady state
    (`long`), walked from what the short runs (`short`) found; None where one user per replica misses."""
    found = _replicas(short, users)
    if found is None:
        return None  # a short run is the lighter one: one user that misses there misses in a long one too
    too_few = walk_to_edge(lambda r: not long(math.ceil(users / r)), found - 1, 1, users)
    return None if too_few >= users else too_few + 1


def _margin_words(best: Option, margin: Option | None) -> str:
    """The plan with margin in one sentence, beside the cheapest at the central step times."""
    if margin is None:
        return (
            "With every step at the slow end of its 80% interval no priced option meets the objectives, even with one "
            "user per replica: there is no plan with margin, so budget above this one."
        )
    each = f"{margin.replicas} replicas of " if margin.replicas > 1 else ""
    same = (margin.gpu, margin.gpus, margin.replicas) == (best.gpu, best.gpus, best.replicas)
    plan = (
        "the same plan, which meets them there too"
        if same
        else f"{each}{margin.gpus} x {margin.name} at ${margin.usd_per_hour:,.2f}/hour, "
        f"{margin.users_per_replica} users per replica"
    )
    budget = (
        "" if same else f"; budget between ${best.usd_per_hour:,.2f} and ${margin.usd_per_hour:,.2f} an hour"
    )
    return (
        f"A plan with margin, the cheapest that still meets the objectives with every step at the slow end of its "
        f"80% interval (all candidates searched again there): {plan}{budget}. That is stricter than the estimate's "
        "80% interval for one figure: every step of every request is taken slow at once, where real steps scatter "
        "on either side."
    )


def _odds(best: Option, likely: Option | None, margin: Option | None) -> dict:
    """The budget at three odds that the real steps are quicker than those the plan was searched at: even (the
    central step times), 3 in 4 (every step at its 75th percentile: steps.INSIDE) and 9 in 10 (the slow end of its
    80% interval). An engineer's walk read $13.96 and, with margin, $55.84 and nothing between: the plans step from
    4 GPUs to 2 x 8, and the odds say what each buys."""

    def plan(o: Option | None) -> str:
        if o is None:
            return "no priced option meets them"
        each = f"{o.replicas} replicas of " if o.replicas > 1 else ""
        return f"{each}{o.gpus} x {o.name}, ${o.usd_per_hour:,.2f}/hour"

    rows = [("even", "central", best), ("3 in 4", "75th percentile", likely), ("9 in 10", "slow end", margin)]
    said = "; ".join(f"{odds}, {plan(o)}" for odds, _, o in rows)
    return {
        "sentence": (
            f" The budget by the odds that the real steps are at least as quick as those searched (the engine "
            f"class's published runs against their estimates, every step at once): {said}."
        ),
        "plans": [
            {
                "odds": odds,
                "step_times": where,
                "usd_per_hour": o.usd_per_hour if o else None,
                "plan": plan(o),
            }
            | ({"gpu": o.gpu, "gpus": o.gpus, "replicas": o.replicas} if o else {})
            for odds, where, o in rows
        ],
    }


def _margin_plan(
    s: SimulateSpec,
    spec: ModelSpec,
    margin: Option | None,
    best: Option,
    deploys: Mapping[tuple[str, int], Deployment],
    prices: Mapping[str, float] | None,
) -> dict:
    """The plan with margin for the JSON, the command line and the page: the option, its sentence (with the price
    note where its servers have more GPUs than the quote's instance), its command."""
    words = _margin_words(best, margin)
    if margin is None:
        return {"sentence": words, "step_times": "slow end", "usd_per_hour": None}
    d = deploys[(margin.gpu, margin.gpus)]
    note = _price_note(margin, prices)
    same = (margin.gpu, margin.gpus) == (best.gpu, best.gpus)
    return margin.__dict__ | {
        "usd_per_hour": margin.usd_per_hour,
        "step_times": "slow end",
        "sentence": words + (f" {note}" if note and not same else ""),
        "launch_command": _replica_command(s, spec, margin, d.limits.max_batch),
        "price_note": note,
    }


def runner_up(
    best: Option,
    tried: Sequence[Option],
    cands: Sequence[tuple[float, str, int]],
    prices: Mapping[str, float] | None = None,
) -> dict | None:
    """The option that came second and why it lost, in one sentence: the next cheapest plan simulated, or, where no
    other was simulated, the cheapest option left out (one replica of it already costs more than the whole plan).
    None when the search had nothing else to compare."""
    catalog = load_gpu_catalog()
    others = sorted((o for o in tried if o != best), key=lambda o: o.usd_per_hour)
    if others:
        o = others[0]
        more = o.usd_per_hour - best.usd_per_hour
        each = f"{o.replicas} replicas of " if o.replicas > 1 else ""
        why = (
            f"{o.replicas * o.gpus} GPUs at ${o.usd_per_gpu_hour:,.2f} an hour each against "
            f"{best.replicas * best.gpus} at ${best.usd_per_gpu_hour:,.2f}"
        )
        sentence = (
            f"Runner-up: {each}{o.gpus} x {o.name} at ${o.usd_per_hour:,.2f}/hour, {o.users_per_replica} users per "
            f"replica: ${more:,.2f}/hour more than the cheapest ({why})."
        )
        return {**o.__dict__, "usd_per_hour": o.usd_per_hour, "simulated": True, "sentence": sentence}
    skipped = [(one, key, n) for one, key, n in cands if (key, n) != (best.gpu, best.gpus)]
    if not skipped:
        return None
    one, key, n = skipped[0]
    name = catalog[key].name if key in catalog else key
    sentence = (
        f"Runner-up: none simulated. The next option, {n} x {name}, costs ${one:,.2f}/hour for one replica, already "
        f"more than the cheapest plan's ${best.usd_per_hour:,.2f}/hour for all of its users, so it could not win."
    )
    hourly = gpu_hour(key, prices)
    return {"gpu": key, "name": name, "gpus": n, "usd_per_gpu_hour": hourly, "usd_per_hour_one_replica": one,
            "simulated": False, "sentence": sentence}  # fmt: skip


def larger_split_holds_fewer(tried: Sequence[Option]) -> list[tuple[Option, Option]]:
    """(smaller, larger) pairs of one GPU type where the larger tensor-parallel replica holds fewer users at the
    objectives than the smaller one: each the nearest smaller count to the larger."""
    out = []
    for o in tried:
        smaller = [x for x in tried if x.gpu == o.gpu and x.gpus < o.gpus]
        if not smaller:
            continue
        s = max(smaller, key=lambda x: x.gpus)
        if o.users_per_replica < s.users_per_replica:
            out.append((s, o))
    return sorted(out, key=lambda p: (p[0].gpu, p[0].gpus))


def split_words(
    s: SimulateSpec, small: Option, large: Option, d_small: Deployment, d_large: Deployment
) -> str:
    """Why `large` (more GPUs in tensor parallel) holds fewer users per replica than `small`, from each
    deployment's own decode step at the users `small` holds, each rows' context halfway through its output: the
    step in its parts (the weights and KV cache read at the fitted utilisation; the fixed per-layer and all-reduce
    latencies, with the anchor's factor on them where a published run of the layout sets one; the all-reduces'
    bytes). Empty when a deployment's steps are not the calculator's (this machine, hand-set steps)."""
    steps_small, steps_large = d_small.steps, d_large.steps
    if not isinstance(steps_small, PublishedSteps) or not isinstance(steps_large, PublishedSteps):
        return ""
    users = small.users_per_replica
    context = users * (s.prompt_tokens + s.output_tokens // 2)

    def parts(steps: PublishedSteps, rows: int, ctx: int, prompt: int) -> StepParts:
        return step_parts(steps.setup, steps.engine, rows, ctx, prompt, fixed_factor=steps.fixed_factor)

    p, q = parts(steps_small, users, context, 0), parts(steps_large, users, context, 0)
    n, m, ms = small.gpus, large.gpus, fmt.seconds
    head = (
        f"Why {m} x {large.name} holds fewer users per replica than {n} x {small.name} ({large.users_per_replica} "
        f"against {small.users_per_replica}):"
    )
    if q.seconds <= p.seconds:
        pp, pq = (parts(st, 0, 0, s.prompt_tokens) for st in (steps_small, steps_large))
        return (
            f"{head} its decode step at {users} users is no slower ({ms(q.seconds)} on {m} GPUs against "
            f"{ms(p.seconds)} on {n}); a prompt of {s.prompt_tokens} tokens takes {ms(pq.seconds)} on {m} GPUs "
            f"against {ms(pp.seconds)} on {n}, and each user's time per token also counts the steps that carry the others' "
            "prompts."
        )
    if p.fixed_factor != q.fixed_factor:
        anchors = {k: st.anchor for k, st in ((n, steps_small), (m, steps_large))}
        said = [
            f"on {k} GPUs a published run of this layout{'' if a.run_tp == k else f' (on {a.run_tp} GPUs)'} puts "
            f"them at {a.factor:.2f}x the fit's"
            if a is not None
            else f"on {k} GPUs no published run of this layout corrects the fit's"
            for k, a in anchors.items()
        ]
        anchor = f" ({'; '.join(said)})"
        fp, fq = (step_parts(st.setup, st.engine, users, context, 0) for st in (steps_small, steps_large))
        unanchored = (
            f" With the fit's own fixed costs on both, the step would take {ms(fq.seconds)} on {m} GPUs against "
            f"{ms(fp.seconds)} on {n}: "
            + (
                f"{m} GPUs would still be slower, so the gap is not only the published run's."
                if fq.seconds > fp.seconds
                else f"{m} GPUs would be the quicker, so the gap comes from the published run that sets {n} GPUs' "
                f"costs, where none sets {m} GPUs'."
            )
        )
    else:
        anchor = unanchored = ""
    gpus = f"{n} GPU{'s' if n > 1 else ''}"
    reads = f"1/{n}" if n > 1 else "all of them on one"
    none = " (one GPU has no all-reduces)" if not p.allreduces else ""
    return (
        f"{head} at {users} users per replica ({s.prompt_tokens} + {s.output_tokens} tokens each, what {gpus} "
        f"{'hold' if n > 1 else 'holds'} within the objectives) a decode step takes {ms(q.seconds)} on {m} GPUs "
        f"against {ms(p.seconds)} on {gpus}. Reading the weights and the KV cache takes {ms(q.roofs_s)} against "
        f"{ms(p.roofs_s)} (each GPU reads 1/{m} of them rather than {reads}), but the step's fixed costs, the "
        f"per-layer launches and {q.allreduces} all-reduce latencies, take {ms(q.fixed_s)} against "
        f"{ms(p.fixed_s)}{none}{anchor}, and the all-reduces' bytes {ms(q.transfer_s)} against "
        f"{ms(p.transfer_s)}.{unanchored}"
    )
