# ``record`` (core/records.py) as inline C, for the modules that Cython compiles: they
# ``cimport`` it from here, and the Python ``record`` they import is then not used. No
# module of this name is built: the function is copied into each build that cimports it
# (``setup.py`` lists this file among their dependencies; ``core.records.LAYOUT`` makes a
# build made before a change to it stale).
from cpython.ref cimport Py_INCREF
from cpython.tuple cimport PyTuple_GET_ITEM, PyTuple_SET_ITEM
from cpython.object cimport PyObject


cdef extern from "Python.h":
    # a new instance of ``cls`` (a tuple subclass) with ``n`` empty items (tuple's own
    # ``tp_alloc``, which NamedTuple classes inherit)
    object PyType_GenericAlloc(type cls, Py_ssize_t n)


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
