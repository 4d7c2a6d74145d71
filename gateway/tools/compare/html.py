"""The comparison as one self-contained HTML page: the summary table and SVG plots of
latency distributions, throughput against concurrency, and agreement."""

from __future__ import annotations

import math
from html import escape
from typing import Any

import numpy as np

from gateway.tools.compare.report import summary
from gateway.tools.svg import chart, histogram_series

STYLE = """body{font-family:sans-serif;margin:24px;color:#222}
table{border-collapse:collapse;margin:12px 0}td,th{padding:4px 10px;border-bottom:1px solid #ddd;
text-align:right}td:first-child,th:first-child{text-align:left}.no{color:#b00;font-weight:bold}
.plots{display:flex;flex-wrap:wrap;gap:16px}"""


def _cell(value: Any, spec: str = "") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "<td>-</td>"
    return f"<td>{escape(format(value, spec))}</td>"


def _summary(variants: list[dict[str, Any]]) -> str:
    rows = ["<tr><th>variant</th><th>agrees</th><th>within tolerance</th><th>top-1</th>"
            "<th>max abs error</th><th>accuracy</th><th>load s</th><th>first call ms</th>"
            "<th>memory MiB</th><th>speed-up</th></tr>"]  # fmt: skip
    for v in variants:
        row = summary(v)
        agrees = "yes" if v["agrees"] else '<span class="no">no</span>'
        speed = "-" if v["speedup"] is None else f"{v['speedup']:.2f}x"
        if v["speedup"] is not None and not v["speedup_counted"] and v is not variants[0]:
            speed += " (not counted)"
        rows.append(
            f"<tr><td>{escape(v['name'])}</td><td>{agrees}</td>{_cell(row['within'], '.3f')}"
            f"{_cell(row['top1'], '.3f')}{_cell(row['max_abs'], '.2e')}"
            f"{_cell(v['accuracy'], '.4f')}{_cell(v['load_s'], '.2f')}"
            f"{_cell(v['first_call_ms'], '.1f')}{_cell(row['memory_mib'], '.1f')}"
            f"<td>{speed}</td></tr>"
        )
    return "<table>" + "\n".join(rows) + "</table>"


def _latency_plots(variants: list[dict[str, Any]]) -> list[str]:
    plots = []
    for point in variants[0]["points"]:
        key = (point["batch_size"], point["concurrency"])
        samples = {v["name"]: next((p["latency_ms"] for p in v["points"]
                                    if (p["batch_size"], p["concurrency"]) == key), [])
                   for v in variants}  # fmt: skip
        values = [x for s in samples.values() for x in s]
        if not values:
            continue
        edges = list(np.linspace(0, float(np.percentile(values, 99)) * 1.05 or 1.0, 31))
        series = [(name, histogram_series(s, edges)) for name, s in samples.items() if s]
        plots.append(chart(f"Latency, batch {key[0]}, concurrency {key[1]}", "ms",
                           "share of requests", series, steps=True))  # fmt: skip
    return plots


def _throughput_plots(variants: list[dict[str, Any]]) -> list[str]:
    plots = []
    for size in sorted({p["batch_size"] for p in variants[0]["points"]}):
        series = [
            (v["name"], [(p["concurrency"], p["rows_per_s"]) for p in v["points"]
                         if p["batch_size"] == size])
            for v in variants
        ]  # fmt: skip
        plots.append(chart(f"Throughput, batch {size}", "concurrency", "rows / s", series))
    return plots


def _agreement_plot(variants: list[dict[str, Any]]) -> str:
    edges = list(range(-9, 2))  # log10 of each row's largest absolute difference
    series = []
    for v in variants[1:]:  # the reference's own errors are all zero
        errors = [e for a in v["agreement"].values() for e in a.get("abs_errors", [])]
        logs = [min(max(math.log10(e), -9.0), 1.0) if e > 0 else -9.0 for e in errors]
        series.append((v["name"], histogram_series(logs, [float(e) for e in edges])))
    return chart("Agreement with the reference", "log10 of a row's largest absolute error",
                 "share of rows", series, steps=True, first_colour=1)  # fmt: skip


def render(report: dict[str, Any]) -> str:
    variants = report["variants"]
    settings = report["settings"]
    plots = _latency_plots(variants) + _throughput_plots(variants)
    if len(variants) > 1:
        plots.append(_agreement_plot(variants))
    notes = ""
    if any(not v["agrees"] for v in variants[1:]):
        notes = ("<p>A variant that does not agree with the reference within rtol "
                 f"{settings['rtol']:g}, atol {settings['atol']:g} on at least "
                 f"{settings['min_agreement']:.0%} of rows has its speed-up shown but not "
                 "counted as a win.</p>")  # fmt: skip
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>accel-gateway compare</title>
<style>{STYLE}</style></head><body>
<h1>accel-gateway compare</h1>
<p>Reference: <b>{escape(variants[0]["name"])}</b>. Mode: {escape(report["mode"])}.
Data: {escape(report["data"])}. Batch sizes {settings["batch_sizes"]}, concurrency
{settings["concurrency"]}, at most {settings["requests"]} requests or
{settings["seconds"]:g} s per point. Speed-up: geometric mean of rows/s over the points.</p>
{_summary(variants)}
{notes}
<div class="plots">
{"".join(f"<div>{plot}</div>" for plot in plots)}
</div>
</body></html>
"""
