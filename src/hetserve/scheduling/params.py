"""Scheduler parameters: declared once, in the constructor's signature, checked one way.

A scheduler declares each parameter's type and, where it has one, its range or its choices
with ``typing.Annotated``::

    def __init__(self, max_batch: Annotated[int, Range(1)] = 8,
                 margin_s: Annotated[float, Range(0, 10, hi_open=True)] = 0.0,
                 priority: Annotated[str, OneOf("largest", "deadline")] = "largest"): ...

:func:`check_params` checks given values against those declarations (an unknown name, a
wrong type, a value out of range or not among the choices: a one-line ``HetserveError``
``scheduler 'NAME': parameter KEY must be ..., got VALUE``). ``register`` (in
:mod:`hetserve.scheduling.protocol`) makes every registered scheduler's constructor check
its arguments this way, however it is called (``make_scheduler``, a plan file's scheduler,
``--param``, or Python); ``make_scheduler`` checks ``package.module:Class`` schedulers too.
"""

from __future__ import annotations

import functools
import inspect
import math
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hetserve.core.errors import HetserveError


@dataclass(frozen=True)
class Range:
    """Bounds of a numeric parameter (None: unbounded on that side)."""

    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    hi_open: bool = False

    def holds(self, x: float) -> bool:
        if self.lo is not None and (x <= self.lo if self.lo_open else x < self.lo):
            return False
        return self.hi is None or (x < self.hi if self.hi_open else x <= self.hi)

    def text(self) -> str:
        lo = None if self.lo is None else f"{'>' if self.lo_open else '>='} {self.lo:g}"
        hi = None if self.hi is None else f"{'<' if self.hi_open else '<='} {self.hi:g}"
        return " and ".join(x for x in (lo, hi) if x)


@dataclass(frozen=True)
class OneOf:
    """The choices of a text parameter."""

    values: tuple[str, ...]

    def __init__(self, *values: str) -> None:
        object.__setattr__(self, "values", values)


_WANT = {bool: "true or false", int: "an integer", float: "a finite number", str: "a text"}


def _declared(factory: Any) -> tuple[inspect.Signature, dict[str, Any]] | None:
    init = factory.__init__ if isinstance(factory, type) else factory
    init = getattr(init, "__wrapped__", init)
    try:
        return inspect.signature(init), typing.get_type_hints(init, include_extras=True)
    except (TypeError, ValueError, NameError):
        return None


def check_params(name: str, factory: Any, params: Mapping[str, Any]) -> None:
    """Each parameter is one the scheduler takes, of its declared type (an integer for
    ``int``, a finite number for ``float``, true/false for ``bool``), within its declared
    range or among its declared choices."""
    found = _declared(factory)
    if found is None:
        return
    sig, hints = found
    known = [p for p in sig.parameters if p not in ("self", "args", "kwargs")]
    for key, value in params.items():
        if key not in known:
            raise HetserveError(
                f"scheduler {name!r}: unknown parameter {key!r}; it takes "
                f"{', '.join(known) or 'no parameters'}"
            )
        hint = hints.get(key)
        extras: tuple[Any, ...] = ()
        if typing.get_origin(hint) is typing.Annotated:
            hint, *rest = typing.get_args(hint)
            extras = tuple(rest)
        allowed = typing.get_args(hint) if typing.get_args(hint) else (hint,)
        if value is None and type(None) in allowed:
            continue
        ok = True
        if bool in allowed:
            ok = isinstance(value, bool)
        elif int in allowed and float not in allowed:
            ok = isinstance(value, int) and not isinstance(value, bool)
        elif float in allowed:
            ok = (
                isinstance(value, (int, float))
                and not isinstance(value, bool)
                and math.isfinite(value)
            )
        elif str in allowed:
            ok = isinstance(value, str)
        kind = next((_WANT[a] for a in (bool, int, float, str) if a in allowed), "a value")
        for e in extras:
            if isinstance(e, Range):
                kind = f"{kind} {e.text()}"
                ok = ok and e.holds(value)
            elif isinstance(e, OneOf):
                kind = " or ".join(repr(v) for v in e.values)
                ok = ok and value in e.values
        if not ok:
            raise HetserveError(
                f"scheduler {name!r}: parameter {key} must be {kind}, got {value!r}"
            )


def checked_init(cls: type, name: str) -> None:
    """Make ``cls``'s constructor check its arguments with :func:`check_params` (once, for
    the class being built: a subclass's checks run, not its bases' again)."""
    init = cls.__init__
    sig = inspect.signature(init)

    @functools.wraps(init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        if type(self) is cls and (args or kwargs):
            try:
                given = sig.bind(self, *args, **kwargs).arguments
            except TypeError as e:
                raise HetserveError(f"scheduler {name!r}: {e}") from None
            given.pop(next(iter(sig.parameters)), None)  # self
            check_params(name, cls, given)
        init(self, *args, **kwargs)

    cls.__init__ = __init__  # type: ignore[misc]


def parse_params(items: Sequence[str]) -> dict[str, Any]:
    """``key=value`` strings -> dict with numbers and ``true``/``false`` converted."""
    out: dict[str, Any] = {}
    for item in items:
        k, eq, v = item.partition("=")
        if not eq or not k.strip():
            raise HetserveError(f"scheduler parameter {item!r}: expected key=value")
        val: Any = v.strip()
        for conv in (int, float):
            try:
                val = conv(v)
                break
            except ValueError:
                continue
        if isinstance(val, str) and val.lower() in ("true", "false"):
            val = val.lower() == "true"
        out[k.strip().replace("-", "_")] = val
    return out
