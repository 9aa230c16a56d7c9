"""Request outcomes: every arrived request ends exactly once.

``ok`` (finished by its deadline), ``late`` (finished after it), ``dropped(reason)`` (the
scheduler gave up on it, or its deadline came while it was queued), ``failed(reason)``
(the engine could not run it) or ``cancelled(reason)`` (its client went away first: no
answer was delivered; ``Kernel.cancel``).
"""

from __future__ import annotations

PENDING, OK, LATE, DROPPED, FAILED, CANCELLED = 0, 1, 2, 3, 4, 5
OUTCOME_NAMES = ("pending", "ok", "late", "dropped", "failed", "cancelled")

#: a request that finishes this close after its deadline is on time (float rounding)
ON_TIME_EPS_S = 1e-12


def finished(finish_s: float, deadline_s: float) -> int:
    """The outcome of a request that finished at ``finish_s``: ok by its deadline, else
    late (the one rule; ``sim.result`` applies it to arrays)."""
    return OK if finish_s <= deadline_s + ON_TIME_EPS_S else LATE


# ------------------------------------------------------------------ why a request is dropped

#: Why a request is dropped: a closed set. A scheduler's ``Drop`` names one of these kinds
#: (the kernel refuses any other); the kind is the label of ``hetserve_drops_total`` and
#: the first word of the text a client and the log get (``"deadline: 0.4 ms left ..."``).
DROP_KINDS: dict[str, str] = {
    "deadline": "it can no longer finish by its deadline",
    "rows": "it has more rows than any batch the plan serves",
    "not_provisioned": "the plan serves its model nowhere",
    "worker_lost": "the worker that was to serve it is lost",
    "preempted": "its batch was preempted and it can no longer finish by its deadline",
    "admission": "even the best case (its queue ahead, the fastest worker) misses its deadline",
    "overloaded": "the server holds as many requests as it may",
    "shutdown": "the server shut down before it ran",
    "run_ended": "the simulation ended before it ran",
}


#: Why a request fails: a closed set, like ``DROP_KINDS``. Every failure's text starts with
#: one of these kinds (``"stage_error: RuntimeError: ... (stage 0 of batch 7 on cpu0)"``);
#: the kind is the label of ``hetserve_failures_total``.
FAILURE_KINDS: dict[str, str] = {
    "stage_error": "a stage raised on its worker (a bug in the model or the worker's runtime)",
    "not_resident": "its stage's weights were not on the worker, nor loading",
    "worker_lost": "the worker that held its activations is lost",
    "bad_output": "the model's answer is not what it advertises",
    "scheduler_error": "the scheduler raised or broke a protocol rule while it held it",
    "internal": "a bug in the server failed every open request",
    "shutdown": "the server shut down while it ran",
    "run_ended": "the simulation ended while it ran",
}


def failure_kind(reason: str) -> str:
    """The kind a failure's text starts with (``"stage_error: ..."`` ->
    ``"stage_error"``); ``""`` for a text that names none."""
    kind = reason.split(":", 1)[0]
    return kind if kind in FAILURE_KINDS else ""


def failure_text(kind: str, detail: str = "") -> str:
    """A failure's text: its kind, then what happened (the kind's sentence where no
    detail is given)."""
    return f"{kind}: {detail or FAILURE_KINDS[kind]}"


def drop_kind(reason: str) -> str:
    """The kind a drop's text starts with (``"deadline: ..."`` -> ``"deadline"``)."""
    return reason.split(":", 1)[0]


def _ms(s: float) -> str:
    return f"{s * 1e3:.1f} ms"


def drop_text(
    kind: str,
    figures: tuple[float | int | str | None, ...],
    arrival_s: float,
    deadline_s: float,
    rows: int,
    now: float,
) -> str:
    """A drop's text for a client and the log: its kind, then what happened, with the
    figures the scheduler gave (``scheduling.protocol.Drop``):

    - ``deadline``: (the least time it needs to finish, requests queued for its model;
      either may be left out, the first as None) -> how long it waited, the time left
      and those;
    - ``preempted``: (the worker, time needed) -> the same, and where it was preempted;
    - ``rows``: (the largest batch) -> its rows and that batch;
    - ``worker_lost``: (the worker) -> which one;
    - ``not_provisioned``: (what the plan says of it).

    Other kinds, or no figures, give the kind's sentence (``DROP_KINDS``)."""
    waited = (
        f"after {_ms(now - arrival_s)} queued, {_ms(deadline_s - now)} left of its "
        f"{_ms(deadline_s - arrival_s)} SLO"
    )
    if kind == "deadline":
        text = f"deadline: {waited}"
        if figures and figures[0] is not None:
            text += f"; it needs at least {_ms(float(figures[0]))} to finish"
        if len(figures) > 1:
            text += f" ({figures[1]} requests of its model queued)"
        return text
    if kind == "preempted" and len(figures) == 2:
        worker, need = figures
        return (
            f"preempted: its batch was stopped on {worker}; {waited}, and it needs "
            f"{_ms(float(need))}"
        )
    if kind == "rows" and len(figures) == 1:
        return f"rows: {rows} rows, more than the largest batch the plan serves ({figures[0]})"
    if kind == "worker_lost" and len(figures) == 1:
        return f"worker_lost: {figures[0]}, the worker that was to serve it, is lost"
    if kind == "not_provisioned" and len(figures) == 1:
        return f"not_provisioned: {figures[0]}"
    return f"{kind}: {DROP_KINDS.get(kind, kind)}"
