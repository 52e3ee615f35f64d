"""The Wilson score interval against values worked by hand (z = 1.96 rounded in the arithmetic
below; the function uses 1.959964)."""

from __future__ import annotations

import pytest

from rlinf.utils.confidence import wilson_interval


def test_eight_of_ten_by_hand():
    # p = 0.8, z^2 = 3.8415, z^2/n = 0.38415: centre = (0.8 + 0.19207) / 1.38415 = 0.71675,
    # half = 1.96 / 1.38415 * sqrt(0.016 + 0.0096037) = 1.41603 * 0.16001 = 0.22658
    lo, hi = wilson_interval(8, 10)
    assert (lo, hi) == pytest.approx((0.71675 - 0.22658, 0.71675 + 0.22658), abs=2e-4)


def test_none_and_all_of_ten_stay_inside_zero_one_and_are_not_empty():
    # p = 0: centre = half = 0.19207 / 1.38415 = 0.13877 (sqrt(z^2 / 4n^2) = z / 2n), so [0, 0.27753]
    assert wilson_interval(0, 10) == pytest.approx((0.0, 0.27753), abs=2e-4)
    assert wilson_interval(10, 10) == pytest.approx((1 - 0.27753, 1.0), abs=2e-4)  # the mirror image
    assert wilson_interval(0, 0) == (0.0, 1.0)


def test_more_episodes_narrow_the_interval_and_bad_counts_are_refused():
    widths = [hi - lo for lo, hi in (wilson_interval(n // 2, n) for n in (10, 40, 160))]
    assert widths[0] > widths[1] > widths[2] and widths[1] == pytest.approx(widths[0] / 2, rel=0.15)
    for bad in ((11, 10), (-1, 10), (0, -1)):
        with pytest.raises(ValueError):
            wilson_interval(*bad)
