"""The Home page's tour, walked in a real browser (Debian chromium + playwright) as a presenter would: each stop's
page opened from its deep link, its live run started with the page's own defaults and waited for, every page
screenshotted at 1280 px and checked for clipped values. Times each stop (open, live runs) and the whole tour.

    .venv/bin/python -m bench.tour [--url http://127.0.0.1:8606] [--shots /tmp/tour] [--stops Batching,Roofline]
    .venv/bin/python -m bench.tour --presenter     # presenter mode: every page opens on its recorded run

Without --url it starts its own `streamlit run app.py` on a free port. Writes bench/results/tour-<machine>.json
(per stop: open and run seconds, clipped values, errors; the load average before and after). Run it under the
CPU lock: its figures are wall times of the tour on this machine, the target the issue set (<= 15 minutes of
live runs, each stop under 60 s)."""

from __future__ import annotations

import argparse
import contextlib
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from bench.common import CHROMIUM_ARGS, write_result
from engine.core.load import cores, loadavg
from engine.runtime import runlog
from ui.machine_view import MEASURE_AGAIN

WIDTH = 1280
RUN_LIMIT_S = 600  # a liveness bound for one live run, not a speed claim
STOP_TARGET_S = 60.0  # each stop's live runs (issue 33: a 15-minute tour on a 2-core CPU)
TOUR_TARGET_S = 15 * 60.0

# In the page: every tile value, select value, page link and sidebar link that is cut (an ellipsis in its text,
# or text wider than its box), and every table wider than its box. Shared with tests/test_browser.py.
CLIPPED_JS = """() => {
  const out = [];
  const sel = [
    ['tile', '[data-testid="stMetricValue"], [data-testid="stMetricValue"] *'],
    ['tile label', '[data-testid="stMetricLabel"] *, [data-testid="stMetricDelta"] *'],
    ['select', 'input[role="combobox"]'],
    ['chosen', '[data-baseweb="tag"] span'],
    ['link', '[data-testid="stPageLink"] *, [data-testid="stSidebarNavLink"] *'],
    ['tab', '[data-baseweb="tab"] *'],
  ];
  for (const [kind, css] of sel) {
    for (const el of document.querySelectorAll(css)) {
      if (!el.clientWidth || el.closest('[data-testid="stTooltipHoverTarget"]')) continue;
      const text = (el.tagName === 'INPUT' ? el.value : el.innerText || '').trim();
      if (!text) continue;
      const cut = /(…|\\.\\.\\.)$/.test(text);  // a value cut by the code that wrote it ("8.2 to…")
      const wide = el.scrollWidth > el.clientWidth + 1;  // cut by its box (CSS ellipsis or overflow)
      if (cut || wide) out.push(`${kind}: ${text.slice(0, 60)}${wide ? ' (wider than its box)' : ''}`);
    }
  }
  // a table wider than its box: a dataframe (drawn on a canvas: its cells are not in the page, its scroller is) or
  // a static table scrolls sideways, and its last columns are cut at the edge ('answer quotes prompt' read 'ar…')
  const tables = [
    ['[data-testid="stDataFrame"]', '.dvn-scroller'],
    ['[data-testid="stTable"]', 'table'],
  ];
  for (const [css, inner] of tables) {
    for (const box of document.querySelectorAll(css)) {
      const el = box.querySelector(inner);
      if (!el || !box.clientWidth) continue;
      const edge = inner === 'table' ? box.getBoundingClientRect().right : el.getBoundingClientRect().right;
      const wide = inner === 'table' ? el.getBoundingClientRect().right > edge + 1 : el.scrollWidth > el.clientWidth + 1;
      if (!wide) continue;
      const heads = [...box.querySelectorAll('[role="columnheader"], th')].map(h => h.innerText.trim()).filter(Boolean);
      out.push(`table: ${heads[0] || ''} … ${heads[heads.length - 1] || ''} (wider than its box)`);
    }
  }
  return [...new Set(out)];
}"""


@dataclass(frozen=True)
class Action:
    """One live run of a stop: the button to press (inside `tab` when given) and the text that says it is done."""

    button: str
    done: str
    tab: str = ""
    before: tuple[tuple[str, str], ...] = ()  # (kind, name) clicks before the button, e.g. a switch


@dataclass(frozen=True)
class Stop:
    title: str
    path: str  # the deep link
    actions: tuple[Action, ...] = ()


