# C types for edf_adaptive_core.py when Cython compiles it (setup.py) as the module
# edf_adaptive_core_c: Cython takes the .pxd named for the module it builds, so this file
# carries that name. The .py file is the source and runs as plain Python without this (its
# annotations are for readers and type checkers: ``annotation_typing=False`` at its top
# leaves the C types to this file). A model's state and a group of models are extension
# types with typed attributes (every one readable and writable from Python); a try is a
# function with typed arguments (a C call from the scheduler's methods, which stay those
# of a Python class: its base is one, and the tests subclass it). A group's idle set (words
# of 64 bits) and the queues (keyed heaps) are core/heaps_core_c.pxd's.
import cython

from hetserve.core.heaps_core_c cimport EventHeap, IdleSet, bisect_s, pop, pop_edf, push
from hetserve.core.records_c cimport (
    REQUEST_DEADLINE_S, REQUEST_ID, REQUEST_ROWS, field, record, record2, record4,
)


@cython.final
cdef class _Group:
    cdef public IdleSet idle
    cdef public bint indexed
    cdef public list models
    cdef public list part
    cdef public dict heaps
    cdef public list unsettled
    cdef public Py_ssize_t p0


@cython.final
cdef class _ModelState:
    cdef public object name
    cdef public Py_ssize_t index
    cdef public _Group group
    cdef public list workers
    cdef public list lat
    cdef public list kind
    cdef public list queue
    cdef public Py_ssize_t rows
    cdef public tuple blocks
    cdef public double timer_at
    cdef public Py_ssize_t waiting
    cdef public Py_ssize_t stamp
    cdef public Py_ssize_t listed
    cdef public Py_ssize_t mark


@cython.final
cdef class _Tries:
    cdef public EventHeap heap
    cdef public Py_ssize_t mark
    cdef public Py_ssize_t n_models
    cdef public dict served_by
    cdef public object try_one
    cdef public object still_waits


cdef Py_ssize_t UNLISTED
cdef Py_ssize_t LISTED
cdef Py_ssize_t SETTLED


cpdef void unsettle(_Group g, _ModelState st) except *


cpdef void add_try(EventHeap heap, _ModelState st, Py_ssize_t k, Py_ssize_t n_models,
                   Py_ssize_t mark) except *


@cython.locals(q=list, g=_Group, rank=Py_ssize_t, lat=list, head_deadline=double,
               slack=double, n=Py_ssize_t, unit=bint, k=Py_ssize_t, b_max=Py_ssize_t,
               t_wait=double, b=Py_ssize_t, h=EventHeap)
cpdef void try_model(object sched, _ModelState st, double now, list out,
                     double margin_s) except *


@cython.locals(st=_ModelState, stamp=Py_ssize_t)
cpdef void take_due(_Group g, EventHeap h, double now, Py_ssize_t k, EventHeap heap,
                    Py_ssize_t n_models, Py_ssize_t mark) except *


@cython.locals(idle=IdleSet, p0=Py_ssize_t, st=_ModelState, h=EventHeap, p=Py_ssize_t,
               listed=list, n=Py_ssize_t, i=Py_ssize_t, j=Py_ssize_t, entries=list, live=list)
cpdef void gather(_Group g, Py_ssize_t k, double now, EventHeap heap, Py_ssize_t n_models,
                  Py_ssize_t mark) except *


@cython.locals(first=dict, served_by=dict, heap=EventHeap, mark=Py_ssize_t, m=Py_ssize_t, indexed=bint,
               g=_Group, k=Py_ssize_t, r=Py_ssize_t, st=_ModelState, t=double,
               seq=cython.longlong, n0=Py_ssize_t, i=Py_ssize_t, g2=_Group)
cpdef void try_freed(_Tries tr, object freed, _ModelState again, double now,
                     list out) except *


@cython.locals(idle=IdleSet, p=Py_ssize_t, h=EventHeap, m=Py_ssize_t,
               st=_ModelState, d=double)
cpdef void repartitioned(_Tries tr, _Group g, Py_ssize_t k, double t, long long seq) except *
