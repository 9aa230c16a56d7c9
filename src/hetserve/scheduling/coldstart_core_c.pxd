# C types for coldstart_core.py when Cython compiles it (setup.py) as the module
# coldstart_core_c: Cython takes the .pxd named for the module it builds, so this file
# carries that name. The .py file is the source and runs as plain Python without this (its
# annotations are for readers and type checkers: ``annotation_typing=False`` at its top
# leaves the C types to this file). The scheduler's core is an extension type with typed
# attributes (every one readable and writable from Python, as a test's subclass uses
# them) and ``cpdef`` methods (C calls inside the core; a Python subclass may override
# them); the registered scheduler stays a Python class (its base is one, and the
# registry wraps its constructor). Dicts, lists and deques stay Python objects.
import cython

from hetserve.core.records_c cimport (
    REQUEST_DEADLINE_S,
    REQUEST_ID,
    REQUEST_MODEL,
    REQUEST_ROWS,
    field,
    record,
    record4,
)
from hetserve.scheduling.policy_core_c cimport PolicyCore


@cython.final
cdef class GpuState:
    cdef public object id
    cdef public str gpu_name
    cdef public double cap
    cdef public double used
    cdef public dict resident
    cdef public dict loading
    cdef public list queue
    cdef public object running
    cdef public object running_model
    cdef public double busy_until
    cdef public double queued_s
    cdef public dict warm1
    cdef public dict nbytes
    cdef public object last_m
    cdef public double last_warm1


@cython.locals(bu=double)
cdef inline double _backlog_s(GpuState g, double now)


cdef class ColdStartCore(PolicyCore):
    cdef public object view
    cdef public object plan
    cdef public Py_ssize_t max_batch
    cdef public double reserve_b
    cdef public Py_ssize_t n_cold
    cdef public Py_ssize_t n_loads
    cdef public Py_ssize_t n_evictions
    cdef public Py_ssize_t n_requests
    cdef public list cold_ids
    cdef public Py_ssize_t next_batch
    cdef public list workers
    cdef public dict gpus
    cdef public dict resident
    cdef public dict loading
    cdef public dict queue
    cdef public set lost
    cdef public list live
    cdef public dict where
    cdef public dict _warm
    cdef public object pending
    cdef public dict _span
    cdef public object cold
    cdef public dict _canon
    cdef public dict _cold_by

    cpdef object _canonical(self, object model)

    cpdef Py_ssize_t new_batch_id(self) except -1

    cpdef double instance_bytes(self, object model, object w) except? -1.0

    @cython.locals(per=dict)
    cpdef double _bytes_on(self, GpuState g, object model) except? -1.0

    cpdef double _cold_s(self, object model) except? -1.0

    @cython.locals(key=tuple)
    cpdef double _warm_s(self, object model, object w, Py_ssize_t batch=*) except? -1.0

    @cython.locals(per=dict)
    cpdef double _warm1_on(self, GpuState g, object model) except? -1.0

    @cython.locals(gpus=dict)
    cpdef list _by_backlog(self, object ws, double now)

    @cython.locals(gpus=dict, s=double, best_s=double)
    cpdef object _least_backlog(self, object ws, double now)

    @cython.locals(left=double, rows=Py_ssize_t)
    cpdef void _dequeue(self, GpuState g, object r) except *

    cpdef object _load(self, GpuState g, object model, double now)

    @cython.locals(need=double, free=double, busy=set, victims=list)
    cpdef bint _make_room(self, GpuState g, object model, list out) except -1

    @cython.locals(g=GpuState, rows=Py_ssize_t, holders=set, live=list)
    cpdef bint _route(self, object r, double now, list out) except -1

    @cython.locals(finish=double)
    cpdef void _next(self, GpuState g, double now, list out) except *

    @cython.locals(finish=double)
    cpdef double _finish_s(self, GpuState g, object m, Py_ssize_t n, double now) except? -1.0

    @cython.locals(take=list, n=Py_ssize_t, cap=Py_ssize_t, finish=double, late=list)
    cpdef tuple _take(self, GpuState g, object q, object m, double now, list out)

    @cython.locals(n=Py_ssize_t)
    cpdef void _retry_pending(self, double now, list out) except *

    @cython.locals(out=list)
    cpdef list on_arrival(self, object request, double now)

    @cython.locals(out=list, g=GpuState)
    cpdef list stage_report(self, object kind, object batch_id, object model, Py_ssize_t stage,
                            object worker, double start_s, double end_s, object requests,
                            bint completed, bint last, object reason, object blocks,
                            Py_ssize_t blocks_done, double transfer_start_s,
                            double transfer_end_s, double now)
