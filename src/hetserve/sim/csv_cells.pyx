# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False
# distutils: language = c++
"""The simulator's CSV files (``requests.csv``, ``batches.csv``) written a column at a
time by compiled code: the bytes the ``csv`` module writes for the same cells, at a
fraction of its time (a 30-second point has 1.3 million cells; docs/benchmarks.md).

``sim/result.py`` describes each file as a list of columns (:data:`COLUMN_KINDS` there)
and writes it with this module where the package was built with Cython (``setup.py``),
else with the ``csv`` module; ``tests/sim/test_csv_cells.py`` checks that both write the
same bytes. Strings are quoted by the ``csv`` module itself (``quote``, once per distinct
string); numbers never need quoting.

A float is written as ``repr`` writes it: the fewest significant digits that read back as
the same double (the one nearest it where several are as short), in fixed notation from
1e-4 up to 1e16 (with ``.0`` where it is whole) and as ``1.5e-05``/``1e+16`` outside. The
digits come from the C++ library's ``std::to_chars`` (C++17; libstdc++ from GCC 11), which
gives that same shortest, nearest string as CPython's own ``PyOS_double_to_string`` (David
Gay's algorithm) 7x faster: a million doubles in 0.05 s against 0.37 s, most of a
30-second point's output. Where the library lacks it (``__cpp_lib_to_chars`` unset),
``PyOS_double_to_string`` makes them, as before. ``tests/sim/test_csv_cells.py`` holds the
two to the same bytes on random bit patterns, every power of two and the notation's
edges, and builds this file with ``-DHETSERVE_NO_TO_CHARS`` (the fallback where the library
has ``to_chars``) to hold that build to them too."""

from libc.stdint cimport int64_t
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy

cdef extern from *:
    """
    #if defined(__has_include)
    #if __has_include(<charconv>)
    #include <charconv>
    #endif
    #endif
    #include <cmath>
    #include <cstring>
    /* HETSERVE_NO_TO_CHARS (a -D flag) builds the fallback where the library has
       to_chars: tests/sim/test_csv_cells.py builds it so, to test that branch */
    #if defined(__cpp_lib_to_chars) && __cpp_lib_to_chars >= 201611L \
        && !defined(HETSERVE_NO_TO_CHARS)
    #define HS_TO_CHARS 1
    #endif
    #ifdef HS_TO_CHARS
    static const char *hs_digits = "std::to_chars";
    #else
    static const char *hs_digits = "PyOS_double_to_string";
    #endif
    /* repr(x) into out (room for 32 bytes); its length (-1: no memory). */
    static int hs_repr(double x, char *out) {
        if (x != x) { std::memcpy(out, "nan", 3); return 3; }
        if (x == HUGE_VAL) { std::memcpy(out, "inf", 3); return 3; }
        if (x == -HUGE_VAL) { std::memcpy(out, "-inf", 4); return 4; }
    #ifdef HS_TO_CHARS
        char s[32], dig[20];
        /* the shortest digits that read back as x, nearest x: d[.ddd]e(+|-)XX */
        char *end = std::to_chars(s, s + sizeof s, x, std::chars_format::scientific).ptr;
        char *p = s;
        int k = 0, nd = 0, e = 0, neg_e = 0;
        if (*p == '-') { out[k++] = '-'; p++; }
        dig[nd++] = *p++;
        if (*p == '.') { p++; while (*p != 'e') dig[nd++] = *p++; }
        p++;  /* 'e' */
        if (*p == '-') neg_e = 1;
        p++;
        while (p < end) e = e * 10 + (*p++ - '0');
        if (neg_e) e = -e;
        if (e >= -4 && e < 16) {  /* fixed, as repr: 0.0001 .. 9999999999999998.0 */
            if (e < 0) {
                out[k++] = '0'; out[k++] = '.';
                for (int j = 0; j < -e - 1; j++) out[k++] = '0';
                std::memcpy(out + k, dig, nd); k += nd;
            } else {
                for (int j = 0; j <= e; j++) out[k++] = j < nd ? dig[j] : '0';
                out[k++] = '.';
                if (nd > e + 1) { std::memcpy(out + k, dig + e + 1, nd - e - 1); k += nd - e - 1; }
                else out[k++] = '0';
            }
        } else {  /* scientific, as repr: 1e-05, 1.5e+16, 5e-324 */
            out[k++] = dig[0];
            if (nd > 1) { out[k++] = '.'; std::memcpy(out + k, dig + 1, nd - 1); k += nd - 1; }
            out[k++] = 'e';
            out[k++] = e < 0 ? '-' : '+';
            if (e < 0) e = -e;
            if (e >= 100) { out[k++] = (char)('0' + e / 100); e %= 100; }
            out[k++] = (char)('0' + e / 10);
            out[k++] = (char)('0' + e % 10);
        }
        return k;
    #else
        char *s = PyOS_double_to_string(x, 'r', 0, Py_DTSF_ADD_DOT_0, NULL);
        int k;
        if (s == NULL) return -1;
        k = (int)std::strlen(s);
        std::memcpy(out, s, k);
        PyMem_Free(s);
        return k;
    #endif
    }
    """
    int hs_repr(double x, char *out) noexcept nogil
    const char *hs_digits

