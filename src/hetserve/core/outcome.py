"""Request outcomes: every arrived request ends exactly once.

``ok`` (finished by its deadline), ``late`` (finished after it), ``dropped(reason)`` (the
scheduler gave up on it) or ``failed(reason)`` (the engine could not run it).
"""

from __future__ import annotations

PENDING, OK, LATE, DROPPED, FAILED = 0, 1, 2, 3, 4
OUTCOME_NAMES = ("pending", "ok", "late", "dropped", "failed")
