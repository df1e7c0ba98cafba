"""`python -m engine simulate`: a load sweep simulated for a GPU this machine lacks (or this machine, from its
calibration): the server's scheduler policy on a virtual clock with predicted step times; the load generator's
JSON (points, knee) plus "simulated" (GPU, engine, step model, scheduler, intervals)."""

from __future__ import annotations

from dataclasses import replace

from engine.commands import loadgen
from engine.commands.progress import progress_lines
from engine.core.errors import InvalidParameterError
from engine.loadgen.workload import SLO, LoadSpecError
from engine.simulate.spec import SimulateSpec
from engine.simulate.sweep import STEADY_REQUESTS_PER_USER, simulate

HELP = (
    "simulate a load sweep on a GPU you do not have: TTFT/TPOT/ITL/E2E percentiles, throughput, the SLO knee"
)


def add_arguments(parser) -> None:
    # without --dtype, the checkpoint's own precision where the GPU runs it, as the estimate and the page start
    # without --requests, enough for every level's steady state (steady_requests)
    SimulateSpec.add_arguments(parser, defaults={"dtype": None, "n_requests": None})
    SLO.add_arguments(parser)


def steady_requests(spec: SimulateSpec) -> int:
    """Requests per level without --requests: the spec's 200, or STEADY_REQUESTS_PER_USER per user at the most users
    asked where that is more (121 users at 200 requests read TTFT 9.71 s, every user's only request starting at
    once, where the most-users answer, confirmed with 20 a user, met the objectives: an engineer's walk)."""
    base = SimulateSpec.default("n_requests")
    if spec.mode != "concurrency":
        return base
    return min(100_000, max(base, STEADY_REQUESTS_PER_USER * int(max(spec.levels()))))


def default_dtype(args) -> str:
    """The weight precision without --dtype: the checkpoint's own where the GPU runs it (default_precision), as
    the estimate and the Memory-and-cost page start. A model or GPU that cannot be read keeps the spec's default, so
    the spec's own check says what is wrong with it."""
    from engine.arch.resolve import resolve_gpu
    from engine.calc.report import default_precision
    from engine.calibration import this_machine_gpu
    from engine.core.errors import EngineError
    from engine.simulate.sweep import model_spec

    try:
        gpu = resolve_gpu(args.gpu, this_machine=this_machine_gpu)
        spec = model_spec(SimulateSpec(model=args.model, config=getattr(args, "config", None), gpu=args.gpu))
    except (EngineError, OSError, ValueError):
        return SimulateSpec.default("dtype")
    return default_precision(gpu, spec)


def run(args) -> dict:
    try:
        spec = SimulateSpec.from_args(
            args,
            dtype=args.dtype or default_dtype(args),
            n_requests=args.n_requests or SimulateSpec.default("n_requests"),
        )
        if args.n_requests is None:
            spec = replace(spec, n_requests=steady_requests(spec)).validate()
        slo = SLO.from_args(args)
    except LoadSpecError as exc:
        raise InvalidParameterError(str(exc)) from None
    levels = spec.levels()
    unit = "users" if spec.mode == "concurrency" else "requests/s"
    what = (
        f"simulating {len(levels)} load level{'s' if len(levels) > 1 else ''} ({', '.join(f'{v:g}' for v in levels)} "
        f"{unit}) of {spec.n_requests:,} requests each on {spec.n_gpus} x {spec.gpu}, with central, low and high "
        "step times…"
    )
    with progress_lines(what) as progress:
        return simulate(spec, slo, progress=progress).to_json()


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

        def end(x: float | None) -> str:
            return "no level" if x is None else f"{x:g}"

        lines.append(
            f"knee interval (step times at their interval's ends, among the levels asked): {end(k['low'])} .. "
            f"{end(k['high'])}"
        )
    if k["central"] is not None and out["points"] and all(p.get("meets_slo") for p in out["points"]):
        lines.append(
            f"every level met the SLOs: the knee is the highest level tried ({k['central']:g}), not a limit"
        )
    if out["points"]:
        # the knee is a level asked, not a search: '79 users' read as the limit where the answer is 121 (an
        # engineer's walk)
        lines.append(
            "the knee is the highest of the levels asked that met the objectives, and levels after the first that "
            "missed are not run (--keep-going runs them); for the most users, `python -m engine estimate ... "
            "--solve max-users` searches every count"
        )
    lines += [f"note: {n}" for n in sim["notes"]]
    return "\n".join(lines)


# ---------------------------------------------------------------- `python -m engine estimate ... --solve Q`


