import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hetserve.core.errors import ConfigError, HetserveError
from hetserve.core.gpus import get_gpu
from hetserve.core.latency import RooflineModel
from hetserve.core.profiles import ProfileSet, TableModel, estimate_profiles

RM = RooflineModel(n_blocks=5)


@pytest.fixture(scope="module")
def profile_dir(tmp_path_factory):
    ps = estimate_profiles(
        RM,
        ["resnet50", "bert-base"],
        [get_gpu("P4"), get_gpu("L4"), get_gpu("RTX-3090")],
        shares=(1, 2),
        batches=(1, 2, 4, 8),
    )
    return ps, ps.write(tmp_path_factory.mktemp("ps"))


def test_round_trip(profile_dir):
    ps, folder = profile_dir
    back = ProfileSet.read(folder)
    assert back.out_bytes == ps.out_bytes
    assert back.latency_us.keys() == ps.latency_us.keys()
    for k, v in ps.latency_us.items():
        assert back.latency_us[k] == pytest.approx(v, rel=1e-9)
    assert back.energy_mj is not None
    # no MPS on GeForce: only share 1
    assert {k[2] for k in back.latency_us if k[1] == "RTX-3090"} == {1}


@settings(max_examples=40, deadline=None)
@given(
    st.sampled_from(["resnet50", "bert-base"]),
    st.sampled_from(["P4", "L4"]),
    st.sampled_from([1, 2]),
    st.sampled_from([1, 2, 4, 8]),
    st.integers(0, 4),
    st.integers(1, 5),
)
def test_table_model_matches_source(model, gpu, share, batch, start, length):
    tm = TableModel(ProfileSet.read(_FOLDER[0]))
    rng = range(start, min(5, start + length))
    assert tm.latency(model, gpu, share, batch, rng) == pytest.approx(
        RM.latency(model, gpu, share, batch, rng), rel=1e-9
    )
    assert tm.energy(model, gpu, share, batch, rng) == pytest.approx(
        RM.energy(model, gpu, share, batch, rng), rel=1e-9
    )


_FOLDER: list = []


@pytest.fixture(autouse=True)
def _remember(profile_dir):
    _FOLDER[:] = [profile_dir[1]]


def test_interpolation_and_limits(profile_dir):
    tm = TableModel(ProfileSet.read(profile_dir[1]))
    t4, t8 = tm.latency("resnet50", "L4", 1, 4), tm.latency("resnet50", "L4", 1, 8)
    assert tm.latency("resnet50", "L4", 1, 6) == pytest.approx((t4 + t8) / 2)
    with pytest.raises(HetserveError, match="profiled at batches 1..8, not 9"):
        tm.latency("resnet50", "L4", 1, 9)
    with pytest.raises(HetserveError, match="no rows for resnet50 on RTX-3090 share 2"):
        tm.latency("resnet50", "RTX-3090", 2, 1)
    assert tm.out_bytes("resnet50", 4) == RM.out_bytes("resnet50", 4)
    assert tm.batches("resnet50", "L4", 1) == [1, 2, 4, 8]


def _write(folder, blocks, latency):
    folder.mkdir(exist_ok=True)
    (folder / "blocks.csv").write_text(blocks)
    (folder / "latency.csv").write_text(latency)
    return folder


B_OK = "model,block,out_bytes\nm,0,100\nm,1,10\n"
L_HEAD = "model,gpu,share,batch,block,latency_us\n"