STOPS = (  # in the Home page's tour order (ui.home.TOUR), which is the sidebar's
    Stop(
        "Playground",
        "Playground?model=smollm2-135m-instruct&prompt=passage",
        (
            Action("Generate", "Stopped by"),
            Action("Generate", "Stopped by", before=(("text", "Use KV cache"),)),
        ),
    ),
    Stop(
        "Memory and cost",
        "Memory_and_cost",
        # this machine as the GPU, then its panel's button (a stored measurement: measured again)
        (
            Action(
                MEASURE_AGAIN,
                "Read bandwidth (measured)",
                before=(("combobox", "GPU"), ("option", "this machine's")),
            ),
        ),
    ),
    Stop("Roofline", "Roofline"),
    Stop(
        "Few-shot, code and eval",
        "Few-shot_code_and_eval",
        (
            Action("Classify", "Predicted label"),
            Action("Generate code", "Syntax:", tab="Code generation"),
            Action("Run evaluation", "bits per byte", tab="Evaluation"),
        ),
    ),
    Stop("Latency race", "Latency_race", (Action("Run the race", "Winner."),)),
    Stop(
        "Batching", "Batching", (Action("Simulate", "across"), Action("Run both policies", "The trade-off"))
    ),
    Stop(
        "Quantization and speculative decoding",
        "Quantization_and_speculative_decoding",
        (
            Action("Quantize and measure", "timed runs of"),
            Action("Measure speculative decoding", "plain greedy", tab="Speculative decoding"),
        ),
    ),
    Stop(
        "Serving",
        "Serving",
        (
            Action("Start server", "serving"),
            Action("Run sweep", "knee"),
            Action("Stop server", "Start server"),
        ),
    ),
)


@dataclass
class StopResult:
    title: str
    open_s: float = 0.0
    runs_s: list[float] = field(default_factory=list)
    actions: list[dict] = field(default_factory=list)  # each run: its button (and tab) and seconds, for Home
    clipped: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    shots: list[str] = field(default_factory=list)

    @property
    def live_s(self) -> float:
        return sum(self.runs_s)


# The lab's style rule (ui.common.LEGIBLE_CSS) is in the page; the size of the page's markup.
STYLED_JS = "() => [...document.querySelectorAll('style')].some(s => s.textContent.includes('inference-lab: legible'))"
MARKUP_JS = "() => document.body.innerHTML.length"
SETTLE_LIMIT_S = 120  # a liveness bound for drawing a finished run, not a speed claim


def idle(page, timeout_s: float = RUN_LIMIT_S) -> None:
    """Wait until the page's script has finished its run and the browser has drawn all of it. Streamlit marks the
    app 'notRunning' before the browser draws the run's elements: measured here, the Memory page's tiles came 2.2 s
    after it and the style rule that keeps links whole 0.3 s after it, and a check in that gap read the sidebar's
    longest link as cut (CI, 2026-12-04). So also wait for the style rule, then for two equal reads of the page."""
    page.wait_for_timeout(400)
    page.wait_for_selector('[data-test-script-state="notRunning"]', timeout=timeout_s * 1000)
    page.wait_for_function(STYLED_JS, timeout=SETTLE_LIMIT_S * 1000)
    last, deadline = None, time.monotonic() + SETTLE_LIMIT_S
    while time.monotonic() < deadline:
        now = page.evaluate(MARKUP_JS)
        if now == last:
            return
        last = now
        page.wait_for_timeout(300)


def screenshot(page, path: Path) -> None:
    """The whole page at WIDTH: Streamlit scrolls inside its main block, so grow the viewport to its height."""
    height = page.evaluate(
        "() => Math.max(900, document.querySelector('[data-testid=\"stMain\"]')?.scrollHeight || 900)"
    )
    page.set_viewport_size({"width": WIDTH, "height": min(int(height) + 40, 16000)})
    page.screenshot(path=str(path))
    page.set_viewport_size({"width": WIDTH, "height": 900})


def page_errors(page) -> list[str]:
    """Exceptions and error boxes on the page (an expected 'not installed' warning is not an error)."""
    found = [e.inner_text()[:200] for e in page.locator('[data-testid="stException"]').all()]
    found += [e.inner_text()[:200] for e in page.locator('[data-testid="stAlertContentError"]').all()]
    return found


def run_action(page, action: Action) -> float:
    """Press the action's button and wait for the script run it starts to end; the seconds from the click to the
    end. The done text must then be on the page, else the run is reported as an error."""
    if action.tab:
        page.get_by_role("tab", name=action.tab).click()
        page.wait_for_timeout(300)
    for kind, name in action.before:
        target = page.get_by_text(name, exact=True) if kind == "text" else page.get_by_role(kind, name=name)
        target.first.click()
        idle(page)
    button = page.get_by_role("button", name=action.button, exact=True).first
    t0 = time.perf_counter()
    button.click()
    with contextlib.suppress(Exception):  # a fast run may end before we look
        page.wait_for_selector('[data-test-script-state="running"]', timeout=5000)
    idle(page)
    took = time.perf_counter() - t0
    if page.get_by_text(action.done).count() == 0:
        raise RuntimeError(f"no '{action.done}' on the page after the run")
    return took


