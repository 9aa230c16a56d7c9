"""Every number a command takes has a range, from one table (``cli.common``) or its own
declaration, and shows it in ``--help``; every entry of the table names a real option."""

import click
import pytest

from hetserve.cli.common import FLOAT_RANGES, INT_RANGES
from hetserve.cli.main import cli, main


def _options(cmd=cli, path=("hetserve",)):
    if isinstance(cmd, click.Group):
        ctx = click.Context(cmd)  # (the group imports a command's module when asked)
        for name in cmd.list_commands(ctx):
            yield from _options(cmd.get_command(ctx, name), (*path, name))
    for p in cmd.params:
        if isinstance(p, click.Option):
            yield " ".join(path), p


NUMBERS = [
    (where, p)
    for where, p in _options()
    if isinstance(p.type, (click.types.FloatParamType, click.types.IntParamType))
]


def test_every_number_option_has_a_range():
    missing = []
    for where, p in NUMBERS:
        t = p.type
        if not isinstance(t, click.types._NumberRangeBase) or (t.min is None and t.max is None):
            missing.append(f"{where} {p.opts[0]} ({p.name})")
    assert not missing, "options without a range (add them to cli.common's table): " + str(missing)


def test_every_table_entry_names_an_option():
    names = {p.name for _, p in NUMBERS}
    assert set(FLOAT_RANGES) <= names, set(FLOAT_RANGES) - names
    assert set(INT_RANGES) <= names, set(INT_RANGES) - names


@pytest.mark.parametrize(
    "argv",
    [
        ["reproduce", "ppipe", "--help"],
        ["reproduce", "shepherd", "--help"],
        ["reproduce", "magicbatch", "--help"],
        ["reproduce", "rampa", "--help"],
        ["simulate", "--help"],
        ["trace", "gen", "--help"],
    ],
)
def test_help_shows_real_ranges(capsys, argv):
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "None" not in out, out


def test_a_number_out_of_its_range_is_a_one_line_usage_error(capsys, tmp_path):
    rc = main(["reproduce", "magicbatch", "--duration", "-1", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1
    assert "--duration" in err and "0.0<x<=100000000.0" in err
