import pytest

from hetserve.core.errors import ConfigError, UnknownNameError
from hetserve.core.gpus import DEFAULT_CATALOG, PCIE_GBPS, get_gpu, load_gpu_types

REQUIRED = [
    "P4",
    "T4",
    "P100",
    "V100-16GB",
    "V100-32GB",
    "A10",
    "A30",
    "A100-40GB",
    "A100-80GB",
    "L4",
    "H100-SXM",
    "H100-PCIe",
    "H200",
    "GTX-1080-Ti",
    "RTX-2080-Ti",
    "RTX-3090",
    "RTX-A5000",
]


def test_catalog_has_required_types():
    for name in REQUIRED:
        assert get_gpu(name).name == name


@pytest.mark.parametrize(
    ("alias", "name"),
    [
        ("V100", "V100-16GB"),
        ("v100", "V100-16GB"),
        ("l4", "L4"),
        ("p4", "P4"),
        ("T4", "T4"),
        ("h100", "H100-SXM"),
        ("a100", "A100-40GB"),
        ("gpu_a", "L4"),
        ("GPU_B", "V100-32GB"),
        ("gpu_c", "A30"),
        ("gpu_d", "T4"),
        ("rtx_3090", "RTX-3090"),
        ("1080ti", "GTX-1080-Ti"),
    ],
)
def test_aliases_case_insensitive(alias, name):
    assert get_gpu(alias).name == name


def test_spec_facts_consistent():
    for g in DEFAULT_CATALOG:
        assert g.idle_w < g.tdp_w
        assert g.host_gbps == PCIE_GBPS[g.pcie_gen]
        assert 2010 < g.year < 2030
        assert g.inference_tflops >= g.fp32_tflops or not g.tensor_cores
    # a few data-sheet anchors
    assert get_gpu("V100").mem_bw_gbps == 900 and get_gpu("V100").fp16_tflops == 125
    assert get_gpu("L4").fp32_tflops == 30.3 and get_gpu("L4").memory_gb == 24
    assert get_gpu("T4").tdp_w == 70 and get_gpu("P4").tensor_cores is False
    assert get_gpu("H200").memory_gb == 141


def test_unknown_name_suggests_closest():
    with pytest.raises(UnknownNameError) as e:
        get_gpu("L5")
    assert "did you mean 'L4'" in str(e.value)
    with pytest.raises(UnknownNameError, match="V100"):
        get_gpu("V1OO")


def test_user_types_from_yaml(tmp_path):
    f = tmp_path / "types.yaml"
    f.write_text(
        "gpu_types:\n  - {name: MI50, fp32_tflops: 13.3, fp16_tflops: 26.5, "
        "tensor_cores: false, memory_gb: 16, mem_bw_gbps: 1024, pcie_gen: 4, "
        "tdp_w: 300, idle_w: 20, year: 2018, aliases: [radeon-mi50]}\n"
    )
    types = load_gpu_types(f)
    cat = DEFAULT_CATALOG.with_types(types)
    assert cat.get("radeon-mi50").host_gbps == 31.5
    assert "MI50" not in DEFAULT_CATALOG


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (
            "- {name: X, fp32_tflops: -1, fp16_tflops: 1, tensor_cores: false, memory_gb: 1, "
            "mem_bw_gbps: 1, pcie_gen: 3, tdp_w: 10, idle_w: 1, year: 2020}",
            r"gpu_types\[0\] \(X\): fp32_tflops: Input should be greater than 0",
        ),
        (
            "- {name: X, fp32_tflops: 1, fp16_tflops: 1, tensor_cores: false, memory_gb: 1, "
            "mem_bw_gbps: 1, pcie_gen: 3, tdp_w: 10, idle_w: 20, year: 2020}",
            "idle_w .* must be below tdp_w",
        ),
        ("- {name: X, fp32_tflops: 1}", "required field is missing"),
        (
            "- {name: X, fp32_tflops: 1, fp16_tflops: 1, tensor_cores: false, memory_gb: 1, "
            "mem_bw_gbps: 1, pcie_gen: 3, tdp_w: 10, idle_w: 1, year: 2020, colour: red}",
            "colour: unknown field",
        ),
        ("name: [unclosed", "not valid YAML"),
        ("42", "expected a list of GPU types"),
    ],
)
def test_bad_gpu_yaml_one_line_errors(tmp_path, body, expected):
    f = tmp_path / "bad.yaml"
    f.write_text(body + "\n")
    with pytest.raises(ConfigError, match=expected) as e:
        load_gpu_types(f)
    assert str(f) in str(e.value)
    assert "\n" not in str(e.value)
