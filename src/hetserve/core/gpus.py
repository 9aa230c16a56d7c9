"""The GPU catalog: spec-sheet facts per GPU type, case-insensitive names with aliases.

Sources (NVIDIA data sheets; figures are dense, i.e. without structured sparsity):
Tesla P4 (2016), Tesla T4 (2018), Tesla P100 PCIe (2016), Tesla V100 SXM2 (2017),
A10 (2021), A30 (2021), A100 SXM4 40/80 GB (2020/2021), L4 (2023), H100 SXM5 and PCIe
(2022), H200 SXM (2024), GeForce GTX 1080 Ti (2017), GeForce RTX 2080 Ti (2018), GeForce
RTX 3090 (2020), RTX A5000 (2021). ``fp16_tflops`` is the FP16 tensor-core peak with FP32
accumulation where the GPU has tensor cores, otherwise its plain FP16 rate (which on
Pascal consumer/inference parts is a tiny fraction of FP32, so inference runs in FP32).
``host_gbps`` is the PCIe x16 per-direction rate of the GPU's generation (GB/s: gen3 15.75,
gen4 31.5, gen5 63). ``idle_w`` is *not* a spec-sheet value: it is a typical
``nvidia-smi`` reading at idle in the default power state, used for energy accounting.

RAMPA's GPU_A..D (paper Table III) are L4, V100-32GB, A30 and T4; its Table III quotes
the FP32 figures (30.3, 14, 10.3, 8.1 TFLOPS) that match these data sheets (V100 PCIe:
14 TFLOPS; the SXM2 part listed here is 15.7).

Users add types in YAML: a list of mappings with the fields of :class:`GpuType`
(see ``docs/formats.md``), loaded with :func:`load_gpu_types`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from hetserve.core.errors import ConfigError, unknown
from hetserve.core.files import read_yaml

PCIE_GBPS = {3: 15.75, 4: 31.5, 5: 63.0}

# The catalog's prices (the cost objective's defaults; a cluster file's ``pricing``
# overrides them): on-demand US dollars per GPU-hour for the GPU alone (a VM's vCPUs and
# memory are billed apart), Google Cloud, region us-central1, as Google's Cloud Billing
# catalog lists them and SkyPilot's catalog records them: github.com/skypilot-org/
# skypilot-catalog, catalogs/v7/gcp/vms.csv at commit 017e2502fb63c7a28757acd94002b2d6099d3e3d
# (the rows with an AcceleratorName and no InstanceType; L4: its 8-GPU row / 8; V100:
# the 16 GB part, A100: the 40 GB part, by the rows' memory). Types Google does not rent
# there have no catalog price.
CATALOG_PRICE_PER_HOUR: Mapping[str, float] = MappingProxyType(
    {
        "P4": 0.60,
        "T4": 0.35,
        "P100": 1.46,
        "V100-16GB": 2.48,
        "L4": 0.56004,
        "A100-40GB": 2.93391,
    }
)


class GpuType(BaseModel):
    """Spec-sheet facts of one GPU type."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1)
    fp32_tflops: float = Field(gt=0)
    fp16_tflops: float = Field(gt=0)
    tensor_cores: bool
    memory_gb: float = Field(gt=0)
    mem_bw_gbps: float = Field(gt=0, description="memory bandwidth, GB/s")
    pcie_gen: int = Field(ge=1, le=7)
    host_gbps: float = Field(gt=0, description="host link, GB/s per direction")
    nvlink_gbps: float | None = Field(default=None, gt=0, description="NVLink GB/s, or none")
    tdp_w: float = Field(gt=0)
    idle_w: float = Field(ge=0)
    mps: bool = True
    year: int = Field(ge=2000, le=2100)
    aliases: tuple[str, ...] = ()

    @field_validator("idle_w")
    @classmethod
    def _idle_below_tdp(cls, v: float, info: Any) -> float:
        tdp = info.data.get("tdp_w")
        if tdp is not None and v >= tdp:
            raise ValueError(f"idle_w ({v}) must be below tdp_w ({tdp})")
        return v

    @property
    def inference_tflops(self) -> float:
        """Peak rate used for inference: FP16 tensor cores where present, else FP32."""
        return self.fp16_tflops if self.tensor_cores else self.fp32_tflops

    @property
    def inference_bytes_per_value(self) -> int:
        """Bytes per activation/weight value at the inference precision (2 or 4)."""
        return 2 if self.tensor_cores else 4


