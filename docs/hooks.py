"""MkDocs hooks: the command-line reference page, written from the parser at build time;
and the benchmark pages' plots, drawn from the figures written beside them.

A plot is a fenced block of kind `plot` in a page:

    ```plot
    title: simple, c=8, 2026-11-23
    x: infer/s
    mark: 12000
    HTTP binary: 11898
    gRPC unary: 3534
    ```

`title` and `x` (the axis's label) come first, `mark` (a dashed line: a floor, a goal)
may follow; every other line is a bar, `label: value`. It becomes an inline SVG
(gateway/tools/svg.py): the figures stay in the page's text, where a reader and a
review see them.
"""

from __future__ import annotations

import re

from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File

PLOT = re.compile(r"^```plot\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def on_files(files, config):
    from gateway.cli import build_parser
    from gateway.tools.cli_reference import render

    files.append(File.generated(config, "reference/cli.md", content=render(build_parser())))
    return files


def on_page_markdown(markdown, page, config, files):
    return PLOT.sub(lambda found: plot(found.group(1), page.file.src_path), markdown)


def plot(text: str, where: str) -> str:
    from gateway.tools.svg import bars

    settings: dict[str, str] = {}
    rows: list[tuple[str, float]] = []
    for line in filter(None, (line.strip() for line in text.splitlines())):
        key, _, setting = line.partition(":")
        if key in ("title", "x", "mark") and not rows:
            settings[key] = setting.strip()
            continue
        label, colon, value = line.rpartition(":")
        if not colon:
            raise PluginError(f"{where}: plot line '{line}' is not 'label: value'")
        try:
            rows.append((label.strip(), float(value.replace(",", ""))))
        except ValueError:
            raise PluginError(f"{where}: plot bar '{line}' has no number after ':'") from None
    if "title" not in settings or "x" not in settings or not rows:
        raise PluginError(f"{where}: a plot needs 'title:', 'x:' and at least one bar")
    try:
        mark = float(settings["mark"].replace(",", "")) if "mark" in settings else None
    except ValueError:
        raise PluginError(f"{where}: a plot's 'mark:' must be a number") from None
    svg = bars(settings["title"], settings["x"], rows, mark)
    return f'<div class="plot">\n{svg}\n</div>\n'
