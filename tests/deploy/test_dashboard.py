"""The Grafana dashboard reads only metrics the gateway exports: every metric name in
every query is a family on a real gateway's /metrics (the GPU ones as rendered with a
GPU reading, since this machine has none)."""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path

from gateway.core.repository import ModelRepository
from gateway.operation.gpu import GpuReading
from gateway.operation.metrics import render

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "accel-gateway.json"
# PromQL's own words, which name no metric.
PROMQL = {"sum", "rate", "increase", "by", "without", "histogram_quantile", "avg", "max",
          "min", "count", "on", "ignoring", "group_left", "group_right", "and", "or",
          "unless", "label_values", "le"}  # fmt: skip
HISTOGRAM_PARTS = ("_bucket", "_sum", "_count")


def queries() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    found = [t["expr"] for panel in dashboard["panels"] for t in panel.get("targets", [])]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            found.append(variable["definition"])
    return found


def metric_names(query: str) -> set[str]:
    bare = re.sub(r"label_values\(\s*([^,()]+),\s*\w+\s*\)", r"\1", query)  # its label
    bare = re.sub(r"\{[^}]*\}|\[[^\]]*\]|\"[^\"]*\"", " ", bare)  # matchers, ranges, text
    bare = re.sub(r"\b(by|without)\s*\([^)]*\)", " ", bare)  # grouping labels
    names = set(re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*", bare)) - PROMQL
    return {n for n in names if not re.fullmatch(r"e\d*|\d+", n)}


def families(text: str) -> set[str]:
    return set(re.findall(r"^# TYPE (\S+) ", text, re.MULTILINE))


def test_every_query_names_exported_metrics(gateway, tmp_path):
    with urllib.request.urlopen(f"http://127.0.0.1:{gateway.metrics_port}/metrics") as reply:
        exported = families(reply.read().decode())
    reading = GpuReading(0, "GPU-0", utilization=0.5, memory_total_bytes=2, memory_used_bytes=1)
    exported |= families(render(ModelRepository(tmp_path), read_gpus=lambda: [reading]))
    named = set().union(*(metric_names(q) for q in queries()))
    assert len(named) >= 15
    missing = set()
    for name in named:
        base = next((name[: -len(p)] for p in HISTOGRAM_PARTS if name.endswith(p)), name)
        if name not in exported and base not in exported:
            missing.add(name)
    assert missing == set()


def labels_used(query: str) -> set[str]:
    """Labels a query groups by, matches on or lists (`label_values(metric, label)`), not
    `le` (every histogram bucket's)."""
    used = set(re.findall(r"label_values\(\s*[^,()]+,\s*(\w+)\s*\)", query))
    for group in re.findall(r"\b(?:by|without)\s*\(([^)]*)\)", query):
        used |= {name.strip() for name in group.split(",") if name.strip()}
    for matchers in re.findall(r"\{([^}]*)\}", query):
        used |= set(re.findall(r"([a-zA-Z_]\w*)\s*(?:=~|!~|!=|=)", matchers))
    return used - {"le"}


def series_labels(text: str) -> dict[str, set[str]]:
    """Each family's label names, from its samples (a family with no sample is left out;
    one whose samples carry no labels has none)."""
    found: dict[str, set[str]] = {}
    sample = r"^([a-zA-Z_:][\w:]*)(?:\{([^}]*)\})?\s"
    for name, labels in re.findall(sample, text, re.MULTILINE):
        base = next((name[: -len(p)] for p in HISTOGRAM_PARTS if name.endswith(p)), name)
        found.setdefault(base, set()).update(re.findall(r'(\w+)="', labels))
    return found


def test_every_label_a_query_uses_is_on_its_metrics(gateway, tmp_path):
    with urllib.request.urlopen(f"http://127.0.0.1:{gateway.metrics_port}/metrics") as reply:
        text = reply.read().decode()
    reading = GpuReading(0, "GPU-0", utilization=0.5, memory_total_bytes=2, memory_used_bytes=1)
    text += render(ModelRepository(tmp_path), read_gpus=lambda: [reading])
    labels = series_labels(text)
    checked, wrong = 0, []
    for query in queries():
        names = {next((n[: -len(p)] for p in HISTOGRAM_PARTS if n.endswith(p)), n)
                 for n in metric_names(query)}  # fmt: skip
        seen = [labels[n] for n in names if n in labels]
        used = labels_used(query)
        if not seen or not used:  # no samples of these families here, or no label used
            continue
        checked += 1
        missing = used - set().union(*seen)
        if missing:
            wrong.append((query, sorted(missing)))
    assert checked >= 10
    assert wrong == []


def test_the_label_reader_reads_promql():
    query = 'sum by (model, reason) (rate(a{model=~"$m", le!="1"}[1m])) / sum without (gpu) (b)'
    assert labels_used(query) == {"model", "reason", "gpu"}
    assert labels_used("label_values(c_total, model)") == {"model"}
    text = '# TYPE b gauge\na_bucket{model="m",le="1"} 2\nb 1\nc{device="cpu"} 3\n'
    assert series_labels(text) == {"a": {"model", "le"}, "b": set(), "c": {"device"}}


def test_the_name_reader_reads_promql():
    query = (
        'histogram_quantile(0.9, sum by (le, model) (rate(a_bucket{model=~"$m"}[5m]))) '
        "/ sum without (gpu) (b) * 1e6"
    )
    assert metric_names(query) == {"a_bucket", "b"}
    assert metric_names("label_values(c_total, model)") == {"c_total"}
