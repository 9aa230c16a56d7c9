# C types for recorder_core.py when Cython compiles it (setup.py) as the module
# recorder_core_c (the .pxd named for the module it builds; the .py file is the source and
# runs as plain Python without this). The kernel's entities come typed from their own
# build (engine/entities_core_c.pxd), so a stage's fields are read as C struct fields:
# this build runs only beside the compiled entities (``sim.result`` chooses).
import cython

from hetserve.core.records_c cimport REQUEST_ID, STEP_BLOCKS, STEP_STAGE, field
from hetserve.engine.entities_core_c cimport Batch, ObserverCore, Slot, Task


# a C integer or double stored past the caches (a non-temporal store, x86-64's
# ``movnti``; a plain store on other machines): ``Ledger.stage_ended``'s rows
cdef extern from *:
    """
    #if defined(__x86_64__) || defined(_M_X64)
    #include <immintrin.h>
    static inline void hs_stream_q(long long *p, long long v) { _mm_stream_si64(p, v); }
    static inline void hs_stream_d(double *p, double v) {
        long long bits; memcpy(&bits, &v, 8); _mm_stream_si64((long long *)p, bits); }
    #else
    static inline void hs_stream_q(long long *p, long long v) { *p = v; }
    static inline void hs_stream_d(double *p, double v) { *p = v; }
    #endif
    """
    void hs_stream_q(long long* p, long long v) noexcept nogil
    void hs_stream_d(double* p, double v) noexcept nogil

cdef double _NAN
cdef str _COMPLETED
cdef Py_ssize_t ROW_INTS, ROW_TIMES


cdef class Ledger(ObserverCore):
    cdef public Py_ssize_t n_rows
    cdef public long long[::1] row_ints
    cdef public double[::1] row_times
    cdef public list row_names
    cdef public dict _row_name_idx
    cdef public list _model_at
    cdef public list _model_code_at
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

    cpdef Py_ssize_t row_name_code(self, object name) except -1

    @cython.locals(i=Py_ssize_t)
    cpdef dispatched(self, Batch batch, Py_ssize_t first_block, double now)

    @cython.locals(b=Batch, w=Slot, k=Py_ssize_t, t0=double,
                   j=Py_ssize_t, x=object, m=object, code=Py_ssize_t,
                   wi=Py_ssize_t, at=list, model_code=Py_ssize_t)
    cpdef stage_ended(self, Task task, double now, object status, Py_ssize_t blocks_done)

    @cython.locals(ri=Py_ssize_t)
    cpdef ended(self, object requests, object outcomes, object reason, double now,
                object outputs)
