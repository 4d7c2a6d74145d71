"""Inline SVG charts, for compare's HTML report and the docs' benchmark pages (docs/hooks.py):
no script, no network, no plotting library."""

from __future__ import annotations

import math
from html import escape

import numpy as np

WIDTH, HEIGHT = 560, 300
LEFT, RIGHT, TOP, BOTTOM = 64, 16, 34, 46
# One colour per variant, in order (the reference is the first).
PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf")

Series = list[tuple[str, list[tuple[float, float]]]]


def _ticks(low: float, high: float, count: int = 5) -> list[float]:
    if high <= low:
        return [low]
    step = 10 ** math.floor(math.log10((high - low) / count))
    for factor in (1, 2, 5, 10):
        if (high - low) / (step * factor) <= count:
            step *= factor
            break
    first = math.ceil(low / step) * step
    return [first + i * step for i in range(int((high - first) / step) + 1)]


def _label(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def chart(
    title: str, xlabel: str, ylabel: str, series: Series, steps: bool = False, first_colour: int = 0
) -> str:
    """Lines (or histogram outlines, with `steps`) of each series over shared axes; series
    i is drawn in PALETTE[first_colour + i], so a variant keeps its colour in every plot."""
    points = [p for _, values in series for p in values if all(map(math.isfinite, p))]
    if not points:
        return f"<p>{escape(title)}: no data</p>"
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    x0, x1 = min(xs), max(xs)
    y0, y1 = min(0.0, min(ys)), max(ys) * 1.08 or 1.0
    if x1 == x0:
        x0, x1 = x0 - 1, x1 + 1

    def px(x: float) -> float:
        return LEFT + (x - x0) / (x1 - x0) * (WIDTH - LEFT - RIGHT)

    def py(y: float) -> float:
        return HEIGHT - BOTTOM - (y - y0) / (y1 - y0) * (HEIGHT - TOP - BOTTOM)

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{escape(title)}">',
        f'<text x="{WIDTH / 2}" y="18" text-anchor="middle" font-weight="bold">'
        f"{escape(title)}</text>",
        f'<line x1="{LEFT}" y1="{py(y0)}" x2="{WIDTH - RIGHT}" y2="{py(y0)}" stroke="#444"/>',
        f'<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{HEIGHT - BOTTOM}" stroke="#444"/>',
    ]
    for tick in _ticks(x0, x1):
        parts.append(f'<text x="{px(tick):.1f}" y="{HEIGHT - BOTTOM + 16}" '
                     f'text-anchor="middle" font-size="11">{_label(tick)}</text>')  # fmt: skip
    for tick in _ticks(y0, y1):
        parts.append(f'<line x1="{LEFT}" y1="{py(tick):.1f}" x2="{WIDTH - RIGHT}" '
                     f'y2="{py(tick):.1f}" stroke="#eee"/>')  # fmt: skip
        parts.append(f'<text x="{LEFT - 6}" y="{py(tick) + 4:.1f}" text-anchor="end" '
                     f'font-size="11">{_label(tick)}</text>')  # fmt: skip
    parts.append(f'<text x="{WIDTH / 2}" y="{HEIGHT - 8}" text-anchor="middle" '
                 f'font-size="12">{escape(xlabel)}</text>')  # fmt: skip
    parts.append(f'<text x="14" y="{HEIGHT / 2}" text-anchor="middle" font-size="12" '
                 f'transform="rotate(-90 14 {HEIGHT / 2})">{escape(ylabel)}</text>')  # fmt: skip
    for index, (name, values) in enumerate(series):
        colour = PALETTE[(first_colour + index) % len(PALETTE)]
        shown = [(x, y) for x, y in values if math.isfinite(x) and math.isfinite(y)]
        if steps:  # a histogram's outline: flat across each bin
            shown = [q for (x, y), nxt in zip(shown, shown[1:], strict=False)
                     for q in ((x, y), (nxt[0], y))]  # fmt: skip
        path = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in shown)
        parts.append(f'<polyline class="series" points="{path}" fill="none" '
                     f'stroke="{colour}" stroke-width="2.5"/>')  # fmt: skip
        if not steps:
            parts += [f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3.5" fill="{colour}"/>'
                      for x, y in shown]  # fmt: skip
        parts.append(f'<rect x="{WIDTH - RIGHT - 150}" y="{TOP + 4 + 16 * index}" width="10" '
                     f'height="10" fill="{colour}"/>')  # fmt: skip
        parts.append(f'<text x="{WIDTH - RIGHT - 136}" y="{TOP + 13 + 16 * index}" '
                     f'font-size="11">{escape(name[:22])}</text>')  # fmt: skip
    parts.append("</svg>")
    return "\n".join(parts)


def histogram_series(values: list[float], edges: list[float]) -> list[tuple[float, float]]:
    """Share of `values` per bin (those outside go to the end bins), as (left edge,
    share) points closed at the last edge."""
    clipped = np.clip(np.asarray(values, dtype=np.float64), edges[0], edges[-1])
    counts, _ = np.histogram(clipped, bins=edges)
    shares = counts / max(len(values), 1)
    points = [(edges[i], float(share)) for i, share in enumerate(shares)]
    return [*points, (edges[-1], points[-1][1])]


BAR_ROW = 22


def bars(title: str, xlabel: str, rows: list[tuple[str, float]], mark: float | None = None) -> str:
    """Horizontal bars, one a row, labelled with their value; `mark`: a value drawn as a
    dashed line across them (a floor, a goal)."""
    if not rows:
        return f"<p>{escape(title)}: no data</p>"
    label_width = min(8 + 7 * max(len(label) for label, _ in rows), WIDTH // 2)
    top, bottom, right = TOP, 40, 64
    height = top + BAR_ROW * len(rows) + bottom
    high = max([value for _, value in rows] + ([mark] if mark is not None else [])) or 1.0

    def px(x: float) -> float:
        return label_width + x / high * (WIDTH - label_width - right)

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
        f'viewBox="0 0 {WIDTH} {height}" role="img" aria-label="{escape(title)}">',
        f'<text x="{WIDTH / 2}" y="18" text-anchor="middle" font-weight="bold">'
        f"{escape(title)}</text>",
    ]
    for index, (label, value) in enumerate(rows):
        y = top + BAR_ROW * index
        parts.append(f'<text x="{label_width - 6}" y="{y + 15}" text-anchor="end" '
                     f'font-size="11">{escape(label)}</text>')  # fmt: skip
        parts.append(f'<rect class="bar" x="{label_width}" y="{y + 3}" '
                     f'width="{max(px(value) - label_width, 0):.1f}" height="{BAR_ROW - 6}" '
                     f'fill="{PALETTE[0]}"/>')  # fmt: skip
        parts.append(f'<text x="{px(value) + 4:.1f}" y="{y + 15}" font-size="11">'
                     f"{_label(value)}</text>")  # fmt: skip
    axis = top + BAR_ROW * len(rows)
    parts.append(f'<line x1="{label_width}" y1="{axis}" x2="{WIDTH - right}" y2="{axis}" '
                 'stroke="#444"/>')  # fmt: skip
    if mark is not None:
        parts.append(f'<line x1="{px(mark):.1f}" y1="{top}" x2="{px(mark):.1f}" y2="{axis}" '
                     f'stroke="{PALETTE[1]}" stroke-dasharray="4 3"/>')  # fmt: skip
    parts.append(f'<text x="{(label_width + WIDTH - right) / 2}" y="{height - 12}" '
                 f'text-anchor="middle" font-size="12">{escape(xlabel)}</text>')  # fmt: skip
    parts.append("</svg>")
    return "\n".join(parts)
