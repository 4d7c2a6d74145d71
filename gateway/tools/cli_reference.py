"""The command line's reference page, written from the argument parser itself
(docs/hooks.py adds it to the docs site as reference/cli.md), so that no flag goes
undocumented: a test checks that every option of every command appears in it."""

from __future__ import annotations

import argparse


def _subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, argparse.ArgumentParser]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return list(action.choices.items())
    return []


def _help(action: argparse.Action) -> str:
    text = action.help or ""
    if "%(" in text:
        text = text % {**vars(action), "prog": ""}
    return " ".join(text.split()).replace("|", "\\|")


def _flags(action: argparse.Action) -> str:
    names = action.option_strings or [action.dest]
    value = "" if action.nargs == 0 else f" {action.metavar or action.dest.upper()}"
    return ", ".join(f"`{name}{value}`" for name in names)


def _default(action: argparse.Action) -> str:
    if action.nargs == 0 or action.default in (None, argparse.SUPPRESS, [], ""):
        return ""
    return f"`{action.default}`"


def _command(lines: list[str], name: str, parser: argparse.ArgumentParser, depth: int) -> None:
    lines += [f"{'#' * depth} `{name}`", ""]
    if parser.description:
        lines += [" ".join(parser.description.split()), ""]
    lines += ["```", parser.format_usage().strip(), "```", ""]
    groups = [(g.title or "options", g._group_actions) for g in parser._action_groups]
    for title, actions in groups:
        shown = [
            a for a in actions
            if a.help != argparse.SUPPRESS and not isinstance(a, argparse._SubParsersAction)
            and not isinstance(a, argparse._HelpAction)
        ]  # fmt: skip
        if not shown:
            continue
        lines += [f"**{title}**", "", "| option | default | what it does |", "|---|---|---|"]
        lines += [f"| {_flags(a)} | {_default(a)} | {_help(a)} |" for a in shown]
        lines.append("")
    for sub_name, sub in _subcommands(parser):
        _command(lines, f"{name} {sub_name}", sub, min(depth + 1, 4))


def render(parser: argparse.ArgumentParser) -> str:
    """Markdown: each command, its usage, and a table of its options."""
    lines = [
        "# Command-line reference",
        "",
        "Written from the argument parser when the docs are built",
        "(gateway/tools/cli_reference.py); `accel-gateway COMMAND --help` prints the same.",
        "",
    ]
    _command(lines, "accel-gateway", parser, 2)
    return "\n".join(lines) + "\n"


def option_strings(parser: argparse.ArgumentParser) -> list[str]:
    """Every option string of every command (for the test that the page lists them)."""
    found = [
        s for a in parser._actions for s in a.option_strings
        if a.help != argparse.SUPPRESS and not isinstance(a, argparse._HelpAction)
    ]  # fmt: skip
    for _, sub in _subcommands(parser):
        found += option_strings(sub)
    return found