#: what makes a float's digits in this build: ``"std::to_chars"`` or, where the C++
#: library lacks it, ``"PyOS_double_to_string"`` (the same bytes either way)
DIGITS: str = hs_digits.decode()

cdef enum:
    CAP = 1 << 20  # bytes held before a write to the file
    ROOM = 64  # the most a number's cell takes


cdef class _Sink:
    """A byte buffer written to a binary file object as it fills."""

    cdef char *buf
    cdef Py_ssize_t n
    cdef object write

    def __cinit__(self, object f):
        self.buf = <char *>malloc(CAP)
        if self.buf == NULL:
            raise MemoryError()
        self.n = 0
        self.write = f.write

    def __dealloc__(self):
        free(self.buf)

    cdef int flush(self) except -1:
        if self.n:
            self.write(self.buf[:self.n])
            self.n = 0
        return 0

    cdef inline int room(self, Py_ssize_t k) except -1:
        if self.n + k > CAP:
            self.flush()
        return 0

    cdef int put(self, const char *s, Py_ssize_t k) except -1:
        if k > CAP // 2:  # (a long string cell: written as it is)
            self.flush()
            self.write(s[:k])
            return 0
        self.room(k)
        memcpy(self.buf + self.n, s, k)
        self.n += k
        return 0

    cdef inline void char_(self, char c):
        self.buf[self.n] = c
        self.n += 1

    cdef int double_(self, double x) except -1:
        """``repr(x)``; NaN as an empty cell."""
        if x != x:
            return 0
        return self.float_(x)

    cdef int float_(self, double x) except -1:
        """``repr(x)``, NaN as ``nan``."""
        cdef int k = hs_repr(x, self.buf + self.n)
        if k < 0:
            raise MemoryError()
        self.n += k
        return 0

    cdef void int_(self, int64_t v):
        cdef char tmp[24]
        cdef int k = 0
        cdef unsigned long long u
        if v < 0:
            self.char_(b'-')
            u = <unsigned long long>(-(v + 1)) + 1
        else:
            u = <unsigned long long>v
        while True:
            tmp[k] = <char>(48 + u % 10)
            k += 1
            u //= 10
            if u == 0:
                break
        while k:
            k -= 1
            self.char_(tmp[k])


