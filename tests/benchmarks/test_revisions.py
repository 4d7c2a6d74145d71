"""The arithmetic of the revision head-to-head (benchmarks/revisions.py): per-round ratios,
their geometric mean and interval, and the ABBA order. Expected values are worked by hand
from t tables, not by the code under test."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from benchmarks.revisions import POINTS, Revision, abba, round_ratios, summarize, t_quantile


def test_a_round_either_revision_failed_drops_out():
    base = [100.0, 200.0, math.nan, 400.0]
    head = [110.0, 180.0, 300.0, 0.0]
    assert round_ratios(base, head) == pytest.approx([1.1, 0.9])


def test_rounds_must_pair_up():
    with pytest.raises(ValueError):
        round_ratios([1.0, 2.0], [1.0])


def test_two_rounds_give_their_geometric_mean_and_min_max():
    summary = summarize([2.0, 8.0])
    assert summary.ratio == pytest.approx(4.0)  # sqrt(2 * 8), not the mean 5
    assert (summary.low, summary.high, summary.interval) == (2.0, 8.0, "min-max")
    assert str(summary) == "4.000x (min-max 2.000-8.000)"


def test_three_rounds_give_a_t_interval_on_the_logs():
    # logs -ln 2, 0, ln 2: mean 0, sample sd ln 2; t(0.975, 2) = 4.303 from the table:
    # half-width 4.3027 * 0.69315 / sqrt(3) = 1.72187, exp(+-1.72187) = 5.5950, 0.17873.
    summary = summarize([0.5, 1.0, 2.0])
    assert summary.ratio == pytest.approx(1.0)
    assert summary.interval == "95% t"
    assert summary.high == pytest.approx(5.5950, rel=1e-4)
    assert summary.low == pytest.approx(0.17873, rel=1e-4)


def test_four_rounds_the_interval_is_symmetric_about_the_mean_in_logs():
    # logs 0, 0, ln 4, ln 4: mean ln 2 (ratio 2), sd ln 4 / sqrt(3) = 0.80038;
    # t(0.975, 3) = 3.182: half-width 3.1824 * 0.80038 / 2 = 1.27358;
    # exp(0.69315 +- 1.27358) = 7.1472, 0.55966.
    summary = summarize([1.0, 1.0, 4.0, 4.0])
    assert summary.ratio == pytest.approx(2.0)
    assert summary.high == pytest.approx(7.1472, rel=1e-4)
    assert summary.low == pytest.approx(0.55966, rel=1e-4)
    assert summary.low * summary.high == pytest.approx(summary.ratio**2)


def test_equal_rounds_have_no_width():
    summary = summarize([1.25, 1.25, 1.25])
    assert (summary.low, summary.ratio, summary.high) == pytest.approx((1.25, 1.25, 1.25))


def test_one_round_or_none_has_no_interval():
    assert str(summarize([1.05])) == "1.050x"
    assert str(summarize([])) == "n/a"
    assert math.isnan(summarize([]).ratio)


def test_t_quantiles_match_the_table():
    assert t_quantile(0.975, 2) == pytest.approx(4.303, abs=5e-4)
    assert t_quantile(0.975, 4) == pytest.approx(2.776, abs=5e-4)
    assert t_quantile(0.975, 30) == pytest.approx(2.042, abs=5e-4)


def test_rounds_alternate_abba():
    base, head = Revision("base", "a", Path("a")), Revision("head", "b", Path("b"))
    orders = [abba(index, base, head) for index in range(4)]
    assert orders == [(base, head), (head, base), (base, head), (head, base)]


def test_the_points_by_their_short_names():
    assert sorted(POINTS) == sorted(
        f"{model}-{protocol}-{c}"
        for model, levels in (("simple", (8, 64)), ("mlp", (1, 64)))
        for protocol in ("http", "grpc")
        for c in levels
    )
    assert POINTS["mlp-grpc-1"].model == "mlp_batched"
    assert POINTS["simple-http-64"].concurrency == 64
