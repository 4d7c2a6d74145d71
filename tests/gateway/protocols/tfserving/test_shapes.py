"""TF Serving's leniency with shapes (shapes.py): which tensors are fitted, and how."""

from __future__ import annotations

import pytest

from gateway.protocols.tfserving.shapes import fitted


@pytest.mark.parametrize(
    ("shape", "declared", "expected"),
    [
        ((3, 1), (-1, 1), (3, 1)),  # fits: as it is
        ((3,), (-1, 1), (3, 1)),  # TF Serving's own tests: [1] to [-1, 1]
        ((3, 1), (-1,), (3,)),
        ((3, 1, 1), (-1, 1), (3, 1)),
        ((64,), (-1, 64), None),  # not made a batch of one
        ((3,), (1, -1), None),
        ((2, 3), (-1,), (6,)),  # an unknown rank, served as [-1]
        ((3,), (-1, 2), None),  # no size-1 dimension makes it fit
        ((2, 3), (-1, 2), None),
        ((2, 3), (-1, 3, 2), None),
        ((2, 3), (3,), None),
    ],
)
def test_fitted(shape, declared, expected) -> None:
    assert fitted(shape, declared) == expected
