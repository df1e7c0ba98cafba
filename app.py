"""Inference Lab's entry script: the home page. The other pages are pages/*.py (Streamlit's pages folder);
`ui.common.page_setup` draws the navigation on every page so titles and icons are ours, and every page has a
stable, shareable URL (/Playground, /Memory_and_cost, ...; query parameters such as ?model= are kept)."""

from ui import home

home.render()