def add_solve_arguments(parser) -> None:
    """The inverse questions' flags on the estimate command (which owns the model, GPU, precision and lengths)."""
    from engine.simulate.solve import CONFIRM_REQUESTS_PER_USER, PROBE_REQUESTS_PER_USER, QUESTIONS

    group = parser.add_argument_group("--solve: the inverse questions")
    group.add_argument(
        "--solve",
        choices=QUESTIONS,
        default=None,
        help="max-context: the longest context that fits (vLLM's --max-model-len auto); max-users: the most users "
        "at the SLOs (the simulator's knee); cheapest: the cheapest GPU type and count for --batch users at the SLOs",
    )
    group.add_argument(
        "--solve-requests",
        type=int,
        default=SimulateSpec.default("n_requests"),
        help="simulated requests per probe of max-users and cheapest; a search probe of N users uses at least "
        f"{PROBE_REQUESTS_PER_USER}N (each user's first request is the ramp, left out), and the answer says when it "
        f"raised this; the answer is then confirmed with runs of at least {CONFIRM_REQUESTS_PER_USER}N, long enough "
        "to reach steady state",
    )
    group.add_argument(
        "--solve-gpus",
        default=None,
        metavar="KEY,KEY",
        help="cheapest: only these catalogue GPUs (comma-separated keys, e.g. h100-sxm,h200; default: every priced "
        "GPU, as `python -m engine gpus` lists them)",
    )
    SLO.add_arguments(group)


def solve(args) -> dict:
    """Answer `args.solve` from the estimate command's flags; the JSON of an engine.simulate.solve.Answer."""
    from engine.calc.report import Inputs
    from engine.simulate import solve as solver

    try:
        slo = SLO.from_args(args)
        # the estimate's flags name the model, GPUs, precisions and utilisation as the simulator's fields do
        spec = SimulateSpec.from_args(
            args,
            engine=args.engine or "vllm",
            n_requests=args.solve_requests,
            prompt_tokens=args.prompt_tokens or Inputs.default("prompt_tokens"),
            output_tokens=args.output_tokens or Inputs.default("output_tokens"),
            max_batch=args.max_num_seqs,
            dtype=args.dtype or default_dtype(args),
        )
    except LoadSpecError as exc:
        raise InvalidParameterError(str(exc)) from None
    if args.solve == "max-context":
        from engine.arch.resolve import resolve_gpu
        from engine.calibration import this_machine_gpu
        from engine.simulate.sweep import model_spec

        answer = solver.max_context_for(
            spec, model_spec(spec), resolve_gpu(spec.gpu, this_machine=this_machine_gpu)
        )
    elif args.solve == "max-users":
        what = (
            f"searching the most users that meet {slo.words() or 'no objective'} on {spec.n_gpus} x {spec.gpu}: "
            "doubling, then bisecting, with central, slow and quick step times, each answer confirmed with longer runs…"
        )
        with progress_lines(what) as progress:
            answer = solver.max_users(spec, slo, progress=progress)
    else:
        only = (
            None if args.solve_gpus is None else [k.strip() for k in args.solve_gpus.split(",") if k.strip()]
        )
        own = getattr(args, "usd_per_gpu_hour", None)  # the estimate's --usd-per-hour: the price of --gpu
        prices = {args.gpu: own} if own is not None and args.gpu else None
        what = (
            f"pricing {args.batch:,} users at {slo.words() or 'no objective'} on "
            f"{'the GPUs ' + ', '.join(only) if only else 'every priced GPU'}, cheapest option first…"
        )
        with progress_lines(what) as progress:
            answer = solver.cheapest(spec, slo, args.batch, gpus=only, prices=prices, progress=progress)
    return answer.to_json()


def solve_text(r: dict) -> str:
    """The answer's sentence, then its value and interval; an end the search could not bound (null in the JSON:
    no option meets the objectives at the slow end) reads "unbounded"."""
    a = r["answer"]
    money = r.get("solve") == "cheapest"

    def show(x) -> str:
        if x is None:
            return "unbounded"
        return f"${x:,.2f}" if money else f"{x:,}"

    width = f", width {a['width']:.2f}x" if a.get("width") else ""
    details = r.get("details", {})
    if money and details.get("margin_plan"):  # the range's ends are two plans: say which is which
        span = (
            f"at the central step times; with margin {show(a['high'])}, the cheapest plan that meets them with every "
            "step at the slow end of its 80% interval"
        )
    else:
        span = f"interval {show(a['low'])} to {show(a['high'])}{width}"
    text = f"{r['sentence']}\n  answer {show(a['central'])} {r['unit']} ({span})"
    ends = details.get("ends")
    if ends:  # max-users: each end of the interval by the step times that give it
        text += (
            f"\n  with every step at the slow end of its 80% interval {show(ends['slow_steps'])} users (the answer with "
            f"margin); at the quick end {show(ends['quick_steps'])}"
        )
    command = details.get("launch_command")
    text += f"\n  launch {command}" if command else ""
    margin = details.get("margin_plan")
    if margin:  # cheapest: the plan that still meets the objectives with every step at its slow end
        text += f"\n{margin['sentence']}"
        if margin.get("launch_command"):
            text += f"\n  launch with margin {margin['launch_command']}"
    return text
