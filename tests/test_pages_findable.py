"""What a presenter looks for is where they look: the paged-KV chart beside the max batch it changes (not below
three other sections), "measure this machine" on top of Home and beside the calculator's 'this machine', and the
tour pointing at both."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from streamlit.testing.v1 import AppTest

from engine.core import paths

ROOT = Path(__file__).resolve().parents[1]


def in_order(node) -> list:
    """Every element of the page, in the order it is drawn (containers opened depth first)."""
    out = []
    for _, child in sorted(getattr(node, "children", {}).items()):
        out.append(child)
        out.extend(in_order(child))
    return out


def position(elements: list, test) -> int:
    return next(i for i, e in enumerate(elements) if test(e))


def is_chart(title: str):
    def test(e) -> bool:
        if e.type != "plotly_chart":
            return False
        layout = json.loads(e.proto.spec)["layout"]
        return layout.get("yaxis", {}).get("title", {}).get("text", "").startswith(title)

    return test


def text_is(kind: str, start: str):
    return lambda e: e.type == kind and str(getattr(e, "value", "")).startswith(start)


def test_paged_kv_chart_sits_with_the_memory_figures():
    at = AppTest.from_file(str(ROOT / "pages/2_Memory_and_cost.py"), default_timeout=120).run()
    assert not at.exception
    els = in_order(at.main)
    paged = position(els, is_chart("KV cache per sequence"))
    max_batch = position(els, lambda e: e.type == "metric" and e.label.startswith("Max batch at"))
    batch_header = position(els, text_is("header", "Cost and latency against batch size"))
    # right under the max batch tile, before the batch sweep and everything below it
    assert max_batch < paged < batch_header
    assert any(
        e.type == "subheader" and e.value.startswith("Static vs paged KV cache") for e in els[max_batch:paged]
    )


def test_calculator_offers_to_measure_this_machine_where_it_is_chosen(monkeypatch, tmp_path):
    from engine.calibration import machine
    from tests.test_machine import FAKE
    from ui import common

    monkeypatch.setenv("INFERENCE_LAB_HOME", str(tmp_path))

    def measure(*a, **k):  # choosing 'this machine' measures it, and stores it as measure() does
        machine.save(replace(FAKE, machine_id=paths.machine_id()))
        return FAKE

    monkeypatch.setattr(machine, "measure", measure)
    common.cached_machine_measurement.clear()
    at = AppTest.from_file(str(ROOT / "pages/2_Memory_and_cost.py"), default_timeout=120).run()
    assert not [b for b in at.button if b.key == "calc.machine.measure"]
    at.selectbox(key="calc.gpu").set_value("this-machine").run()
    assert not at.exception
    assert [b.label for b in at.button if b.key == "calc.machine.measure"] == ["Measure this machine again"]
    # its roofs beside the choice, with their date and load
    assert any("measured 2026-11-30 00:00 UTC on cpu, load average 0.50" in c.value for c in at.caption)
    common.cached_machine_measurement.clear()


def test_home_puts_measuring_this_machine_above_the_tour_and_the_tour_points_at_both(monkeypatch, tmp_path):
    monkeypatch.setenv("INFERENCE_LAB_HOME", str(tmp_path))
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120).run()
    assert not at.exception
    els = in_order(at.main)
    button = position(els, lambda e: e.type == "button" and getattr(e, "key", None) == "home.measure")
    tour = position(els, text_is("subheader", "Start here"))
    assert button < tour
    # not folded away: no expander holds it
    assert not any(e.type == "expandable" and "Measure" in str(getattr(e, "label", "")) for e in els)
    from ui.machine_view import MEASURE

    stop = next(m.value for m in at.markdown if "Static vs paged KV cache" in m.value)
    # the button the page shows, by its own label (nothing measured here yet: 'Measure this machine')
    assert f"press **{MEASURE}** beside it" in stop


def test_the_top_of_home_links_to_the_tour_and_its_pace_comes_first(monkeypatch, tmp_path):
    """The presenter's walk: the tour sat below the machine panel and its pace line below its eight stops, past the
    first screen at 1280 x 900; the page's first lines now link to the tour's heading, and the pace line and
    presenter mode come right under that heading, before the stops (checked in Chromium too)."""
    monkeypatch.setenv("INFERENCE_LAB_HOME", str(tmp_path))
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120).run()
    assert not at.exception
    from ui.home import TOUR_ANCHOR

    els = in_order(at.main)
    link = position(els, lambda e: e.type == "markdown" and f"](#{TOUR_ANCHOR})" in e.value)
    roofs = position(els, text_is("subheader", "This machine's roofs"))
    tour = position(els, text_is("subheader", "Start here"))
    assert link < roofs < tour
    assert els[tour].proto.anchor == TOUR_ANCHOR
    first_stop = position(els, lambda e: e.type == "page_link")
    assert tour < position(els, text_is("caption", "Each live run shows a progress bar")) < first_stop
    if any((ROOT / "bench" / "results").glob("tour-full-*.json")):
        assert tour < position(els, text_is("caption", "Time it:")) < first_stop


def test_every_tab_the_tour_names_is_a_tab_of_its_page():
    """The tour said "(second tab) prompt lookup" where the second tab is KV-cache quantization; a tab is now named
    by its label (*Label* tab), and each such label is one the page's st.tabs draws."""
    import ast
    import re

    from ui.common import PAGES
    from ui.home import TOUR

    for title, _, what, _ in TOUR:
        named = re.findall(r"\*([^*]+)\* tab", what)
        assert "second tab" not in what and "first tab" not in what
        if not named:
            continue
        page = next(p for p in PAGES if p.title == title)
        tree = ast.parse((ROOT / page.script).read_text())
        labels = {
            elt.value
            for call in ast.walk(tree)
            if isinstance(call, ast.Call) and getattr(call.func, "attr", "") == "tabs"
            for elt in getattr(call.args[0], "elts", [])
            if isinstance(elt, ast.Constant)
        }
        assert set(named) <= labels, (title, named, labels)


