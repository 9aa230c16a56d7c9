# C types for modelled_core.py when Cython compiles it (setup.py) as the module
# modelled_core_c: Cython takes the .pxd named for the module it builds, so this file
# carries that name. The .py file is the source and runs as plain Python without this (its
# annotations are for readers and type checkers: ``annotation_typing=False`` at its top
# leaves the C types to this file). A worker's memory, the residency, the stage start and
# the loads are extension types with typed attributes (every one readable and writable
# from Python); the entities and the host links come typed from their own build
# (entities_core_c.pxd); the executor stays a Python class (its base is one), its methods
# compiled; block masks stay Python integers (a model may have more blocks than a C
# integer has bits).
import cython

from hetserve.core.heaps_core_c cimport EventHeap
from hetserve.core.records_c cimport (
    LOAD_BLOCKS,
    LOAD_MODEL,
    LOAD_WAIT,
    LOAD_WORKER,
    STEP_BLOCKS,
    field,
)
from hetserve.engine.entities_core_c cimport Batch, HostLinks, Slot, StageStarter, Task


cdef class Held:
    cdef public str gpu_name
    cdef public double mem_cap
    cdef public double mem_used
    cdef public dict resident
    cdef public list res_at
    cdef public dict loading
    cdef public dict cold
    cdef public dict waits
    cdef public dict streams
    cdef public object held_res
    cdef public object held_m


@cython.final
cdef class RunTerms:
    cdef public Py_ssize_t share
    cdef public Py_ssize_t batch
    cdef public double total_s
    cdef public double peak_s
    cdef public bint pipelined
    cdef public double load_done_s


@cython.final
cdef class Residency:
    cdef public object cluster
    cdef public object latency
    cdef public object _graphs
    cdef public bint _graph_blocks
    cdef public dict _bytes_cache
    cdef public dict _mask_bytes
    cdef public object cold_model
    cdef public HostLinks host_links
    cdef public dict model_ix

    @cython.locals(ix=Py_ssize_t)
    cpdef Py_ssize_t ix_of(self, object model) except -1

    @cython.locals(ix=Py_ssize_t, at=list)
    cpdef void set_resident(self, Held h, object model, object mask) except *

    @cython.locals(per=dict, bb=list, total=double, i=Py_ssize_t, bits=str, top=Py_ssize_t)
    cpdef double bytes_of(self, object model, object mask) except? -1.0

    @cython.locals(h=Held, resident=dict, whole=double, ix=Py_ssize_t, at=list,
                   n_models=Py_ssize_t)
    cpdef void warm_start(self, object plan, object placement, dict held) except *

    cdef public dict _parts
    cdef public dict _timelines
    cdef public dict _canon

    cpdef object canonical(self, object model)

    @cython.locals(scale=list, links=tuple, hit=tuple)
    cpdef double take_host_links(self, object gpu_id, object gpu, Held h, object model,
                                 double now) except? -1.0

    @cython.locals(cold=tuple, t=RunTerms, share=Py_ssize_t, offset_s=double, end=double)
    cpdef double cold_run_s(self, Held h, object info, object model, Py_ssize_t batch,
                            double now) except? -1.0

    @cython.locals(cold=tuple, f=double, ratio=double, last=double)
    cpdef tuple dha_contention(self, Held h, object gpu_id, object model, double dha,
                               tuple cum, double energy, double now)

    @cython.locals(cold=tuple)
    cpdef void loaded(self, Held h, object model, object new) except *

    cpdef void evict(self, Held h, object model, object blocks) except *


@cython.final
cdef class LastRun:
    cdef public object model
    cdef public Py_ssize_t b0
    cdef public Py_ssize_t b1
    cdef public Py_ssize_t ix
    cdef public list row


cdef class ModelledStart(StageStarter):
    cdef public object ex
    cdef public object kernel
    cdef public dict runs
    cdef public dict held
    cdef public list held_at
    cdef public double overhead_s
    cdef public bint jitter_on
    cdef public EventHeap heap
    cdef public object call_at
    cdef public object done_at
    cdef public Residency residency
    cdef public dict rows
    cdef public dict model_ids
    cdef public dict canon_ids
    cdef public dict kinds
    cdef public list kind_of
    cdef public list last_at

    @cython.locals(b=Batch, w=Slot, n=Py_ssize_t, energy=object, dha=double, j=double,
                   extra=double, h=Held, dur=double, b0=Py_ssize_t, b1=Py_ssize_t,
                   hit=tuple, wi=Py_ssize_t, end_s=double, held_at=list, last=LastRun,
                   last_at=list, plain=bint, ix=Py_ssize_t, at=list, row=list,
                   blocks=tuple)
    cpdef start(self, Task task, double now)

    @cython.locals(mi=Py_ssize_t, fast=Py_ssize_t, row=list, kind_of=list, k=Py_ssize_t,
                   last_at=list, last=LastRun)
    cdef tuple _run_of(self, object model, Slot w, Py_ssize_t wi, Py_ssize_t n,
                       object blocks, Py_ssize_t b0, Py_ssize_t b1)

    @cython.locals(hit=tuple)
    cdef tuple _run_in(self, list row, object model, Slot w, Py_ssize_t n, object blocks)

    @cython.locals(k=Py_ssize_t, kind_of=list)
    cdef Py_ssize_t _kind(self, Slot w) except -1


@cython.final
cdef class ModelledLoads:
    cdef public object kernel
    cdef public dict held
    cdef public dict infos
    cdef public Residency residency
    cdef public object links
    cdef public object view
    cdef public EventHeap heap
    cdef public object call_at
    cdef public object loaded_cb

    cpdef void _at(self, double t, object a, tuple info) except *

    @cython.locals(h=Held, res=Residency, nbytes=double)
    cpdef load(self, object a, double now)

    @cython.locals(h=Held, res=Residency, nbytes=double, end=double, t0=double, t1=double,
                   done=double)
    cpdef begin(self, object a, object new, double now)

    @cython.locals(h=Held)
    cpdef loaded(self, object a, tuple info, double now)

    @cython.locals(h=Held)
    cpdef evict(self, object a, double now)
