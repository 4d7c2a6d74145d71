"""answer_json.dumps against json.dumps(value, indent=2), which ts's writer calls."""

import enum
import json
import math
import random
from collections import OrderedDict

import numpy as np
import pytest

from backends.torchserve import answer_json


def _value(rng: random.Random, depth: int = 0):
    kind = rng.choice(["str", "int", "float", "bool", "none", "list", "tuple", "dict"])
    if depth > 3 and kind in ("list", "tuple", "dict"):
        kind = "float"
    if kind == "str":
        return "".join(rng.choice('ab"\\\n\té€😀\x00 ') for _ in range(rng.randrange(6)))
    if kind == "int":
        return rng.randint(-(10**20), 10**20)
    if kind == "float":
        return rng.choice([rng.uniform(-1e6, 1e6), rng.random() * 1e-7, 1e300, -0.0, 0.1,
                           math.nan, math.inf, -math.inf])  # fmt: skip
    if kind == "bool":
        return rng.random() < 0.5
    if kind == "none":
        return None
    items = [_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    if kind == "list":
        return items
    if kind == "tuple":
        return tuple(items)
    keys = [_value(rng, 99), (1,)] + [f"k{i}é" for i in range(8)]  # (1,): json refuses it
    return {rng.choice(keys) if rng.random() < 0.2 else f"k{i}é": v for i, v in enumerate(items)}


def test_random_values_give_json_s_text() -> None:
    rng = random.Random(0)
    for _ in range(3000):
        value = _value(rng)
        try:
            expected = json.dumps(value, indent=2)
        except TypeError:  # a key json refuses (a tuple key from the generator)
            with pytest.raises(TypeError):
                answer_json.dumps(value)
            continue
        assert answer_json.dumps(value) == expected


def test_a_handler_s_usual_answer() -> None:
    value = [{"digit": 3, "probabilities": [0.1, 2.5e-08, 0.9], "batch": 16, "ok": True}]
    assert answer_json.dumps(value) == json.dumps(value, indent=2)
    assert answer_json.dumps({}) == "{}"
    assert answer_json.dumps([[], {}]) == json.dumps([[], {}], indent=2)


class Ratio(float):
    pass


@pytest.mark.parametrize(
    "row",
    [
        [0.25, 1e-05, 1e16, -0.0, 123456789.125],
        (0.5, 2.5e-08),
        [0.5, 1, 2.0],  # an int among them
        [0.5, True],
        [0.5, math.nan, -math.inf],
        [0.5, Ratio(0.75), Ratio(math.inf)],
        [0.5, "text", None, [0.25]],
    ],
)
def test_rows_that_begin_with_a_float_are_json_s(row) -> None:
    assert answer_json.dumps({"row": row}) == json.dumps({"row": row}, indent=2)


class Colour(enum.IntEnum):
    RED = 1


class Text(str):
    pass


@pytest.mark.parametrize(
    "value",
    [
        {1: "int key", 2.5: "float key", None: "none key", False: "bool key"},
        [Colour.RED, Text("sub"), OrderedDict(a=1), 1.5],
        {"nested": [[[[{"deep": [1]}]]]]},
    ],
)
def test_subclasses_and_other_keys_as_json_writes_them(value) -> None:
    assert answer_json.dumps(value) == json.dumps(value, indent=2)


def test_deep_nesting_is_json_s() -> None:
    deep: list = [1.0]
    for _ in range(150):
        deep = [deep]
    assert answer_json.dumps(deep) == json.dumps(deep, indent=2)


def test_what_json_refuses_it_refuses_alike() -> None:
    cycle: list = []
    cycle.append(cycle)
    with pytest.raises(ValueError, match="Circular reference"):
        answer_json.dumps(cycle)
    with pytest.raises(TypeError, match="ndarray"):
        answer_json.dumps({"a": [1, np.zeros(2)]})
    with pytest.raises(TypeError, match="float32"):
        answer_json.dumps([np.float32(1)])
