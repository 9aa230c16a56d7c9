# C types for reservation_core.py when Cython compiles it (setup.py) as the module
# reservation_core_c: Cython takes the .pxd named for the module it builds, so this file
# carries that name. The .py file is the source and runs as plain Python without this
# (its annotations are for readers and type checkers: ``annotation_typing=False`` at its
# top leaves the C types to this file). Floats are C doubles, the classes are extension
# types with typed attributes; lists, dicts and tuples stay Python objects.
import cython

from hetserve.core.heaps_core_c cimport pop, pop_edf, push

cdef double _EPS
cdef double _NEG_INF
cdef object _NO_TAG
cdef tuple _NO_XFER

cdef class Probed


cdef class PoolOrder:
    cdef public Py_ssize_t n
    cdef public double[::1] front_t
    cdef public long long[::1] front_w
    cdef public double[::1] solid_t
    cdef public long long[::1] solid_w
    cdef public double min_gap


@cython.locals(lo=Py_ssize_t, hi=Py_ssize_t, mid=Py_ssize_t, u=double)
cdef Py_ssize_t _at(double[::1] ts, long long[::1] ws, Py_ssize_t n, double t,
                    Py_ssize_t w) except -1

@cython.locals(i=Py_ssize_t, j=Py_ssize_t)
cdef void _move(double[::1] ts, long long[::1] ws, Py_ssize_t n, double old_t, Py_ssize_t w,
                double new_t) except *


@cython.final
cdef class Lane:
    cdef public double[::1] s
    cdef public double[::1] e
    cdef public list tags
    cdef public Py_ssize_t lo
    cdef public Py_ssize_t hi

    @cython.locals(e="double[::1]", tags=list, lo=Py_ssize_t, hi=Py_ssize_t)
    cpdef void drop_past(self, double now) except *

    @cython.locals(cap=Py_ssize_t, lo=Py_ssize_t, n=Py_ssize_t, s="double[::1]",
                   e="double[::1]", tags=list, i=Py_ssize_t, s2="double[::1]",
                   e2="double[::1]")
    cpdef void room(self) except *

    @cython.locals(s="double[::1]", e="double[::1]", tags=list, lo=Py_ssize_t,
                   hi=Py_ssize_t, a=Py_ssize_t, b=Py_ssize_t, mid=Py_ssize_t, u=double,
                   v=double, i=Py_ssize_t)
    cpdef void insort(self, double start, double end, object tag) except *

    @cython.locals(s="double[::1]", e="double[::1]", tags=list, hi=Py_ssize_t,
                   j=Py_ssize_t, i=Py_ssize_t, x=object)
    cpdef void keep(self, object tag, double t) except *

    cpdef list intervals(self)


cdef class SlotTable:
    cdef public list lanes
    cdef public Py_ssize_t n
    cdef public double[::1] front
    cdef public double[::1] solid
    cdef public double[::1] min_gap
    cdef public list orders_of
    cdef public double now

    cpdef list intervals(self, Py_ssize_t r)

    cpdef void set_min_gap(self, Py_ssize_t r, double gap_s) except *

    @cython.locals(order=PoolOrder)
    cpdef void _moved(self, Py_ssize_t r, double old_f, double old_s, double new_f,
                      double new_s) except *

    @cython.locals(lane=Lane, old_f=double, old_s=double, lo=Py_ssize_t, hi=Py_ssize_t,
                   run_s=double, run_e=double, s="double[::1]", e="double[::1]",
                   usable=double, i=Py_ssize_t, a=double, b=double)
    cpdef void update(self, Py_ssize_t r) except *

    @cython.locals(f=double)
    cpdef double slot(self, Py_ssize_t r, double t, double duration) except? -1.0

    @cython.locals(lane=Lane, s="double[::1]", e="double[::1]", start=double,
                   i=Py_ssize_t, b=double)
    cpdef double scan(self, Py_ssize_t r, double t, double duration) except? -1.0

    @cython.locals(start=double, s=double, moved=bint, r=Py_ssize_t)
    cpdef double earliest_slot(self, rs, double t, double duration) except? -1.0

    @cython.locals(lane=Lane, f=double, hi=Py_ssize_t, old_s=double, new_s=double,
                   new_f=double)
    cpdef void add(self, Py_ssize_t r, double start, double end, object tag) except *

    @cython.locals(lane=Lane)
    cpdef void remove(self, Py_ssize_t r, object tag) except *

    @cython.locals(lane=Lane)
    cpdef void replace(self, Py_ssize_t r, object tag, double start, double end) except *

    @cython.locals(delay=double, changed=bint, x=tuple, r=Py_ssize_t, start=double,
                   dur=double, a=double, b=double, shifted=list, st=Py_ssize_t)
    cpdef tuple correct(self, object bid, list entries, Py_ssize_t stage, Py_ssize_t worker,
                        double start_s, double end_s, double x_start_s, double x_end_s,
                        bint has_transfer, bint completed, bint last)

    @cython.locals(entries=list, stage=Py_ssize_t, r=Py_ssize_t, start=double, dur=double,
                   path_w="long long[::1]", k=Py_ssize_t)
    cpdef list reserve(self, object bid, Probed pr)


