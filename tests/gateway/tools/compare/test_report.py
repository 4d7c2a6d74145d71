import math

import numpy as np

from gateway.tools.compare.html import render
from gateway.tools.compare.measure import Settings, accuracy, agreement
from gateway.tools.compare.report import best, judge, table


def variant(name, rates, within=1.0, top1=1.0):
    return {
        "name": name, "load_s": 0.5, "first_call_ms": 3.0, "memory_bytes": 2**20,
        "accuracy": 0.97,
        "agreement": {"1": {"rows": 100, "within_tolerance": within, "top1": top1,
                            "max_abs_error": 1e-6, "max_rel_error": 1e-5,
                            "abs_errors": [1e-6] * 10}},
        "points": [
            {"batch_size": 1, "concurrency": c, "requests": 500, "seconds": 1.0,
             "rows_per_s": r, "p50_ms": 1.0, "p90_ms": 1.5, "p99_ms": 2.0,
             "enough_samples": True, "latency_ms": [1.0, 1.2, 2.0]}
            for c, r in zip((1, 4), rates, strict=True)
        ],
    }  # fmt: skip


def test_speedup_is_the_geometric_mean_and_disagreement_is_not_counted():
    variants = [variant("eager", [100, 400]), variant("compiled", [200, 800]),
                variant("fast_but_wrong", [1000, 4000], top1=0.9)]  # fmt: skip
    judge(variants, Settings())
    assert math.isclose(variants[1]["speedup"], 2.0)
    assert variants[1]["agrees"] and variants[1]["speedup_counted"]
    assert math.isclose(variants[2]["speedup"], 10.0)
    assert not variants[2]["agrees"] and not variants[2]["speedup_counted"]
    assert best(variants)["name"] == "compiled"
    text = table({"mode": "in-process", "data": "generated", "variants": variants})
    assert "fastest agreeing variant: compiled, 2.00x eager" in text
    assert "10.00x*" in text and "its speed is not counted" in text


def test_agreement_and_accuracy_figures():
    reference = {"y": np.array([[0.9, 0.1], [0.2, 0.8], [0.6, 0.4]])}
    other = {"y": np.array([[0.9, 0.1], [0.2, 0.8], [0.4, 0.6]])}
    figures = agreement(reference, other, Settings())
    assert figures["rows"] == 3 and math.isclose(figures["top1"], 2 / 3)
    assert math.isclose(figures["within_tolerance"], 2 / 3)
    assert math.isclose(figures["max_abs_error"], 0.2)
    assert accuracy(other, np.array([0, 1, 0])) == 2 / 3
    assert accuracy(other, None) is None
    missing = agreement(reference, {}, Settings())
    assert missing["within_tolerance"] == 0 and "missing" in missing["incomparable"]


def test_html_report_is_self_contained_with_its_plots():
    variants = [variant("eager", [100, 400]), variant("compiled", [200, 800])]
    judge(variants, Settings())
    settings = {"batch_sizes": [1], "concurrency": [1, 4], "requests": 500, "seconds": 1.0,
                "rtol": 1e-3, "atol": 1e-4, "min_agreement": 0.99}  # fmt: skip
    page = render({"mode": "http", "data": "x.npz", "settings": settings, "variants": variants})
    assert page.count("<svg") == 4  # two latency plots, throughput, agreement
    assert page.count('class="series"') == 2 * 2 + 2 + 1
    assert "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert "<script" not in page
