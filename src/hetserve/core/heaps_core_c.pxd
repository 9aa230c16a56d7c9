# C types for heaps_core.py when Cython compiles it (setup.py) as the module heaps_core_c:
# Cython takes the .pxd named for the module it builds, so this file carries that name. The
# .py file is the source and runs as plain Python without this. An entry's first key is a
# C double, its second a C integer; the functions are ``cpdef`` (C calls from the other
# builds that ``cimport`` them, Python functions for everyone else).
import cython

from hetserve.core.records_c cimport id_fits, pop_last, put, take

cdef bint COMPILED
cdef object _heappush
cdef object _heappop


@cython.locals(x=double, y=double, i=Py_ssize_t, j=Py_ssize_t)
cdef bint _lt(tuple a, tuple b) except -1

@cython.locals(item=tuple, parent=tuple, parent_pos=Py_ssize_t)
cdef void _sift_down(list heap, Py_ssize_t start, Py_ssize_t pos) except *

@cython.locals(end=Py_ssize_t, start=Py_ssize_t, item=tuple, child=Py_ssize_t,
               right=Py_ssize_t)
cdef void _sift_up(list heap, Py_ssize_t pos) except *

cpdef void push(list heap, tuple item) except *

@cython.locals(last=object, top=object)
cpdef object pop(list heap)

cpdef tuple pop_first(list q, Py_ssize_t k)

@cython.locals(k=Py_ssize_t, out=list, n=Py_ssize_t)
cpdef tuple pop_edf(list q, Py_ssize_t limit, Py_ssize_t queued_rows=*)

@cython.locals(lo=Py_ssize_t, hi=Py_ssize_t, mid=Py_ssize_t)
cpdef Py_ssize_t bisect_s(list lat, double x) except -1

cdef double _INF
cdef Py_ssize_t FIRST_ROOM
cdef unsigned long long[::1] _NO_WORDS
cdef long long[::1] _NO_LONGS
cdef long long SEQ_LIMIT
cdef Py_ssize_t SLOT_BITS
cdef Py_ssize_t SLOT_LIMIT
cdef unsigned long long _SLOT_MASK
cdef unsigned long long _ONE
cdef unsigned long long _ALL
cdef unsigned long long _DE_BRUIJN
cdef long long[::1] _PLACE


@cython.final
cdef class IdleSet:
    cdef public Py_ssize_t n
    cdef public Py_ssize_t count
    cdef public unsigned long long[::1] words

    @cython.locals(bit="unsigned long long", w="unsigned long long")
    cpdef void add(self, Py_ssize_t i) except *

    @cython.locals(bit="unsigned long long", w="unsigned long long")
    cpdef void discard(self, Py_ssize_t i) except *

    @cython.locals(j=Py_ssize_t, nw=Py_ssize_t, w="unsigned long long",
                   low="unsigned long long")
    cpdef Py_ssize_t first_from(self, Py_ssize_t i) except -2

    cpdef object as_int(self)



# an ``EventHeap``'s entries as words (``EventHeap``'s docstring): a time's order as an
# unsigned word's (the bits of a double, the sign's bit flipped where it is positive and
# every bit where negative: the integers' order is the times'; -0.0 as 0.0) and back; two
# entries (word pairs) compared as one 128-bit integer, without a branch where the compiler
# has one; a list's item handed over with its reference (NULL left in its place: only the
# heap reads its list, and a list's traversal and release skip NULL), and one put where
# the item left there (NULL or None) is let go
cdef extern from *:
    """
    #include <string.h>
    static inline unsigned long long hs_key(double t) {
        unsigned long long u; t += 0.0; memcpy(&u, &t, 8);
        return (u >> 63) ? ~u : (u | 0x8000000000000000ULL); }
    static inline double hs_time(unsigned long long k) {
        unsigned long long u = (k >> 63) ? (k & 0x7FFFFFFFFFFFFFFFULL) : ~k; double t;
        memcpy(&t, &u, 8); return t; }
    static inline Py_ssize_t hs_lt(unsigned long long h1, unsigned long long l1,
                                   unsigned long long h2, unsigned long long l2) {
    #ifdef __SIZEOF_INT128__
        return (((unsigned __int128)h1 << 64) | l1) < (((unsigned __int128)h2 << 64) | l2);
    #else
        return (h1 < h2) | ((h1 == h2) & (l1 < l2));
    #endif
    }
    static inline PyObject *hs_take(PyObject *items, Py_ssize_t i) {
        PyObject **p = ((PyListObject *)items)->ob_item + i; PyObject *x = *p; *p = NULL;
        return x; }
    static inline void hs_put(PyObject *items, Py_ssize_t i, PyObject *x) {
        PyObject **p = ((PyListObject *)items)->ob_item + i; PyObject *old = *p;
        Py_INCREF(x); *p = x; Py_XDECREF(old); }
    """
    unsigned long long hs_key(double t) noexcept nogil
    double hs_time(unsigned long long k) noexcept nogil
    Py_ssize_t hs_lt(unsigned long long h1, unsigned long long l1, unsigned long long h2,
                     unsigned long long l2) noexcept nogil
    object hs_take(list items, Py_ssize_t i)
    void hs_put(list items, Py_ssize_t i, object x) noexcept


