"""The reference pages, generated from the code each time the site is built (an mkdocs hook).

A page asks for a table with a marker line, `<!-- generated: NAME -->`, which this hook replaces:
`cli` (every command and option of the click tree under `wheelbuild.cli.main.main`), `options`
(the build options: config keys, WHEELBUILD_* variables and defaults, from
`wheelbuild.spec.option_table.OPTIONS` and the `build` command's click options), `variables` (every
variable another command's option reads) and `exit-codes` (every subclass of
`wheelbuild.errors.WheelbuildError`, with its exit code and docstring). Nothing generated is
committed, so the reference cannot drift from the code. An unknown marker fails the build.

The renderers take nothing and return Markdown, so a test can read a table without building the
site (tests/unit/test_errors.py reads the exit codes this way).
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Iterator

import click

MARKER = re.compile(r"^<!-- generated: ([a-z-]+) -->$", re.MULTILINE)
USAGE_ERROR = 2  # click's own exit code for a command line it cannot parse


def _cell(text: str) -> str:
    """Text that stays in one Markdown table cell as written: one line, pipes escaped, and outside
    code spans `<`, `>` and `*` escaped (`<run-id>` is no HTML tag, `*_TOKEN` no emphasis)."""
    parts = " ".join(text.split()).replace("|", "\\|").split("`")
    for i in range(0, len(parts), 2):  # even parts lie outside code spans
        parts[i] = parts[i].replace("<", "&lt;").replace(">", "&gt;").replace("*", "\\*")
    return "`".join(parts)


def _no_value(value: object) -> bool:
    # click 8.3 marks "no default" with a sentinel object of its own
    return value is None or value == () or type(value).__name__ == "Sentinel"


def _shown(param: click.Parameter) -> tuple[list[str], list[str]]:
    """Its names and its negatives, without the old spellings (RenamedOption's, hidden from help)."""
    old = set(getattr(param, "old_names", ()))
    secondary = getattr(param, "secondary_opts", [])
    return [n for n in param.opts if n not in old], [n for n in secondary if n not in old]


def _names(param: click.Parameter) -> str:
    shown, secondary = _shown(param)
    return " / ".join(f"`{n}`" for n in (*shown, *secondary))


def _default(param: click.Parameter) -> str:
    show = getattr(param, "show_default", None)
    if isinstance(show, str):
        return _cell(show)
    value = param.default
    if callable(value):
        return "computed when run"
    if isinstance(param, click.Option) and param.is_flag:
        shown, secondary = _shown(param)
        if secondary:
            return f"`{shown[-1] if value else secondary[-1]}`"
        return "on" if value is True else "off"
    if _no_value(value):
        return ""
    if isinstance(value, tuple | list):
        return _cell(", ".join(f"`{v}`" for v in value))
    return f"`{_cell(str(value))}`"


def _kind(param: click.Parameter) -> str:
    if isinstance(param, click.Option) and param.is_flag:
        return "flag"
    if isinstance(param.type, click.Choice):
        return " or ".join(f"`{c}`" for c in param.type.choices)
    if isinstance(param.type, click.IntRange):
        low, high = param.type.min, param.type.max
        return f"integer {low if low is not None else ''}..{high if high is not None else ''}"
    kind = param.type.name
    return f"{kind}, repeatable" if getattr(param, "multiple", False) else kind


def _envvar(param: click.Parameter) -> str:
    names = [param.envvar] if isinstance(param.envvar, str) else list(param.envvar or [])
    return ", ".join(f"`{n}`" for n in names)


def _commands(group: click.Group, ctx: click.Context) -> Iterator[tuple[click.Command, click.Context]]:
    """Every visible command under *group*, depth first, each with its context (for its usage)."""
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        if command is None or command.hidden:
            continue
        child = click.Context(command, info_name=name, parent=ctx)
        yield command, child
        if isinstance(command, click.Group):
            yield from _commands(command, child)


def _command_section(command: click.Command, ctx: click.Context) -> list[str]:
    path = ctx.command_path
    usage = " ".join([path, *command.collect_usage_pieces(ctx)])
    paragraphs = [_cell(p) for p in inspect.cleandoc(command.help or "").split("\n\n")]
    lines = [f"## {path}", "", f"    {usage}", "", "\n\n".join(paragraphs), ""]
    if isinstance(command, click.Group):
        subs = [n for n in command.list_commands(ctx) if not (command.get_command(ctx, n) or command).hidden]
        lines += [f"Commands: {', '.join(f'`{n}`' for n in subs)}.", ""]
    arguments = [p for p in command.params if isinstance(p, click.Argument)]
    if arguments:
        lines += [
            "Arguments: "
            + ", ".join(
                f"`{a.make_metavar(ctx)}`" + (" (optional)" if not a.required else "") for a in arguments
            )
            + ".",
            "",
        ]
    options = [p for p in command.params if isinstance(p, click.Option) and not p.hidden]
    if options:
        lines += ["| option | takes | default | variable | what it does |", "|---|---|---|---|---|"]
        lines += [
            f"| {_names(o)} | {_kind(o)} | {_default(o)} | {_envvar(o)} | {_cell(o.help or '')} |"
            for o in options
        ]
        lines.append("")
    return lines


def cli_reference() -> str:
    """Every command and option, read from the click tree the `wheelbuild` script runs."""
    from wheelbuild.cli.main import main

    root = click.Context(main, info_name="wheelbuild")
    lines = _command_section(main, root)
    for command, ctx in _commands(main, root):
        lines += _command_section(command, ctx)
    return "\n".join(lines)


def options_reference() -> str:
    """The build options: each one's config key, variable, TOML type, example and default."""
    from wheelbuild.cli.main import build
    from wheelbuild.spec.option_table import OPTIONS

    params = {p.name: p for p in build.params}
    lines = [
        "| key | option | variable | value in TOML | example | default |",
        "|---|---|---|---|---|---|",
    ]
    for option in OPTIONS:
        param = params[option.param]
        default = _default(param) or _cell(option.unset)
        choices = f" ({', '.join(option.choices)})" if option.choices else ""
        lines.append(
            f"| `{option.key}` | {_names(param)} | `{option.env}` | {_cell(option.kind.value)}{choices} "
            f"| `{_cell(option.example)}` | {default} |"
        )
    return "\n".join(lines) + "\n"


def variables_reference() -> str:
    """Every variable a command's option reads, with the commands that read it."""
    from wheelbuild.cli.main import main

    root = click.Context(main, info_name="wheelbuild")
    readers: dict[str, list[str]] = {}
    for command, ctx in _commands(main, root):
        for param in command.params:
            if isinstance(param, click.Option) and not param.hidden and isinstance(param.envvar, str):
                readers.setdefault(param.envvar, []).append(f"`{ctx.command_path} {_shown(param)[0][-1]}`")
    lines = ["| variable | read by |", "|---|---|"]
    lines += [f"| `{name}` | {', '.join(readers[name])} |" for name in sorted(readers)]
    return "\n".join(lines) + "\n"


def exit_codes_reference() -> str:
    """Every exit code: click's usage error, then each WheelbuildError subclass and its docstring."""
    lines = [
        "| code | error | what it means |",
        "|---|---|---|",
        f"| {USAGE_ERROR} | (usage) | usage error: the command line could not be parsed (an unknown "
        "option, a missing argument, a value of the wrong kind or not among an option's choices) |",
    ]
    from wheelbuild.errors import exit_codes

    for row in exit_codes():
        lines.append(f"| {row.code} | `{row.name}` | {_cell(row.meaning)} |")
    return "\n".join(lines) + "\n"


RENDERERS: dict[str, Callable[[], str]] = {
    "cli": cli_reference,
    "options": options_reference,
    "variables": variables_reference,
    "exit-codes": exit_codes_reference,
}


def on_page_markdown(markdown: str, page: object, config: object, files: object) -> str:
    """mkdocs' hook: each marker replaced by its table; an unknown marker stops the build."""

    def render(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in RENDERERS:
            raise ValueError(f"{page}: unknown generated table {name!r}; known: {', '.join(RENDERERS)}")
        return RENDERERS[name]()

    return MARKER.sub(render, markdown)
