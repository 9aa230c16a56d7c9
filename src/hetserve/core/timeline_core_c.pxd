# C types for timeline_core.py when Cython compiles it (setup.py) as the module
# timeline_core_c: Cython takes the .pxd named for the module it builds, so this file
# carries that name. The .py file is the source and runs as plain Python without this (its
# annotations are for readers and type checkers: ``annotation_typing=False`` at its top
# leaves the C types to this file). The loaded layers' numbers are read as C buffers
# (``array.array`` of 'q' and 'd' in core/coldstart.py), the scale as a Python sequence.
import cython


@cython.locals(ready=list, n_scale=Py_ssize_t, start=Py_ssize_t, end=Py_ssize_t,
               p=Py_ssize_t, k=Py_ssize_t, share=double, link_free=double,
               fwd_free=double, t=double, last=double)
cpdef tuple ready_times(const long long[::1] layer, const double[::1] load_s,
                        const double[::1] fwd_s, const long long[::1] part_end,
                        object scale, Py_ssize_t n_layers)
