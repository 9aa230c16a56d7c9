# C types for recorder_core.py when Cython compiles it (setup.py) as the module
# recorder_core_c (the .pxd named for the module it builds; the .py file is the source and
# runs as plain Python without this). The kernel's entities come typed from their own
# build (engine/entities_core_c.pxd), so a stage's fields are read as C struct fields:
# this build runs only beside the compiled entities (``sim.result`` chooses).
import cython

from hetserve.core.records_c cimport REQUEST_ID, STEP_BLOCKS, STEP_STAGE, field, put
from hetserve.engine.entities_core_c cimport Batch, ObserverCore, Slot, Task


cdef double _NAN
cdef str _COMPLETED


cdef class Ledger(ObserverCore):
    cdef public Py_ssize_t n_rows
    cdef public long long[::1] row_batch
    cdef public long long[::1] row_stage
    cdef public long long[::1] row_size
    cdef public double[::1] row_start_s
    cdef public double[::1] row_end_s
    cdef public double[::1] row_xfer_start_s
    cdef public double[::1] row_xfer_end_s
    cdef public double[::1] row_dispatch_s
    cdef public list row_model
    cdef public list row_worker
    cdef public list row_gpu
    cdef public list row_status
    cdef public double[::1] dispatch_s
    cdef public double[::1] start_s
    cdef public double[::1] finish_s
    cdef public signed char[::1] outcome
    cdef public short[::1] reason
    cdef public long long[::1] batch_of
    cdef public list reasons
    cdef public dict _reason_idx
    cdef public double[::1] busy_s
    cdef public double[::1] busy_energy_j

    cpdef Py_ssize_t reason_index(self, object text) except -1

    @cython.locals(i=Py_ssize_t)
    cpdef dispatched(self, Batch batch, Py_ssize_t first_block, double now)

    @cython.locals(b=Batch, w=Slot, k=Py_ssize_t, t0=double,
                   j=Py_ssize_t, x=object)
    cpdef stage_ended(self, Task task, double now, object status, Py_ssize_t blocks_done)

    @cython.locals(ri=Py_ssize_t)
    cpdef ended(self, object requests, object outcomes, object reason, double now,
                object outputs)
