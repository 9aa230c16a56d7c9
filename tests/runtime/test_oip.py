"""The infer request codec: every malformed request is a RequestError naming the tensor or
field; any JSON body either parses or is refused that way (hypothesis)."""

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hetserve.core.graph import get_graph
from hetserve.runtime.oip import ModelTensors, RequestError, parse_request, split_body


def _tensors(model, max_batch=64):
    g = get_graph(model)
    return ModelTensors(g.inputs, g.outputs, max_batch)


RESNET = _tensors("resnet18")
BERT = _tensors("bert-base")


def _req(shape, dt="FP32", name="input", data=None, **extra):
    n = math.prod(shape)
    body = {"inputs": [{"name": name, "shape": shape, "datatype": dt,
                        "data": [0.5] * n if data is None else data}]}  # fmt: skip
    body.update(extra)
    return body


def _ids(shape, value=5, **extra):
    return _req(shape, "INT64", "input_ids", [value] * math.prod(shape), **extra)


@pytest.mark.parametrize(
    "model, body, message",
    [
        (RESNET, _req([1, 3, 224, 223]), "shape [1, 3, 224, 223], expected [-1, 3, 224, 224]"),
        (RESNET, _req([1, 3, 32, 32]), "shape [1, 3, 32, 32], expected"),
        (RESNET, _req([1, 150528]), "shape [1, 150528], expected"),
        (RESNET, _req([1, 1, 224, 224]), "shape [1, 1, 224, 224], expected"),
        (RESNET, _req([20000, 1]), "shape [20000, 1], expected"),
        (RESNET, _req([1, 3, 224, 224], name="INPUT__0"), "unknown input 'INPUT__0'"),
        (RESNET, _req([1, 3, 224, 224], outputs=[{"name": "foo"}]), "unknown output 'foo'"),
        (RESNET, _req([1, 3, 224, 224], dt="INT64"), "datatype 'INT64', expected 'FP32'"),
        (RESNET, _req([1, 3, 224, 224], parameters=[1, 2]), "'parameters' must be an object"),
        (RESNET, _req([1, 3, 224, 224], data=["a"] * 150528), "data has strings"),
        (RESNET, _req([1, 3, 224, 224], data=[True] * 150528), "data has booleans"),
        (RESNET, _req([1, 3, 224, 224], data=[1e39] * 150528), "beyond the largest FP32"),
        (RESNET, _req([1, 3, 224, 224], data=[0.5] * 3), "data has 3 values"),
        (RESNET, _req([1, 3, 224, 224], parameters={"priority": 2}), "priority 2 is not"),
        (RESNET, _req([1, 3, 224, 224], parameters={"timeout": -1}), "timeout must be"),
        (RESNET, _req([1, 3, 224, 224], parameters={"sequence_id": 1}), "sequence batching"),
        (RESNET, _req([1, 3, 224, 224], id=7), "'id' must be a string"),
        (RESNET, _req([1, 3, 224, 224], extra=1), "unknown request field(s) 'extra'"),
        (
            RESNET,
            _req([1, 3, 224, 224], parameters={"timeout": 5, "deadline_ms": 5}),
            "not both",
        ),
        (BERT, _ids([1, 128], 99999), "value 99999 out of range; expected 0 <= value < 30522"),
        (BERT, _ids([1, 128], -1), "value -1 out of range"),
        (BERT, _req([1, 128], "INT64", "input_ids", [1.5] * 128), "INT64 needs integers"),
        (BERT, _req([1, 128], "FP32", "input_ids"), "datatype 'FP32', expected 'INT64'"),
        (BERT, _ids([65, 128]), "batch dimension 65, expected 1 to 64"),
        (BERT, _ids([0, 128]), "batch dimension 0"),
        (BERT, {"inputs": [_ids([1, 128])["inputs"][0]] * 2}, "given twice"),
        (BERT, {"inputs": []}, "'inputs' must be a list of tensors"),
        (BERT, _req([2, 128], "INT64", "input_ids", [[5] * 128, [5] * 127]), "ragged"),
    ],
)
def test_malformed_requests_name_the_problem(model, body, message):
    with pytest.raises(RequestError) as e:
        parse_request(body, b"", model, decode=False)
    assert message in str(e.value)
    assert "\n" not in str(e.value)


