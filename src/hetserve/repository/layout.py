"""A model repository in Triton's layout, read without torch.

::

    REPO/
      <model>/
        config.yaml          optional: what cannot be derived from the model
        <version>/           a positive integer
          model.pt2          a torch.export program (torch.export.save), batch dimension dynamic
        | model.py + *.safetensors    trusted Python building the nn.Module; its weights
        | config.json + *.safetensors a Hugging Face model folder (the ``transformers`` extra)

Pickled weights (``.pt``, ``.pth``, ``.bin``, ``.ckpt``, ``.pkl``) are refused: loading a
pickle runs whatever code it names. ``model.py`` is the one place a repository runs its
own code, by design (docs/repository.md, "Trust").

``config.yaml`` (every key optional; an unknown key is an error)::

    max_batch_size: 32        # rows per batch the model is exported and served for
    slo_ms: 100               # the model's latency SLO (default: as for zoo models)
    datatype: fp32            # fp32 | fp16 | bf16: the weights' and floating inputs' type
    inputs:                   # names, datatypes and fixed shapes (no batch dimension)
      - {name: input_ids, datatype: INT64, shape: [128], value_range: [0, 30522]}
    outputs: [logits]         # output names, in the model's order
    version_policy: {latest: 1}   # or: all, or {specific: [1, 3]} (Triton's policies)
    blocks: 10                # blocks to pre-partition the model into for planning
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from hetserve.core.errors import ConfigError
from hetserve.core.files import read_yaml
from hetserve.core.tensors import DATATYPES

PICKLES = (".pt", ".pth", ".bin", ".ckpt", ".pkl", ".pickle")
FORMATS = ("pt2", "python", "huggingface")
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


class TensorConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    datatype: str | None = None
    shape: list[int] | None = None
    value_range: list[int] | None = None  # integer inputs: [low, high)

    @field_validator("datatype")
    @classmethod
    def _dt(cls, v: str | None) -> str | None:
        if v is not None and v not in DATATYPES:
            raise ValueError(f"expected one of {', '.join(DATATYPES)}")
        return v

    @field_validator("shape")
    @classmethod
    def _shape(cls, v: list[int] | None) -> list[int] | None:
        if v is not None and not all(isinstance(s, int) and s > 0 for s in v):
            raise ValueError("expected positive integers (no batch dimension)")
        return v


class ModelConfig(BaseModel):
    """``REPO/<model>/config.yaml`` (module docstring)."""

    model_config = ConfigDict(extra="forbid")
    max_batch_size: int = Field(32, ge=1, le=4096)
    slo_ms: float | None = Field(None, gt=0, le=3_600_000)
    datatype: Literal["fp32", "fp16", "bf16"] = "fp32"
    inputs: list[TensorConfig] | None = None
    outputs: list[str] | None = None
    version_policy: Any = Field(default_factory=lambda: {"latest": 1})
    blocks: int | None = Field(None, ge=1, le=1000)

    @field_validator("version_policy")
    @classmethod
    def _policy(cls, v: Any) -> Any:
        if v == "all" or v == {"all": {}} or v == {"all": None}:
            return "all"
        if isinstance(v, dict) and len(v) == 1:
            ((k, x),) = v.items()
            if k == "latest" and isinstance(x, int) and x >= 1:
                return {"latest": x}
            if (
                k == "specific"
                and isinstance(x, list)
                and x
                and all(isinstance(i, int) and i >= 1 for i in x)
            ):
                return {"specific": sorted(set(x))}
        raise ValueError("expected all, {latest: N} (N >= 1) or {specific: [versions]}")


@dataclass(frozen=True)
class Version:
    number: int
    path: Path
    format: str  # one of FORMATS
    error: str | None = None  # why it cannot load (found while scanning)

    def files(self) -> list[Path]:
        return sorted(p for p in self.path.rglob("*") if p.is_file())

    def digest(self, config: ModelConfig) -> str:
        """A hash of the version's files and the model's configuration."""
        h = hashlib.sha256(config.model_dump_json().encode())
        for p in self.files():
            h.update(str(p.relative_to(self.path)).encode())
            with p.open("rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    h.update(chunk)
        return h.hexdigest()[:20]


@dataclass(frozen=True)
class VersionState:
    """A version's state as the repository index shows it (Triton's states)."""

    version: int
    state: Literal["READY", "UNAVAILABLE"]
    reason: str = ""


@dataclass
class RepoModel:
    name: str
    path: Path
    config: ModelConfig
    versions: dict[int, Version] = field(default_factory=dict)

    def served(self) -> list[int]:
        """The versions the version policy serves (newest last)."""
        nums = sorted(self.versions)
        pol = self.config.version_policy
        if pol == "all":
            return nums
        if "latest" in pol:
            return nums[-pol["latest"] :]
        return [v for v in nums if v in pol["specific"]]

    def default_version(self) -> Version:
        """The newest served version: the one planning and simulation use."""
        served = self.served()
        if not served:
            pol = self.config.version_policy
            raise ConfigError(
                f"{self.path}: no version to serve (versions on disk: "
                f"{sorted(self.versions) or 'none'}; version_policy: {pol})"
            )
        return self.versions[served[-1]]


def detect_format(path: Path) -> tuple[str, str | None]:
    """The version folder's format, and why it cannot load (None when it can)."""
    names = {p.name for p in path.iterdir()} if path.is_dir() else set()
    pickles = sorted(n for n in names if n.endswith(PICKLES))
    tensors = sorted(n for n in names if n.endswith(".safetensors"))
    if "model.pt2" in names:
        return "pt2", None
    if pickles:
        return "", (
            f"{path / pickles[0]}: pickled weights are refused (loading a pickle runs the "
            f"code it names); save them with safetensors (safetensors.torch.save_file) or "
            f"export the model with torch.export.save as model.pt2"
        )
    if "model.py" in names:
        if not tensors:
            return "python", f"{path}: model.py needs its weights as *.safetensors beside it"
        return "python", None
    if "config.json" in names:
        if not tensors:
            return "huggingface", (
                f"{path}: a Hugging Face folder needs its weights as *.safetensors "
                f"(save_pretrained(..., safe_serialization=True))"
            )
        return "huggingface", None
    return "", (
        f"{path}: expected model.pt2, model.py with *.safetensors, or a Hugging Face folder "
        f"(config.json with *.safetensors); found {', '.join(sorted(names)) or 'nothing'}"
    )


def read_config(path: Path) -> ModelConfig:
    if not path.exists():
        return ModelConfig()
    data = read_yaml(path, "model configuration")
    if data is None:
        return ModelConfig()
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of configuration keys")
    try:
        return ModelConfig.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(str(x) for x in err["loc"])
        if err["type"] == "extra_forbidden":
            keys = ", ".join(ModelConfig.model_fields)
            raise ConfigError(f"{path}: unknown key {where!r}; expected one of: {keys}") from None
        raise ConfigError(f"{path}: {where}: {err['msg']}") from None
