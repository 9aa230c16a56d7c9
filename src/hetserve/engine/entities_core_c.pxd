# C types for entities_core.py when Cython compiles it (setup.py) as the module
# entities_core_c: Cython takes the .pxd named for the module it builds, so this file
# carries that name. The .py file is the source and runs as plain Python without this (its
# annotations are for readers and type checkers: ``annotation_typing=False`` at its top
# leaves the C types to this file). The entities and the link table are extension types
# with typed attributes (every one readable and writable from Python, as the executors,
# observers and tests use them); the compiled kernel (kernel_core_c.pxd) and recorder
# (sim/recorder_core_c.pxd) cimport them and read them as C structs. The host links' heap
# of DHA runs is a keyed heap (core/heaps_core_c.pxd).
import cython

from hetserve.core.heaps_core_c cimport EventHeap

cdef double _NAN
cdef Py_ssize_t _ROUTE_KEY


@cython.locals(most=Py_ssize_t, x=Py_ssize_t)
cdef Py_ssize_t _most(list busy, tuple path) except -1
@cython.locals(users=Py_ssize_t, u=Py_ssize_t, x=Py_ssize_t, y=Py_ssize_t)
cdef Py_ssize_t _users(list busy, list dha, tuple path, tuple own) except -1
@cython.locals(free_s=double, i=Py_ssize_t, j=Py_ssize_t, v=double)
cdef Py_ssize_t _earliest_lane(double[::1] free, Py_ssize_t o, Py_ssize_t k) noexcept

cdef class Task
cdef class Slot
cdef class Batch


@cython.final
cdef class Route:
    cdef public Py_ssize_t n
    cdef public double bw_gbps
    cdef public double delay_s
    cdef public long long[::1] at
    cdef public tuple path


@cython.final
cdef class LinkTable:
    cdef public object cluster
    cdef public bint record
    cdef public dict _lane_at
    cdef public dict _lane_n
    cdef public double[::1] free
    cdef public Py_ssize_t n_free
    cdef public dict _paths
    cdef public list _routes
    cdef public dict log
    cdef public double end_s

    cpdef dict lanes(self)

    @cython.locals(o=Py_ssize_t, k=Py_ssize_t, free="double[::1]", i=Py_ssize_t)
    cpdef Py_ssize_t _place(self, object name) except -1

    cpdef tuple path(self, object a, object b)

    @cython.locals(chosen=list, start=double, end=double, o=Py_ssize_t, i=Py_ssize_t,
                   free_s=double)
    cpdef tuple transfer(self, object path, double bw_gbps, double delay_s, double n_bytes,
                         double now)

    cpdef tuple send(self, object a, object b, double n_bytes, double now)

    @cython.locals(start=double)
    cpdef tuple send_between(self, Slot a, Slot b, double n_bytes, double now)

    @cython.locals(rows=list, row=list, route=Route, n=Py_ssize_t, q=Py_ssize_t,
                   start=double, end=double, free_s=double, o=Py_ssize_t, i=Py_ssize_t,
                   j=Py_ssize_t)
    cpdef double send_between_at(self, Slot a, Slot b, double n_bytes, double now) except? -1.0

    @cython.locals(rows=list, row=list, route=Route, at=list)
    cdef Route _route(self, Slot a, Slot b)


@cython.final
cdef class Slot:
    cdef public object id
    cdef public Py_ssize_t index
    cdef public object info
    cdef public object gpu
    cdef public object gpu_id
    cdef public str gpu_name
    cdef public Task running
    cdef public EventHeap ready
    cdef public list waiting
    cdef public bint lost

    cpdef list queued(self)


@cython.final
cdef class Batch:
    cdef public object _d
    cdef public object id
    cdef public object model
    cdef public object requests
    cdef public object _route
    cdef public Py_ssize_t rows
    cdef public Py_ssize_t stage
    cdef public double dispatch_s
    cdef public bint alive
    cdef public Task task
    cdef public object gone
    cdef public object payload
    cdef public Py_ssize_t nblocks
    cdef public list cuts


@cython.final
cdef class Task:
    cdef public Batch batch
    cdef public Task prev
    cdef public Py_ssize_t index
    cdef public object _step
    cdef public Slot worker
    cdef public Py_ssize_t version
    cdef public bint dead
    cdef public bint ran
    cdef public bint stop
    cdef public double start_s
    cdef public object run
    cdef public double xfer_start_s
    cdef public double xfer_end_s


@cython.final
cdef class HostLinks:
    cdef public object cluster
    cdef public list names
    cdef public dict _ids
    cdef public list busy
    cdef public dict _paths
    cdef public dict _routes
    cdef public list dha_busy
    cdef public EventHeap _until
    cdef public dict _cands
    cdef public dict _switch

    @cython.locals(until=EventHeap, dha=list, x=Py_ssize_t)
    cpdef void expire(self, double now) except *

    @cython.locals(path=tuple)
    cpdef tuple dha_factor(self, object gpu_id, double now, tuple own=*)

    @cython.locals(f=double, path=tuple)
    cpdef double dha_run(self, object gpu_id, double now, double dha_s,
                         tuple own=*) except? -1.0

    @cython.locals(dha=list, x=Py_ssize_t)
    cpdef void hold_until(self, tuple path, double end_s) except *

    @cython.locals(p=tuple, ids=list)
    cpdef tuple path(self, object gpu_id)

    @cython.locals(busy=list, path=tuple, p=tuple, links=list, scale=list, held=tuple,
                   x=Py_ssize_t, c=tuple)
    cpdef tuple take(self, object gpu_id, Py_ssize_t n_parts, object model, object now=*)

    @cython.locals(busy=list, x=Py_ssize_t)
    cpdef void release(self, tuple held) except *

    @cython.locals(cands=list, busy=list, ranked=list, c=tuple, e=tuple, out=list, best=tuple)
    cpdef list secondaries(self, object gpu_id, Py_ssize_t k, object model)

    @cython.locals(cands=list, busy=list, c=tuple, best=tuple, best_m=Py_ssize_t,
                   best_i=Py_ssize_t, m=Py_ssize_t, i=Py_ssize_t)
    cpdef tuple _secondary(self, object gpu_id)


cdef class ObserverCore:
    cpdef dispatched(self, Batch batch, Py_ssize_t first_block, double now)

    cpdef stage_ended(self, Task task, double now, object status, Py_ssize_t blocks_done)

    cpdef ended(self, object requests, object outcomes, object reason, double now,
                object outputs)


cdef class StageStarter:
    cpdef start(self, Task task, double now)


cpdef StageStarter starter_of(object executor)


@cython.final
cdef class ObserverCall(ObserverCore):
    cdef public object observer


cdef int _init_batch(Batch b, object d, object bid, object model, object requests,
                     object route, double now, Py_ssize_t rows) except -1

cpdef Batch new_batch(object d, object bid, object model, object requests, object route,
                      double now, Py_ssize_t rows)

cdef int _init_task(Task t, Batch batch, Py_ssize_t index, Slot worker) except -1

cpdef Task new_task(Batch batch, Py_ssize_t index, Slot worker)

cpdef void add_task(Batch batch, Task task) noexcept

@cython.locals(out=list, t=Task)
cpdef list tasks_of(Batch batch)
