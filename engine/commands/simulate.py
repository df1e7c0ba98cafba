"""`python -m engine simulate`: a load sweep simulated for a GPU this machine lacks (or this machine, from its
calibration): the server's scheduler policy on a virtual clock with predicted step times; the load generator's
JSON (points, knee) plus "simulated" (GPU, engine, step model, scheduler, intervals)."""

from __future__ import annotations

from engine.commands import loadgen
from engine.core.errors import InvalidParameterError
from engine.loadgen.workload import SLO, LoadSpecError
from engine.simulate.spec import SimulateSpec
from engine.simulate.sweep import simulate

HELP = (
    "simulate a load sweep on a GPU you do not have: TTFT/TPOT/ITL/E2E percentiles, throughput, the SLO knee"
)


def add_arguments(parser) -> None:
    SimulateSpec.add_arguments(parser)
    SLO.add_arguments(parser)


def run(args) -> dict:
    try:
        spec = SimulateSpec.from_args(args)
        slo = SLO.from_args(args)
    except LoadSpecError as exc:
        raise InvalidParameterError(str(exc)) from None
    return simulate(spec, slo).to_json()


def format_text(out: dict) -> str:
    sim = out["simulated"]
    step = sim["step_model"]
    lines = [
        f"{sim['label']}: {sim['model']}, {out['spec']['n_requests']} requests per level, "
        f"{sim['prompt_tokens']} prompt + {out['spec']['output_tokens']} output tokens",
        f"step times: {step.get('what', step.get('kind'))}",
    ]
    lines += loadgen.format_text(out).splitlines()[1:]  # the load generator's table, without its URL line
    k = sim["knee_interval"]
    if k["central"] is not None:
        lines.append(f"knee interval (step times at their interval's ends): {k['low']} .. {k['high']}")
    lines += [f"note: {n}" for n in sim["notes"]]
    return "\n".join(lines)
