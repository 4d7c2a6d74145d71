"""MkDocs hook: the command-line reference page, written from the parser at build time."""

from __future__ import annotations

from mkdocs.structure.files import File


def on_files(files, config):
    from gateway.cli import build_parser
    from gateway.tools.cli_reference import render

    files.append(File.generated(config, "reference/cli.md", content=render(build_parser())))
    return files
