"""The comparison's verdicts (agreement, speed-up over the reference) and its terminal
table; the JSON report is the dict built here."""

from __future__ import annotations

import math
from typing import Any

from gateway.tools.compare.measure import Settings


def judge(variants: list[dict[str, Any]], settings: Settings) -> None:
    """Mark each variant's agreement and its geometric-mean speed-up over the first
    (the reference), point by point; a variant that does not agree has its speed-up
    reported but not counted as a win."""
    reference = variants[0]
    base = {(p["batch_size"], p["concurrency"]): p["rows_per_s"] for p in reference["points"]}
    for variant in variants:
        shares = []
        for figures in variant["agreement"].values():
            shares.append(figures["within_tolerance"])
            if figures.get("top1") is not None:
                shares.append(figures["top1"])
        variant["agrees"] = bool(shares) and min(shares) >= settings.min_agreement
        ratios = [
            p["rows_per_s"] / base[key]
            for p in variant["points"]
            if (key := (p["batch_size"], p["concurrency"])) in base
            and base[key] > 0 and p["rows_per_s"] > 0
        ]  # fmt: skip
        variant["speedup"] = math.exp(sum(map(math.log, ratios)) / len(ratios)) if ratios else None
        variant["speedup_counted"] = variant["agrees"] and variant["speedup"] is not None
        variant["enough_samples"] = all(p["enough_samples"] for p in variant["points"])
    reference["speedup_counted"] = False  # the reference is the yardstick


def best(variants: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The fastest variant that agrees with the reference and beats it, if any."""
    winners = [v for v in variants[1:] if v["speedup_counted"] and v["speedup"] > 1]
    return max(winners, key=lambda v: v["speedup"]) if winners else None


def _fmt(value: float | None, spec: str) -> str:
    return (
        "-"
        if value is None or (isinstance(value, float) and math.isnan(value))
        else format(value, spec)
    )


def summary(v: dict[str, Any]) -> dict[str, float | None]:
    """A variant's row of the summary, over all its outputs: the least share within
    tolerance and of top-1 matches, the largest absolute error, memory in MiB."""
    agreement = list(v["agreement"].values())
    top1s = [a["top1"] for a in agreement if a.get("top1") is not None]
    errors = [a["max_abs_error"] for a in agreement if a["max_abs_error"] is not None]
    return {
        "within": min((a["within_tolerance"] for a in agreement), default=None),
        "top1": min(top1s) if top1s else None,
        "max_abs": max(errors) if errors else None,
        "memory_mib": v["memory_bytes"] / 2**20 if v["memory_bytes"] is not None else None,
    }


def table(report: dict[str, Any]) -> str:
    variants = report["variants"]
    lines = [
        f"compare: {len(variants)} variants, {report['mode']}, data: {report['data']}, "
        f"reference: {variants[0]['name']}",
        "",
        f"{'variant':<24}{'agrees':>7}{'within':>8}{'top-1':>7}{'max abs':>10}{'accuracy':>9}"
        f"{'load s':>8}{'1st ms':>8}{'MiB':>7}{'speed-up':>10}",
    ]
    for v in variants:
        row = summary(v)
        speed = _fmt(v["speedup"], ".2f") + ("x" if v["speedup"] is not None else "")
        if v["speedup"] is not None and not v["speedup_counted"] and v is not variants[0]:
            speed += "*"
        lines.append(
            f"{v['name'][:23]:<24}{'yes' if v['agrees'] else 'NO':>7}"
            f"{_fmt(row['within'], '.3f'):>8}{_fmt(row['top1'], '.3f'):>7}"
            f"{_fmt(row['max_abs'], '.2e'):>10}{_fmt(v['accuracy'], '.4f'):>9}"
            f"{_fmt(v['load_s'], '.2f'):>8}{_fmt(v['first_call_ms'], '.1f'):>8}"
            f"{_fmt(row['memory_mib'], '.1f'):>7}{speed:>10}"
        )
    lines += ["", f"{'variant':<24}{'batch':>6}{'conc':>5}{'rows/s':>10}{'p50 ms':>8}"
              f"{'p90 ms':>8}{'p99 ms':>8}{'requests':>9}"]  # fmt: skip
    for v in variants:
        for p in v["points"]:
            flag = "" if p["enough_samples"] else "  (too few samples)"
            lines.append(
                f"{v['name'][:23]:<24}{p['batch_size']:>6}{p['concurrency']:>5}"
                f"{p['rows_per_s']:>10,.0f}{p['p50_ms']:>8.2f}{p['p90_ms']:>8.2f}"
                f"{p['p99_ms']:>8.2f}{p['requests']:>9}{flag}"
            )
    winner = best(variants)
    lines.append("")
    if any(not v["agrees"] for v in variants[1:]):
        lines.append("* does not agree with the reference: its speed is not counted as a win")
    if winner is not None:
        lines.append(
            f"fastest agreeing variant: {winner['name']}, "
            f"{winner['speedup']:.2f}x {variants[0]['name']} (geometric mean)"
        )
    else:
        lines.append(f"no agreeing variant is faster than {variants[0]['name']}")
    return "\n".join(lines)
