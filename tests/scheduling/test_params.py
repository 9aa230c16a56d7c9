"""One validation for every scheduler's parameters: declared in the constructor's signature
(``scheduling.params``), checked the same way by ``make_scheduler`` and by the constructor."""

import math
import typing

import pytest

from hetserve.core.errors import HetserveError
from hetserve.scheduling.params import OneOf, Range, check_params
from hetserve.scheduling.protocol import BUILTIN, make_scheduler, scheduler_factory


def _declared(name):
    cls = scheduler_factory(name)
    init = getattr(cls.__init__, "__wrapped__", cls.__init__)
    hints = typing.get_type_hints(init, include_extras=True)
    return cls, {k: v for k, v in hints.items() if k != "return"}


def _outside(r: Range):
    """A value just outside a range, or None when it is unbounded both ways."""
    if r.lo is not None:
        return r.lo if r.lo_open else r.lo - 1
    if r.hi is not None:
        return r.hi if r.hi_open else r.hi + 1
    return None


@pytest.mark.parametrize("name", sorted(BUILTIN))
def test_every_declared_bound_is_enforced_the_same_way(name):
    cls, hints = _declared(name)
    base = {int: "an integer", float: "a finite number", bool: "true or false"}
    for key, hint in hints.items():
        if typing.get_origin(hint) is not typing.Annotated:
            continue
        kind, *extras = typing.get_args(hint)
        args = typing.get_args(kind) or (kind,)
        for e in extras:
            if isinstance(e, Range):
                bad = _outside(e)
                if bad is None:
                    continue
                bad = int(bad) if int in args and float not in args else float(bad)
                want = next(base[a] for a in (int, float) if a in args)
                msg = f"scheduler '{name}': parameter {key} must be {want} {e.text()}, got {bad!r}"
            elif isinstance(e, OneOf):
                bad = "no-such-choice"
                msg = f"scheduler '{name}': parameter {key} must be "
            else:
                continue
            for build in (make_scheduler, None):
                with pytest.raises(HetserveError) as err:
                    make_scheduler(name, {key: bad}) if build else cls(**{key: bad})
                assert str(err.value).startswith(msg), str(err.value)


@pytest.mark.parametrize("name", sorted(BUILTIN))
def test_types_unknown_names_and_non_finite_numbers(name):
    _, hints = _declared(name)
    with pytest.raises(HetserveError, match=f"scheduler '{name}': unknown parameter 'nope'"):
        make_scheduler(name, {"nope": 1})
    for key, hint in hints.items():
        kind = typing.get_args(hint)[0] if typing.get_origin(hint) is typing.Annotated else hint
        args = typing.get_args(kind) or (kind,)
        if float in args:
            with pytest.raises(HetserveError, match=f"parameter {key} must be a finite number"):
                make_scheduler(name, {key: math.nan})
        elif int in args:
            with pytest.raises(HetserveError, match=f"parameter {key} must be an integer"):
                make_scheduler(name, {key: 1.5})
        elif bool in args:
            with pytest.raises(HetserveError, match=f"parameter {key} must be true or false"):
                make_scheduler(name, {key: 1})


def test_declared_defaults_are_valid():
    """Every built-in's defaults lie inside its own declarations."""
    import inspect

    for name in BUILTIN:
        cls = scheduler_factory(name)
        init = getattr(cls.__init__, "__wrapped__", cls.__init__)
        given = {
            k: p.default
            for k, p in inspect.signature(init).parameters.items()
            if k != "self" and p.default is not inspect.Parameter.empty
        }
        check_params(name, cls, given)
        make_scheduler(name, given)


def test_range_text_and_bounds():
    r = Range(0, 10, hi_open=True)
    assert r.text() == ">= 0 and < 10" and r.holds(0) and not r.holds(10)
    assert Range(1, lo_open=True).text() == "> 1" and not Range(1, lo_open=True).holds(1)
