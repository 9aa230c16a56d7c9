"""hetserve profile measure: real PyTorch runs of zoo models, in the profile-set format."""

import pytest

torch = pytest.importorskip("torch")

from hetserve.cli import main  # noqa: E402
from hetserve.core.errors import HetserveError  # noqa: E402
from hetserve.core.latency import RooflineModel  # noqa: E402
from hetserve.core.presets import load_cluster  # noqa: E402
from hetserve.core.profiles import ProfileSet  # noqa: E402
from hetserve.engine.setup import build_setup  # noqa: E402
from hetserve.experiments.setup import build_trace, simulate  # noqa: E402
from hetserve.profiling.measure import measure_profiles  # noqa: E402

pytestmark = pytest.mark.torch


@pytest.fixture(scope="module")
def measured():
    return measure_profiles(["resnet18"], "cpu", (1, 2), (1, 2), n_blocks=3, warmup=1, repeats=2)


def test_measured_set_has_every_block_and_the_graphs_cut_sizes(measured):
    ps, fits = measured
    assert sorted(ps.latency_us) == [("resnet18", "CPU", s, b) for s in (1, 2) for b in (1, 2)]
    assert all(len(v) == 3 and min(v) > 0 for v in ps.latency_us.values())
    # the bytes leaving each block, measured on the tensors, are the exported graph's
    blocks = RooflineModel(n_blocks=3).blocks("resnet18")
    assert ps.out_bytes["resnet18"] == pytest.approx(list(blocks.out_bytes))
    (fit,) = fits
    assert fit.model == "resnet18" and fit.max_rel_error < 1e-6  # two points: exact
    total = {b: sum(ps.latency_us[("resnet18", "CPU", 1, b)]) / 1e6 for b in (1, 2)}
    assert fit.params.alpha_s * 2 + fit.params.beta_s == pytest.approx(total[2])


def test_a_measured_set_plugs_into_simulate(measured, tmp_path):
    ps, _ = measured
    folder = ps.write(tmp_path / "prof")
    again = ProfileSet.read(folder, load_cluster("local-cpu").catalog)
    assert again.latency_us.keys() == ps.latency_us.keys()
    for k, v in ps.latency_us.items():
        assert again.latency_us[k] == pytest.approx(v, rel=1e-6)
    s = build_setup("local-cpu", ["resnet18"], profiles=folder, max_batch=2)
    tr = build_trace(s, "poisson", {"resnet18": 5.0}, 2.0, seed=0)
    res = simulate(s, "edf-adaptive", tr)
    assert len(res.outcome) == len(tr)


def test_cli_and_errors(tmp_path, capsys):
    rc = main(
        ["profile", "measure", "--models", "resnet18", "--batches", "1,2", "--blocks", "2",
         "--warmup", "0", "--repeats", "1", "--out", str(tmp_path / "p")]
    )  # fmt: skip
    out = capsys.readouterr().out
    assert rc == 0 and "alpha" in out and (tmp_path / "p" / "latency.csv").exists()
    assert not (tmp_path / "p" / "layers.csv").exists()  # on CUDA devices only
    rc = main(["profile", "measure", "--models", "resnet18", "--layers", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert rc == 2 and "--layers: DeepPlan's per-layer times need a CUDA device" in err
    with pytest.raises(HetserveError, match="cpu or cuda"):
        measure_profiles(["resnet18"], "tpu")
    with pytest.raises(HetserveError, match="repeats >= 1"):
        measure_profiles(["resnet18"], "cpu", repeats=0)
    if not torch.cuda.is_available():
        with pytest.raises(HetserveError, match="CUDA is not available"):
            measure_profiles(["resnet18"], "cuda")


def test_a_precision_is_measured_as_asked(monkeypatch):
    """``dtype``: the weights and the floating-point inputs in that precision (token ids
    stay integers); an unknown one is refused."""
    import torch

    import hetserve.zoo.registry as registry

    seen = []
    real = registry.build

    def spy(*args, **kwargs):
        net = real(*args, **kwargs)
        seen.append(net)
        return net

    monkeypatch.setattr(registry, "build", spy)
    ps, _ = measure_profiles(["resnet18", "bert-base"], "cpu", (1,), n_blocks=3, warmup=0,
                             repeats=1, dtype="bf16")  # fmt: skip
    assert {k[0] for k in ps.latency_us} == {"resnet18", "bert-base"}
    assert all(p.dtype == torch.bfloat16 for net in seen for p in net.parameters())
    with pytest.raises(HetserveError, match="--dtype 'int4'; expected fp32, fp16, bf16"):
        measure_profiles(["resnet18"], "cpu", (1,), dtype="int4")
