# C types for reservation_core.py when Cython compiles it (setup.py) as the module
# reservation_core_c: Cython takes the .pxd named for the module it builds, so this file
# carries that name. The .py file is the source and runs as plain Python without this
# (its annotations are for readers and type checkers: ``annotation_typing=False`` at its
# top leaves the C types to this file). Floats are C doubles, the classes are extension
# types with typed attributes; lists, dicts and tuples stay Python objects.
import cython

from hetserve.core.records_c cimport (
    REQUEST_DEADLINE_S, REQUEST_ID, REQUEST_MODEL, REQUEST_ROWS, field, record, record2,
    record4,
)

from hetserve.core.heaps_core_c cimport pop, pop_edf, pop_first, push
from hetserve.scheduling.policy_core_c cimport PolicyCore
from hetserve.scheduling.reservation_slots_c cimport Bookings, PoolOrder, SlotTable

cdef double _EPS
cdef double _INF
cdef double _NEG_INF
cdef Py_ssize_t _MOVED
cdef Py_ssize_t _KEPT
cdef long long _STAGE_TAGS
cdef long long _MAX_BATCH_ID
cdef Into _NO_INTO
cdef double _NAN
cdef Py_ssize_t RESV_ROOM
cdef double[::1] _NO_LB

cdef class Probed
cdef class Pipe


@cython.final
cdef class Into:
    cdef public Py_ssize_t n
    cdef public Py_ssize_t width
    cdef public double[::1] d
    cdef public long long[::1] i
    cdef public list links
    cdef public double min_inv
    cdef public double min_delay

@cython.locals(first=Py_ssize_t, prev=Py_ssize_t, row=Py_ssize_t, stage=Py_ssize_t,
               r=Py_ssize_t, start=double, dur=double, k=Py_ssize_t, tag=cython.longlong,
               room=Py_ssize_t)
cpdef Py_ssize_t reserve(SlotTable table, long long bid, Probed pr, Bookings bk) except? -2


@cython.locals(t_g=double, last=Py_ssize_t, busy=double,
               min_inv=double, min_delay=double, xs=Into, by_last=list, si=Py_ssize_t,
               l_i=double, bits=double, orders=tuple,
               order=PoolOrder, t_lb=double, hit=Into, best_t=double, best_w=Py_ssize_t,
               best_s=double, best_tl=double, best_ln=double, best_nl=Py_ssize_t,
               best_at=Py_ssize_t, nx=Py_ssize_t, width=Py_ssize_t,
               n_w=Py_ssize_t, mask=Py_ssize_t, sh=Py_ssize_t,
               fh=Py_ssize_t, k0=Py_ssize_t, hi=Py_ssize_t,
               mid=Py_ssize_t, all_inf=bint, j=Py_ssize_t, f_w=double,
               w=Py_ssize_t, at=Py_ssize_t, nl=Py_ssize_t, q=Py_ssize_t, l_n=double,
               tl=double, arr=double, f=double, s=double)
cpdef int probe(SlotTable table, Pipe p, Py_ssize_t k, set lost, double now,
                Probed out) except -1


@cython.final
cdef class Pipe:
    cdef public Py_ssize_t bs
    cdef public list blocks
    cdef public list infos
    cdef public object info_of
    cdef public list xfers
    cdef public object miss
    cdef public Probed first
    cdef public Probed other
    cdef public double[::1] lb
    cdef public tuple orders

    @cython.locals(infos=list, info=list, n=Py_ssize_t, k=Py_ssize_t, lb="double[::1]",
                   i=Py_ssize_t, si=Py_ssize_t)
    cpdef Py_ssize_t learn(self, Py_ssize_t batch) except -1


@cython.final
cdef class Probed:
    cdef public Pipe pipe
    cdef public Py_ssize_t batch
    cdef public Py_ssize_t n_stages
    cdef public Py_ssize_t n_resv
    cdef public Py_ssize_t room
    cdef public double finish_s
    cdef public double wait_s
    cdef public long long[::1] iw
    cdef public double[::1] dv

    @cython.locals(k=Py_ssize_t, room=Py_ssize_t, more=Py_ssize_t, iw="long long[::1]",
                   dv="double[::1]", i=Py_ssize_t)
    cpdef int add_resv(self, Py_ssize_t r, double start, double dur) except -1


@cython.final
cdef class ModelQueue:
    cdef public list heap
    cdef public Py_ssize_t rows
    cdef public list pipes
    cdef public double timer_at


cdef class Algorithm1(PolicyCore):
    cdef public SlotTable table
    cdef public list names
    cdef public dict ids
    cdef public set lost
    cdef public double margin_s
    cdef public dict pipes
    cdef public dict queues
    cdef public Py_ssize_t resv_mask
    cdef public long long[::1] resv_bid
    cdef public long long[::1] resv_first
    cdef public Bookings booked
    cdef public object next_batch

    @cython.locals(i=Py_ssize_t)
    cpdef int resv_put(self, long long bid, Py_ssize_t first) except -1

    @cython.locals(i=Py_ssize_t)
    cpdef Py_ssize_t resv_get(self, long long bid) except? -2

    cpdef void resv_del(self, long long bid) except *

    @cython.locals(kept=list, size=Py_ssize_t, mask=Py_ssize_t)
    cdef void _resv_grow(self) except *

    @cython.locals(mq=ModelQueue, plain=bint)
    cpdef list on_arrival(self, object request, double now)

    @cython.locals(mq=ModelQueue, at=double, plain=bint)
    cpdef list on_timer(self, object token, double now)

    @cython.locals(changed=bint, out=list, mq=ModelQueue, plain=bint)
    cpdef list stage_report(self, object kind, object batch_id, object model, Py_ssize_t stage,
                            object worker, double start_s, double end_s, object requests,
                            bint completed, bint last, object reason, object blocks,
                            Py_ssize_t blocks_done, double transfer_start_s,
                            double transfer_end_s, double now)

    @cython.locals(pr=Probed)
    cpdef Probed probe(self, Pipe p, Py_ssize_t batch, double now)

    @cython.locals(k=Py_ssize_t)
    cpdef int probe_into(self, Probed out, Pipe p, Py_ssize_t batch, double now) except -1

    @cython.locals(pr=Probed, bs=Py_ssize_t)
    cpdef object largest_in_time(self, Probed first, double head_s, double now,
                                 Py_ssize_t least)

    @cython.locals(q=list, pipes=list, table=SlotTable, best=Probed, route=tuple,
                   top=tuple, head_dl=double,
                   p=Pipe, pr=Probed, head=double, least=Py_ssize_t, chosen=Probed,
                   n=Py_ssize_t, slack=double, at=double, taken=Py_ssize_t, names=list,
                   si=Py_ssize_t, keys=list, nk=Py_ssize_t,
                   blocks=list, route=tuple)
    cpdef void try_model(self, ModelQueue mq, object model, double now, list out,
                         bint plain=*) except *

    @cython.locals(has_x=bint, res=cython.int, first=Py_ssize_t, b=cython.longlong)
    cpdef bint correct(self, object bid, Py_ssize_t stage, double start_s, double end_s,
                       double xs, double xe, bint completed, bint last) except? -1
