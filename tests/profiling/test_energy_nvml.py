"""Energy on CUDA from NVML's total-energy counter, checked on the CPU: NVML is a fake
``pynvml`` module (two GPUs whose counters are refreshed every 50 ms of a fake clock) and
torch's device properties are faked, so the handle matching, the window and the division
by the runs are what is tested; no real GPU has run this."""

import math
import statistics
import sys
import types
from types import SimpleNamespace
from typing import ClassVar

import pytest

torch = pytest.importorskip("torch")

from hetserve.profiling import measure  # noqa: E402
from hetserve.profiling.measure import (  # noqa: E402
    MIN_ENERGY_WINDOW_S,
    _Energy,
    measure_profiles,
    measure_window,
    nvml_handle,
)

pytestmark = pytest.mark.torch

UUID_A = "0f3c1d52-6a0b-4c57-9d1e-2b7a4e8c9f01"
UUID_B = "7e9d2a44-1c3f-4b68-8a05-d6c2f1e3b7a9"
REFRESH_S = 0.05  # the fake counter's refresh period


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


class FakeNvml(types.ModuleType):
    """The calls of ``pynvml`` that measure.py makes, over GPUs given as (uuid, watts); a
    GPU's counter is its energy in mJ at the last refresh of ``clock``, from 1e6 mJ."""

    class NVMLError(Exception):
        pass

    class NVMLError_NotSupported(NVMLError):
        pass

    class NVMLError_NoPermission(NVMLError):
        pass

    def __init__(self, gpus, clock, fail=None, uuid_bytes=False):
        super().__init__("pynvml")
        self.gpus, self.clock, self.fail, self.uuid_bytes = gpus, clock, fail, uuid_bytes
        self.inits = self.shutdowns = 0
        self.reads = []  # (handle, value) of every counter read

    def nvmlInit(self):
        self.inits += 1

    def nvmlShutdown(self):
        self.shutdowns += 1

    def nvmlDeviceGetCount(self):
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i):
        return ("handle", i)

    def nvmlDeviceGetUUID(self, h):
        uuid = f"GPU-{self.gpus[h[1]][0]}"
        return uuid.encode() if self.uuid_bytes else uuid

    def nvmlDeviceGetTotalEnergyConsumption(self, h):
        if self.fail is not None:
            raise self.fail
        watts = self.gpus[h[1]][1]
        refreshed = math.floor(self.clock.t / REFRESH_S + 1e-9) * REFRESH_S
        value = 10**6 + round(watts * refreshed * 1e3)
        self.reads.append((h, value))
        return value


class FakeUuid:
    """torch's ``_CUuuid``: its ``str`` is the UUID without the ``GPU-`` prefix."""

    def __init__(self, s: str) -> None:
        self.s = s

    def __str__(self) -> str:
        return self.s


@pytest.fixture
def clock():
    return Clock()


def fake_gpus(monkeypatch, clock, torch_uuids, fail=None, uuid_bytes=False):
    """NVML sees GPU A (70 W) and GPU B (250 W); torch's devices have ``torch_uuids``."""
    nvml = FakeNvml([(UUID_A, 70.0), (UUID_B, 250.0)], clock, fail, uuid_bytes)
    monkeypatch.setitem(sys.modules, "pynvml", nvml)

    def props(dev):
        index = torch.device(dev).index or 0
        return SimpleNamespace(uuid=FakeUuid(torch_uuids[index]), total_memory=40 * 2**30)

    monkeypatch.setattr(torch.cuda, "get_device_properties", props)
    return nvml


def test_the_handle_is_the_gpu_with_the_torch_devices_uuid(monkeypatch, clock):
    """CUDA_VISIBLE_DEVICES=1: torch's cuda:0 is NVML's GPU 1; its handle is chosen by UUID,
    whether NVML returns the UUID as str or bytes."""
    for uuid_bytes in (False, True):
        nvml = fake_gpus(monkeypatch, clock, [UUID_B], uuid_bytes=uuid_bytes)
        assert nvml_handle(nvml, "cuda:0") == ("handle", 1)
        assert nvml_handle(nvml, "cuda") == ("handle", 1)
    nvml = fake_gpus(monkeypatch, clock, [UUID_A, UUID_B])  # both visible
    assert nvml_handle(nvml, "cuda:1") == ("handle", 1)
    assert nvml_handle(nvml, "cuda:0") == ("handle", 0)
    energy = _Energy("cuda:1")
    assert energy.kind == "nvml" and energy.min_window_s == MIN_ENERGY_WINDOW_S
    energy.start()
    assert {h for h, _ in nvml.reads} == {("handle", 1)}
    energy.close()
    assert nvml.inits == nvml.shutdowns == 1


def test_energy_per_run_is_the_counter_delta_over_the_runs_of_a_long_enough_window(
    monkeypatch, clock
):
    nvml = fake_gpus(monkeypatch, clock, [UUID_B])
    energy = _Energy("cuda:0")
    outputs = iter(range(1000))

    def run():  # one synchronized run of a block: 30 ms
        clock.t += 0.03
        return next(outputs)

    w = measure_window(run, 3, energy, clock)
    energy.close()
    # the runs go on past the 3 timed ones until the window lasts MIN_ENERGY_WINDOW_S
    assert w.seconds >= MIN_ENERGY_WINDOW_S
    assert w.runs == math.ceil(MIN_ENERGY_WINDOW_S / 0.03 - 1e-9) and w.last == w.runs - 1
    assert w.times_s == pytest.approx([0.03] * 3)  # the latency's runs: the first `repeats`
    (_, before), (_, after) = nvml.reads[-2:]
    assert w.joules == pytest.approx((after - before) / 1e3 / w.runs)
    # within one 50 ms refresh of the truth (250 W x 30 ms), and far from the other GPU
    assert w.joules == pytest.approx(250 * 0.03, rel=REFRESH_S / MIN_ENERGY_WINDOW_S)


