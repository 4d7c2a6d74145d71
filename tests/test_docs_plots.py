"""The benchmark pages' plots (docs/hooks.py): a `plot` block becomes an inline SVG of its
bars, and a malformed one stops the build, naming the page."""

from __future__ import annotations

import importlib.util
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from mkdocs.exceptions import PluginError

ROOT = Path(__file__).resolve().parents[1]


def hooks():
    spec = importlib.util.spec_from_file_location("docs_hooks", ROOT / "docs" / "hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_plot_block_becomes_an_svg_of_its_bars():
    page = "Before\n\n```plot\ntitle: simple: c=8\nx: infer/s\nmark: 12,000\nHTTP: 11,898\ngRPC unary: 3534\n```\n\nAfter\n"  # noqa: E501
    html = hooks().PLOT.sub(lambda m: hooks().plot(m.group(1), "page.md"), page)
    assert html.startswith("Before") and html.rstrip().endswith("After")
    svg = ET.fromstring(html[html.index("<svg") : html.index("</svg>") + 6])
    ns = "{http://www.w3.org/2000/svg}"
    widths = [float(r.get("width")) for r in svg.iter(f"{ns}rect") if r.get("class") == "bar"]
    assert len(widths) == 2 and widths[0] > 3 * widths[1]  # 11,898 against 3,534
    texts = [t.text for t in svg.iter(f"{ns}text")]
    assert "simple: c=8" in texts and "gRPC unary" in texts and "11,898" in texts


@pytest.mark.parametrize(
    ("block", "says"),
    [
        ("title: t\nx: y\nHTTP: fast\n", "has no number"),
        ("title: t\nHTTP: 3\n", "needs 'title:', 'x:'"),
        ("title: t\nx: y\n", "at least one bar"),
        ("title: t\nx: y\njust words\n", "is not 'label: value'"),
    ],
)
def test_a_malformed_plot_names_the_page_and_the_line(block, says):
    with pytest.raises(PluginError, match=says) as failed:
        hooks().plot(block, "benchmarks/serving.md")
    assert "benchmarks/serving.md" in str(failed.value)
