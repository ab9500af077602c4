"""Every ``grepvi`` command the project documents for the paper's experiments parses and
passes the run configuration's checks: ``examples/reproduce.sh`` and the commands of
REPRODUCING.md's experiment table. (``reproduce.sh`` asked for ``--elbo-every 10`` for many
sessions after the default procedure's window became 100 iterations, and every one of its
runs was refused at the first line; no test read it.)"""

import re
import shlex
from pathlib import Path

import pytest

from grepvi import cli
from grepvi.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]


def _reproduce_commands() -> list[list[str]]:
    text = (ROOT / "examples" / "reproduce.sh").read_text().replace("\\\n", " ")
    common = re.search(r"^COMMON=\((.*)\)$", text, re.M).group(1)
    commands = []
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("grepvi "):
            continue
        line = line.replace('"${COMMON[@]}"', common).replace('"$BUDGET"', "600").replace('"$OUT', '"runs')
        commands.append(shlex.split(line))
    return commands


def _table_commands() -> list[list[str]]:
    text = (ROOT / "REPRODUCING.md").read_text()
    return [shlex.split(found) for found in re.findall(r"^\|[^|]*\|[^|]*\| `(grepvi [^`]*)` \|$", text, re.M)]


def _check(words: list[str]) -> None:
    args = cli.build_parser().parse_args(words[1:])
    if args.command in ("fit", "samples"):
        estimators = [args.estimator]
    elif args.command == "compare":
        estimators = args.estimators or ["grep"]
    else:  # report
        return
    for name in estimators:
        cli._config(args, name).validate()


COMMANDS = [("reproduce.sh", w) for w in _reproduce_commands()] + [
    ("REPRODUCING.md", w) for w in _table_commands()
]


def _name(source: str, words: list[str]) -> str:
    dataset = words[words.index("--dataset") + 1] if "--dataset" in words else "runs"
    return f"{source}: {words[1]} {dataset}"


def test_the_documents_hold_commands():
    assert len(_reproduce_commands()) >= 6  # four compares, the samples sweep, the report
    assert len(_table_commands()) >= 4


@pytest.mark.parametrize(("source", "words"), COMMANDS, ids=[_name(*c) for c in COMMANDS])
def test_a_documented_command_is_accepted(source, words):
    try:
        _check(words)
    except (ConfigError, SystemExit) as error:
        pytest.fail(f"{source}: {' '.join(words)}: refused ({error})")


def test_the_check_refuses_what_the_cli_refuses():
    words = shlex.split("grepvi compare --model sparse-gamma-def --dataset olivetti --elbo-every 10 --out x")
    with pytest.raises(ConfigError, match="elbo_every"):
        _check(words)
