"""Records (the protocol's NamedTuples: requests, actions, reports) made and read without
Python calls, on the hot paths of the compiled modules.

- ``record(cls, items)`` makes a record of class ``cls`` from a tuple of its fields in
  order (a NamedTuple's own ``__new__`` is a Python function, a frame per record): here
  ``tuple.__new__``, one C call.
- ``record2``, ``record4``, ``record7`` and ``record15`` (``cls`` and its two, four,
  seven or fifteen fields) are ``record`` for the records the hot paths make per request
  (a timer, a dispatch or a route step, a request, a stage report): compiled, without
  the tuple of the fields that ``record`` takes and copies.
- ``field(rec, k)`` reads a record's ``k``-th field (``rec[k]``; ``rec.name`` is a lookup
  in the class's dictionary and a call of the field's descriptor).
- ``fields(rec)`` is ``rec``, to unpack: compiled, a record's items are read in C where
  Cython would unpack anything but an exact tuple through the iterator protocol.

The field numbers the compiled modules read per request are named here
(``REQUEST_MODEL``: ``Request``'s ``model``; a test holds them to the classes' ``_fields``).

A module that Cython compiles (``setup.py``) ``cimport``s these names from
``records_c.pxd`` instead: inline C that allocates the record and sets its fields (without
the arguments' parsing and the copy of ``items`` that ``tuple.__new__`` makes), reads a
tuple's item, and numbers that are C constants. Such a module imports the ones here only
where ``not cython.compiled`` (Cython reads that when it compiles; a name cimported as C
cannot be assigned). Both give the same records and the same fields."""

from __future__ import annotations

import operator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

__all__ = [
    "LAYOUT",
    "NO_CYTHON",
    "field",
    "fields",
    "pop_last",
    "record",
    "record2",
    "record4",
    "record7",
    "record15",
    "take",
]

#: ``record(cls, items)``: ``cls`` (a tuple subclass without fields of its own, as
#: ``typing.NamedTuple`` makes them) holding ``items``
record = tuple.__new__


def record2(cls: type, a: Any, b: Any) -> Any:
    """``record(cls, (a, b))``."""
    return tuple.__new__(cls, (a, b))


def record4(cls: type, a: Any, b: Any, c: Any, d: Any) -> Any:
    """``record(cls, (a, b, c, d))``."""
    return tuple.__new__(cls, (a, b, c, d))


def record7(cls: type, a: Any, b: Any, c: Any, d: Any, e: Any, f: Any, g: Any) -> Any:
    """``record(cls, (a, ..., g))``."""
    return tuple.__new__(cls, (a, b, c, d, e, f, g))


def record15(
    cls: type, a: Any, b: Any, c: Any, d: Any, e: Any, f: Any, g: Any, h: Any, i: Any,
    j: Any, k: Any, l: Any, m: Any, n: Any, o: Any,
) -> Any:  # fmt: skip
    """``record(cls, (a, ..., o))``."""
    return tuple.__new__(cls, (a, b, c, d, e, f, g, h, i, j, k, l, m, n, o))


#: ``field(rec, k)``: ``rec[k]``
field = operator.getitem


def pop_last(items: list[Any]) -> Any:
    """``items.pop()``; compiled (``records_c.pxd``), one that keeps the list's memory."""
    return items.pop()


def take(items: list[Any], i: int) -> Any:
    """``items[i]``, leaving None in its place (compiled, ``records_c.pxd``: without a
    call or a reference counted up and down)."""
    x = items[i]
    items[i] = None
    return x


def put(items: list[Any], i: int, x: Any) -> None:
    """``items[i] = x`` (compiled, ``records_c.pxd``: written inline, without a call)."""
    items[i] = x


def id_fits(key: int) -> bool:
    """Whether the ``int`` ``key`` is a C ``long long`` (64 bits)."""
    return -(1 << 63) <= key < (1 << 63)


def fields(rec: Any) -> Any:
    """``rec``, to unpack (the compiled one reads a NamedTuple's items in C)."""
    return rec


# field numbers (``core.requests.Request``; ``scheduling.protocol``'s ``RouteStep``,
# ``Dispatch``, ``StageReport`` and ``Load``), as ``records_c.pxd`` has them too
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
LOAD_WORKER = 0  # (``Evict``'s first three fields are ``Load``'s too)
LOAD_MODEL = 1
LOAD_BLOCKS = 2
LOAD_WAIT = 3

#: ``cython`` where Cython is not installed (for the ``not cython.compiled`` above)
NO_CYTHON = SimpleNamespace(
    compiled=False, freelist=lambda n: lambda cls: cls, cclass=lambda cls: cls
)

#: the inline C that a build which ``cimport``s these was compiled with
LAYOUT = (Path(__file__).with_name("records_c.pxd"),)
