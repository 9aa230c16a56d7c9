# C types for fixed_batch_core.py when Cython compiles it (setup.py) as the module
# fixed_batch_core_c: Cython takes the .pxd named for the module it builds, so this file
# carries that name. The .py file is the source and runs as plain Python without this (its
# annotations are for readers and type checkers: ``annotation_typing=False`` at its top
# leaves the C types to this file). A try and the search for a free first-stage worker
# are functions with typed arguments (C calls from the scheduler's methods, which stay
# those of a Python class: its base is one, and the tests subclass it); a model's queue
# stays a deque of its own; the idle sets are core/heaps_core_c.pxd's.
import cython

from hetserve.core.heaps_core_c cimport IdleSet
from hetserve.core.records_c cimport (
    REQUEST_ARRIVAL_S,
    REQUEST_ID,
    REQUEST_MODEL,
    REQUEST_ROWS,
    field,
    record,
    record2,
    record4,
)


@cython.locals(i=Py_ssize_t)
cpdef object free_first_worker(list first, IdleSet idle)

@cython.locals(max_batch=Py_ssize_t, delay=double, first=list, idle=IdleSet, at=double, rid=object)
cpdef void try_model(object sched, object model, double now, list out) except *