def _gpu(
    name: str,
    fp32: float,
    fp16: float,
    tc: bool,
    mem: float,
    bw: float,
    gen: int,
    nvlink: float | None,
    tdp: float,
    idle: float,
    mps: bool,
    year: int,
    aliases: tuple[str, ...] = (),
) -> GpuType:
    return GpuType(
        name=name,
        fp32_tflops=fp32,
        fp16_tflops=fp16,
        tensor_cores=tc,
        memory_gb=mem,
        mem_bw_gbps=bw,
        pcie_gen=gen,
        host_gbps=PCIE_GBPS[gen],
        nvlink_gbps=nvlink,
        tdp_w=tdp,
        idle_w=idle,
        mps=mps,
        year=year,
        aliases=aliases,
    )


# name, FP32, FP16(tensor), tensor cores, GB, GB/s, PCIe gen, NVLink GB/s, TDP, idle, MPS, year
BUILTIN_GPUS: tuple[GpuType, ...] = (
    _gpu("P4", 5.5, 0.09, False, 8, 192, 3, None, 75, 7, True, 2016, ("tesla-p4", "Tesla P4")),
    _gpu(
        "T4",
        8.1,
        65.0,
        True,
        16,
        320,
        3,
        None,
        70,
        10,
        True,
        2018,
        ("tesla-t4", "gpu_d", "Tesla T4"),
    ),
    _gpu(
        "P100",
        9.3,
        18.7,
        False,
        16,
        732,
        3,
        None,
        250,
        30,
        True,
        2016,
        ("p100-16gb", "tesla-p100", "Tesla P100-PCIE-16GB"),
    ),
    _gpu(
        "V100-16GB",
        15.7,
        125.0,
        True,
        16,
        900,
        3,
        300,
        300,
        40,
        True,
        2017,
        ("v100", "v100-sxm2-16gb", "tesla-v100", "Tesla V100-SXM2-16GB"),
    ),
    _gpu(
        "V100-32GB",
        15.7,
        125.0,
        True,
        32,
        900,
        3,
        300,
        300,
        40,
        True,
        2018,
        ("v100-sxm2-32gb", "gpu_b", "Tesla V100-SXM2-32GB"),
    ),
    _gpu("A10", 31.2, 125.0, True, 24, 600, 4, None, 150, 20, True, 2021, ("NVIDIA A10",)),
    _gpu("A30", 10.3, 165.0, True, 24, 933, 4, 200, 165, 30, True, 2021, ("gpu_c", "NVIDIA A30")),
    _gpu(
        "A100-40GB",
        19.5,
        312.0,
        True,
        40,
        1555,
        4,
        600,
        400,
        50,
        True,
        2020,
        ("a100", "a100-sxm4-40gb", "NVIDIA A100-SXM4-40GB"),
    ),
    _gpu(
        "A100-80GB",
        19.5,
        312.0,
        True,
        80,
        2039,
        4,
        600,
        400,
        55,
        True,
        2021,
        ("a100-sxm4-80gb", "NVIDIA A100-SXM4-80GB"),
    ),
    _gpu("L4", 30.3, 121.0, True, 24, 300, 4, None, 72, 16, True, 2023, ("gpu_a", "NVIDIA L4")),
    _gpu(
        "H100-SXM",
        67.0,
        989.0,
        True,
        80,
        3350,
        5,
        900,
        700,
        70,
        True,
        2022,
        ("h100", "h100-sxm5", "NVIDIA H100 80GB HBM3"),
    ),
    _gpu(
        "H100-PCIe", 51.0, 756.0, True, 80, 2000, 5, 600, 350, 45, True, 2022, ("NVIDIA H100 PCIe",)
    ),
    _gpu(
        "H200",
        67.0,
        989.0,
        True,
        141,
        4800,
        5,
        900,
        700,
        75,
        True,
        2024,
        ("h200-sxm", "NVIDIA H200"),
    ),
    _gpu(
        "GTX-1080-Ti",
        11.3,
        0.18,
        False,
        11,
        484,
        3,
        None,
        250,
        15,
        False,
        2017,
        ("1080ti", "gtx1080ti", "NVIDIA GeForce GTX 1080 Ti", "GeForce GTX 1080 Ti"),
    ),
    _gpu(
        "RTX-2080-Ti",
        13.4,
        53.8,
        True,
        11,
        616,
        3,
        100,
        250,
        15,
        False,
        2018,
        ("2080ti", "rtx2080ti", "NVIDIA GeForce RTX 2080 Ti", "GeForce RTX 2080 Ti"),
    ),
    _gpu(
        "RTX-3090",
        35.6,
        71.0,
        True,
        24,
        936,
        4,
        112.5,
        350,
        25,
        False,
        2020,
        ("3090", "rtx3090", "NVIDIA GeForce RTX 3090"),
    ),
    _gpu(
        "RTX-A5000",
        27.8,
        111.1,
        True,
        24,
        768,
        4,
        112.5,
        230,
        20,
        True,
        2021,
        ("a5000", "rtxa5000", "NVIDIA RTX A5000"),
    ),
)