@cython.final
cdef class EventHeap:
    cdef public long long pushed
    cdef public Py_ssize_t n
    cdef public list items
    cdef unsigned long long[::1] ks
    cdef Py_ssize_t off
    cdef list calls
    cdef long long[::1] free
    cdef Py_ssize_t n_free
    cdef public double now_s
    cdef public long long seq
    cdef public object fn
    cdef public object a
    cdef public object b

    cpdef double first_s(self)

    cpdef object first(self)

    cpdef int push(self, double t, object fn, object a, object b) except -1

    @cython.locals(k=Py_ssize_t, pos=Py_ssize_t, parent=Py_ssize_t, calls=list, o=Py_ssize_t,
                   hi="unsigned long long", lo="unsigned long long",
                   ph="unsigned long long", pl="unsigned long long")
    cpdef int push_seq(self, double t, long long seq, object fn, object a, object b) except -1

    @cython.locals(t=double)
    cpdef tuple pop(self)

    @cython.locals(calls=list, o=Py_ssize_t, k=Py_ssize_t, n=Py_ssize_t, pos=Py_ssize_t,
                   child=Py_ssize_t, right=Py_ssize_t, c=Py_ssize_t, r=Py_ssize_t,
                   x=Py_ssize_t, y=Py_ssize_t, won=Py_ssize_t,
                   hi0="unsigned long long", lo0="unsigned long long",
                   hi="unsigned long long", lo="unsigned long long",
                   ch="unsigned long long", cl="unsigned long long")
    cpdef double pop_into(self) except? -1.0

    @cython.locals(old=Py_ssize_t, ks="unsigned long long[::1]", at=size_t, off=Py_ssize_t,
                   i=Py_ssize_t, free="long long[::1]", more=Py_ssize_t)
    cdef void _room(self, Py_ssize_t cap) except *

    @cython.locals(cap=Py_ssize_t)
    cpdef void _grow(self) except *


cdef Py_ssize_t _MAP_ROOM
cdef object _MISSING


@cython.final
cdef class IdMap:
    cdef public dict d
    cdef public Py_ssize_t n
    cdef public long long key
    cdef public long long[::1] ids
    cdef public list vals
    cdef public long long[::1] live
    cdef public long long[::1] table
    cdef public Py_ssize_t mask
    cdef public Py_ssize_t used

    cpdef void _room(self, Py_ssize_t cap) except *

    cdef bint _c(self, object key) except -1

    @cython.locals(d=dict, j=Py_ssize_t)
    cdef void _as_dict(self) except *

    @cython.locals(mask=Py_ssize_t, i=Py_ssize_t, e=Py_ssize_t)
    cdef Py_ssize_t _place(self, long long key) noexcept

    @cython.locals(j=Py_ssize_t)
    cdef object _remove(self, Py_ssize_t i)

    @cython.locals(k="long long")
    cpdef bint has(self, object key) except -1

    @cython.locals(k="long long", i=Py_ssize_t, j=Py_ssize_t, mask=Py_ssize_t)
    cpdef void put(self, object key, object value) except *

    @cython.locals(i=Py_ssize_t)
    cpdef object discard(self, object key)

    @cython.locals(cap=Py_ssize_t, used=Py_ssize_t, n=Py_ssize_t, j=Py_ssize_t, e=Py_ssize_t,
                   i=Py_ssize_t, mask=Py_ssize_t, k="long long", vals=list, room=Py_ssize_t,
                   ids="long long[::1]", live="long long[::1]")
    cpdef void _pack(self) except *

    @cython.locals(i=Py_ssize_t)
    cpdef object get(self, object key, object default=*)

    @cython.locals(i=Py_ssize_t)
    cpdef object pop(self, object key, object default=*)
