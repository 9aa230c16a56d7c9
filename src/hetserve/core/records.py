"""Records (the protocol's NamedTuples: requests, actions, reports) made without their
Python constructors, on the hot paths of the compiled modules.

A NamedTuple's own ``__new__`` is a Python function, a frame per record. ``record(cls,
items)`` makes the same record from a tuple of its fields in order: here ``tuple.__new__``,
one C call. A module that Cython compiles (``setup.py``) and that ``cimport``s
``record`` from ``records_c.pxd`` gets that file's inline C function instead (and
imports this one only where ``not cython.compiled``: a name cimported as C cannot be
assigned), which
allocates the record and sets its fields without the call (the arguments' parsing and the
copy of ``items`` that ``tuple.__new__`` makes). The two give equal records of the same
class."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

__all__ = ["LAYOUT", "NO_CYTHON", "record"]

#: ``record(cls, items)``: ``cls`` (a tuple subclass without fields of its own, as
#: ``typing.NamedTuple`` makes them) holding ``items``
record = tuple.__new__

#: ``cython`` where Cython is not installed (a module that cimports ``record`` imports
#: the Python one only where ``not cython.compiled``, which Cython reads when it compiles)
NO_CYTHON = SimpleNamespace(compiled=False)

#: the inline C that a build which ``cimport``s ``record`` was compiled with
LAYOUT = (Path(__file__).with_name("records_c.pxd"),)