def _key(name: str) -> str:
    return name.strip().lower().replace("_", "-").replace(" ", "-")


class GpuCatalog:
    """GPU types by case-insensitive name or alias (``V100`` is the 16 GB SXM2 part)."""

    def __init__(self, types: Iterable[GpuType] = BUILTIN_GPUS) -> None:
        self._types: dict[str, GpuType] = {}
        self._index: dict[str, str] = {}
        for t in types:
            self.add(t)

    def add(self, gpu: GpuType, *, replace: bool = False) -> None:
        keys = [_key(gpu.name), *(_key(a) for a in gpu.aliases)]
        for k in keys:
            owner = self._index.get(k)
            if owner is not None and owner != gpu.name and not replace:
                raise ConfigError(
                    f"GPU type {gpu.name!r}: name or alias {k!r} is already used by {owner!r}"
                )
        self._types[gpu.name] = gpu
        for k in keys:
            self._index[k] = gpu.name

    def get(self, name: str) -> GpuType:
        canonical = self._index.get(_key(name))
        if canonical is None:
            raise unknown("GPU type", name, self._types, self._index)
        return self._types[canonical]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and _key(name) in self._index

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self._types.values())

    def __len__(self) -> int:
        return len(self._types)

    def names(self) -> list[str]:
        return list(self._types)

    def with_types(self, extra: Iterable[GpuType]) -> GpuCatalog:
        cat = GpuCatalog(self._types.values())
        for t in extra:
            cat.add(t, replace=True)
        return cat


def parse_gpu_types(data: Any, source: str) -> list[GpuType]:
    """Validate a YAML list of GPU-type mappings; errors name ``source`` and the field."""
    if isinstance(data, Mapping) and "gpu_types" in data:
        data = data["gpu_types"]
    if not isinstance(data, list):
        raise ConfigError(
            f"{source}: expected a list of GPU types (mappings with name, "
            f"fp32_tflops, ...), got {type(data).__name__}"
        )
    out = []
    for i, item in enumerate(data):
        if not isinstance(item, Mapping):
            raise ConfigError(f"{source}: gpu_types[{i}]: expected a mapping")
        item = dict(item)
        if "pcie_gen" in item and "host_gbps" not in item:
            item["host_gbps"] = PCIE_GBPS.get(int(item["pcie_gen"]), 0) or None
        if "aliases" in item and isinstance(item["aliases"], list):
            item["aliases"] = tuple(item["aliases"])
        try:
            out.append(GpuType(**item))
        except ValidationError as e:
            raise ConfigError(
                f"{source}: gpu_types[{i}] ({item.get('name', '?')}): {pydantic_message(e)}"
            ) from None
    return out


def load_gpu_types(path: str | Path) -> list[GpuType]:
    return parse_gpu_types(read_yaml(path, "GPU types"), str(path))


def pydantic_message(err: ValidationError) -> str:
    """The first validation problem as ``field.path: what was expected``."""
    first = err.errors()[0]
    loc = ".".join(str(p) for p in first["loc"]) or "(top level)"
    msg = first["msg"]
    if first["type"] == "extra_forbidden":
        msg = "unknown field"
    elif first["type"] == "missing":
        msg = "required field is missing"
    return f"{loc}: {msg}"


DEFAULT_CATALOG = GpuCatalog()


def get_gpu(name: str) -> GpuType:
    """A built-in GPU type by name or alias."""
    return DEFAULT_CATALOG.get(name)


def gpu_type(name: str, catalog: GpuCatalog, where: str, memory_mb: float | None = None) -> GpuType:
    """The catalog type a driver's (or Ray's) GPU name stands for, exactly: the name or
    an alias (``GpuCatalog.get``). An unknown name is a one-line error saying how to add
    it; a memory far from the type's is one too (a name that maps to the wrong type)."""
    if name not in catalog:
        raise ConfigError(
            f"{where}: unknown GPU {name!r}: no catalog type has this name or alias; add it "
            f"to the catalog in the cluster YAML (gpu_types: [{{name: ..., fp32_tflops: ..., "
            f"..., aliases: [{name!r}]}}], docs/formats.md#gpu-types), or as an alias of a "
            f"type the catalog has"
        )
    t = catalog.get(name)
    if memory_mb is not None and t.memory_gb > 0:
        gb = memory_mb * 2**20 / 1e9
        if not 0.8 <= gb / t.memory_gb <= 1.25:
            raise ConfigError(
                f"{where}: GPU {name!r} has {memory_mb:.0f} MiB, but the catalog's {t.name} "
                f"has {t.memory_gb:g} GB; give it a type of its own (gpu_types in the cluster "
                f"YAML, with {name!r} as an alias)"
            )
    return t