def test_the_tour_walks_the_sidebar_in_its_order():
    """The tour ran Batching before the race and Few-shot last while the sidebar lists them 6th, 5th and 4th: a
    presenter following the numbers jumped up and down the sidebar."""
    from ui.common import PAGES
    from ui.home import TOUR

    assert [title for title, *_ in TOUR] == [p.title for p in PAGES]
    from bench.tour import STOPS  # the tour's benchmark walks it in the same order

    assert [s.title for s in STOPS] == [p.title for p in PAGES]


def test_the_kv_cache_stop_opens_on_a_prompt_long_enough_to_show_the_cache():
    """The tour's Playground stop promised that the per-token chart shows what the cache saves, on a five-word prompt
    where the two runs took the same time (5.7 s and 5.4 s for the stop's two runs, bench/results/tour-*.json of
    2026-12-04): its deep link now opens on a passage of a few hundred tokens, which the benchmark walks too."""
    from urllib.parse import urlencode

    from bench.tour import STOPS
    from ui.home import TOUR

    title, params, what, _ = TOUR[0]
    assert title == "Playground" and params["prompt"] == "passage" and "passage" in what
    assert STOPS[0].path == f"Playground?{urlencode(params)}"
    at = AppTest.from_file(str(ROOT / "pages/1_Playground.py"), default_timeout=180)
    at.query_params["prompt"] = "passage"
    at.query_params["model"] = "tiny-gpt-neo"
    at.run()
    prompt = at.text_area(key="playground.prompt.False").value
    assert prompt.startswith("A language model writes one token at a time") and len(prompt.split()) > 200
    at = AppTest.from_file(str(ROOT / "pages/1_Playground.py"), default_timeout=180)
    at.query_params["model"] = "tiny-gpt-neo"
    assert at.run().text_area(key="playground.prompt.False").value == "The capital of France is"
    # a newcomer who came by the sidebar, not the tour's link, finds the passage on the page itself
    at.radio(key="playground.example").set_value("passage").run()
    assert at.text_area(key="playground.prompt.False").value == prompt and not at.exception
    # a reload keeps the choice (the URL said the link's before)
    assert at.query_params["prompt"] == "passage"


def test_the_tour_says_how_long_its_live_runs_took_when_measured():
    """The presenter's walk: the tour gave no time per stop nor in all, and no word on which run to leave out."""
    from ui.home import tour_pace

    line = tour_pace()
    assert line.startswith("Time it: the runs the stops below ask for took ") and "measured" in line
    assert "KV cache off" in line


def test_each_stop_of_the_tour_says_how_long_its_live_runs_took():
    """The presenter's second walk: Home promised how long the live runs take but gave only the total, so no one
    could plan stop by stop. Each stop the tour benchmark timed now says its own time, from the same record."""
    from ui.home import stop_runs, took_words

    runs = stop_runs()
    assert runs and all(s > 0 for stop in runs.values() for _, s in stop)
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120).run()
    said = " ".join(m.value for m in at.markdown)
    for title, stop in runs.items():
        assert f"; in that benchmark {took_words(stop)})*" in said, title


def test_each_stop_is_timed_by_the_runs_it_asks_for_named_as_the_page_names_them(monkeypatch, tmp_path):
    """The presenter's walk: Home gave Batching 15.3 s while the Simulate it asks for took 3.8 s (the total held the
    replay the stop does not ask for), and named 'Measure this machine' and 'Calibrate this machine again' where the
    page showed 'Measure this machine again' and 'Calibrate this machine'. Each stop's time is now per run it asks
    for, by the button's own label, and every such button is one the tour's benchmark presses on that page."""
    from dataclasses import replace

    from bench.tour import STOPS
    from engine.calc import format as fmt
    from engine.calibration import machine
    from tests.test_machine import FAKE
    from ui import common
    from ui.home import PRESSES, TOUR, _tour_record, presses, stop_runs
    from ui.machine_view import MEASURE_AGAIN

    record = {s["title"]: s for s in _tour_record()["stops"]}
    batching = stop_runs(presses(MEASURE_AGAIN))["Batching"]
    simulate = next(a["s"] for a in record["Batching"]["actions"] if a["button"] == "Simulate")
    assert batching == [("Simulate", simulate)] and simulate < record["Batching"]["live_s"]
    walked = {s.title: [a.button for a in s.actions] for s in STOPS}
    for title, _, what, _ in TOUR:
        for button, _words in presses("{measure}").get(title, ()):
            assert f"**{button}**" in what, (title, button)  # the text asks for it by the page's label
        for button, _words in PRESSES.get(title, ()):
            assert button in walked[title], (title, button)  # and the benchmark presses it there
    assert MEASURE_AGAIN in walked["Memory and cost"]
    # a measured machine: Home names the button the page shows, 'Measure this machine again'
    monkeypatch.setenv("INFERENCE_LAB_HOME", str(tmp_path))
    machine.save(replace(FAKE, machine_id=paths.machine_id()))
    common.cached_machine_measurement.clear()
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120).run()
    assert not at.exception
    said = " ".join(m.value for m in at.markdown)
    assert f"press **{MEASURE_AGAIN}** beside it" in said
    assert f"in that benchmark Simulate took {fmt.seconds(simulate)})*" in said
    common.cached_machine_measurement.clear()
