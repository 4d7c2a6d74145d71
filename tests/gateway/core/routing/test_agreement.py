import itertools
import math

import numpy as np

from gateway.core.routing.agreement import compare


def test_identical_outputs_agree():
    out = {"y": np.array([[0.1, 0.9], [0.7, 0.3]], dtype=np.float32)}
    result = compare(out, {"y": out["y"].copy()})
    assert result.within_tolerance and result.top1
    assert result.max_abs_error == 0 and result.max_rel_error == 0


def test_small_differences_are_measured_and_judged_by_tolerance():
    a = {"y": np.array([[1.0, 2.0]], dtype=np.float32)}
    b = {"y": np.array([[1.0005, 2.0]], dtype=np.float32)}
    loose = compare(a, b, rtol=1e-3, atol=0)
    assert loose.within_tolerance and loose.top1
    assert math.isclose(loose.max_abs_error, 0.0005, rel_tol=1e-3)
    assert math.isclose(loose.max_rel_error, 0.0005, rel_tol=1e-3)
    assert not compare(a, b, rtol=1e-5, atol=0).within_tolerance


def test_top1_disagreement_is_seen_even_within_a_loose_tolerance():
    a = {"y": np.array([[0.50, 0.49]])}
    b = {"y": np.array([[0.49, 0.50]])}
    result = compare(a, b, rtol=0.1, atol=0.1)
    assert result.within_tolerance and result.top1 is False


def test_outputs_without_classes_have_no_top1():
    result = compare({"y": np.array([1.0, 2.0])[:, None]}, {"y": np.array([1.0, 2.0])[:, None]})
    assert result.top1 is None and result.within_tolerance


def test_missing_or_misshaped_outputs_are_incomparable():
    a = {"y": np.zeros((2, 3))}
    assert compare(a, {}).mismatch == "output 'y': expected shape [2, 3], missing"
    wrong = compare(a, {"y": np.zeros((3, 2))})
    assert not wrong.within_tolerance and "shape [3, 2]" in wrong.mismatch


def test_nan_on_one_side_is_an_infinite_error_and_on_both_sides_none():
    a = {"y": np.array([[np.nan, 1.0]])}
    assert compare(a, {"y": np.array([[np.nan, 1.0]])}).max_abs_error == 0
    one_sided = compare(a, {"y": np.array([[0.0, 1.0]])})
    assert one_sided.max_abs_error == math.inf and not one_sided.within_tolerance


def test_infinities_agree_with_the_same_infinity_only():
    a = {"y": np.array([[np.inf, -np.inf, 2.0]])}
    same = compare(a, {"y": np.array([[np.inf, -np.inf, 2.5]])}, rtol=0, atol=1)
    assert same.within_tolerance and same.max_abs_error == 0.5
    assert same.max_rel_error == 0.25  # over the finite primaries alone
    for other in ([[np.inf, np.inf, 2.0]], [[1e300, -np.inf, 2.0]]):
        differs = compare(a, {"y": np.array(other)}, rtol=1.0, atol=1.0)
        assert differs.max_abs_error == math.inf and not differs.within_tolerance


def test_tolerance_is_judged_as_numpy_allclose_with_equal_nan():
    values = [0.0, -0.0, 1.0, 1.0 + 1e-9, 2.0, 1e-300, 5e-324, 1e308, -1e308]
    values += [np.inf, -np.inf, np.nan]
    for rtol, atol in ((1e-3, 1e-5), (10.0, 0.0), (0.0, 0.0)):
        for x, y in itertools.product(values, values):
            for shape in ((1,), ()):  # 0-d outputs too
                primary, shadow = np.full(shape, x), np.full(shape, y)
                with np.errstate(all="ignore"):
                    expected = np.allclose(shadow, primary, rtol, atol, equal_nan=True)
                got = compare({"y": primary}, {"y": shadow}, rtol, atol)
                assert got.within_tolerance == expected, (x, y, rtol, atol, shape)


def test_bytes_and_integers():
    words = {"w": np.array([b"a", b"b"], dtype=object)}
    assert compare(words, {"w": np.array([b"a", b"b"], dtype=object)}).within_tolerance
    assert not compare(words, {"w": np.array([b"a", b"c"], dtype=object)}).within_tolerance
    ints = {"i": np.array([[1, 5, 2]], dtype=np.int64)}
    assert compare(ints, {"i": np.array([[1, 5, 2]], dtype=np.int32)}).within_tolerance