def test_valid_requests_parse_flat_and_nested():
    r = parse_request(_ids([2, 128]), b"", BERT, decode=False)
    assert r.n == 2 and r.deadline_s is None
    nested = _req([2, 128], "INT64", "input_ids", [[5] * 128] * 2, parameters={"timeout": 250})
    r = parse_request(nested, b"", BERT, decode=False)
    assert r.n == 2 and r.deadline_s == pytest.approx(250e-6)


def test_parameters_are_free_form_except_where_ignoring_would_change_the_answer():
    """The protocol's parameters are free-form: a KServe client's ``content_type`` (on the
    request and on an input) is accepted and ignored; sequence batching and shared-memory
    inputs are refused, since ignoring them would answer another question."""
    body = _ids([1, 128], parameters={"content_type": "np", "x-trace": 1})
    body["inputs"][0]["parameters"] = {"content_type": "np"}
    r = parse_request(body, b"", BERT, decode=False)
    assert r.n == 1 and r.deadline_s is None
    shm = _ids([1, 128])
    shm["inputs"][0]["parameters"] = {"shared_memory_region": "r0"}
    with pytest.raises(RequestError, match="shared-memory extension is not supported"):
        parse_request(shm, b"", BERT, decode=False)


def test_nan_and_infinity_are_not_json():
    for token in ("NaN", "Infinity", "-Infinity"):
        raw = json.dumps(_req([1, 3, 224, 224])).replace("0.5", token, 1).encode()
        with pytest.raises(RequestError, match="not JSON"):
            split_body(raw, None)


def test_binary_inputs_are_checked():
    import numpy as np

    blob = np.full(128, 7, dtype="<i8").tobytes()
    body = {"inputs": [{"name": "input_ids", "shape": [1, 128], "datatype": "INT64",
                        "parameters": {"binary_data_size": len(blob)}}]}  # fmt: skip
    assert parse_request(body, blob, BERT, decode=False).n == 1
    with pytest.raises(RequestError, match="out of range"):
        parse_request(body, np.full(128, 10**6, dtype="<i8").tobytes(), BERT, decode=False)
    fbody = {"inputs": [{"name": "input", "shape": [1, 3, 224, 224], "datatype": "FP32",
                         "parameters": {"binary_data_size": 602112}}]}  # fmt: skip
    nan = np.zeros(150528, dtype="<f4")
    nan[7] = np.nan
    with pytest.raises(RequestError, match="NaN or infinite"):
        parse_request(fbody, nan.tobytes(), RESNET, decode=False)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)
fields = st.fixed_dictionaries(
    {},
    optional={
        "id": json_values,
        "inputs": st.lists(
            st.fixed_dictionaries(
                {},
                optional={
                    "name": st.sampled_from(["input", "input_ids", "x"]) | json_values,
                    "shape": st.lists(st.integers(-2, 300), max_size=4) | json_values,
                    "datatype": st.sampled_from(["FP32", "INT64", "BYTES"]) | json_values,
                    "data": st.lists(st.integers(-5, 40000) | st.floats(), max_size=300)
                    | json_values,
                    "parameters": json_values,
                },
            ),
            max_size=3,
        )
        | json_values,
        "outputs": json_values,
        "parameters": json_values,
    },
)


@settings(max_examples=300, deadline=None)
@given(body=fields | json_values)
def test_any_json_body_parses_or_is_refused_with_a_request_error(body):
    raw = json.dumps(body).encode()
    for model in (RESNET, BERT):
        try:
            parsed, binary = split_body(raw, None)
            r = parse_request(parsed, binary, model, decode=False)
        except RequestError as e:
            assert str(e) and "\n" not in str(e)
        else:
            assert 1 <= r.n <= model.max_batch
