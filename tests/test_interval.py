"""The one interval type (engine.core.interval): width, coverage, inversion and its JSON form."""

import math

from engine.core import stats
from engine.core.interval import Interval


def test_width_is_high_over_low_and_travels_in_the_json():
    i = Interval(2.0, 3.0, 5.0, bound=1.5, rows=12)
    assert i.width == 2.5
    assert i.to_json() == {"low": 2.0, "central": 3.0, "high": 5.0, "bound": 1.5, "width": 2.5, "rows": 12}
    assert Interval(0.0, 1.0, 2.0).to_json()["width"] is None  # no finite width from a zero low end
    assert Interval.exact(4.0).width == 1.0


def test_covers_and_inverse_swap_the_ends():
    t = Interval(0.01, 0.02, 0.04, bound=0.005)
    assert t.covers(0.03) and not t.covers(0.05)
    r = t.inverse()
    assert (r.low, r.central, r.high, r.bound) == (25.0, 50.0, 100.0, 200.0)
    assert math.isclose(r.width, t.width)


def test_a_speedup_is_an_interval():
    s = stats.speedup([1.0, 1.1, 0.9], [0.5, 0.55, 0.45])
    assert isinstance(s, Interval) and s.low <= s.central <= s.high and s.rows == 3
