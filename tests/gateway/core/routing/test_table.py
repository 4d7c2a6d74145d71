from collections import Counter

import pytest

from gateway.core.routing.table import Route, RouteTable, key_point

A, B, C = Route("a", "", 70), Route("b", "", 20), Route("c", "", 10)


def test_weights_are_honoured_closely_over_any_run():
    table = RouteTable([A, B, C])
    counts = Counter(table.choose().model for _ in range(10_000))
    assert counts == pytest.approx({"a": 7000, "b": 2000, "c": 1000}, abs=10)
    # and over a short run too: no long streak of one variant
    short = Counter(table.choose().model for _ in range(100))
    assert short == pytest.approx({"a": 70, "b": 20, "c": 10}, abs=3)


def test_zero_weight_routes_get_nothing():
    table = RouteTable([Route("a", "", 0), Route("b", "", 1), Route("c", "", 0)])
    assert {table.choose().model for _ in range(1000)} == {"b"}
    assert {table.choose(f"user{i}").model for i in range(1000)} == {"b"}


def test_no_positive_weight_is_refused():
    with pytest.raises(ValueError):
        RouteTable([Route("a", "", 0)])


def test_sticky_keys_keep_their_variant_and_spread_by_weight():
    table = RouteTable([A, B, C])
    first = {f"user{i}": table.choose(f"user{i}").model for i in range(5000)}
    table.choose()  # the even spread's counter does not move sticky choices
    again = {key: RouteTable([A, B, C]).choose(key).model for key in first}
    assert first == again
    counts = Counter(first.values())
    assert counts == pytest.approx({"a": 3500, "b": 1000, "c": 500}, rel=0.08)


def test_key_point_is_stable_and_in_range():
    assert key_point("user-1") == key_point("user-1")
    assert 0 <= key_point("") < 1
    assert key_point("user-1") != key_point("user-2")
