"""The Open Inference Protocol's (KServe v2) infer request and response, checked against
the model's tensors before any work is spent on them.

A request is checked in full: the body is a JSON object (NaN and Infinity are not JSON);
``id`` a string; ``inputs`` holds each of the model's inputs once, by name, with the
model's datatype and a shape ``[n, *the model's shape]`` with ``1 <= n <= max_batch``; the
data (flat or nested JSON numbers of that datatype, or raw little-endian bytes with the
binary tensor extension) has exactly ``prod(shape)`` finite values within the datatype's
range (token ids within the model's vocabulary); ``outputs`` names only the model's
outputs; ``parameters`` holds only parameters the server honours. Every violation is a
``RequestError`` whose message names the tensor or field, what was sent and what was
expected (the front end answers it with 400).

Request parameters: ``deadline_ms`` (hetserve) or ``timeout`` (Triton, microseconds) set
the request's deadline, relative to its arrival (default: the model's SLO);
``binary_data_output`` asks for raw output bytes; ``stream`` (hetserve) names the client's
stream, which a MagicBatch plan queues by (and whose deadline is then the default).
Triton's ``priority`` is rejected unless
0 (hetserve schedules by deadline: send a tighter ``timeout`` instead), and so are
sequence parameters (no sequence batching). Output parameters: ``binary_data``.

Each of the ``n`` rows is served as its own request and batched by the scheduler.

Responses carry only the requested outputs (all when none are named). A JSON response
cannot hold NaN or infinity: such output values are written as ``null`` and the output's
``parameters.non_finite`` counts them (binary outputs carry them as they are).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from hetserve.core.tensors import DATATYPES, TensorSpec

HEADER_LEN = "Inference-Header-Content-Length"
REQUEST_PARAMETERS = ("deadline_ms", "timeout", "priority", "binary_data_output", "stream")
MAX_STREAM_NAME = 128
_INT_KINDS = "iu"
_LITTLE = {k: np.dtype(v).newbyteorder("<") for k, v in DATATYPES.items()}


class RequestError(ValueError):
    """A malformed request: the message names the field, what was sent and what was
    expected."""


@dataclass(frozen=True)
class ModelTensors:
    """What a served model accepts and returns."""

    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    max_batch: int  # rows (requests) in one infer request, at most


@dataclass
class InferRequest:
    n: int  # rows: the batch dimension; one request of n rows, which go to the GPU together
    batch: Any  # the input, the rows first (a tensor, or a tuple for several inputs; None
    # when the workers are emulated)
    deadline_s: float | None
    id: str | None
    outputs: list[str]  # requested output names (empty: all)
    binary_outputs: set[str]
    stream: str | None = None  # the client's stream (MagicBatch's device), if it names one


def _reject_constant(name: str) -> Any:
    raise RequestError(f"request body contains {name}, which is not JSON (send finite numbers)")


_DECODER = json.JSONDecoder(parse_constant=_reject_constant)  # one decoder: json.loads with
# keyword arguments builds a new one per call (~30 us)


def split_body(raw: bytes, header_length: bytes | None) -> tuple[dict[str, Any], Any]:
    """The JSON part (an object) and the binary part of a body."""
    try:
        n_json = len(raw) if header_length is None else int(header_length)
        if not 0 <= n_json <= len(raw):
            raise ValueError
    except ValueError:
        shown = None if header_length is None else header_length.decode("latin-1")
        raise RequestError(
            f"{HEADER_LEN} must be an integer within the body's {len(raw)} bytes, got {shown!r}"
        ) from None
    view = memoryview(raw)
    try:
        body = _DECODER.decode(str(view[:n_json], "utf-8"))
    except RequestError:
        raise
    except (ValueError, UnicodeDecodeError) as e:
        raise RequestError(f"request body is not JSON ({e})") from None
    if not isinstance(body, dict):
        raise RequestError(f"request body must be a JSON object, got {type(body).__name__}")
    return body, view[n_json:]  # no copy of the binary part


def parse_request(
    body: dict[str, Any], binary: bytes, model: ModelTensors, decode: bool
) -> InferRequest:
    """Check a request against the model; ``decode``: build the rows' tensors (real
    workers), else only check them (emulated workers)."""
    rid = body.get("id")
    if rid is not None and not isinstance(rid, str):
        raise RequestError(f"'id' must be a string, got {json.dumps(rid)[:40]}")
    unknown = sorted(set(body) - {"id", "inputs", "outputs", "parameters"})
    if unknown:
        raise RequestError(
            f"unknown request field(s) {', '.join(map(repr, unknown))}; expected id, inputs, "
            f"outputs, parameters"
        )
    deadline_s, binary_all, stream = _request_parameters(body.get("parameters"))
    outputs, binary_outs = _requested_outputs(body.get("outputs"), model)
    if binary_all:
        binary_outs = set(outputs or [o.name for o in model.outputs])
    inputs = body.get("inputs")
    if not isinstance(inputs, list) or not inputs:
        raise RequestError(
            f"'inputs' must be a list of tensors; the model takes "
            f"{', '.join(repr(s.name) for s in model.inputs)}"
        )
    by_name: dict[str, dict[str, Any]] = {}
    for i, t in enumerate(inputs):
        if not isinstance(t, dict):
            raise RequestError(f"inputs[{i}] must be an object with name, datatype, shape, data")
        name = t.get("name")
        if not isinstance(name, str):
            raise RequestError(f"inputs[{i}]: missing or non-string 'name'")
        if name in by_name:
            raise RequestError(f"input {name!r} is given twice")
        by_name[name] = t
    expected = {s.name: s for s in model.inputs}
    extra = [n for n in by_name if n not in expected]
    if extra:
        raise RequestError(
            f"unknown input {extra[0]!r}; the model takes {', '.join(repr(n) for n in expected)}"
        )
    missing = [n for n in expected if n not in by_name]
    if missing:
        raise RequestError(f"missing input {missing[0]!r}")
    offset = 0
    arrays = []
    n_rows = None
    for spec in model.inputs:
        t = by_name[spec.name]
        n, arr, used = _tensor(t, spec, model.max_batch, binary, offset, decode)
        offset += used
        if n_rows is not None and n != n_rows:
            raise RequestError(
                f"input {spec.name!r} has batch {n}, but the other inputs have {n_rows}"
            )
        n_rows = n
        arrays.append(arr)
    if offset != len(binary):
        raise RequestError(
            f"{len(binary)} bytes follow the JSON part, but the inputs' binary_data_size "
            f"add up to {offset}"
        )
    assert n_rows is not None
    batch: Any = None
    if decode:
        import torch

        tensors = [torch.from_numpy(a) for a in arrays]
        batch = tensors[0] if len(tensors) == 1 else tuple(tensors)
    return InferRequest(n_rows, batch, deadline_s, rid, outputs, binary_outs, stream)


def _request_parameters(params: Any) -> tuple[float | None, bool, str | None]:
    if params is None:
        return None, False, None
    if not isinstance(params, dict):
        raise RequestError(
            f"'parameters' must be an object, got {type(params).__name__} {json.dumps(params)[:40]}"
        )
    # the protocol's parameters are free-form: others are ignored (KServe's clients send
    # ``content_type``, for one), except those whose meaning ignoring them would change
    unknown = sorted(set(params) - set(REQUEST_PARAMETERS))
    seq = [k for k in unknown if k.startswith("sequence_")]
    if seq:
        raise RequestError(f"parameters.{seq[0]}: sequence batching is not supported")
    deadline_s = None
    if "deadline_ms" in params:
        d = params["deadline_ms"]
        if not _positive_number(d):
            raise RequestError(
                f"parameters.deadline_ms must be a positive number of milliseconds, got {d!r}"
            )
        deadline_s = d / 1e3
    if "timeout" in params:
        us = params["timeout"]
        if isinstance(us, bool) or not isinstance(us, int) or us <= 0:
            raise RequestError(
                f"parameters.timeout must be a positive integer of microseconds, got {us!r}"
            )
        if deadline_s is not None:
            raise RequestError("give parameters.timeout or parameters.deadline_ms, not both")
        deadline_s = us / 1e6
    if "priority" in params:
        p = params["priority"]
        if isinstance(p, bool) or not isinstance(p, int) or p < 0:
            raise RequestError(f"parameters.priority must be a non-negative integer, got {p!r}")
        if p != 0:
            raise RequestError(
                f"parameters.priority {p} is not supported: hetserve schedules by deadline; "
                f"send a shorter parameters.timeout (us) or deadline_ms instead"
            )
    bo = params.get("binary_data_output", False)
    if not isinstance(bo, bool):
        raise RequestError(f"parameters.binary_data_output must be true or false, got {bo!r}")
    stream = params.get("stream")
    if stream is not None and not (
        isinstance(stream, str)
        and 0 < len(stream) <= MAX_STREAM_NAME
        and stream.isprintable()
        and stream.strip() == stream
    ):
        raise RequestError(
            f"parameters.stream must be a stream name (1-{MAX_STREAM_NAME} printable "
            f"characters, no surrounding spaces), got {json.dumps(stream)[:60]}"
        )
    return deadline_s, bo, stream


def _positive_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x > 0


def _requested_outputs(outs: Any, model: ModelTensors) -> tuple[list[str], set[str]]:
    if outs is None:
        return [], set()
    if not isinstance(outs, list):
        raise RequestError("'outputs' must be a list of requested outputs")
    known = [o.name for o in model.outputs]
    names: list[str] = []
    binary: set[str] = set()
    for i, o in enumerate(outs):
        name = o.get("name") if isinstance(o, dict) else None
        if not isinstance(name, str):
            raise RequestError(f"outputs[{i}] must be an object with a 'name'")
        if name not in known:
            raise RequestError(
                f"unknown output {name!r}; the model returns {', '.join(map(repr, known))}"
            )
        if name in names:
            raise RequestError(f"output {name!r} is requested twice")
        p = o.get("parameters") or {}
        if not isinstance(p, dict):
            raise RequestError(f"outputs[{i}].parameters must be an object")
        for key, v in p.items():
            if key != "binary_data":
                raise RequestError(
                    f"outputs[{i}].parameters.{key} is not supported (only binary_data)"
                )
            if not isinstance(v, bool):
                raise RequestError(f"outputs[{i}].parameters.binary_data must be true or false")
            if v:
                binary.add(name)
        names.append(name)
    return names, binary


def _tensor(
    t: dict[str, Any], spec: TensorSpec, max_batch: int, binary: bytes, offset: int, decode: bool
) -> tuple[int, Any, int]:
    """Check one input tensor: its batch, its array (when decoded; else None) and the binary
    bytes it took."""
    what = f"input {spec.name!r}"
    want_shape = [-1, *spec.shape]
    dt = t.get("datatype")
    if dt != spec.datatype:
        raise RequestError(f"{what}: datatype {dt!r}, expected {spec.datatype!r}")
    shape = t.get("shape")
    if not isinstance(shape, list) or not all(
        isinstance(s, int) and not isinstance(s, bool) for s in shape
    ):
        raise RequestError(f"{what}: shape must be a list of integers, got {shape!r}")
    if len(shape) != len(want_shape) or list(shape[1:]) != list(spec.shape):
        raise RequestError(f"{what}: shape {shape}, expected {want_shape}")
    n = shape[0]
    if not 1 <= n <= max_batch:
        raise RequestError(
            f"{what}: batch dimension {n}, expected 1 to {max_batch} (the model's "
            f"max_batch_size: a request's rows go to the GPU in one batch)"
        )
    count = math.prod(shape)
    np_dtype = _LITTLE[spec.datatype]
    tparams = t.get("parameters") or {}
    if not isinstance(tparams, dict):
        raise RequestError(f"{what}: parameters must be an object")
    # free-form too (``content_type``...), but data in a shared-memory region would be
    # read from nowhere if ignored
    shm = sorted(k for k in tparams if k.startswith("shared_memory_"))
    if shm:
        raise RequestError(
            f"{what}: parameters.{shm[0]}: the shared-memory extension is not supported; "
            "send the data in the body (JSON or binary)"
        )
    size = tparams.get("binary_data_size")
    if size is not None:
        if "data" in t:
            raise RequestError(f"{what}: give data or parameters.binary_data_size, not both")
        want = count * np_dtype.itemsize
        if isinstance(size, bool) or not isinstance(size, int) or size != want:
            raise RequestError(
                f"{what}: binary_data_size {size!r}, shape {shape} of {dt} needs {want} bytes"
            )
        if offset + size > len(binary):
            raise RequestError(
                f"{what}: binary_data_size {size}, but only {len(binary) - offset} bytes "
                f"follow the JSON part"
            )
        arr = np.frombuffer(binary, dtype=np_dtype, count=count, offset=offset).reshape(shape)
        _check_values(arr, spec, what)  # (on the body's bytes: no copy unless decoded)
        if not decode:
            return n, None, size
        return n, arr.astype(np_dtype.newbyteorder("="), copy=True), size
    if "data" not in t:
        raise RequestError(f"{what}: missing 'data' (or parameters.binary_data_size)")
    arr = _json_data(t["data"], spec, shape, count, what)
    _check_values(arr, spec, what)
    return n, arr if decode else None, 0


def _json_data(data: Any, spec: TensorSpec, shape: list[int], count: int, what: str) -> Any:
    if not isinstance(data, list):
        raise RequestError(f"{what}: data must be a (flat or nested) list of numbers")
    try:
        raw = np.asarray(data)
    except ValueError:
        raise RequestError(
            f"{what}: data is a ragged nested list; expected shape {shape}"
        ) from None
    if raw.size != count:
        raise RequestError(f"{what}: data has {raw.size} values, shape {shape} needs {count}")
    if raw.ndim > 1 and list(raw.shape) != list(shape):
        raise RequestError(
            f"{what}: nested data of shape {list(raw.shape)}, expected {shape} (or a flat list)"
        )
    kind = raw.dtype.kind
    dt = spec.datatype
    if dt == "BOOL":
        if kind != "b":
            raise RequestError(f"{what}: data must be true/false values for BOOL")
    elif dt.startswith(("INT", "UINT")):
        if kind not in _INT_KINDS:
            shown = "strings" if kind in "US" else "booleans" if kind == "b" else "non-integers"
            raise RequestError(f"{what}: data has {shown}; {dt} needs integers")
    elif kind not in _INT_KINDS + "f":
        shown = "strings" if kind in "US" else "booleans" if kind == "b" else "non-numbers"
        raise RequestError(f"{what}: data has {shown}; {dt} needs numbers")
    target = np.dtype(DATATYPES[dt])
    if target.kind in _INT_KINDS:
        info = np.iinfo(target)
        if raw.size and (raw.min() < info.min or raw.max() > info.max):
            raise RequestError(f"{what}: data out of the range of {dt}")
    if target.kind == "f" and raw.size and kind == "f":
        big = float(np.abs(raw).max())
        if big > float(np.finfo(target).max):
            raise RequestError(f"{what}: data holds {big:g}, beyond the largest {dt}")
    return raw.astype(target).reshape(shape)


def _check_values(arr: Any, spec: TensorSpec, what: str) -> None:
    if arr.dtype.kind == "f" and not np.isfinite(arr).all():
        raise RequestError(f"{what}: data holds NaN or infinite values")
    if spec.value_range is not None and arr.size:
        lo, hi = spec.value_range
        if arr.min() >= lo and arr.max() < hi:
            return
        bad = (arr < lo) | (arr >= hi)
        if bad.any():
            v = arr[bad].flat[0]
            raise RequestError(
                f"{what}: value {v} out of range; expected {lo} <= value < {hi} "
                f"(the model's vocabulary)"
            )


def encode_outputs(
    output: Any, model: ModelTensors, req: InferRequest
) -> tuple[list[dict[str, Any]], list[bytes]]:
    """The output tensors of a request's answer (a tensor, or a tuple of tensors, one per
    model output; its rows first), as JSON data or as raw bytes to append."""
    names = req.outputs or [o.name for o in model.outputs]
    index = {o.name: k for k, o in enumerate(model.outputs)}
    specs = {o.name: o for o in model.outputs}
    out, blobs = [], []
    for name in names:
        k = index[name]
        t = output[k] if isinstance(output, (tuple, list)) else output
        spec = specs[name]
        arr = t.detach().cpu().numpy().astype(np.dtype(DATATYPES[spec.datatype]).newbyteorder("<"))
        entry: dict[str, Any] = {
            "name": name,
            "datatype": spec.datatype,
            "shape": list(arr.shape),
        }
        if name in req.binary_outputs:
            blob = arr.tobytes()
            entry["parameters"] = {"binary_data_size": len(blob)}
            blobs.append(blob)
        else:
            flat = arr.reshape(-1)
            if flat.dtype.kind == "f" and not np.isfinite(flat).all():
                bad = ~np.isfinite(flat)
                values = [None if b else float(v) for v, b in zip(flat.tolist(), bad, strict=True)]
                entry["parameters"] = {"non_finite": int(bad.sum())}
                entry["data"] = values
            else:
                entry["data"] = flat.tolist()
        out.append(entry)
    return out, blobs
