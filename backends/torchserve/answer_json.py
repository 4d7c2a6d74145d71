"""A handler's answer as JSON, byte for byte as `json.dumps(value, indent=2)` writes it.

`ts`'s writer encodes every answer that is not bytes, text or a tensor with
`json.dumps(value, indent=2)`. With an indent, Python's json module runs its pure-Python
encoder, one generator per level and one call per value: in a worker serving a small
model that was about a quarter of its time. `dumps` writes the same text for the values
handlers return (dicts with str keys, lists, tuples, str, int, float, bool and None, of
exactly those types) in a few joins, and hands anything else (a subclass, a non-str key,
a value json calls `default` for, nesting past 100 levels, which a cycle reaches) to
`json.dumps` itself, so whatever it writes or raises stays json's.
"""

from __future__ import annotations

import json
from json.encoder import encode_basestring_ascii
from typing import Any

# Nesting deeper than this goes to json.dumps, which may refuse it (RecursionError) at
# a depth this encoder would not.
_DEEPEST = 1 + 2 * 100


class _Unusual(Exception):
    """A value this encoder leaves to json.dumps."""


def _float(value: float) -> str:
    text = float.__repr__(value)
    if "n" in text:  # nan or inf: a finite float's repr has no "n"
        if value != value:
            return "NaN"
        return "Infinity" if value > 0 else "-Infinity"
    return text


def _encode(value: Any, newline: str) -> str:
    # newline: "\n" and the indent of the level `value` sits at.
    if len(newline) > _DEEPEST:
        raise _Unusual
    kind = type(value)
    if kind is str:
        return encode_basestring_ascii(value)
    if kind is float:
        return _float(value)
    if kind is int:
        return int.__repr__(value)
    if value is None:
        return "null"
    if kind is bool:
        return "true" if value else "false"
    if kind is list or kind is tuple:
        if not value:
            return "[]"
        inner = newline + "  "
        between = "," + inner
        if type(value[0]) is float:  # a row of scores or an embedding: no call per value
            try:
                floats = between.join(map(float.__repr__, value))
            except TypeError:  # not every value is a float
                floats = "n"
            if "n" not in floats:  # (nan and inf are written otherwise; see _float)
                return "[" + inner + floats + newline + "]"
        return "[" + inner + between.join([_encode(v, inner) for v in value]) + newline + "]"
    if kind is dict:
        if not value:
            return "{}"
        inner = newline + "  "
        items = []
        for key, item in value.items():
            if type(key) is not str:
                raise _Unusual
            items.append(encode_basestring_ascii(key) + ": " + _encode(item, inner))
        return "{" + inner + ("," + inner).join(items) + newline + "}"
    raise _Unusual


def dumps(value: Any) -> str:
    """`json.dumps(value, indent=2)`, the same text or the same exception."""
    try:
        return _encode(value, "\n")
    except _Unusual:
        return json.dumps(value, indent=2)
