# C types for deadlines_core.py when Cython compiles it (setup.py) as the module
# deadlines_core_c: Cython takes the .pxd named for the module it builds, so this file
# carries that name. The .py file is the source and runs as plain Python without this (its
# annotations are for readers and type checkers: ``annotation_typing=False`` at its top
# leaves the C types to this file). The held requests by deadline are an extension type
# with typed attributes (every one readable and writable from Python); its heaps are a keyed
# heap and an EventHeap (core/heaps_core_c.pxd), its FIFOs deques; a request's deadline is
# read as its tuple item (core/records_c.pxd).
import cython

from hetserve.core.heaps_core_c cimport EventHeap, pop, push
from hetserve.core.records_c cimport REQUEST_DEADLINE_S, field

cdef double _INF


cdef double _deadline_s(object r) except? -1.0


@cython.final
cdef class Deadlines:
    cdef public dict fifos
    cdef public dict last_s
    cdef public EventHeap heads
    cdef public list heap

    @cython.locals(d=double)
    cpdef int add(self, object r) except -1

    cpdef int again(self, object r) except -1

    cpdef object fifo(self, object stream)

    cpdef int head(self, object q, double deadline_s) except -1

    @cython.locals(out=dict, heads=EventHeap, heap=list, hd=dict, d=double)
    cpdef list due(self, double now, object held)

    @cython.locals(heap=list, heads=EventHeap, first=double, d=double, d_r=double, hd=dict)
    cpdef double first_s(self, object held) except? -1.0

    cpdef void clear(self) except *
