"""User-facing errors: one line that names the file, the field and what was expected.

Every error a user can cause by bad input (a config, a profile table, a trace, a name on
the command line) is a :class:`HetserveError`. The CLI prints its message on one line and
exits with status 2; nothing else ever reaches the user as a traceback.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class HetserveError(Exception):
    """An error caused by user input; ``str(err)`` is a complete one-line message."""

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(message.split()))


class ConfigError(HetserveError):
    """A config, profile, graph or trace file does not have the expected content."""


class UnknownNameError(HetserveError, KeyError):
    """A GPU type, model, cluster preset or process name is not known."""

    def __str__(self) -> str:  # KeyError would add quotes around the message
        return str(self.args[0])


def closest(name: str, known: Iterable[str], n: int = 3) -> list[str]:
    """The known names closest to ``name`` (case-insensitive), best first."""
    by_lower = {k.lower(): k for k in known}
    hits = difflib.get_close_matches(name.lower(), list(by_lower), n=n, cutoff=0.5)
    if not hits:  # substring matches catch e.g. "resnet" -> "resnet50"
        hits = [k for k in sorted(by_lower) if name.lower() in k][:n]
    return [by_lower[h] for h in hits]


def unknown(
    kind: str, name: str, known: Iterable[str], aliases: dict[str, str] | None = None
) -> UnknownNameError:
    """An error for an unknown ``kind`` name, suggesting the closest known ones.

    ``aliases`` maps other accepted spellings to known names; they are searched too and
    suggested as the name they stand for.
    """
    known = list(known)
    pool = {k: k for k in known} | dict(aliases or {})
    near: list[str] = []
    for hit in closest(name, pool, n=5):
        if pool[hit] not in near:
            near.append(pool[hit])
    near = near[:3]
    hint = f"; did you mean {', '.join(repr(s) for s in near)}?" if near else ""
    listing = ", ".join(sorted(known)[:12]) + (" ..." if len(known) > 12 else "")
    return UnknownNameError(f"unknown {kind} {name!r}{hint} (known: {listing})")
