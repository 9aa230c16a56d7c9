"""``core.records``: the field numbers that the compiled modules read records by are the
classes' own, and ``record``/``field`` make and read the same records as the classes do.
(``records_c.pxd`` repeats the numbers as C constants: the check below reads that file.)"""

import re
from pathlib import Path

from hetserve.core import records
from hetserve.core.requests import Request
from hetserve.scheduling.protocol import Dispatch, Evict, Load, RouteStep, SetTimer, StageReport

CLASSES = {
    "REQUEST": Request, "STEP": RouteStep, "DISPATCH": Dispatch, "REPORT": StageReport,
    "LOAD": Load,
}  # fmt: skip


def _numbers() -> dict[str, int]:
    return {n: v for n, v in vars(records).items() if n.split("_")[0] in CLASSES and n.isupper()}


def test_each_field_number_is_its_fields_place_in_the_class():
    numbers = _numbers()
    assert len(numbers) == 22
    for name, k in numbers.items():
        prefix, field = name.split("_", 1)
        assert CLASSES[prefix]._fields[k] == field.lower(), name
    assert Evict._fields == Load._fields[:3]  # (an Evict is read by the LOAD_ numbers too)


def test_the_c_constants_are_the_same_numbers():
    pxd = Path(records.__file__).with_name("records_c.pxd").read_text()
    c = {n: int(v) for n, v in re.findall(r"^    ([A-Z_]+) = (\d+)$", pxd, re.M)}
    assert c == _numbers()


def test_a_record_is_its_class_made_from_its_fields():
    r = records.record(Request, (3, "m", "s", 0.5, 1.5, None, 2))
    assert type(r) is Request and r == Request(3, "m", "s", 0.5, 1.5, None, 2)
    assert records.field(r, records.REQUEST_DEADLINE_S) == r.deadline_s == 1.5
    assert records.field(r, records.REQUEST_ROWS) == r.rows == 2


def test_the_fixed_arity_records_are_record_of_their_fields():
    step = records.record4(RouteStep, 0, "w0", 0.25, (0, 3))
    d = records.record4(Dispatch, 7, "m", (), (step,))
    made = [
        (records.record2(SetTimer, 1.5, ("m", 1.5)), SetTimer(1.5, ("m", 1.5))),
        (step, RouteStep(0, "w0", 0.25, (0, 3))),
        (d, Dispatch(7, "m", (), (step,))),
        (
            records.record7(Request, 3, "m", "s", 0.5, 1.5, None, 2),
            Request(3, "m", "s", 0.5, 1.5, None, 2),
        ),
    ]
    report = ("stage", 7, "m", 0, "w0", 0.25, 0.5, (), True, True, "", (0, 3), 3, None, None)
    made.append((records.record15(StageReport, *report), StageReport(*report)))
    for got, want in made:
        assert type(got) is type(want) and got == want


def test_fields_unpacks_a_record_as_its_class_does():
    d = Dispatch(7, "m", (), ())
    bid, model, reqs, route = records.fields(d)
    assert (bid, model, reqs, route) == (d.batch_id, d.model, d.requests, d.route)
