"""A serving engine's times under a closed loop of c users, in closed form: what a request's first token waits for,
the time per output token while c - 1 others decode and prefill beside it, and the throughput that follows.

Each scheduler step is one forward (engine.calc.timing.step_seconds) over the decode rows and whatever prompt
tokens the step carries (vLLM's chunked prefill, SGLang's mixed batches). In steady state each of the c users
finishes a request every O steps and the next one arrives, so a step carries (c - 1) x P / O prompt tokens of the
*other* users on average beside the c decode rows. Then, for one request,

    TPOT  = step(c rows at mean context P + O/2, (c - 1) P / O prompt tokens)
    TTFT  = fixed + prefill(P) + queue, where
    queue = half a decode step (it arrives while one is running) + what carrying the c - 1 others' decode rows
            adds to the step that prefills it (0 with one user)
    E2E   = TTFT + (O - 1) x TPOT;   throughput = c x O / E2E

A burst (every request sent at once, as `vllm bench serve --num-prompts c --max-concurrency c` does) prefills
the c prompts together: TTFT = fixed + prefill of the batch, TPOT = the batch's decode step. Little's law ties
the loop together (c = throughput / O x E2E); queueing beyond c (more users than the cache or `max_num_seqs`
holds) is the simulator's (engine.simulate), not this form's.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from engine.calc.timing import Efficiency, Setup, step_seconds, timing_from, timing_inputs


@dataclass(frozen=True)
class LoadTimes:
    concurrency: int
    fixed_s: float  # the request's fixed cost (tokenize, schedule, detokenize, HTTP)
    prefill_s: float  # its own prompt's prefill, alone
    queue_s: float  # waiting for the running step and sharing its prefill step with the others
    tpot_s: float
    e2e_s: float
    output_tokens_per_s: float  # all users together
    decode_step_s: float  # a step of c decode rows alone
    burst: bool

    @property
    def ttft_s(self) -> float:
        return self.fixed_s + self.prefill_s + self.queue_s

    @property
    def parts(self) -> dict[str, float]:
        """{"fixed", "prefill", "queue"} in seconds, summing to the TTFT."""
        return {"fixed": self.fixed_s, "prefill": self.prefill_s, "queue": self.queue_s}


def closed_loop(s: Setup, eff: Efficiency, concurrency: int, *, burst: bool = False) -> LoadTimes:
    """TTFT (in parts), TPOT, E2E and output throughput of `concurrency` users each sending P-token prompts for
    O output tokens (the setup's lengths), as the module docstring derives them."""
    c = max(1, int(concurrency))
    p, o = s.prompt_tokens, s.output_tokens
    one = replace(s, batch=1)
    alone = step_seconds(one, eff, decode_rows=0, context_tokens=0, prefill_tokens=p).seconds
    ctx = round(c * (p + o / 2))
    if burst:
        together = timing_from(timing_inputs(replace(s, batch=c)), eff)
        queue, tpot, decode = (
            together.prefill_s - alone,
            together.decode_s_per_token,
            together.decode_s_per_token,
        )
    else:
        decode = step_seconds(s, eff, decode_rows=c, context_tokens=ctx, prefill_tokens=0).seconds
        # in O steps the c - 1 others each bring one prompt, whole, into a step (a scheduler's token budget takes
        # a prompt of P <= budget in one step): TPOT = decode + (c - 1) / O x what a prompt adds to a step
        lumped = step_seconds(s, eff, decode_rows=c, context_tokens=ctx, prefill_tokens=p).seconds
        tpot = decode + (c - 1) / o * (lumped - decode)
        queue = 0.0
        if c > 1:
            carried = step_seconds(
                s, eff, decode_rows=c - 1, context_tokens=round((c - 1) * (p + o / 2)), prefill_tokens=p
            ).seconds
            queue = decode / 2 + max(0.0, carried - alone)
    ttft = eff.request_fixed_s + alone + queue
    e2e = ttft + (o - 1) * tpot
    return LoadTimes(
        concurrency=c,
        fixed_s=eff.request_fixed_s,
        prefill_s=alone,
        queue_s=queue,
        tpot_s=tpot,
        e2e_s=e2e,
        output_tokens_per_s=c * o / e2e,
        decode_step_s=decode,
        burst=burst,
    )
