# C types for kernel_core.py when Cython compiles it (setup.py) as the module
# kernel_core_c: Cython takes the .pxd named for the module it builds, so this file carries
# that name. The .py file is the source and runs as plain Python without this (its
# annotations are for readers and type checkers: ``annotation_typing=False`` at its top
# leaves the C types to this file). The kernel is an extension type with typed attributes
# (every one readable and writable from Python, as the executors and tests use them); the
# entities and the link table come typed from their own build (entities_core_c.pxd), so
# the kernel reads them as C structs and calls the link table in C (the deadline watch
# likewise, deadlines_core_c.pxd); the per-request
# methods are ``cpdef`` (C calls inside the kernel, Python methods outside it); lists,
# dicts and tuples stay Python objects.
import cython

from hetserve.core.heaps_core_c cimport EventHeap, IdMap
from hetserve.core.records_c cimport (
    LOAD_BLOCKS, LOAD_MODEL, LOAD_WORKER, REQUEST_ID, REQUEST_MODEL, STEP_BLOCKS,
    STEP_PLANNED_START_S, STEP_STAGE, STEP_WORKER, field, fields, record, record7,
    record15,
)
from hetserve.engine.deadlines_core_c cimport Deadlines
from hetserve.engine.entities_core_c cimport (
    Batch, LinkTable, ObserverCore, Slot, StageStarter, Task, add_task, new_batch, new_task,
    starter_of, tasks_of,
)
from hetserve.scheduling.policy_core_c cimport PolicyCore, core_of, timer_core_of

cdef object _NO_PARTS
cdef double _NAN


cpdef Py_ssize_t check_dispatch(object d, dict nblocks, dict workers, object live,
                                list slots) except -1

@cython.locals(route=object, pos=Py_ssize_t, s0=Py_ssize_t, k=Py_ssize_t,
               first=Py_ssize_t, stage_c=Py_ssize_t, b0_c=Py_ssize_t, b1_c=Py_ssize_t,
               bad=bint, rt=tuple, bt=tuple, nb_c=Py_ssize_t, pos_c=Py_ssize_t, ws=Slot,
               rq=tuple, empty=bint, used=bint, lm=IdMap)
cpdef Py_ssize_t check_dispatch_nb(object d, object nb, dict workers, object live,
                                   list slots) except -1


@cython.final
cdef class Kernel:
    cdef public object view
    cdef public object plan
    cdef public object scheduler
    cdef public object executor
    cdef public object clock
    cdef public object _observer
    cdef public ObserverCore _obs
    cdef public object links
    cdef public bint strict
    cdef public dict workers
    cdef public list _slots
    cdef public set retired
    cdef public dict nblocks
    cdef public IdMap batches
    cdef public dict held
    cdef public object _fresh
    cdef public Py_ssize_t _fresh_id
    cdef public bint _fresh_held
    cdef public object open
    cdef public dict parked
    cdef public dict payloads
    cdef public set gone
    cdef public Deadlines deadlines
    cdef public double _expiry_s
    cdef public object _ask
    cdef public object _apply
    cdef public object _on_arrival
    cdef public object _on_stage_done
    cdef public PolicyCore _core
    cdef public PolicyCore _tcore
    cdef public object _exec_start
    cdef public StageStarter _starter
    cdef public bint _unit
    cdef public bint _rebound
    cdef public object _timer_cb
    cdef public object _expire_cb
    cdef public object _arrived_cb
    cdef public object stage_done_at_cb
    cdef public bint _reported
    cdef public bint _outputs
    cdef public EventHeap _heap
    cdef public dict _out_bytes
    cdef public dict _models
    cdef public double _cut_factor

    cpdef double _cut_bytes(self, object model, Py_ssize_t after_block,
                            Py_ssize_t rows) except? -1.0

    @cython.locals(per=list)
    cpdef list _cuts(self, object model)

    @cython.locals(out=double)
    cpdef double _cut_bytes_in(self, list per, object model, Py_ssize_t after_block,
                               Py_ssize_t rows) except? -1.0

    @cython.locals(clock=object, heap=EventHeap, held=dict, n=Py_ssize_t, i=Py_ssize_t,
                   now=double, last=double, t=double, task=Task, t_next=double, rid=object,
                   core=PolicyCore, tcore=PolicyCore, models_l=list, streams_l=list,
                   deadlines_a="double[::1]", times_a="double[::1]", t_obj=object,
                   dl_obj=object, stream=object, dl=Deadlines, fifos=dict,
                   kept=bint)
    cpdef double run(self, models, streams, deadlines_s, times, double horizon) except? -1.0

    @cython.locals(w=Slot, b=Batch, ntask=Task, nw=Slot, last=bint, held=dict,
                   parked=dict, end_block=Py_ssize_t, links=LinkTable, now_s=object,
                   blk0=Py_ssize_t, blk1=Py_ssize_t, core=PolicyCore,
                   nbytes=double, x0=double)
    cpdef stage_done(self, Task task, double now, object output=*)

    cpdef stage_done_at(self, Task task, object version, double now)

    @cython.locals(w=Slot, core=PolicyCore)
    cpdef load_finished(self, object a, double start_s, double now, bint ok=*, object reason=*)

    @cython.locals(tcore=PolicyCore)
    cpdef _timer(self, object token, double at_s, double now)

    @cython.locals(t=double, held=dict)
    cpdef bint _expire(self, object _, double at_s, double now) except? -1

    cpdef int _at(self, double t, object fn, object a, object b) except -1

    cpdef _watch(self, object r, bint again=*)

    cpdef _apply_strict(self, object actions, double now)

    cpdef _apply_core(self, list actions, double now)

    @cython.locals(at=double)
    cdef _take(self, object a, double now, bint plain)

    cdef Slot _slot(self, object worker)

    cdef void _hold_fresh(self) except *

    cpdef _act(self, object a, double now)

    @cython.locals(nb=object, blocks=object)
    cpdef _check_load(self, object a)

    @cython.locals(held=dict, parked=dict, first=Py_ssize_t, k=Py_ssize_t, trim=bint,
                   b=Batch, task=Task, blk=Py_ssize_t, mi=tuple, nb=object)
    cpdef _dispatch(self, object d, double now)

    cpdef _transfer(self, Task task, tuple span, double now)

    cpdef int _transfer_s(self, Task task, double start_s, double end_s, double now) except -1

    cpdef _arrived(self, Task task, object _, double now)

    @cython.locals(w=Slot)
    cpdef _input_arrived(self, Task task, double now)

    @cython.locals(task=Task)
    @cython.locals(ready=EventHeap)
    cpdef _try_start(self, Slot w, double now)

    @cython.locals(starter=StageStarter)
    cpdef _start(self, Slot w, Task task, double now)

    cpdef _close(self, object requests, bint check=*)

    cpdef _end(self, object requests, int outcome, object reason, double now, bint check=*)


cpdef tuple _live(Batch b)
