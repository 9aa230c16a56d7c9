"""The Scheduler protocol's rules (``scheduling.protocol``), as both engines enforce them.

Each function here is one rule, with one message: the simulator and the runtime call the
same function at the same point, so a scheduler that breaks a rule fails the same way
(:class:`ProtocolError`, the same text) in both. The engines keep their own state (lists
indexed by request id in the simulator, dicts in the runtime) and pass in what a rule
needs. What stays in an engine is how time passes and how a stage runs, never what an
action means.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable, Mapping

from hetserve.core.requests import Request
from hetserve.engine.entities import route_steps
from hetserve.scheduling.protocol import Dispatch, Evict, Load, RouteStep, StageReport

# A stage's result, as the engines record it and report it (rule 5).
PARKED = "parked"  # an open route's last stage: the requests wait on its worker (rule 4)
WORKER_LOST = "worker lost"  # a batch from block 0 hit by a lost worker: returned (rule 9)
# one that carried parked activations: failed (a failure of the closed set,
# ``core.outcome.FAILURE_KINDS``, as every failure the engines make)
ACTIVATIONS_LOST = "worker_lost: the activations it continued from were on a lost worker"
PREEMPTED = "preempted"
NOT_RESIDENT = "not_resident: its stage's blocks were not resident on the worker, nor loading"
# every request of the batch ended (cancelled by its client, or its deadline came while the
# scheduler held it) before the stage started: the stage did not run, and no request is
# in the report
WITHDRAWN = "withdrawn"


class ProtocolError(RuntimeError):
    """A scheduler broke the Scheduler protocol: a bug in the scheduler, not bad user
    input (that is ``HetserveError``). Both engines raise it, with the same message."""


# ---------------------------------------------------------------------- dispatch (rule 4)
# (a dispatch's shape is checked by ``engine.kernel_core.check_dispatch``, compiled with the
# kernel: it runs for every batch)
def as_dispatch(d: Dispatch | tuple) -> Dispatch:
    """``d`` as a ``Dispatch`` of ``RouteStep``s: a scheduler's compiled core gives the
    kernel a dispatch as a plain tuple of its fields, its route of plain tuples of a step's
    (``scheduling.policy_core.PolicyCore.plain``)."""
    if type(d) is Dispatch:
        return d
    bid, model, requests, route = d
    return Dispatch(bid, model, requests, route_steps(route))


def not_held(d: Dispatch, r: Request) -> ProtocolError:
    """A dispatched request the scheduler does not hold (never arrived, in another batch,
    already ended) or one of another model."""
    d = as_dispatch(d)
    return ProtocolError(
        f"Dispatch {d.batch_id}: request {r.id} is not held by the scheduler or is for "
        f"another model"
    )


def parked_elsewhere(d: Dispatch, r: Request, at_block: int) -> ProtocolError:
    """A dispatched request not at the route's first block (rule 3: a returned request
    stays where its batch started; rule 4: a continued route starts where it stopped)."""
    d = as_dispatch(d)
    return ProtocolError(
        f"Dispatch {d.batch_id}: request {r.id} is parked at block {at_block}, "
        f"the route starts at block {d.route[0].blocks[0]}"
    )


def parked_sources(requests: Iterable[Request], where: Callable[[int], str]) -> dict[str, int]:
    """A continued batch's input (rule 4): per worker, how many rows of its requests'
    activations are parked there (``where(request id)``), in the requests' order."""
    counts: dict[str, int] = {}
    for r in requests:
        src = where(r.id)
        counts[src] = counts.get(src, 0) + r.rows
    return counts


# ---------------------------------------------------------------------- other actions
def drop_not_held(r: Request) -> ProtocolError:
    return ProtocolError(f"Drop of request {r.id}, which the scheduler does not hold")


