"""Inference Lab: the entry script is a router (st.navigation); the home page is `ui.home.render`."""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from ui import home

PAGES_DIR = Path(__file__).parent / "pages"
# Material icons ship with Streamlit: no emoji font needed on the viewer's machine.
ICONS = {"Playground": ":material/chat:", "Memory and cost": ":material/calculate:", "Roofline": ":material/show_chart:",
         "Few-shot code and eval": ":material/science:", "Latency race": ":material/timer:",
         "Batching": ":material/stacks:"}


def _title(path: Path) -> str:
    """'2_Memory_and_cost.py' -> 'Memory and cost'."""
    return path.stem.split("_", 1)[-1].replace("_", " ")


pages = [st.Page(home.render, title="Home", icon=":material/home:", default=True)]
pages += [
    st.Page(str(p), title=_title(p), icon=ICONS.get(_title(p), ":material/article:"),
            url_path=_title(p).lower().replace(" ", "-"))  # explicit: /memory-and-cost is a stable link
    for p in sorted(PAGES_DIR.glob("*.py"))
]
st.navigation(pages).run()
