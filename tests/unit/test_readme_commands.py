"""The README names only what exists: every ``broker ...`` command it shows answers ``--help``,
every ``make`` target is in the Makefile, every ``BROKER_*`` key is a setting.

The checkers take the text, so the last tests prove they fail on a command, a target or a key
that is not there (as ``broker workflows diagram`` once went missing and no test noticed).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import click
import pytest
from click.testing import CliRunner

from broker.cli import main as cli
from broker.setting_keys import KEY_BY_ENV
from tests.support.services import PROJECT_ROOT

README = PROJECT_ROOT / "README.md"
MAKEFILE = PROJECT_ROOT / "Makefile"

# `...` spans, and the lines of indented or fenced code blocks
_SPAN = re.compile(r"`([^`\n]+)`")
_WORD = re.compile(r"^[a-z][a-z0-9-]*$")
_TARGET = re.compile(r"^([A-Za-z0-9_.-]+)\s*:(?!=)", re.MULTILINE)
_KEY = re.compile(r"\bBROKER_[A-Z0-9]+(?:_[A-Z0-9]+)*")


def code_texts(text: str) -> Iterator[str]:
    """The README's code: inline spans and the lines of code blocks."""
    fenced = False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if fenced or line.startswith("    "):
            yield line.strip()
        else:
            yield from _SPAN.findall(line)


def broker_commands(text: str) -> set[tuple[str, ...]]:
    """Each ``broker a b ...`` the code names, as its words up to the first argument or option;
    ``broker db upgrade \\| current`` is ``(db, upgrade)`` and ``(db, current)``."""
    found: set[tuple[str, ...]] = set()
    for code in code_texts(text):
        for match in re.finditer(r"(?:^|[\s(=$])broker\s+([^;&]*)", code):
            alternatives = re.split(r"\s*\\?\|\s+", match.group(1))
            head = _words(alternatives[0])
            if head:
                found.add(head)
            for other in alternatives[1:]:
                words = _words(other)
                if head and words:
                    found.add((*head[:-1], *words))
    return found


def _words(text: str) -> tuple[str, ...]:
    words: list[str] = []
    for token in text.replace("\\", " ").split():
        if not _WORD.match(token):
            break
        words.append(token)
    return tuple(words)


def missing_commands(text: str, root: click.Group = cli.main) -> list[str]:
    """The commands ``text`` names that ``root`` does not have (a word after a leaf command is
    its argument; after a group it must be one of the group's commands)."""
    missing = []
    for words in sorted(broker_commands(text)):
        command: click.Command = root
        ctx = click.Context(root, info_name="broker")
        for word in words:
            if not isinstance(command, click.Group):
                break  # an argument of a leaf command, such as `broker certs server HOST`
            sub = command.get_command(ctx, word)
            if sub is None:
                missing.append(" ".join(("broker", *words)))
                break
            command = sub
    return missing


def makefile_targets() -> set[str]:
    return set(_TARGET.findall(MAKEFILE.read_text()))


def missing_targets(text: str, targets: set[str]) -> list[str]:
    named = {
        match.group(1)
        for code in code_texts(text)
        for match in re.finditer(r"(?:^|[\s(])make\s+([a-z][a-z0-9-]*)", code)
    }
    return sorted(named - targets)


def unknown_keys(text: str) -> list[str]:
    return sorted({key for key in _KEY.findall(text) if key not in KEY_BY_ENV})


def test_every_broker_command_the_readme_names_exists_and_answers_help() -> None:
    text = README.read_text()
    commands = broker_commands(text)
    # Given the commands the README shows (the table alone names more than twenty)
    assert len(commands) > 20
    assert ("workflows", "diagram") in commands
    # Then each exists
    assert missing_commands(text) == []
    # And each answers --help
    runner = CliRunner()
    for words in sorted(commands):
        path = [w for w in words if w]
        result = runner.invoke(cli.main, [*_command_path(path), "--help"])
        assert result.exit_code == 0, (words, result.output)


def _command_path(words: list[str]) -> list[str]:
    """The words that name commands (the rest are a leaf command's arguments)."""
    command: click.Command = cli.main
    ctx = click.Context(cli.main, info_name="broker")
    path = []
    for word in words:
        if not isinstance(command, click.Group):
            break
        sub = command.get_command(ctx, word)
        assert sub is not None, words
        path.append(word)
        command = sub
    return path


def test_every_make_target_the_readme_names_is_in_the_makefile() -> None:
    assert missing_targets(README.read_text(), makefile_targets()) == []


def test_every_configuration_key_the_readme_names_is_a_setting() -> None:
    assert unknown_keys(README.read_text()) == []


# The checkers fail on what is missing -------------------------------------------------------------

STALE_README = """
| `broker workflows list \\| validate [FILES] \\| draw FILE` | what is loaded |

    make run
    make deploy-everything
    BROKER_NO_SUCH_KEY=1 make run
    ID=$(broker requests submit InvoiceProcess -k A=1)
    broker nothing-here --json
"""


def test_the_checker_reports_a_removed_command() -> None:
    assert missing_commands(STALE_README) == [
        "broker nothing-here",
        "broker workflows draw",
    ]


def test_the_checker_reports_a_command_removed_from_a_group() -> None:
    # Given a `broker` whose workflows group lost its diagram command, as it once did
    from broker.cli.workflows import workflows

    shrunk = click.Group("workflows", commands={n: c for n, c in workflows.commands.items()
                                                if n != "diagram"})  # fmt: skip
    root = click.Group("broker", commands={"workflows": shrunk})
    # Then the README, which shows `broker workflows ... diagram FILE`, fails the check
    assert "broker workflows diagram" in missing_commands(README.read_text(), root)


def test_the_checker_reports_a_missing_target_and_an_unknown_key() -> None:
    assert missing_targets(STALE_README, makefile_targets()) == ["deploy-everything"]
    assert unknown_keys(STALE_README) == ["BROKER_NO_SUCH_KEY"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("`broker db upgrade \\| current \\| check`", {("db", "upgrade"), ("db", "current"),
                                                       ("db", "check")}),
        ("`broker certs server HOST`", {("certs", "server")}),
        ("    ID=$(broker requests submit TYPE)", {("requests", "submit")}),
    ],
)  # fmt: skip
def test_commands_are_read_from_spans_tables_and_code_blocks(
    text: str, expected: set[tuple[str, ...]]
) -> None:
    assert broker_commands(text) == expected
