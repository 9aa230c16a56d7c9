"""``hetserve reproduce verdicts``: the verdict rule on hand-made numbers, the collection
of every headline from per-seed jobs, and the command on the quick configuration."""

import json

import pytest

from hetserve.cli import main
from hetserve.experiments import verdicts as V


def test_ahead_only_when_every_seed_agrees_by_at_least_the_grid_step():
    # max load factors (grid step 0.05): +0.10, +0.05, +0.15 -> PPipe ahead
    v = V.verdict("ppipe_over_np", [(0.9, 0.8), (0.9, 0.85), (0.95, 0.8)], [0, 1, 2])
    assert v["verdict"] == "PPipe ahead on every seed"
    assert v["a_mean"] == pytest.approx(2.75 / 3) and v["diff_min"] == pytest.approx(0.05)
    # one seed a step ahead, one a step behind: a tie
    v = V.verdict("ppipe_over_np", [(0.9, 0.85), (0.85, 0.9), (0.9, 0.8)], [0, 1, 2])
    assert v["verdict"].startswith("tie")
    # below the grid step on one seed: a tie
    v = V.verdict("ppipe_over_np", [(0.9, 0.88), (0.95, 0.8)], [0, 1])
    assert v["verdict"].startswith("tie")
    # energy: less is better, so the smaller side is ahead
    v = V.verdict("magicbatch_over_tfserving", [(100.0, 300.0), (120.0, 310.0)], [0, 1])
    assert v["verdict"] == "MagicBatch ahead on every seed"
    assert v["ratio_mean"] == pytest.approx((1 / 3 + 12 / 31) / 2)
    v = V.verdict("rampa_over_ncar", [(519, 523), (540, 530)], [0, 1])
    assert v["verdict"].startswith("tie") and v["diff_min"] == -4 and v["diff_max"] == 10


def test_collect_reads_every_headline_from_the_jobs():
    cfg = V.quick_config((0, 1))
    done = {}
    for t in V.tasks(cfg):
        kind, seed, what = t
        if kind == "ppipe":
            done[t] = {"ppipe": 0.9, "np": 0.7, "reactive": 0.8}.get(what[2], 0.9) + 0.01 * seed
            if what[3] == "reactive":
                done[t] = 0.8
        elif kind == "shepherd":
            done[t] = 100.0 if what[1] == "flex" else 50.0
        elif kind == "deepplan":
            done[t] = {"pt+dha": 0.95, "pipeswitch": 0.32}
        elif kind == "rampa":
            done[t] = 10 if what[0] == "rampa" else what[1] + 5
        else:
            done[t] = (10.0, 30.0)
    h = V.collect(cfg, done)["headlines"]
    assert set(h) == set(V.HEADLINES)
    assert h["ppipe_over_np"]["a_values"] == [0.9, 0.91]
    assert h["ppipe_over_np"]["b_values"] == [0.7, 0.71]
    assert h["reservation_over_reactive"]["b_values"] == [0.8, 0.8]
    assert h["flex_over_clockwork_maf-bursty"]["verdict"] == "FLEX ahead on every seed"
    assert h["ptdha_over_pipeswitch"]["ratio_mean"] == pytest.approx(0.95 / 0.32)
    assert h["rampa_over_ncar"]["b_values"] == [6, 6]  # NCAR's best of 2 combinations
    assert h["magicbatch_over_tfserving"]["verdict"] == "MagicBatch ahead on every seed"


@pytest.mark.slow
def test_the_command_on_the_quick_configuration(tmp_path, capsys):
    rc = main(["reproduce", "verdicts", "--quick", "--seeds", "0,1", "--jobs", "2",
               "--out", str(tmp_path)])  # fmt: skip
    out = capsys.readouterr().out
    assert rc == 0, out
    r = json.loads((tmp_path / "results.json").read_text())
    assert r["seeds"] == [0, 1] and set(r["headlines"]) == set(V.HEADLINES)
    for h in r["headlines"].values():
        assert len(h["a_values"]) == len(h["b_values"]) == 2
        assert h["verdict"].startswith(("tie", h["a"], h["b"]))
    assert "Headline comparisons over seeds 0, 1" in out
    assert r["provenance"]["command"].startswith("hetserve reproduce verdicts --quick")


def test_bad_seeds_are_a_one_line_error(capsys, tmp_path):
    for bad in ("0", "a,b", "1,1"):
        rc = main(["reproduce", "verdicts", "--seeds", bad, "--out", str(tmp_path)])
        err = capsys.readouterr().err
        assert rc == 2 and "--seeds" in err and len(err.strip().splitlines()) == 1, err
