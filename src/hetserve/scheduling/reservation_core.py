# cython: annotation_typing=False
"""The reservation scheduler's hot path (``scheduling/reservation.py``) on resources
numbered 0..n-1: the probe (PPipe Algorithm 2) that reads the reservation table
(``reservation_slots.py``: the table, its lanes and pool orders) and the decisions
(Algorithm 1, its queues and the feedback correction: :class:`Algorithm1`), which take the
protocol's calls whole.

This file is plain Python and runs as it is. Where the package was built with Cython
(``setup.py``; ``reservation_core_c.pxd`` beside it declares the C types), the same file is
also compiled as ``hetserve.scheduling.reservation_core_c`` and the scheduler takes that one
(``reservation_table.py`` chooses; ``HETSERVE_PURE_PYTHON=1`` keeps this one). Both give
the same results, bit for bit (``tests/scheduling/test_reservation_core.py``).

The table's C types come from ``reservation_slots_c.pxd``, so this build is taken only
beside that one (``reservation_table.py``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

from hetserve.core.errors import HetserveError
from hetserve.core.heaps import pop, pop_edf, pop_first, push
from hetserve.scheduling import reservation_slots as slots
from hetserve.scheduling.protocol import RETURNED, Dispatch, Drop, RouteStep, SetTimer
from hetserve.scheduling.reservation_slots import double_buffer, int_buffer

try:  # (Cython reads ``cython.compiled`` as True in the build it makes of this file)
    import cython
except ImportError:  # (plain Python, without Cython installed)
    from hetserve.core.records import NO_CYTHON as cython
if not cython.compiled:  # (compiled: these are the C its .pxd cimports)
    from hetserve.core.records import (
        REQUEST_DEADLINE_S,
        REQUEST_ID,
        REQUEST_MODEL,
        REQUEST_ROWS,
        field,
        record,
        record2,
        record4,
    )
    from hetserve.scheduling.policy_core import PolicyCore

_EPS = 1e-12
_INF = math.inf
_NEG_INF = -math.inf
# a stage's transfer into one worker from the previous stage's: (worker, links crossed,
# seconds per bit, delay s); what :class:`Into` is made of
Xfer = tuple[int, tuple[int, ...], float, float]


class Into:
    """A stage's transfers from one worker of the previous stage into each worker of the
    stage's pool (``Pipe.xfers``), by the receiving worker's number: per worker ``w`` its
    seconds per bit and delay at ``d[2 w]`` and ``d[2 w + 1]``, and at ``i[w width]`` the
    links crossed (how many; 0 for a worker on the same GPU, or none of the pool's) then
    the links themselves; ``links[w]`` the same links as a tuple (None for none of the
    pool's); ``min_inv`` and ``min_delay`` the least seconds per bit and delay over them
    (a lower bound on any transfer's time). C buffers compiled: a probe reads a
    candidate's transfer from two lines of them (as a tuple per worker it read two
    objects from wherever they were, and counted their references up and down: the
    probe's most waited-for loads, 23% of its time)."""

    def __init__(self, into: Iterable[Xfer]) -> None:
        into = list(into)
        n = max((x[0] for x in into), default=-1) + 1
        self.n = n
        self.width = 1 + max((len(x[1]) for x in into), default=0)
        self.d = double_buffer(2 * n, 0.0)
        self.i = int_buffer(n * self.width)
        self.links: list[tuple[int, ...] | None] = [None] * n
        for w, links, inv, delay in into:
            self.d[2 * w] = inv
            self.d[2 * w + 1] = delay
            self.i[w * self.width] = len(links)
            for q, lk in enumerate(links):
                self.i[w * self.width + 1 + q] = lk
            self.links[w] = tuple(links)
        self.min_inv = min((x[2] for x in into), default=0.0)
        self.min_delay = min((x[3] for x in into), default=0.0)


# a stage's tag in the reservation table: its batch's id times STAGE_TAGS plus its stage
# (ordered as the pair ``(batch, stage)`` is, for stages below STAGE_TAGS; an integer, so
# that no object is made, kept or freed per reservation)
STAGE_TAGS = 1 << 12
MAX_BATCH_ID = (1 << 62) // STAGE_TAGS  # (batch ids below it in size: the tags fit 63 bits)
_STAGE_TAGS = STAGE_TAGS  # (compiled: C integers)
_MAX_BATCH_ID = MAX_BATCH_ID
# the tag of a worker's work left from the previous plan (a switch: ``busy_until_s``),
# below every stage's
PREVIOUS_PLAN_TAG = -(1 << 62) - 1


def stage_tag(bid: int, stage: int) -> int:
    """The reservation table's tag of batch ``bid``'s stage ``stage`` (see ``STAGE_TAGS``)."""
    return bid * _STAGE_TAGS + stage


def reserve(table: slots.SlotTable, bid: int, pr: Probed, bk: slots.Bookings) -> int:
    """Commit a probe (``pr``)'s reservations for batch ``bid``, a stage's tagged
    :func:`stage_tag` (which its reservations share); each one a row of ``bk``, in
    order; returns the first row (-1: none)."""
    if not -_MAX_BATCH_ID < bid < _MAX_BATCH_ID:
        raise HetserveError(f"reservation: batch id {bid} is too large for a tag")
    first = -1
    prev = -1
    stage = 0
    tag = bid * _STAGE_TAGS  # (the stages' tags: this plus the stage)
    room = pr.room  # (where the reservations begin in the probe's buffers)
    for k in range(pr.n_resv):
        r = pr.iw[room + k]
        start = pr.dv[room + 2 * k]
        dur = pr.dv[room + 2 * k + 1]
        table.add(r, start, start + dur, tag + stage)
        row = bk.new_row(r, start, dur, stage, tag + stage)
        if prev < 0:
            first = row
        else:
            bk.nxt[prev] = row  # (read anew: a new row may have grown the buffers)
        prev = row
        if r == pr.iw[stage]:  # (the stage's worker: its reservations end there)
            stage += 1
    return first


_MOVED = slots.MOVED  # (``SlotTable.correct``'s flags; compiled, C integers)
_KEPT = slots.KEPT
_NO_INTO = Into([])  # (the first stage's: no transfer into it)
_NAN = math.nan
RESV_ROOM = 64  # the ring of batches' rows at first (a power of two; it doubles as needed)
_NO_LB = double_buffer(0, 0.0)  # (a pipeline's numbers before it learns any)


def probe(table: slots.SlotTable, p: Pipe, k: int, lost: set[int], now: float, out: Probed) -> int:
    """PPipe Algorithm 2: stage by stage, the worker of the pool that completes first
    (transfer on both link ends at once, then inference); side-effect free but for
    ``out``, where it writes its result.

    ``p.lb[k + 2 si]`` and ``p.lb[k + 2 si + 1]``: stage ``si``'s inference seconds and
    the bits crossing the cut into it (``k``: where the batch size's numbers begin,
    :meth:`Pipe.learn`); ``p.orders[si]``: its pool's order; ``p.xfers[si]``: the stage's
    transfers by the previous stage's worker, a list by its number of :class:`Into`
    (None, or past the end: ``p.miss(si, last)`` makes it). Writes the
    path (a worker per stage), the reservations it needs ``(resource, start, duration)``,
    the completion time, the time spent waiting for resources, and the stages' starts into
    ``out`` (:class:`Probed`); an empty path and an infinite completion where a pool has
    no live worker."""
    # (the buffers read as ``table.front[w]`` etc. each time, not kept in locals:
    # compiled, a typed buffer in a local is taken and let go with atomic counts, at
    # each call, and ``miss`` may grow the table's)
    t_g = now
    last = -1
    out.n_resv = 0
    busy = 0.0
    min_inv = 0.0
    min_delay = 0.0
    xs = _NO_INTO
    orders = p.orders
    for si in range(len(orders)):
        l_i: float = p.lb[k + 2 * si]
        bits: float = p.lb[k + 2 * si + 1]
        order: slots.PoolOrder = orders[si]
        if last < 0:
            xs = _NO_INTO
            t_lb = t_g
        else:
            by_last = p.xfers[si]  # (a list by worker: no key to hash and look up)
            hit = by_last[last] if last < len(by_last) else None
            if hit is None:
                hit = p.miss(si, last)  # (it may number new links: the buffers grow)
            xs = hit
            min_inv = xs.min_inv
            min_delay = xs.min_delay
            t_lb = t_g + bits * min_inv + min_delay  # no transfer arrives earlier
        nx = xs.n
        width = xs.width
        best_t = _INF
        best_w = -1
        best_s = 0.0
        best_tl = 0.0
        best_ln = 0.0
        best_nl = 0
        best_at = 0
        # workers with a usable gap after t_lb first (their front says nothing), then
        # the rest by front: once max(t_lb, front) + l_i cannot beat the best, stop
        # (candidates j = k0..n-1: by_solid's from the first that begins after t_lb, as if
        # their front were -inf; then j = n..2n-1: by_front's)
        # (the orders are rings: the j-th pair at (start + j) & mask)
        n_w = order.n
        mask = order.mask
        sh = order.solid_h
        fh = order.front_h - n_w  # (by_front's j - n_w: at (front_h + j - n_w) & mask)
        k0 = n_w
        if order.solid_t[(sh + n_w - 1) & mask] > t_lb:  # (bisect_right by time)
            k0 = 0
            hi = n_w
            while k0 < hi:
                mid = (k0 + hi) >> 1
                if t_lb < order.solid_t[(sh + mid) & mask]:
                    hi = mid
                else:
                    k0 = mid + 1
        all_inf = l_i < order.min_gap  # a stage shorter than planned for: look at them all
        if all_inf:
            k0 = n_w
        for j in range(k0, 2 * n_w):
            if j < n_w:
                f_w = _NEG_INF
                w = order.solid_w[(sh + j) & mask]
            else:
                f_w = _NEG_INF if all_inf else order.front_t[(fh + j) & mask]
                w = order.front_w[(fh + j) & mask]
            if (f_w if f_w > t_lb else t_lb) + l_i >= best_t - _EPS:
                break
            if lost and w in lost:
                continue
            # (by worker number: the links crossed into it, none into the first stage)
            at = w * width
            nl = xs.i[at] if w < nx else 0
            if nl > 0:
                l_n = bits * xs.d[2 * w] + xs.d[2 * w + 1]
                tl = t_g
                for q in range(nl):
                    if t_g < table.front[xs.i[at + 1 + q]] - _EPS:
                        tl = table.earliest_slot(xs.links[w], t_g, l_n)
                        break
                arr = tl + l_n
            else:
                l_n = 0.0
                tl = t_g
                arr = t_g
            f = table.front[w]
            if arr >= f - _EPS:
                s = arr
            elif arr >= table.solid[w] and l_i >= table.min_gap[w]:
                s = f
            else:
                s = table.scan(w, arr, l_i)
            if s + l_i < best_t - _EPS:
                best_t = s + l_i
                best_w = w
                best_s = s
                best_tl = tl
                best_ln = l_n
                best_nl = nl
                best_at = at
        if best_w < 0:
            out.n_stages = 0
            out.n_resv = 0
            out.finish_s = _INF
            out.wait_s = _INF
            return 0
        for q in range(best_nl):
            out.add_resv(xs.i[best_at + 1 + q], best_tl, best_ln)
        out.add_resv(best_w, best_s, l_i)
        busy += best_ln + l_i
        out.iw[si] = best_w  # (the stage's worker and start: ``Probed``)
        out.dv[si] = best_s
        t_g = best_t
        last = best_w
    out.n_stages = len(orders)
    out.finish_s = t_g
    out.wait_s = t_g - now - busy
    return 0


# ---------------------------------------------------------------------- Algorithm 1
class Pipe:
    """A pipeline as Algorithm 1 probes it: its planned batch size (``bs``), its stages'
    blocks, per batch size the stages' inference seconds, bits into them and pool orders
    (``infos``, by batch size, None where not made yet; ``info_of(batch)`` makes one and
    keeps it there; the numbers also in ``lb`` and the orders in ``orders``, as
    :meth:`learn` puts them),
    and per stage its transfers by the previous stage's worker (``xfers``, a list by the
    worker's number; ``miss(si, last)`` makes one)."""

    def __init__(
        self,
        bs: int,
        blocks: list[tuple[int, int]],
        info_of: Callable[[int], list[tuple[float, float, slots.PoolOrder]]],
        xfers: list[list[Into | None]],
        miss: Callable[[int, int], Into],
    ) -> None:
        if len(blocks) >= _STAGE_TAGS:  # (a stage's tag holds its number below that)
            raise HetserveError(f"reservation: {len(blocks)} stages; at most {_STAGE_TAGS - 1}")
        self.bs = bs
        self.blocks = blocks
        self.infos: list[list[tuple[float, float, slots.PoolOrder]] | None] = []
        self.info_of = info_of
        self.xfers = xfers
        self.miss = miss
        # (Algorithm 1's probes of this pipeline, written over each time: the one at its
        # planned batch size, and the others)
        self.first = Probed(self, len(blocks))
        self.other = Probed(self, len(blocks))
        # per batch size b, stage si: its inference seconds at 2 (b n + si) and the bits
        # into it next, n the stages; NaN where not learnt. (One buffer: at 1,000 GPUs a
        # probe found a model's tuple and its two floats out of the cache, and waited
        # for them: 42% of the probe's time there.)
        self.lb = _NO_LB
        self.orders: tuple[slots.PoolOrder, ...] = ()  # per stage, its pool's order

    def learn(self, batch: int) -> int:
        """``batch``'s numbers (``info_of``'s, or ``infos``' where kept) written into
        ``lb`` (made longer where short) and the orders into ``orders``; returns where
        the batch size's numbers begin in ``lb``."""
        infos = self.infos
        info = infos[batch] if batch < len(infos) else None
        if info is None:
            info = self.info_of(batch)
        n = len(self.blocks)
        k = 2 * n * batch
        if k + 2 * n > len(self.lb):
            lb = double_buffer(max(k + 2 * n, 2 * len(self.lb)), _NAN)
            for i in range(len(self.lb)):
                lb[i] = self.lb[i]
            self.lb = lb
        for si in range(n):
            self.lb[k + 2 * si] = info[si][0]
            self.lb[k + 2 * si + 1] = info[si][1]
        self.orders = tuple([st[2] for st in info])
        return k


class Probed:
    """A probe's result (:func:`probe`) for ``batch`` rows on ``pipe``, in two buffers that
    a probe writes over. ``iw`` (C integers): per stage its worker, for the first
    ``n_stages`` (at 0, 1, ...), then per reservation its resource (at ``room + k``);
    ``dv`` (C doubles): per stage its start (at 0, 1, ...), then per reservation its
    start and duration (at ``room + 2k`` and ``room + 2k + 1``), for the first
    ``n_resv``; ``room``: the stages there is room for (the pipeline's). Also the
    completion (``finish_s``) and the time spent waiting for resources (``wait_s``).
    ``path``, ``starts`` and ``resv`` read them as lists. (Two buffers, not one per
    field: at 1,000 GPUs, where a model's probes are seldom in the cache, a probe
    touched a cache line per buffer and one per buffer's view in this object.)"""

    def __init__(self, pipe: Pipe | None, n_stages: int) -> None:
        self.pipe = pipe
        self.batch = 0
        self.n_stages = 0
        self.n_resv = 0
        self.room = n_stages
        self.finish_s = math.inf
        self.wait_s = math.inf
        # (room for three reservations a stage: its worker's and two links')
        self.iw = int_buffer(4 * n_stages)
        self.dv = double_buffer(7 * n_stages, 0.0)

    def add_resv(self, r: int, start: float, dur: float) -> int:
        """One more reservation (the buffers grow by doubling)."""
        k = self.n_resv
        room = self.room
        if room + k == len(self.iw):
            more = k if k > 0 else 4
            iw = int_buffer(room + k + more)
            dv = double_buffer(room + 2 * (k + more), 0.0)
            for i in range(room + k):
                iw[i] = self.iw[i]
            for i in range(room + 2 * k):
                dv[i] = self.dv[i]
            self.iw = iw
            self.dv = dv
        self.iw[room + k] = r
        self.dv[room + 2 * k] = start
        self.dv[room + 2 * k + 1] = dur
        self.n_resv = k + 1
        return 0

    @property
    def path(self) -> list[int]:
        return [int(self.iw[i]) for i in range(self.n_stages)]

    @property
    def starts(self) -> list[float]:
        return [float(self.dv[i]) for i in range(self.n_stages)]

    @property
    def resv(self) -> list[tuple[int, float, float]]:
        room = self.room
        return [
            (int(self.iw[room + k]), float(self.dv[room + 2 * k]), float(self.dv[room + 2 * k + 1]))
            for k in range(self.n_resv)
        ]


class ModelQueue:
    """A model's waiting requests as :class:`Algorithm1` keeps them: a heap by deadline,
    then request id (``heap``: ``(deadline_s, id, request)`` entries), their rows
    together (``rows``), the pipelines that serve the model (``pipes``) and the time of
    the wake-up timer it waits for (``timer_at``; NaN: none). Found once per call: the
    four were dicts by model's name, each looked up on its own."""

    __slots__ = ("heap", "pipes", "rows", "timer_at")

    def __init__(self, pipes: list[Pipe]) -> None:
        self.heap: list = []
        self.rows = 0
        self.pipes = pipes
        self.timer_at = _NAN


class Algorithm1(PolicyCore):
    """PPipe Algorithm 1 with the feedback correction: the ``reservation`` scheduler's
    decisions, which ``scheduling/reservation.py`` sets up and hands the protocol's calls
    to. Per model, a heap of waiting requests by deadline (``queues``, with their
    ``rows``), the pipelines to probe (``pipes``) and the wake-up timer it waits for
    (``timer_at``), a :class:`ModelQueue` each; each batch's
    reservations (its first row of ``booked``, a
    :class:`~hetserve.scheduling.reservation_slots.Bookings`, kept by batch id in a ring:
    :meth:`resv_put`, :meth:`resv_get`, :meth:`resv_items`; its route is the kernel's,
    ``Kernel.batches``);
    ``next_batch``: the last batch id given (what ``BaseScheduler.new_batch_id``
    counts). A ``policy_core.PolicyCore``: the compiled kernel calls its arrivals and
    stage reports as C methods."""

    def __init__(
        self,
        table: slots.SlotTable,
        names: list[str],
        ids: dict[str, int],
        lost: set[int],
        margin_s: float,
        pipes: dict[str, list[Pipe]],
        models: Iterable[str],
        next_batch: int,
    ) -> None:
        super().__init__()
        self.table = table
        self.names = names  # (resources by number, and the numbers by name)
        self.ids = ids
        self.lost = lost
        self.margin_s = margin_s
        self.pipes = pipes
        self.queues: dict[str, ModelQueue] = {m: ModelQueue(pipes.get(m, [])) for m in models}
        # (each batch's first row by batch id: at ``bid & resv_mask``, its id in
        # ``resv_bid`` and its row + 1 in ``resv_first``, 0 where none. Batch ids are
        # this core's counter, so the batches under way sit side by side and a dict's
        # hashing, insertion and deletion, 650 instructions a batch, are not needed)
        self.resv_mask = RESV_ROOM - 1
        self.resv_bid = int_buffer(RESV_ROOM)
        self.resv_first = int_buffer(RESV_ROOM)
        self.booked = table.bookings()
        self.next_batch = next_batch

    # ------------------------------------------------------------------ the batches' rows
    def resv_put(self, bid: int, first: int) -> int:
        """Batch ``bid``'s first row of ``booked`` is ``first`` (the ring doubles where
        another batch under way holds ``bid``'s place)."""
        i = bid & self.resv_mask
        while self.resv_first[i] != 0 and self.resv_bid[i] != bid:
            self._resv_grow()
            i = bid & self.resv_mask
        self.resv_bid[i] = bid
        self.resv_first[i] = first + 1
        return 0

    def resv_get(self, bid: int) -> int:
        """Batch ``bid``'s first row of ``booked``; -1 where none is kept."""
        i = bid & self.resv_mask
        if self.resv_first[i] != 0 and self.resv_bid[i] == bid:
            return self.resv_first[i] - 1
        return -1

    def resv_del(self, bid: int) -> None:
        """Batch ``bid``'s row is kept no more (it was: :meth:`resv_get`)."""
        self.resv_first[bid & self.resv_mask] = 0

    def resv_items(self) -> list[tuple[int, int]]:
        """``(batch id, first row)`` of each batch whose reservations are kept, by id."""
        return sorted(
            (int(self.resv_bid[i]), int(self.resv_first[i]) - 1)
            for i in range(self.resv_mask + 1)
            if self.resv_first[i] != 0
        )

    def _resv_grow(self) -> None:
        """The ring twice as large (again, until the batches kept fall on places of
        their own)."""
        kept = self.resv_items()
        size = 2 * (self.resv_mask + 1)
        while True:
            mask = size - 1
            if len({bid & mask for bid, _ in kept}) == len(kept):
                break
            size *= 2
        self.resv_mask = mask
        self.resv_bid = int_buffer(size)
        self.resv_first = int_buffer(size)
        for bid, first in kept:
            self.resv_bid[bid & mask] = bid
            self.resv_first[bid & mask] = first + 1

    # ------------------------------------------------------------------ the protocol
    def on_arrival(self, request: object, now: float) -> list:
        """A request joins its model's queue; then Algorithm 1 for that model."""
        plain = self.plain  # (this call's: ``PolicyCore``)
        self.plain = False
        model = field(request, REQUEST_MODEL)
        mq = self.queues.get(model)
        if mq is None:
            raise HetserveError(f"reservation: no pipeline serves model {model!r}")
        push(mq.heap, (field(request, REQUEST_DEADLINE_S), field(request, REQUEST_ID), request))
        mq.rows += field(request, REQUEST_ROWS)
        out: list = []
        self.try_model(mq, model, now, out, plain)
        return out

    def on_timer(self, token: object, now: float) -> list:
        """The wake-up timer of a model: Algorithm 1 again, if it is still the one the
        model waits for. The token, ``("reservation", model, time, queue)``, carries the
        model's queue: most timers fire after an arrival asked for an earlier one, and
        are answered without a look-up by the model's name (a look-up in a dict of 100
        models' queues missed the first-level cache at 1,000 GPUs)."""
        plain = self.plain
        self.plain = False
        mq = token[3]
        at = token[2]
        if mq.timer_at != at:  # (NaN: none, unequal to any)
            return []
        model = token[1]
        if self.queues.get(model) is not mq:  # (a queue of a core since replaced)
            return []
        mq.timer_at = _NAN
        out: list = []
        self.try_model(mq, model, now, out, plain)
        return out

    def stage_report(
        self,
        kind: str,
        batch_id: int,
        model: str,
        stage: int,
        worker: str,
        start_s: float,
        end_s: float,
        requests: tuple,
        completed: bool,
        last: bool,
        reason: str,
        blocks: tuple[int, int],
        blocks_done: int,
        transfer_start_s: float,
        transfer_end_s: float,
        now: float,
    ) -> list | None:
        """A stage report (``on_stage_done``, its fields: ``PolicyCore``): the feedback
        correction; preempted requests back in their queue; Algorithm 1 again where
        anything moved."""
        plain = self.plain
        self.plain = False
        if kind != "stage":
            return None  # (no actions: ``PolicyCore.on_stage_done`` says ``[]``)
        # (the tables say who is busy: no counts kept)
        changed = self.correct(
            batch_id, stage, start_s, end_s, transfer_start_s, transfer_end_s, completed,
            last,
        )  # fmt: skip
        if not completed and reason in RETURNED:
            mq = self.queues[model]  # (back in their queue: they keep their deadlines)
            for r in requests:
                push(mq.heap, (field(r, REQUEST_DEADLINE_S), field(r, REQUEST_ID), r))
                mq.rows += field(r, REQUEST_ROWS)
            changed = True
        if not changed:
            # everything ran as reserved: nothing a new decision could use (Algorithm 1
            # runs on arrivals, at the wake-up timer and when resources change)
            return None
        out: list = []
        self.try_model(self.queues[model], model, now, out, plain)
        return out

    def worker_names(self) -> list | None:
        """The resources' names by number (``PolicyCore.worker_names``): a plain
        dispatch's steps carry the kernel's keys for them."""
        return self.names

    # ------------------------------------------------------------------ the steps
    def probe(self, p: Pipe, batch: int, now: float) -> Probed:
        """Algorithm 2 (:func:`probe`) for ``batch`` rows on ``p``: a new
        :class:`Probed`."""
        pr = Probed(p, len(p.blocks))
        self.probe_into(pr, p, batch, now)
        return pr

    def probe_into(self, out: Probed, p: Pipe, batch: int, now: float) -> int:
        """Algorithm 2 for ``batch`` rows on ``p``, written over ``out``."""
        k = 2 * len(p.orders) * batch  # (the batch size's numbers in ``p.lb``)
        if batch < 0:
            raise ValueError(f"a batch of {batch} rows")
        if k >= len(p.lb) or p.lb[k] != p.lb[k]:  # (NaN: not learnt)
            k = p.learn(batch)
        probe(self.table, p, k, self.lost, now, out)
        out.pipe = p
        out.batch = batch
        return 0

    def largest_in_time(self, first: Probed, head_s: float, now: float, least: int) -> object:
        """Step 2: from ``first``'s batch size down to ``least`` (the head's rows), the
        first probe of its pipeline that completes by ``head_s`` (None: none does). The
        smaller ones are written over the pipeline's ``other`` probe."""
        pr = first.pipe.other
        if first.batch < least:  # the head alone is larger than the planned batch
            self.probe_into(pr, first.pipe, least, now)
            return pr if pr.finish_s <= head_s else None
        if first.finish_s <= head_s:
            return first
        bs = first.batch - 1
        while bs >= least:
            self.probe_into(pr, first.pipe, bs, now)
            if pr.finish_s <= head_s:
                return pr
            bs -= 1
        return None

    def try_model(
        self, mq: ModelQueue, model: str, now: float, out: list, plain: bool = False
    ) -> None:
        """Algorithm 1 for ``model``'s queue (``mq``), until it is empty or waits; the
        actions go to ``out`` (``plain``: its dispatches as plain tuples, ``PolicyCore``)."""
        q = mq.heap
        if not q:
            return
        pipes = mq.pipes
        table = self.table
        table.now = now
        while q:
            # step 1: the pipeline whose probe at its planned batch size waits least
            best = None
            for p in pipes:
                pr = p.first
                self.probe_into(pr, p, p.bs, now)
                if best is None or pr.wait_s < best.wait_s - _EPS:
                    best = pr
            # step 2: from there down, the largest batch that meets the head's deadline
            top = q[0]
            head_dl = top[0]  # (the head's deadline, a C double compiled)
            head = head_dl + _EPS
            least = field(top[2], REQUEST_ROWS)  # (a batch holds the head's rows at least)
            chosen = self.largest_in_time(best, head, now, least)
            if chosen is None and len(pipes) > 1:
                # not even batch 1 makes it there: before dropping the head, the other
                # pipelines that are free right now (a request that waited for a fuller
                # batch on one pipeline may still fit another that sits idle); each
                # pipeline's ``first`` holds its probe at its planned batch size still
                for p in pipes:
                    pr = p.first
                    if pr is not best and pr.wait_s <= _EPS:
                        chosen = self.largest_in_time(pr, head, now, least)
                        if chosen is not None:
                            break
            if chosen is None:
                r = pop(q)[2]
                mq.rows -= field(r, REQUEST_ROWS)
                out.append(record(Drop, ((r,), "deadline", ())))
                continue
            # (from here on only ``chosen`` is read: the probes below write over it)
            n = mq.rows
            if n < chosen.batch:
                pr = chosen
                self.probe_into(pr, chosen.pipe, n, now)
                slack = head_dl - pr.finish_s - self.margin_s
                if slack > _EPS:  # wait till the last moment the n can still make it
                    at = now + slack
                    t_at = mq.timer_at
                    if t_at != t_at or t_at > at + _EPS or t_at < now:  # (NaN: none)
                        mq.timer_at = at
                        out.append(record2(SetTimer, at, ("reservation", model, at, mq)))
                    return
                chosen = pr
            if n == len(q):  # (each request one row: ``pop_edf``'s count known here)
                taken = chosen.batch if chosen.batch < n else n
                reqs = pop_first(q, taken)
            else:
                reqs, taken = pop_edf(q, chosen.batch, n)
            mq.rows = n - taken
            if taken < chosen.batch:  # (the next request's rows did not fit)
                self.probe_into(chosen, chosen.pipe, taken, now)
            self.next_batch += 1
            bid = self.next_batch
            self.resv_put(bid, reserve(table, bid, chosen, self.booked))
            names = self.names
            blocks = chosen.pipe.blocks
            # the route as plain tuples of a ``RouteStep``'s fields: what the kernel's C call
            # takes (``PolicyCore.plain``), each worker its key there where the kernel gave
            # keys for its number (``PolicyCore.worker_keys``: the resources named when the
            # kernel took this core, the workers among them; links are named later); the
            # protocol's NamedTuples, with names, for any other caller
            if plain:
                keys = self.worker_keys
                if keys is not None:
                    nk = len(keys)
                    for si in range(chosen.n_stages):
                        if chosen.iw[si] >= nk:
                            break
                    else:
                        names = keys
            if chosen.n_stages == 1:  # (one stage: its tuple made at once)
                route = ((0, names[chosen.iw[0]], chosen.dv[0], blocks[0]),)
            elif chosen.n_stages == 2:  # (two: likewise, no list made first)
                route = (
                    (0, names[chosen.iw[0]], chosen.dv[0], blocks[0]),
                    (1, names[chosen.iw[1]], chosen.dv[1], blocks[1]),
                )
            else:
                route = tuple([
                    (si, names[chosen.iw[si]], chosen.dv[si], blocks[si])
                    for si in range(chosen.n_stages)
                ])  # fmt: skip
            if plain:
                out.append((bid, model, reqs, route))
            else:
                steps = tuple([record4(RouteStep, st[0], st[1], st[2], st[3]) for st in route])
                out.append(record4(Dispatch, bid, model, reqs, steps))

    def correct(
        self,
        bid: int,
        stage: int,
        start_s: float,
        end_s: float,
        xs: float,
        xe: float,
        completed: bool,
        last: bool,
    ) -> bool:
        """Feedback correction of a stage report's (its batch, stage, start, end,
        transfer start and end, NaN where none, whether it completed, whether it was the
        last): the
        batch's reservations follow reality (:meth:`SlotTable.correct`, which knows the
        stage's worker from its rows: the report's is the one it was routed to). Returns
        whether any reservation moved."""
        if type(bid) is not int:  # (never this core's: its ids are ints)
            return False
        b = bid  # (compiled, a C integer)
        first = self.resv_get(b)
        if first < 0:  # (none kept: released, or never this core's)
            return False
        has_x = xs == xs and xe == xe  # (NaN: no transfer)
        res = self.table.correct(
            bid, self.booked, first, stage, start_s, end_s,
            xs if has_x else 0.0, xe if has_x else 0.0, has_x, completed, last,
        )  # fmt: skip
        if not res & _KEPT:
            self.booked.release(first)
            self.resv_del(b)
        return (res & _MOVED) != 0
