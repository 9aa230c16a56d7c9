"""DeepPlan's layers.csv: the format, the DLPack wrapper (on the CPU) and, where CUDA is
present, the measurement itself."""

import gc

import pytest

from hetserve.core.errors import ConfigError
from hetserve.profiling.layers import (
    LAYER_COLUMNS,
    LayerRow,
    read_layers_csv,
    write_layers_csv,
)


def test_layers_csv_round_trip(tmp_path):
    rows = [
        LayerRow("resnet18", 0, "Conv2d", 37632, 5.1, 21.25, 48.0),
        LayerRow("resnet18", 1, "BatchNorm2d", 512, 1.0, 3.5, 4.0),
        LayerRow("bert-base", 0, "Embedding", 93763584, 900.0, 12.0, 15.5),
    ]
    path = write_layers_csv(rows, tmp_path / "layers.csv")
    assert path.read_text().splitlines()[0] == ",".join(LAYER_COLUMNS) + ",gpu,batch"
    assert read_layers_csv(path) == rows


@pytest.mark.parametrize(
    "line, msg",
    [
        ("m,0,Conv2d,-1,1,1,1", "layers.csv:2: field 'param_bytes': expected an integer >= 0"),
        ("m,0,Conv2d,10,x,1,1", "field 'load_us': expected a non-negative number"),
        ("m,0,Conv2d,10,1,nan,1", "field 'exec_gpu_us'"),
        ("m,1,Conv2d,10,1,1,1", "layers must be numbered 0, 1, ... in order; expected 0, got 1"),
        (",0,Conv2d,10,1,1,1", "field 'model': expected a model name"),
        ("m,0,Conv2d,10,1,1", "layers.csv:2: expected 7 fields"),
    ],
)
def test_bad_layers_csv_names_file_line_and_field(tmp_path, line, msg):
    path = tmp_path / "layers.csv"
    path.write_text(",".join(LAYER_COLUMNS) + "\n" + line + "\n")
    with pytest.raises(ConfigError, match=msg.replace("(", r"\(").replace(".", r"\.")):
        read_layers_csv(path)


def test_a_dlpack_capsule_shares_memory_and_frees_it():
    """The capsule the CUDA alias is made of, checked on the CPU: the tensor torch makes of
    it has the buffer's shape, dtype and values, writes go to the same memory, and the
    buffer is released when the tensor is dropped."""
    torch = pytest.importorskip("torch")
    from hetserve.profiling import layers

    for dtype in (torch.float32, torch.float16, torch.int64):
        src = torch.arange(12, dtype=dtype).reshape(3, 4)
        t = torch.from_dlpack(layers.dlpack_capsule(src, layers.KDL_CPU))
        assert t.shape == (3, 4) and t.dtype == dtype and torch.equal(t, src)
        src[1, 2] = 99
        assert t[1, 2].item() == 99  # the same memory, not a copy
        assert t.data_ptr() == src.data_ptr()
        n = len(layers._ALIVE)
        del t
        gc.collect()
        assert len(layers._ALIVE) == n - 1  # the deleter ran
    with pytest.raises(Exception, match="contiguous"):
        layers.dlpack_capsule(torch.zeros(4, 4).t(), layers.KDL_CPU)


def test_measurement_needs_cuda():
    torch = pytest.importorskip("torch")
    from hetserve.core.errors import HetserveError
    from hetserve.profiling.layers import measure_layers

    if torch.cuda.is_available():
        pytest.skip("CUDA is present: the measurement test below runs instead")
    with pytest.raises(HetserveError, match="CUDA is not available"):
        measure_layers("resnet18", "cuda")
    with pytest.raises(HetserveError, match="device must be cpu or cuda"):
        measure_layers("resnet18", "tpu")


def test_measurement_on_cuda():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    from hetserve.profiling.layers import measure_layers

    rows = measure_layers("resnet18", "cuda", batch=1, warmup=1, repeats=3)
    assert [r.layer for r in rows] == list(range(len(rows)))
    assert all(r.exec_gpu_us > 0 and r.exec_host_us > 0 for r in rows)
    assert all(r.load_us > 0 for r in rows if r.param_bytes > 0)
    big = max(rows, key=lambda r: r.param_bytes)
    assert big.exec_host_us > big.exec_gpu_us  # weights over PCIe are slower to read


def test_measured_rows_carry_the_catalog_name_that_plan_deepplan_selects(
    monkeypatch, tmp_path, capsys
):
    """A measured layers.csv names its GPU as the catalog does (``V100-16GB``), not as the
    driver does (``Tesla V100-SXM2-16GB``), so ``plan --planner deepplan --layers`` finds
    its rows. torch.cuda is faked and the CPU run stands in for the CUDA one (which needs a
    GPU): the rows carry whatever ``device_name`` gives for the device."""
    import dataclasses
    from types import SimpleNamespace

    torch = pytest.importorskip("torch")
    from hetserve.cli import main
    from hetserve.profiling import layers, measure

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Tesla V100-SXM2-16GB")
    monkeypatch.setattr(
        torch.cuda,
        "get_device_properties",
        lambda device=None: SimpleNamespace(total_memory=16 * 2**30),
    )
    assert measure.device_name("cuda:0") == "V100-16GB"
    asked = []

    def name(device):
        asked.append(device)
        return measure.device_name("cuda:0")

    monkeypatch.setattr(layers, "device_name", name)
    rows = layers.measure_layers("resnet18", "cpu", batch=1, warmup=0, repeats=1)
    monkeypatch.undo()
    assert asked == ["cpu"] and {r.gpu for r in rows} == {"V100-16GB"}
    good = write_layers_csv(rows, tmp_path / "layers.csv")
    raw = [dataclasses.replace(r, gpu="Tesla V100-SXM2-16GB") for r in rows]
    bad = write_layers_csv(raw, tmp_path / "raw.csv")  # what was written before
    plan = ["plan", "--planner", "deepplan", "--cluster", "p3-8xlarge", "--models", "resnet18"]
    out = tmp_path / "dp.json"
    assert main([*plan, "--layers", str(good), "--output", str(out)]) == 0
    capsys.readouterr()
    assert main([*plan, "--layers", str(bad), "--output", str(out)]) == 2
    assert "no layers of model resnet18 on V100-16GB" in capsys.readouterr().err