def walk(url: str, shots: Path, stops, *, presenter: bool, curate: bool = False) -> list[StopResult]:
    """`curate`: this walk's runs become presenter mode's recording (a whole tour, run live)."""
    from playwright.sync_api import sync_playwright

    results = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=list(CHROMIUM_ARGS))
        page = browser.new_page(viewport={"width": WIDTH, "height": 900})
        page.set_default_timeout(RUN_LIMIT_S * 1000)
        page.goto(url + ("/?presenter=1" if presenter else "/"))
        idle(page)
        if curate and not presenter:
            # a whole tour's runs are the recording presenter mode shows first (ui.pace.presented)
            first = page.evaluate("() => new URLSearchParams(location.search).get('session') || ''")
            if first:
                runlog.set_curated_session(first)
        for n, stop in enumerate(stops, 1):
            r = StopResult(stop.title)
            t0 = time.perf_counter()
            sep = "&" if "?" in stop.path else "?"
            session = page.evaluate("() => new URLSearchParams(location.search).get('session') || ''")
            keep = f"{sep}session={session}" if session else ""
            keep += ("&" if keep or sep == "&" else "?") + "presenter=1" if presenter else ""
            page.goto(f"{url}/{stop.path}{keep}")
            idle(page)
            r.open_s = time.perf_counter() - t0
            r.clipped += page.evaluate(CLIPPED_JS)
            shot = shots / f"{n:02d}-{stop.path.split('?')[0]}-open.png"
            screenshot(page, shot)
            r.shots.append(str(shot))
            if not presenter:
                for k, action in enumerate(stop.actions, 1):
                    try:
                        took = run_action(page, action)
                        r.runs_s.append(took)
                        r.actions.append({"button": action.button, "tab": action.tab, "s": took})
                    except Exception as exc:  # a stop that fails is reported, the tour goes on
                        r.errors.append(f"{action.button}: {type(exc).__name__}: {str(exc)[:200]}")
                    shot = shots / f"{n:02d}-{stop.path.split('?')[0]}-run{k}.png"
                    screenshot(page, shot)
                    r.shots.append(str(shot))
                    r.clipped += page.evaluate(CLIPPED_JS)
            r.errors += page_errors(page)
            r.clipped = sorted(set(r.clipped))
            results.append(r)
            print(
                f"{stop.title:<40} open {r.open_s:6.1f} s  live {r.live_s:6.1f} s "
                f"({', '.join(f'{s:.0f}' for s in r.runs_s)})  clipped {len(r.clipped)}  errors {len(r.errors)}",
                flush=True,
            )
        browser.close()
    return results


@contextlib.contextmanager
def server(url: str | None):
    if url:
        yield url
        return
    from bench.load import serve

    with tempfile.TemporaryDirectory() as tmp, serve(Path(tmp) / "streamlit.log") as (started, _proc):
        yield started


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", default=None, help="a running dashboard (default: start one)")
    ap.add_argument("--shots", default="/tmp/tour-shots", help="folder for the screenshots")
    ap.add_argument(
        "--stops",
        default="",
        help="comma-separated pages by URL path, e.g. Batching,Latency_race (default: all)",
    )
    ap.add_argument("--presenter", action="store_true", help="presenter mode: open each page, run nothing")
    ap.add_argument("--label", default="", help="a suffix for the result file")
    args = ap.parse_args(argv)
    shots = Path(args.shots)
    shots.mkdir(parents=True, exist_ok=True)
    wanted = set(args.stops.split(",")) if args.stops else None
    chosen = [s for s in STOPS if wanted is None or s.path.split("?")[0] in wanted]
    load_before = loadavg()
    t0 = time.perf_counter()
    with server(args.url) as url:
        results = walk(url, shots, chosen, presenter=args.presenter, curate=wanted is None)
    wall = time.perf_counter() - t0
    load_after = loadavg()
    live = sum(r.live_s for r in results)
    print(
        f"tour: live runs {live:.0f} s (target <= {TOUR_TARGET_S:.0f} s), whole walk {wall:.0f} s; "
        f"load average {load_before[0]:.1f} -> {load_after[0]:.1f} on {cores()} cores"
    )
    kind = "tour" + ("-presenter" if args.presenter else "") + (f"-{args.label}" if args.label else "")
    write_result(
        kind,
        {
            "benchmark": kind,
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "width_px": WIDTH,
            "presenter": args.presenter,
            "live_runs_s": live,
            "walk_s": wall,
            "targets": {"tour_live_s": TOUR_TARGET_S, "stop_live_s": STOP_TARGET_S},
            "load_average_before": load_before,
            "load_average_after": load_after,
            "cores": cores(),
            "stops": [asdict(r) | {"live_s": r.live_s} for r in results],
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