cdef int _object(_Sink out, object x, dict cache, object quote) except -1:
    """One cell of a column of Python objects, as the ``csv`` module writes it: None
    empty, an int in decimal, a float by ``repr``, anything else as ``quote`` gives it
    (remembered per distinct string)."""
    cdef bytes cell
    if x is None:
        return 0
    if type(x) is float:
        out.room(ROOM)
        out.float_(<double>x)
        return 0
    if type(x) is int and -(1 << 62) < x < (1 << 62):
        out.room(ROOM)
        out.int_(<int64_t>x)
        return 0
    if type(x) is not str:  # (kept per value only for strings: 1 == True == 1.0)
        cell = <bytes>quote(x)
        out.put(cell, len(cell))
        return 0
    got = cache.get(x)
    if got is None:
        got = quote(x)
        cache[x] = got
    cell = <bytes>got
    out.put(cell, len(cell))
    return 0


def write_columns(object f, bytes header, list columns, Py_ssize_t n, object quote):
    """Writes ``header`` then ``n`` rows to the binary file ``f``; ``columns`` as
    ``sim/result.py`` makes them: ``(kind, data, cells)`` with kind ``"F"`` (a float64
    array; NaN empty), ``"I"`` (an int64 array), ``"C"`` (an int64 array of codes into
    ``cells``, a tuple of each code's cell as bytes), ``"T"`` (a list of times: None or
    NaN empty, anything else as a float) or ``"O"`` (a list of Python objects); ``quote(x)``
    gives an object's cell as bytes."""
    cdef _Sink out = _Sink(f)
    cdef Py_ssize_t i, j, m = len(columns)
    cdef double[::1] fv
    cdef int64_t[::1] iv
    cdef tuple cv
    cdef bytes cell
    cdef dict cache = {}
    cdef list keep = []  # (the arrays the pointers below point into)
    cdef char *kinds = <char *>malloc(m + 1)
    cdef double **fp = <double **>malloc((m + 1) * sizeof(double *))
    cdef int64_t **ip = <int64_t **>malloc((m + 1) * sizeof(int64_t *))
    cdef list data = [None] * m
    cdef char k
    cdef int64_t c
    cdef Py_ssize_t start
    cdef double t
    try:
        if kinds == NULL or fp == NULL or ip == NULL:
            raise MemoryError()
        for j in range(m):
            kind, col, extra = columns[j]
            k = kinds[j] = (<bytes>kind.encode())[0]
            if k == b'T' or k == b'O':
                if len(<list?>col) != n:
                    raise ValueError(f"column {j}: {len(col)} cells for {n} rows")
                data[j] = col
                continue
            if col.shape[0] != n:
                raise ValueError(f"column {j}: {col.shape[0]} cells for {n} rows")
            keep.append(col)
            if k == b'F':
                fv = col
                fp[j] = &fv[0] if n else NULL
            elif k == b'I' or k == b'C':
                iv = col
                ip[j] = &iv[0] if n else NULL
                data[j] = tuple(extra) if k == b'C' else None
            else:
                raise ValueError(f"column {j}: unknown kind {kind!r}")
        out.put(header, len(header))
        for i in range(n):
            for j in range(m):
                out.room(ROOM)
                if j:
                    out.char_(b',')
                start = out.n
                k = kinds[j]
                if k == b'F':
                    out.double_(fp[j][i])
                elif k == b'I':
                    out.int_(ip[j][i])
                elif k == b'C':
                    cv = <tuple>data[j]
                    c = ip[j][i]
                    if c < 0 or c >= len(cv):
                        raise ValueError(f"column {j}, row {i}: code {c} of {len(cv)}")
                    cell = <bytes>cv[c]
                    out.put(cell, len(cell))
                elif k == b'T':
                    x = (<list>data[j])[i]
                    if x is not None:
                        t = x
                        out.double_(t)
                else:
                    _object(out, (<list>data[j])[i], cache, quote)
            if m == 1 and out.n == start:  # (a row of one empty cell: the csv module's "")
                out.put(b'""', 2)
            out.room(2)
            out.char_(b'\r')
            out.char_(b'\n')
        out.flush()
    finally:
        free(kinds)
        free(fp)
        free(ip)
