"""Published on-demand prices per GPU-hour (engine/data/prices.toml): the calculator's default price for a GPU,
with the provider, the date it was quoted and where. Prices change weekly; the page and the CLI let the user
replace them, and say whose price a figure uses. Standard library only."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import cache

from engine.calc.specs import DATA_DIR


@dataclass(frozen=True)
class Price:
    gpu: str
    usd_per_gpu_hour: float
    provider: str
    date: str
    source: str
    quote: str
    instance_gpus: int = 1  # GPUs of the instance the quote prices (a 1-GPU droplet, an 8-GPU node)

    @property
    def label(self) -> str:
        return f"${self.usd_per_gpu_hour:g}/GPU-hour: {self.provider}, quoted {self.date} ({self.source})"


@cache
def prices() -> dict[str, Price]:
    path = DATA_DIR / "prices.toml"
    if not path.exists():
        return {}
    with path.open("rb") as f:
        raw = tomllib.load(f)
    return {
        key: Price(
            key,
            float(r["usd_per_gpu_hour"]),
            r["provider"],
            str(r["date"]),
            r["source"],
            r.get("quote", ""),
            int(r.get("instance_gpus", 1)),
        )
        for key, r in raw.items()
        if isinstance(r, dict) and "usd_per_gpu_hour" in r
    }


def price_for(gpu_key: str) -> Price | None:
    """The published price of a catalogue GPU (the book's T4 is the datasheet T4's card), or None."""
    table = prices()
    return table.get(gpu_key) or table.get({"t4-datasheet": "t4", "t4": "t4-datasheet"}.get(gpu_key, ""))


def instance_words(gpu_key: str, gpus: int, name: str) -> str:
    """A sentence where a server of `gpus` GPUs is priced from a quote for a smaller instance (every row of the price
    data is a 1-GPU offering): that many times its rate, with no offering of that size behind it; empty where the
    quote's instance holds the GPUs or the GPU has no published price."""
    p = price_for(gpu_key)
    if p is None or gpus <= p.instance_gpus:
        return ""
    return (
        f"{gpus} x {name} is priced as {gpus} x the {p.instance_gpus}-GPU rate of {p.provider} "
        f"(${p.usd_per_gpu_hour:g} per GPU-hour); the price data has no {gpus}-GPU offering of this GPU, and one "
        "whose GPUs are linked for tensor parallel may cost more per GPU or not be offered."
    )