@pytest.mark.parametrize(
    ("blocks", "latency", "match"),
    [
        (
            B_OK,
            L_HEAD + "m,V100,1,1,0,5\nm,V100,1,1,1,abc\n",
            r"latency.csv:3: field 'latency_us': expected a positive number, got 'abc'",
        ),
        (B_OK, L_HEAD + "m,V1000,1,1,0,5\n", r"latency.csv:2: field 'gpu': unknown GPU type"),
        (B_OK, L_HEAD + "m,V100,0,1,0,5\n", r"latency.csv:2: field 'share': expected an integer"),
        (B_OK, L_HEAD + "m,V100,1,1,0,5\n", r"missing blocks \[1\]"),
        (B_OK, L_HEAD + "m,V100,1,1,0,5\nm,V100,1,1,0,6\n", r"latency.csv:3: duplicate row"),
        (B_OK, L_HEAD + "q,V100,1,1,0,5\n", r"latency.csv:2: model 'q' has no rows in blocks"),
        (B_OK, L_HEAD + "m,V100,1,1,2,5\n", r"latency.csv:2: block 2 of m: blocks.csv has"),
        (B_OK, "model,gpu,batch,block,latency_us\n", r"latency.csv:1: header must have columns"),
        (
            "model,block,out_bytes\nm,0,100\nm,2,1\n",
            "",
            r"blocks.csv: model m: blocks must be "
            r"numbered 0..1 without gaps",
        ),
        (
            "model,block,out_bytes\nm,0,-1\n",
            "",
            r"blocks.csv:2: field 'out_bytes': expected a "
            r"non-negative number",
        ),
        (B_OK, L_HEAD + "m,V100,1,1,0\n", r"latency.csv:2: expected 6 fields"),
    ],
)
def test_bad_profile_sets(tmp_path, blocks, latency, match):
    folder = _write(tmp_path / "p", blocks, latency)
    with pytest.raises(ConfigError, match=match) as e:
        ProfileSet.read(folder)
    assert "\n" not in str(e.value)


def test_missing_folder(tmp_path):
    with pytest.raises(ConfigError, match="must be a folder"):
        ProfileSet.read(tmp_path / "nope")


def test_table_without_energy(tmp_path):
    folder = _write(tmp_path / "p", B_OK, L_HEAD + "m,V100,1,1,0,5\nm,V100,1,1,1,7\n")
    tm = TableModel(ProfileSet.read(folder))
    assert tm.latency("m", "v100", 1, 1) == pytest.approx(12e-6)
    assert tm.latency("m", "V100", 1, 1, range(1, 2)) == pytest.approx(7e-6)
    with pytest.raises(HetserveError, match="no energy.csv"):
        tm.energy("m", "V100", 1, 1)


@pytest.mark.parametrize("name", ["h200", "h200-fp16"])
def test_the_shipped_h200_sets_are_installed_whole_and_plan(name):
    """``data/profiles/h200`` and ``h200-fp16`` (measured on a card, docs/profiles.md):
    installed with the package, every model at every batch and block with energy, a whole
    model slower at a larger batch and cheaper per request, and a plan made on it for a
    one-H200 cluster."""
    from importlib.resources import files

    from hetserve.core.cluster import parse_cluster
    from hetserve.engine.setup import build_setup

    folder = files("hetserve") / "data" / "profiles" / name
    ps = ProfileSet.read(str(folder))
    models = ("resnet50", "bert-base", "efficientnet-b0", "vit-b16", "vgg16")
    batches = (1, 2, 4, 8, 16, 32, 64)
    assert set(ps.latency_us) == {(m, "H200", 1, b) for m in models for b in batches}
    assert ps.energy_mj is not None and set(ps.energy_mj) == set(ps.latency_us)
    for m in models:
        whole = [sum(ps.latency_us[(m, "H200", 1, b)]) for b in batches]
        per_req = [sum(ps.energy_mj[(m, "H200", 1, b)]) / b for b in batches]
        assert whole[-1] > whole[0] and per_req[-1] < per_req[0]
        assert len(ps.latency_us[(m, "H200", 1, 1)]) == 10
    node = {"name": "n", "gpus": {"H200": 1}, "nic_gbps": 10}
    cluster = parse_cluster({"name": "one-h200", "nodes": [node]}, "test")
    setup = build_setup(cluster, ["resnet50", "bert-base"], profiles=str(folder))
    assert setup.plan.models["resnet50"].throughput_rps > 0
