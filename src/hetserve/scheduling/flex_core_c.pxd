# C types for flex_core.py when Cython compiles it (setup.py) as the module flex_core_c:
# Cython takes the .pxd named for the module it builds, so this file carries that name.
# The .py file is the source and runs as plain Python without this (its annotations are
# for readers and type checkers: ``annotation_typing=False`` at its top leaves the C types
# to this file). A model's queue, a worker, an idle set and a waiting set are extension
# types with typed attributes (every one readable and writable from Python, as ``nexus``
# and the tests use them); the per-decision steps are functions with typed arguments (C
# calls from the schedulers' methods, which stay those of Python classes: their base is
# one, and ``nexus`` and the tests subclass them). An idle set (words of 64 bits) and the
# queues (keyed heaps) are core/heaps_core_c.pxd's.
import cython

from hetserve.core.heaps_core_c cimport IdleSet, bisect_s, pop, pop_edf, push
from hetserve.core.records_c cimport (
    REQUEST_DEADLINE_S, REQUEST_ID, REQUEST_ROWS, field, record, record4,
)

cdef double _INF


@cython.final
cdef class _Waiting:
    cdef public bint lazy
    cdef public list order
    cdef public bytearray has

    @cython.locals(k=Py_ssize_t)
    cpdef void add(self, Py_ssize_t i) except *


cdef class GroupWorker


@cython.final
cdef class ModelQueue:
    cdef public object name
    cdef public tuple blocks
    cdef public list queue
    cdef public Py_ssize_t rows
    cdef public list workers
    cdef public double fastest_1
    cdef public IdleSet idle
    cdef public list waiting_in
    cdef public list lat_of
    cdef public double[::1] lat_c
    cdef public long long[::1] lat_at
    cdef public long long[::1] lat_len

    @cython.locals(s=_Waiting, i=Py_ssize_t)
    cpdef void push(self, object r) except *

    @cython.locals(best=double, w=GroupWorker, lat=list)
    cpdef double fastest(self, Py_ssize_t rows) except? -1.0


@cython.final
cdef class GroupWorker:
    cdef public object id
    cdef public list models
    cdef public dict lat
    cdef public Py_ssize_t kind
    cdef public Py_ssize_t bid
    cdef public Py_ssize_t size
    cdef public double start
    cdef public double end
    cdef public double block_s
    cdef public bint lost
    cdef public list idle_in
    cdef public _Waiting waiting

    @cython.locals(s=IdleSet)
    cpdef void set_busy(self) except *

    @cython.locals(s=IdleSet)
    cpdef void set_idle(self) except *


@cython.locals(w=GroupWorker)
cpdef void join(ModelQueue st, dict workers, object wid, list lat, Py_ssize_t kind=*) except *


@cython.locals(k=Py_ssize_t, got=object)
cdef list _lat(GroupWorker w, ModelQueue st)

@cython.locals(n=Py_ssize_t, k=Py_ssize_t, i=Py_ssize_t)
cdef void _add_table(ModelQueue st, Py_ssize_t kind, list lat) except *

@cython.locals(q=list, d=double, rows=Py_ssize_t, need=double)
cpdef void prune(ModelQueue st, double now, list out, Py_ssize_t max_batch) except *

@cython.locals(q=list, b=Py_ssize_t, n=Py_ssize_t, x=double, k=Py_ssize_t, lo=Py_ssize_t,
               hi=Py_ssize_t, mid=Py_ssize_t, base=Py_ssize_t)
cpdef Py_ssize_t fit(GroupWorker w, ModelQueue st, double now) except -1

@cython.locals(best=ModelQueue, best_b=Py_ssize_t, best_d=double, st=ModelQueue,
               b=Py_ssize_t, d=double, models=list, waiting=_Waiting, lazy=bint,
               order=list, n=Py_ssize_t, k=Py_ssize_t, i=Py_ssize_t)
cpdef tuple largest_batch(GroupWorker w, double now, list out, bint by_deadline,
                          Py_ssize_t max_batch)

@cython.locals(best=ModelQueue, best_b=Py_ssize_t, best_d=double, st=ModelQueue,
               b=Py_ssize_t, models=list, waiting=_Waiting, lazy=bint, order=list,
               n=Py_ssize_t, k=Py_ssize_t, i=Py_ssize_t)
cpdef tuple earliest_batch(GroupWorker w, double now, list out, Py_ssize_t max_batch)

@cython.locals(t=double, k=Py_ssize_t)
cpdef object start_batch(GroupWorker w, ModelQueue st, Py_ssize_t b, double now,
                         Py_ssize_t bid)

@cython.locals(st=ModelQueue, b=Py_ssize_t, bid=Py_ssize_t)
cpdef void run_free(object sched, GroupWorker w, double now, list out, int kind,
                    bint by_deadline, Py_ssize_t max_batch, dict of_batch) except *

@cython.locals(q=list, ws=list, idle=IdleSet, i=Py_ssize_t)
cpdef void idle_first(object sched, ModelQueue st, double now, list out, int kind,
                      bint by_deadline, Py_ssize_t max_batch, dict of_batch) except *
