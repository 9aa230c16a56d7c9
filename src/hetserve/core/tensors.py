"""A model's input and output tensors as a client sees them (the Open Inference Protocol's
metadata): name, datatype and shape of one request, without the batch dimension.

They come from the zoo model (``hetserve.zoo.export`` writes them into the shipped graph
JSON as ``inputs`` and ``outputs``), so that a server advertises and accepts the same
tensors whether its workers are real or emulated, and without torch.

``value_range`` bounds integer inputs: token ids must lie in ``[0, vocab)``, or the
embedding lookup fails.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hetserve.core.errors import ConfigError

# KServe v2 datatypes hetserve's models use, and their NumPy dtype names
DATATYPES = {
    "FP32": "float32",
    "FP16": "float16",
    "FP64": "float64",
    "INT64": "int64",
    "INT32": "int32",
    "INT8": "int8",
    "UINT8": "uint8",
    "BOOL": "bool",
}
TORCH_TO_DATATYPE = {
    "torch.float32": "FP32",
    "torch.float16": "FP16",
    "torch.float64": "FP64",
    "torch.int64": "INT64",
    "torch.int32": "INT32",
    "torch.int8": "INT8",
    "torch.uint8": "UINT8",
    "torch.bool": "BOOL",
}


@dataclass(frozen=True)
class TensorSpec:
    name: str
    datatype: str  # KServe v2 name: FP32, INT64, ...
    shape: tuple[int, ...]  # one request's, without the batch dimension
    value_range: tuple[int, int] | None = None  # integer inputs: [low, high)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "datatype": self.datatype,
            "shape": list(self.shape),
        }
        if self.value_range is not None:
            out["value_range"] = list(self.value_range)
        return out

    @staticmethod
    def from_json(row: Any, where: str) -> TensorSpec:
        if not isinstance(row, dict):
            raise ConfigError(f"{where}: expected an object with name, datatype, shape")
        try:
            name, dt, shape = row["name"], row["datatype"], row["shape"]
        except KeyError as e:
            raise ConfigError(f"{where}: missing field {e}") from None
        if not isinstance(name, str) or not name:
            raise ConfigError(f"{where}.name: expected a non-empty string, got {name!r}")
        if dt not in DATATYPES:
            raise ConfigError(f"{where}.datatype: expected one of {', '.join(DATATYPES)}")
        if not isinstance(shape, list) or not all(isinstance(s, int) and s > 0 for s in shape):
            raise ConfigError(f"{where}.shape: expected a list of positive integers")
        vr = row.get("value_range")
        if vr is not None and (
            not isinstance(vr, list)
            or len(vr) != 2
            or not all(isinstance(v, int) for v in vr)
            or vr[0] >= vr[1]
        ):
            raise ConfigError(f"{where}.value_range: expected [low, high) integers")
        return TensorSpec(name, dt, tuple(shape), None if vr is None else (vr[0], vr[1]))


def default_inputs(input_shape: tuple[int, ...]) -> tuple[TensorSpec, ...]:
    """For graph files written before tensors were recorded: one FP32 input."""
    return (TensorSpec("input", "FP32", tuple(input_shape)),)
