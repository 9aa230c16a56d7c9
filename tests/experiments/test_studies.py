"""Studies by name: ``reproduce NAME`` is built from the study registry, and a new study is
a module with a ``STUDY`` plus one registry line."""

import inspect
import json
import sys
import types

import pytest

from hetserve.cli import main
from hetserve.core.errors import HetserveError
from hetserve.experiments import studies
from hetserve.experiments.studies import Study, StudyOption, SummaryTable, get_study, run_study


@pytest.mark.parametrize("name", studies.study_names())
def test_every_study_declares_exactly_what_it_configures(name):
    """A study's options are its configure function's keyword arguments, one for one."""
    st = get_study(name)
    kw = [
        p.name
        for p in inspect.signature(st.configure).parameters.values()
        if p.kind is inspect.Parameter.KEYWORD_ONLY
    ]
    assert sorted(kw) == sorted(o.dest for o in st.options)
    assert len({o.flag for o in st.options}) == len(st.options)


def test_reproduce_lists_every_registered_study(capsys):
    assert main(["reproduce", "--help"]) == 0
    out = capsys.readouterr().out
    for name in studies.study_names():
        assert name in out


def test_unknown_study_is_one_line():
    with pytest.raises(HetserveError, match="did you mean 'ppipe'"):
        get_study("pipe")


def _toy_study() -> Study:
    def configure(quick, seed, *, size):
        if size is not None and size < 1:
            raise HetserveError(f"--size: expected >= 1, got {size}")
        return {"quick": quick, "seed": seed, "size": size or (2 if quick else 5)}

    def run(cfg, jobs, progress):
        progress("counting", 0, 0)
        return {"config": cfg, "squares": [i * i for i in range(cfg["size"])]}

    def write(results, out):
        from pathlib import Path

        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "results.json").write_text(json.dumps(results))
        (out / "report.html").write_text("<p>toy</p>")
        return out / "results.json", out / "report.html"

    def summary(results, cfg):
        return [SummaryTable("toy", ("n", "square"), [(str(i), str(v)) for i, v in
                                                       enumerate(results["squares"])])]  # fmt: skip

    return Study("toy", "Toy", "A toy study.", "Two points.",
                 (StudyOption("--size", "size", "Points.", int),), configure, run, write,
                 summary)  # fmt: skip


def test_a_new_study_is_a_module_and_one_registry_line(tmp_path, monkeypatch):
    from hetserve.core.registry import Registry

    # a registry of this test's own: the toy study's module registers into it on import
    monkeypatch.setattr(studies, "STUDIES", Registry("study", studies.BUILTIN))
    mod = types.ModuleType("toy_study_module")
    mod.STUDY = studies.register_study(_toy_study())  # (what the module's import runs)
    monkeypatch.setitem(sys.modules, "toy_study_module", mod)
    monkeypatch.setitem(studies.BUILTIN, "toy", "toy_study_module")  # the one line
    st = get_study("toy")
    _, (path, report), tables = run_study(st, tmp_path, quick=True, options={"size": 3})
    assert json.loads(path.read_text())["squares"] == [0, 1, 4]
    assert report.exists() and tables[0].rows[-1] == ("2", "4")
    with pytest.raises(HetserveError, match="unknown options colour"):
        run_study(st, tmp_path, options={"colour": 1})
    with pytest.raises(HetserveError, match="--size: expected >= 1"):
        run_study(st, tmp_path, options={"size": 0})