def unknown_drop_reason(reason: str) -> ProtocolError:
    """A ``Drop`` whose reason is not one of the closed set (``core.outcome.DROP_KINDS``)."""
    from hetserve.core.outcome import DROP_KINDS

    return ProtocolError(
        f"Drop reason {reason!r}: expected one of {', '.join(DROP_KINDS)} (say what happened "
        f"with the Drop's figures)"
    )


def check_timer(at_s: float, now: float) -> None:
    """Rule 6: a timer is for now or later (1 ns of rounding allowed)."""
    if at_s < now - 1e-9:
        raise ProtocolError(f"SetTimer at {at_s} is in the past (now {now})")


def check_load(a: Load | Evict, nblocks: Mapping[str, int], workers: Container[str]) -> None:
    """Rule 8: a load or eviction names a known worker and a block range of a served
    model."""
    nb = nblocks.get(a.model)
    if a.worker in workers and nb is not None and 0 <= a.blocks[0] < a.blocks[1] <= nb:
        return
    kind = type(a).__name__
    if a.worker not in workers:
        raise ProtocolError(f"{kind} on unknown worker {a.worker!r}")
    if nb is None:
        raise ProtocolError(f"{kind} of {a.model!r}, which is not in the plan")
    raise ProtocolError(f"{kind} of {a.model} blocks {a.blocks}: model has {nb}")


def evict_running(a: Evict, batch_id: int) -> ProtocolError:
    """Rule 8: an eviction never touches a running stage (its weights are in use)."""
    return ProtocolError(
        f"Evict of {a.model} blocks {a.blocks} on {a.worker} while batch {batch_id} runs them there"
    )


def unknown_action(a: object) -> ProtocolError:
    return ProtocolError(f"unknown action {a!r}")


def ended_twice(request_id: int) -> ProtocolError:
    return ProtocolError(f"request {request_id} ended twice")


# ---------------------------------------------------------------------- faults (rule 9)
def lost_reason(route: tuple[RouteStep, ...]) -> str:
    """A batch hit by a lost worker comes back to the scheduler if its route started at
    block 0 (its inputs are still at the front end), and fails if it carried activations
    parked on some worker."""
    return WORKER_LOST if route[0].blocks[0] == 0 else ACTIVATIONS_LOST


# ---------------------------------------------------------------------- reports (rule 5)
def stage_done_report(
    d: Dispatch,
    index: int,
    worker: str,
    start_s: float,
    end_s: float,
    last: bool,
    reason: str,
    transfer_start_s: float | None = None,
    transfer_end_s: float | None = None,
) -> StageReport:
    """The report of route step ``index`` that ran to its end (``reason``: ``PARKED`` at
    the end of an open route, else empty), with the times its input was in transfer."""
    step = d.route[index]
    b = step.blocks
    return StageReport(
        "stage", d.batch_id, d.model, step.stage, worker, start_s, end_s, d.requests,
        True, last, reason, b, b[1] - b[0], transfer_start_s, transfer_end_s,
    )  # fmt: skip


def stage_ended_report(
    d: Dispatch,
    index: int,
    worker: str,
    start_s: float,
    end_s: float,
    reason: str,
    blocks_done: int,
    transfer: tuple[float | None, float | None] = (None, None),
) -> StageReport:
    """The report of route step ``index`` stopped before its end: preempted or its worker
    lost (``reason`` in ``RETURNED``: the requests are the scheduler's again) or failed."""
    step = d.route[index]
    return StageReport(
        "stage", d.batch_id, d.model, step.stage, worker, start_s, end_s, d.requests,
        False, False, reason, step.blocks, blocks_done, transfer[0], transfer[1],
    )  # fmt: skip


def load_report(
    worker: str,
    model: str,
    blocks: tuple[int, int],
    start_s: float,
    end_s: float,
    ok: bool = True,
    reason: str = "",
) -> StageReport:
    """A load's report (``kind="load"``)."""
    return StageReport("load", -1, model, 0, worker, start_s, end_s, (), ok, False, reason, blocks)
