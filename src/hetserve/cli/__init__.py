"""The ``hetserve`` command line: one module per command group, shared helpers in
``common`` and ``views`` (which import no command module), the entry point in ``main``."""

from hetserve.cli.main import cli, main

__all__ = ["cli", "main"]