@cython.locals(front="double[::1]", solid="double[::1]", min_gap="double[::1]", t_g=double,
               last=Py_ssize_t, path_w="long long[::1]", start_s="double[::1]", busy=double,
               min_inv=double, min_delay=double, xs=dict, si=Py_ssize_t, st=tuple, l_i=double, bits=double,
               order=PoolOrder, t_lb=double, hit=tuple, best_t=double, best_w=Py_ssize_t,
               best_s=double, best_tl=double, best_ln=double, best_links=tuple,
               n_w=Py_ssize_t, solid_t="double[::1]", k0=Py_ssize_t, hi=Py_ssize_t,
               mid=Py_ssize_t, all_inf=bint, j=Py_ssize_t, f_w=double,
               w=Py_ssize_t, xf=tuple, links=tuple, l_n=double, tl=double, arr=double,
               f=double, s=double, lk=Py_ssize_t)
cpdef void probe(SlotTable table, list info, list xfers, object miss, set lost, double now,
                 Probed out) except *


cdef class Pipe:
    cdef public Py_ssize_t bs
    cdef public list blocks
    cdef public dict infos
    cdef public object info_of
    cdef public list xfers
    cdef public object miss
    cdef public Probed first
    cdef public Probed other


cdef class Probed:
    cdef public Pipe pipe
    cdef public Py_ssize_t batch
    cdef public Py_ssize_t n_stages
    cdef public long long[::1] path_w
    cdef public double[::1] start_s
    cdef public Py_ssize_t n_resv
    cdef public long long[::1] resv_r
    cdef public double[::1] resv_t
    cdef public double[::1] resv_d
    cdef public double finish_s
    cdef public double wait_s

    @cython.locals(k=Py_ssize_t, rr="long long[::1]", tt="double[::1]", dd="double[::1]",
                   i=Py_ssize_t)
    cpdef void add_resv(self, Py_ssize_t r, double start, double dur) except *


cdef class Algorithm1:
    cdef public SlotTable table
    cdef public list names
    cdef public dict ids
    cdef public set lost
    cdef public double margin_s
    cdef public dict pipes
    cdef public object queue
    cdef public dict queues
    cdef public dict rows
    cdef public dict timer_at
    cdef public dict batch_resv
    cdef public dict batch_route
    cdef public object next_batch

    @cython.locals(q=list)
    cpdef list on_arrival(self, object request, double now)

    cpdef list on_timer(self, object token, double now)

    @cython.locals(changed=bint, out=list)
    cpdef list on_stage_done(self, object report, double now)

    @cython.locals(pr=Probed)
    cpdef Probed probe(self, Pipe p, Py_ssize_t batch, double now)

    @cython.locals(info=list)
    cpdef void probe_into(self, Probed out, Pipe p, Py_ssize_t batch, double now) except *

    @cython.locals(pr=Probed, bs=Py_ssize_t)
    cpdef object largest_in_time(self, Probed first, double head_s, double now,
                                 Py_ssize_t least)

    @cython.locals(q=list, pipes=list, table=SlotTable, rows=dict, firsts=list, best=Probed,
                   p=Pipe, pr=Probed, head=double, least=Py_ssize_t, chosen=Probed,
                   n=Py_ssize_t, slack=double, at=double, taken=Py_ssize_t, names=list,
                   starts="double[::1]", path_w="long long[::1]", si=Py_ssize_t,
                   blocks=list, route=tuple)
    cpdef void try_model(self, object model, double now, list out) except *

    @cython.locals(entries=list, has_x=bint, changed=bint)
    cpdef bint correct(self, object r) except? -1