def test_a_window_of_more_than_the_minimum_is_not_stretched(monkeypatch, clock):
    fake_gpus(monkeypatch, clock, [UUID_B])
    energy = _Energy("cuda:0")

    def slow():
        clock.t += MIN_ENERGY_WINDOW_S / 2

    w = measure_window(slow, 5, energy, clock)
    assert w.runs == 5 and len(w.times_s) == 5  # the repeats alone last long enough
    assert w.joules == pytest.approx(250 * MIN_ENERGY_WINDOW_S / 2, rel=0.05)


@pytest.mark.parametrize(
    "fail, why",
    [
        (FakeNvml.NVMLError_NotSupported("Not Supported"), "has no total-energy counter"),
        (FakeNvml.NVMLError_NoPermission("Insufficient Permissions"), "NVML denied reading"),
        (FakeNvml.NVMLError("Unknown Error"), "could not read the energy counter"),
    ],
)
def test_a_gpu_without_the_counter_gives_no_energy_and_says_why(monkeypatch, clock, fail, why):
    nvml = fake_gpus(monkeypatch, clock, [UUID_B], fail=fail)
    energy = _Energy("cuda:0")
    assert energy.kind is None and why in energy.why and "cuda:0" in energy.why
    assert nvml.inits == nvml.shutdowns == 1  # NVML released at once
    calls = []
    w = measure_window(lambda: calls.append(1), 4, energy, clock)
    assert w.runs == 4 and w.joules is None and len(calls) == 4  # no window to wait for


def test_no_nvml_or_no_matching_gpu_gives_no_energy(monkeypatch, clock):
    fake_gpus(monkeypatch, clock, ["11111111-2222-3333-4444-555555555555"])
    energy = _Energy("cuda:0")
    assert energy.kind is None
    assert "no GPU NVML sees has the UUID of cuda:0 (GPU-11111111-" in energy.why
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml fails
    energy = _Energy("cuda:0")
    assert energy.kind is None and energy.why == "nvidia-ml-py is not installed (the nvml extra)"


class FakeEnergy:
    """An energy counter of 100 W over real time, with a 0.125 s window."""

    kind = "nvml"
    why = ""
    min_window_s = 0.125
    closed: ClassVar[list[str]] = []  # the devices of the counters closed

    def __init__(self, device: str) -> None:
        self.device = device

    def start(self):
        return measure.time.perf_counter()

    def joules(self, mark):
        return (measure.time.perf_counter() - mark) * 100.0

    def close(self):
        FakeEnergy.closed.append(self.device)


def test_measure_profiles_writes_each_windows_latency_and_energy(monkeypatch):
    """The measuring loop's wiring, on the CPU with a fake counter: every block's latency
    is the median of its window's timed runs and its energy the window's joules per run."""
    windows = []
    ticks = Clock()

    def tick():  # 1/64 s a reading (exact in binary), 2 readings a run: 4 runs fill 0.125 s
        ticks.t += 1 / 64
        return ticks.t

    def spy(run, repeats, energy):
        w = measure_window(run, repeats, energy, tick)
        windows.append(w)
        return w

    monkeypatch.setattr(measure, "_Energy", FakeEnergy)
    monkeypatch.setattr(measure, "measure_window", spy)
    monkeypatch.setattr(FakeEnergy, "closed", [])
    ps, _ = measure_profiles(["resnet18"], "cpu", (1,), (1,), n_blocks=2, warmup=0, repeats=2)
    assert FakeEnergy.closed == ["cpu"]  # the counter released (NVML shut down)
    assert len(windows) == 2
    assert all(len(w.times_s) == 2 and w.seconds >= FakeEnergy.min_window_s for w in windows)
    assert all(w.runs == 4 for w in windows)  # stretched to the window
    assert ps.latency_us[("resnet18", "CPU", 1, 1)] == pytest.approx(
        [statistics.median(w.times_s) * 1e6 for w in windows]
    )
    assert ps.energy_mj is not None
    assert ps.energy_mj[("resnet18", "CPU", 1, 1)] == pytest.approx(
        [w.joules * 1e3 for w in windows]
    )


def test_measure_profiles_says_once_why_there_is_no_energy(monkeypatch):
    class NoEnergy(FakeEnergy):
        kind = None
        why = "the reason"
        min_window_s = 0.0

    monkeypatch.setattr(measure, "_Energy", NoEnergy)
    notes = []
    ps, _ = measure_profiles(
        ["resnet18"], "cpu", (1, 2), (1,), n_blocks=2, warmup=0, repeats=1, note=notes.append
    )
    assert ps.energy_mj is None and notes == ["no energy.csv: the reason"]


def test_the_fake_has_the_real_modules_names():
    """Where nvidia-ml-py is installed: the names measure.py uses exist, and an error with
    NVML's not-supported or no-permission code is the subclass measure.py catches."""
    nvml = pytest.importorskip("pynvml")
    for fn in ("nvmlInit", "nvmlShutdown", "nvmlDeviceGetCount", "nvmlDeviceGetHandleByIndex",
               "nvmlDeviceGetUUID", "nvmlDeviceGetTotalEnergyConsumption"):  # fmt: skip
        assert callable(getattr(nvml, fn)) and hasattr(FakeNvml, fn)
    assert isinstance(nvml.NVMLError(nvml.NVML_ERROR_NOT_SUPPORTED), nvml.NVMLError_NotSupported)
    assert isinstance(nvml.NVMLError(nvml.NVML_ERROR_NO_PERMISSION), nvml.NVMLError_NoPermission)
    assert issubclass(nvml.NVMLError_NotSupported, nvml.NVMLError)
