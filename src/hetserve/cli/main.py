"""The ``hetserve`` entry point: the command group, every command module's commands added
to it, and the one place where errors become one line on stderr and an exit status.

Bad input ends in one line on stderr naming the file, row or field and what was expected,
and exit status 2 — never a traceback. Every command is documented in ``docs/cli.md``.
"""

from __future__ import annotations

import importlib
import os
import sys

import click

from hetserve import __version__
from hetserve.cli.common import add_repository_option, harden, report_error
from hetserve.core.errors import HetserveError
from hetserve.core.provenance import set_command

#: every command of the group: its name, and the module of ``hetserve.cli`` that defines it
#: (an attribute of that name)
COMMANDS: dict[str, str] = {
    "gpus": "catalog", "cluster": "catalog", "model": "catalog",
    "profile": "data", "trace": "data", "zoo": "data",
    "plan": "plan",
    "place": "place",
    "simulate": "sim", "sweep": "sim", "report": "sim",
    "reproduce": "reproduce",
    "serve": "serve",
    "bench": "bench",
    "demo": "demo",
}  # fmt: skip


class Commands(click.Group):
    """The ``hetserve`` group, whose commands' modules are imported when a command is run,
    not when the program starts: ``hetserve simulate`` does not import the server, the
    benchmarks or the studies (35-50 ms of a command's start). ``hetserve --help`` lists
    every command, and so imports them all."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in COMMANDS:
            module = importlib.import_module(f"hetserve.cli.{COMMANDS[cmd_name]}")
            command = getattr(module, cmd_name)
            if not isinstance(command, click.Command):  # (COMMANDS names a wrong attribute)
                raise TypeError(f"hetserve.cli.{COMMANDS[cmd_name]}.{cmd_name} is not a command")
            harden(command)
            add_repository_option(command, under_model=cmd_name == "model")
            self.add_command(command, cmd_name)
        return self.commands.get(cmd_name)


@click.group(cls=Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="hetserve")
def cli() -> None:
    """hetserve: DNN inference serving on heterogeneous GPU clusters under latency SLOs."""


harden(cli)


def main(argv: list[str] | None = None) -> int:
    set_command(["hetserve", *(sys.argv[1:] if argv is None else argv)])
    # CUDA numbers GPUs by PCI bus, as NVML does, in hetserve and what it starts (unless
    # the user chose): on a machine with two GPU types "cuda:0" is then NVML's GPU 0
    os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    try:
        cli.main(args=argv, prog_name="hetserve", standalone_mode=False)
    except HetserveError as e:
        return report_error(str(e))
    except OSError as e:  # writing an output file or folder
        where = f"{e.filename}: " if e.filename else ""
        return report_error(f"{where}{e.strerror or e}")
    except click.exceptions.Abort:
        click.echo("hetserve: aborted", err=True)
        return 130
    except click.exceptions.NoArgsIsHelpError as e:  # a group without its command: help
        click.echo(e.format_message())
        return 2
    except click.ClickException as e:
        return report_error(_one_line(e), e.exit_code if e.exit_code else 2)
    except KeyboardInterrupt:
        return 130
    return 0


def _one_line(e: click.ClickException) -> str:
    """Click's usage errors as one line: the command, then the message (Click prints a
    usage block, a hint and the message on four lines)."""
    ctx = getattr(e, "ctx", None)
    where = f"{ctx.command_path}: " if ctx is not None else ""
    where = where.removeprefix("hetserve: ").removeprefix("hetserve ")
    return f"{where}{e.format_message()}"
