"""Request outcomes: every arrived request ends exactly once.

``ok`` (finished by its deadline), ``late`` (finished after it), ``dropped(reason)`` (the
scheduler gave up on it) or ``failed(reason)`` (the engine could not run it).
"""

from __future__ import annotations

PENDING, OK, LATE, DROPPED, FAILED = 0, 1, 2, 3, 4
OUTCOME_NAMES = ("pending", "ok", "late", "dropped", "failed")

#: a request that finishes this close after its deadline is on time (float rounding)
ON_TIME_EPS_S = 1e-12


def finished(finish_s: float, deadline_s: float) -> int:
    """The outcome of a request that finished at ``finish_s``: ok by its deadline, else
    late (the one rule; ``sim.result`` applies it to arrays)."""
    return OK if finish_s <= deadline_s + ON_TIME_EPS_S else LATE
