"""Inference Lab's entry script: a router. `st.navigation` lists the home page and pages/*.py with our titles and
icons (ui.common.PAGES, one table), and every page keeps a stable, shareable URL (/Playground, /Memory_and_cost,
...; query parameters such as ?model= are kept)."""

from ui import home
from ui.common import navigation

navigation(home.render).run()
