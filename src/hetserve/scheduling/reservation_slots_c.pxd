# C types for reservation_slots.py when Cython compiles it (setup.py) as the module
# reservation_slots_c (the .pxd named for the module it builds; the .py file is the source
# and runs as plain Python without this). Times are C doubles and workers C integers, in
# buffers (typed memoryviews); the classes are extension types with typed attributes.
import cython
from libc.string cimport memmove

cdef double _EPS
cdef double _NEG_INF
cdef long long _NO_TAG
cdef Py_ssize_t _MOVED
cdef Py_ssize_t _KEPT


@cython.final
cdef class PoolOrder:
    cdef public Py_ssize_t n
    cdef public Py_ssize_t mask
    cdef public Py_ssize_t front_h
    cdef public Py_ssize_t solid_h
    cdef public double[::1] front_t
    cdef public long long[::1] front_w
    cdef public double[::1] solid_t
    cdef public long long[::1] solid_w
    cdef public double min_gap


@cython.locals(lo=Py_ssize_t, hi=Py_ssize_t, mid=Py_ssize_t, p=Py_ssize_t, u=double)
cdef Py_ssize_t _at(double[::1] ts, long long[::1] ws, Py_ssize_t n, Py_ssize_t h,
                    Py_ssize_t mask, double t, Py_ssize_t w) except -1

@cython.locals(i=Py_ssize_t, j=Py_ssize_t, k=Py_ssize_t, out_in=Py_ssize_t, p=Py_ssize_t)
cdef Py_ssize_t _move(double[::1] ts, long long[::1] ws, Py_ssize_t n, Py_ssize_t h,
                      Py_ssize_t mask, double old_t, Py_ssize_t w, double new_t) except -1

@cython.locals(q=Py_ssize_t, a=Py_ssize_t, b=Py_ssize_t)
cdef void _shift_pairs(double[::1] ts, long long[::1] ws, Py_ssize_t h, Py_ssize_t mask,
                       Py_ssize_t dst, Py_ssize_t src, Py_ssize_t count) noexcept

# the pairs src..src+count-1 of a ring that starts at h copied to dst.. (dst one from src:
# the ranges overlap): one ``memmove`` a buffer where the span does not cross the
# buffers' end, else pair by pair (``_shift_pairs``, which the Python file takes for all)
@cython.boundscheck(False)
@cython.wraparound(False)
cdef inline void _shift(double[::1] ts, long long[::1] ws, Py_ssize_t h, Py_ssize_t mask,
                        Py_ssize_t dst, Py_ssize_t src, Py_ssize_t count) noexcept:
    cdef Py_ssize_t lo, a
    if count <= 0:
        return
    lo = dst if dst < src else src
    a = (h + lo) & mask
    if a + count <= mask:  # (the span lo..lo+count lies in one piece)
        memmove(&ts[a + dst - lo], &ts[a + src - lo], count * sizeof(double))
        memmove(&ws[a + dst - lo], &ws[a + src - lo], count * sizeof(long long))
    else:
        _shift_pairs(ts, ws, h, mask, dst, src, count)


@cython.final
cdef class Lane:
    cdef public double[::1] s
    cdef public double[::1] e
    cdef public long long[::1] tags
    cdef public Py_ssize_t lo
    cdef public Py_ssize_t hi

    @cython.locals(lo=Py_ssize_t, hi=Py_ssize_t)
    cpdef void drop_past(self, double now) noexcept

    @cython.locals(cap=Py_ssize_t, lo=Py_ssize_t, n=Py_ssize_t, s="double[::1]",
                   e="double[::1]", tags="long long[::1]", i=Py_ssize_t, s2="double[::1]",
                   e2="double[::1]", tags2="long long[::1]")
    cpdef void room(self) except *

    @cython.locals(s="double[::1]", e="double[::1]", tags="long long[::1]", lo=Py_ssize_t,
                   hi=Py_ssize_t, a=Py_ssize_t, b=Py_ssize_t, mid=Py_ssize_t, u=double,
                   v=double, i=Py_ssize_t)
    cpdef void insort(self, double start, double end, long long tag) except *

    @cython.locals(s="double[::1]", e="double[::1]", tags="long long[::1]", hi=Py_ssize_t,
                   j=Py_ssize_t, i=Py_ssize_t, x=cython.longlong)
    cpdef void keep(self, long long tag, double t) except *

    cpdef list intervals(self)


cdef Py_ssize_t LANE_ROOM


@cython.locals(s_all="double[::1]", e_all="double[::1]", tags_all="long long[::1]",
               out=list, j=Py_ssize_t, lane=Lane, a=Py_ssize_t)
cpdef list new_lanes(Py_ssize_t k)


@cython.final
cdef class Bookings:
    cdef public long long[::1] r
    cdef public double[::1] t
    cdef public double[::1] d
    cdef public long long[::1] st
    cdef public long long[::1] nxt
    cdef public long long[::1] tags
    cdef public Py_ssize_t top
    cdef public Py_ssize_t free

    @cython.locals(k=Py_ssize_t)
    cpdef Py_ssize_t new_row(self, Py_ssize_t r, double t, double d, Py_ssize_t st,
                             long long tag) except -1

    @cython.locals(n=Py_ssize_t, i=Py_ssize_t, r="long long[::1]", t="double[::1]",
                   d="double[::1]", st="long long[::1]", nxt="long long[::1]",
                   tags="long long[::1]")
    cpdef void _grow(self) except *

    @cython.locals(k=Py_ssize_t, nx=Py_ssize_t)
    cpdef void release(self, Py_ssize_t first) except *

    @cython.locals(out=list, k=Py_ssize_t)
    cpdef list entries(self, Py_ssize_t first)


@cython.final
cdef class SlotTable:
    cdef public list lanes
    cdef public Py_ssize_t n
    cdef public double[::1] front
    cdef public double[::1] solid
    cdef public double[::1] min_gap
    cdef public list orders_of
    cdef public double now

    cpdef Bookings bookings(self)

    cpdef list intervals(self, Py_ssize_t r)

    cpdef void set_min_gap(self, Py_ssize_t r, double gap_s) except *

    @cython.locals(order=PoolOrder)
    cpdef int _moved(self, Py_ssize_t r, double old_f, double old_s, double new_f,
                     double new_s) except -1

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
    cpdef int add(self, Py_ssize_t r, double start, double end, long long tag) except -1

    @cython.locals(lane=Lane)
    cpdef void remove(self, Py_ssize_t r, long long tag) except *

    @cython.locals(lane=Lane)
    cpdef void replace(self, Py_ssize_t r, long long tag, double start, double end) except *

    @cython.locals(delay=double, changed=bint, k=Py_ssize_t, r=Py_ssize_t, start=double,
                   dur=double, a=double, b=double, moves=bint, nk=Py_ssize_t)
    cpdef int correct(self, object bid, Bookings bk, Py_ssize_t first, Py_ssize_t stage,
                        double start_s, double end_s, double x_start_s,
                        double x_end_s, bint has_transfer, bint completed,
                        bint last) except -1
