"""Every command's --help, walked through click's own API: each option says what it does, shows
the variable it reads, and one concept has one name across the commands (an old spelling still
works, hidden from help)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from click.testing import CliRunner
from wheelbuild.cli.main import main
from wheelbuild.cli.params import LIST_RULE, RenamedOption
from wheelbuild.image.inputs import Image, image_table

# One flag, two meanings, each said in its help (asserted below); nothing else may differ.
TWO_MEANINGS = {
    "--version": {"version", "recipe_version"},  # wheelbuild's own (the group) vs a recipe's release
    "--archs": {"archs", "archs_options"},  # one list to build vs calibrate's one set to measure per use
}
OLD_NAMES = {"--config", "--wheelhouse"}  # renamed: --config-file, and yank's --tree


def _commands(command: click.Command, path: tuple[str, ...]) -> Iterator[tuple[str, click.Command]]:
    yield " ".join(path), command
    if isinstance(command, click.Group):
        for name, sub in sorted(command.commands.items()):
            if not sub.hidden:
                yield from _commands(sub, (*path, name))


COMMANDS = list(_commands(main, ("wheelbuild",)))


def _help(path: str, command: click.Command) -> str:
    parent = None
    for word in path.split()[:-1]:
        parent = click.Context(main if parent is None else parent.command, info_name=word, parent=parent)
    with click.Context(command, info_name=path.split()[-1], parent=parent) as ctx:
        return " ".join(command.get_help(ctx).split())


def _shown(command: click.Command) -> list[click.Option]:
    return [p for p in command.params if isinstance(p, click.Option) and not p.hidden]


def _names(option: click.Option) -> list[str]:
    old = option.old_names if isinstance(option, RenamedOption) else ()
    return [name for name in (*option.opts, *option.secondary_opts) if name not in old]


def test_the_walk_sees_every_command_and_subcommand() -> None:
    paths = {path for path, _ in COMMANDS}
    assert {
        "wheelbuild build",
        "wheelbuild image ls",
        "wheelbuild nightly schedule",
        "wheelbuild publish",
    } <= paths
    assert len(paths) >= 20


@pytest.mark.parametrize(("path", "command"), COMMANDS, ids=[p for p, _ in COMMANDS])
def test_every_option_has_help_and_shows_its_variable(path: str, command: click.Command) -> None:
    text = _help(path, command)
    for option in _shown(command):
        assert option.help and option.help.strip(), (path, option.opts)
        for name in [option.envvar] if isinstance(option.envvar, str) else option.envvar or []:
            assert option.show_envvar, (path, option.opts, name)
            assert name in text, (path, option.opts, name)
        for old in option.old_names if isinstance(option, RenamedOption) else ():
            assert f"{old} " not in text.replace(f"{old}-", ""), (path, old)  # accepted, never shown


def test_one_concept_has_one_name_across_commands() -> None:
    by_param: dict[str, set[str]] = {}
    by_flag: dict[str, set[str]] = {}
    for _path, command in COMMANDS:
        for option in _shown(command):
            long_names = [n for n in _names(option) if n.startswith("--")]
            by_param.setdefault(str(option.name), set()).add(long_names[0] if long_names else option.opts[0])
            for name in long_names:
                by_flag.setdefault(name, set()).add(str(option.name))
    assert {param: flags for param, flags in by_param.items() if len(flags) > 1} == {}
    assert {flag: params for flag, params in by_flag.items() if len(params) > 1} == TWO_MEANINGS
    assert not OLD_NAMES & set(by_flag), "an old spelling is shown in some command's help"


def test_the_two_versions_say_which_is_which() -> None:
    top = _help("wheelbuild", main)
    build = _help("wheelbuild build", main.commands["build"])
    assert "Show wheelbuild's own version and exit (a recipe's release is build's --version)." in top
    assert "not wheelbuild's own version, which `wheelbuild --version` prints" in build
    assert LIST_RULE in top


@pytest.mark.parametrize("spelling", ["--config-file", "--config"])
@pytest.mark.parametrize("command", [("matrix",), ("nightly", "plan")])
def test_the_matrix_file_option_takes_its_old_name_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: tuple[str, ...], spelling: str
) -> None:
    """The file given either way is the one read: a directory is refused naming it (13), where an
    unknown option would be click's usage error (2)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a-dir").mkdir()
    result = CliRunner().invoke(main, [*command, spelling, "a-dir"])
    assert result.exit_code == 33, result.output
    assert "a-dir" in result.stderr.splitlines()[-2]


def test_the_published_tree_is_one_name_in_publish_yank_and_serve() -> None:
    for path in ("publish", "yank", "serve"):
        shown = _help(f"wheelbuild {path}", main.commands[path])
        assert "TREE" in shown and "the published tree" in shown.lower(), shown


@pytest.mark.parametrize("spelling", ["--tree", "--wheelhouse"])
def test_yank_takes_its_old_tree_option_too(tmp_path: Path, spelling: str) -> None:
    """The tree given either way is the one read: one without an index is refused naming it (53)."""
    result = CliRunner().invoke(main, ["yank", "wbtiny==0.1.0", spelling, str(tmp_path / "tree-typo")])
    assert result.exit_code == 53, result.output
    assert "tree-typo" in result.stderr


def test_image_ls_has_a_header_and_each_images_size() -> None:
    images = [
        Image("wheelbuild-cuda131:d3512f04b369314f", "sha256:516371a6feee" + "0" * 52,
              {"org.opencontainers.image.base.name": "wheelbuild-base:bookworm", "org.wheelbuild.cuda.version": "13.1"},
              reused=True, size=1_395_864_371),
        Image("wheelbuild-cuda131:0123456789abcdef", "sha256:" + "a" * 64, {}, reused=True, size=2 * 1024**3),
    ]  # fmt: skip
    header, first, second = image_table(images)
    assert header.split() == ["TAG", "ID", "SIZE", "BASE", "CUDA", "CUDA12"]
    assert first.split() == [
        "wheelbuild-cuda131:d3512f04b369314f", "516371a6feee", "1.3", "GiB", "wheelbuild-base:bookworm", "13.1", "none",
    ]  # fmt: skip
    assert second.split()[2:4] == ["2.0", "GiB"]
    assert first.index("516371a6feee") == header.index("ID") == second.index("a" * 12)  # aligned


def test_the_dist_fleet_is_one_group_and_its_old_names_still_run() -> None:
    top = _help("wheelbuild", main)
    assert " dist " in f" {top} " and "dist-stop" not in top
    for name in ("scheduler", "server", "stop"):
        new = CliRunner().invoke(main, ["dist", name, "--help"])
        old = CliRunner().invoke(main, [f"dist-{name}", "--help"])
        assert new.exit_code == old.exit_code == 0, new.output + old.output
        group = main.commands["dist"]
        assert isinstance(group, click.Group)
        assert group.commands[name].callback is main.commands[f"dist-{name}"].callback
