# core/records.py's ``record``, ``field`` and field numbers as inline C and C constants, for
# the modules that Cython compiles: they ``cimport`` them from here, and import the Python
# ones only where ``not cython.compiled``. No module of this name is built: the functions
# are copied into each build that cimports them (``setup.py`` lists this file among their
# dependencies; ``core.records.LAYOUT`` makes a build made before a change to it stale).
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE, PyList_SET_ITEM
from cpython.long cimport PyLong_AsLongLongAndOverflow
from cpython.ref cimport Py_DECREF, Py_INCREF
from cpython.tuple cimport PyTuple_Check, PyTuple_GET_ITEM, PyTuple_GET_SIZE, PyTuple_SET_ITEM


cdef extern from "Python.h":
    # a new instance of ``cls`` (a tuple subclass) with ``n`` empty items (tuple's own
    # ``tp_alloc``, which NamedTuple classes inherit)
    object PyType_GenericAlloc(type cls, Py_ssize_t n)
    # a list's length set, its items and memory left as they are
    void Py_SET_SIZE(list o, Py_ssize_t n)


cdef inline object pop_last(list items):
    """``items.pop()`` (IndexError where empty) that keeps the list's memory: a list that
    shrinks below half of what it holds gives memory back, and one that grows past it asks
    for more (a heap of one, filled and emptied per request, did both each time). The
    list's reference to the item becomes the caller's."""
    cdef Py_ssize_t n = PyList_GET_SIZE(items)
    cdef object x
    if n == 0:
        raise IndexError("pop from empty list")
    x = <object>PyList_GET_ITEM(items, n - 1)  # (a new reference: ``x``'s own)
    Py_SET_SIZE(items, n - 1)
    Py_DECREF(x)  # (the list's, which it no longer holds)
    return x


cdef inline object take(list items, Py_ssize_t i):
    """``items[i]``, leaving None in its place (``i`` in range: the build checks no
    bounds). The list's reference to the item becomes the caller's: no reference counted
    up and down, no call."""
    cdef object x = <object>PyList_GET_ITEM(items, i)  # (a new reference: ``x``'s own)
    Py_INCREF(None)
    PyList_SET_ITEM(items, i, None)  # (takes the reference to None just made)
    Py_DECREF(x)  # (the list's, which it no longer holds)
    return x


cdef inline void put(list items, Py_ssize_t i, object x) noexcept:
    """``items[i] = x`` (``i`` in range: the build checks no bounds), written inline: the
    list takes a reference to ``x`` and lets go of the item it held. ``noexcept``: nothing
    here raises (an exception in a ``__del__`` that the release runs is CPython's to
    report, never set after it), so no caller asks ``PyErr_Occurred`` after each call, as
    Cython 3 has a ``void`` function's callers do unless it says so."""
    cdef object old = <object>PyList_GET_ITEM(items, i)  # (a new reference: ``old``'s own)
    Py_INCREF(x)
    PyList_SET_ITEM(items, i, x)  # (takes the reference to ``x`` just made)
    Py_DECREF(old)  # (the list's, which it no longer holds; ``old``'s own goes at the end)


cdef inline bint id_fits(object key) noexcept:
    """Whether the ``int`` ``key`` is a C ``long long`` (64 bits): read without an
    exception raised and caught where it is not."""
    cdef int overflow = 0
    PyLong_AsLongLongAndOverflow(key, &overflow)
    return overflow == 0


cdef inline object record(type cls, tuple items):
    """``tuple.__new__(cls, items)``, for a ``cls`` whose allocator is tuple's."""
    cdef Py_ssize_t n = len(items)
    cdef object out = PyType_GenericAlloc(cls, n)
    cdef Py_ssize_t i
    cdef object x
    for i in range(n):
        x = <object>PyTuple_GET_ITEM(items, i)
        Py_INCREF(x)
        PyTuple_SET_ITEM(out, i, x)
    return out


cdef inline object _item(object out, Py_ssize_t i, object x):
    Py_INCREF(x)
    PyTuple_SET_ITEM(out, i, x)
    return out


cdef inline object record2(type cls, object a, object b):
    """``record(cls, (a, b))`` without the tuple ``(a, b)``."""
    cdef object out = PyType_GenericAlloc(cls, 2)
    _item(out, 0, a)
    _item(out, 1, b)
    return out


cdef inline object record4(type cls, object a, object b, object c, object d):
    """``record(cls, (a, b, c, d))`` without the tuple of the four."""
    cdef object out = PyType_GenericAlloc(cls, 4)
    _item(out, 0, a)
    _item(out, 1, b)
    _item(out, 2, c)
    _item(out, 3, d)
    return out


cdef inline object record7(type cls, object a, object b, object c, object d, object e,
                           object f, object g):
    """``record(cls, (a, ..., g))`` without the tuple of the seven (a ``Request``)."""
    cdef object out = PyType_GenericAlloc(cls, 7)
    _item(out, 0, a)
    _item(out, 1, b)
    _item(out, 2, c)
    _item(out, 3, d)
    _item(out, 4, e)
    _item(out, 5, f)
    _item(out, 6, g)
    return out


cdef inline object record15(type cls, object a, object b, object c, object d, object e,
                            object f, object g, object h, object i, object j, object k,
                            object l, object m, object n, object o):
    """``record(cls, (a, ..., o))`` without the tuple of the fifteen (a ``StageReport``)."""
    cdef object out = PyType_GenericAlloc(cls, 15)
    _item(out, 0, a)
    _item(out, 1, b)
    _item(out, 2, c)
    _item(out, 3, d)
    _item(out, 4, e)
    _item(out, 5, f)
    _item(out, 6, g)
    _item(out, 7, h)
    _item(out, 8, i)
    _item(out, 9, j)
    _item(out, 10, k)
    _item(out, 11, l)
    _item(out, 12, m)
    _item(out, 13, n)
    _item(out, 14, o)
    return out


cdef inline object field(object rec, Py_ssize_t k):
    """``rec[k]``: a tuple's item read in C (anything else indexed as Python does)."""
    if PyTuple_Check(rec) and 0 <= k < PyTuple_GET_SIZE(rec):
        return <object>PyTuple_GET_ITEM(rec, k)
    return rec[k]


cdef inline tuple fields(object rec):
    """``rec`` as a tuple, to unpack: a tuple (a NamedTuple too) as it is, read in C
    (unpacking a NamedTuple straight would go through the iterator protocol, which
    Cython uses for all but exact tuples); anything else copied into one."""
    if PyTuple_Check(rec):
        return <tuple>rec
    return tuple(rec)


# the field numbers of core/records.py
cdef enum:
    REQUEST_ID = 0
    REQUEST_MODEL = 1
    REQUEST_STREAM = 2
    REQUEST_ARRIVAL_S = 3
    REQUEST_DEADLINE_S = 4
    REQUEST_ROWS = 6
    STEP_STAGE = 0
    STEP_WORKER = 1
    STEP_PLANNED_START_S = 2
    STEP_BLOCKS = 3
    DISPATCH_REQUESTS = 2
    REPORT_KIND = 0
    REPORT_MODEL = 2
    REPORT_WORKER = 4
    REPORT_REQUESTS = 7
    REPORT_COMPLETED = 8
    REPORT_LAST = 9
    REPORT_REASON = 10
    LOAD_WORKER = 0
    LOAD_MODEL = 1
    LOAD_BLOCKS = 2
    LOAD_WAIT = 3
