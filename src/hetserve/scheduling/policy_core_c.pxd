# C types for policy_core.py when Cython compiles it (setup.py) as the module policy_core_c
# (the .pxd named for the module it builds; the .py file is the source and runs as plain
# Python without this). A scheduler's compiled core is an extension type that derives from
# PolicyCore (reservation_core_c.pxd, coldstart_core_c.pxd); the compiled kernel
# (kernel_core_c.pxd) cimports it and calls on_arrival, on_timer and stage_report as C methods
# (``cpdef``: a Python subclass's method, where one overrides them, is still the one called).
import cython

from hetserve.core.records_c cimport fields


cdef class PolicyCore:
    cdef public bint plain
    cdef public list worker_keys

    cpdef list on_arrival(self, object request, double now)

    cpdef list on_timer(self, object token, double now)

    cpdef list stage_report(self, object kind, object batch_id, object model, Py_ssize_t stage,
                            object worker, double start_s, double end_s, object requests,
                            bint completed, bint last, object reason, object blocks,
                            Py_ssize_t blocks_done, double transfer_start_s,
                            double transfer_end_s, double now)


cpdef PolicyCore core_of(object scheduler)

cpdef PolicyCore timer_core_of(object scheduler)
