"""Every command, every option, bad values and bad files: exit status 2, exactly one line on
stderr, no traceback (the README's promise). Cases are drawn by hypothesis from the command
tree itself, so a new option is fuzzed without a new test."""

import click
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hetserve.cli import cli, main
from hetserve.cli.common import Finite

# valid arguments that make each command cheap; a fuzzed option is appended after them
# (Click keeps the last value of an option)
BASE = {
    "gpus": [],
    "cluster show": ["hc1-s"],
    "model show": ["resnet50"],
    "model ratios": ["resnet50", "--gpus", "P4,L4", "--out", "{tmp}/r.png"],
    "profile estimate": ["--cluster", "hc1-s", "--models", "resnet50", "--batches", "1",
                         "--shares", "1", "--out", "{tmp}/prof"],
    "trace gen": ["--models", "resnet50", "--duration", "1", "--out", "{tmp}/t.csv"],
    "trace stats": ["{tmp}/good.csv"],
    "plan": ["--cluster", "hc1-s", "--models", "resnet50", "--output", "{tmp}/p.json"],
    "simulate": ["--cluster", "hc1-s", "--models", "resnet50", "--duration", "1", "--rate",
                 "10", "--out", "{tmp}/sim"],
    "sweep": ["--cluster", "hc1-s", "--models", "resnet50", "--duration", "1", "--schedulers",
              "fixed-batch", "--resolution", "0.5", "--out", "{tmp}/sw"],
    "report": ["{tmp}/run"],
    "serve": ["--cluster", "hc1-s", "--models", "resnet50", "--emulate", "--check", "--port",
              "0"],
}  # fmt: skip
# commands whose work is long: only values Click itself refuses are sent to them
CLICK_ONLY = {
    "reproduce ppipe", "reproduce shepherd", "reproduce deepplan", "reproduce magicbatch",
    "reproduce rampa",
    "profile measure", "place",
    "zoo export", "zoo layers", "demo",
}  # fmt: skip

BAD_FILES = ["{tmp}/latin1.yaml", "{tmp}/missing.yaml", "{tmp}", "{tmp}/binary.bin"]
# option or argument name -> values that must be refused
BY_NAME = {
    "models": ["nosuchmodel", ",,,", ""],
    "cluster_name": ["nosuch-cluster", "{tmp}/latin1.yaml"],
    "name_or_file": ["nosuch-cluster", "{tmp}/latin1.yaml", "{tmp}/binary.bin"],
    "name": ["nosuchmodel"],
    "slo": ["resnet50=inf", "resnet50=nan", "resnet50=-3", "x"],
    "batches": ["0", "a-b", "", "1-1000000000", "8-1", "99999"],
    "shares": ["0", "x"],
    "params": ["max_batch=abc", "nosuch=1", "max_batch=0", "novalue"],
    "scheduler": ["os:system", "nosuch", "hetserve.cli:main"],
    "schedulers": ["", "nosuch"],
    "workload": ["nosuch", "gamma:x", "mmpp:foo=1"],
    "process": ["poisson:rate=nan", "nosuch", "poisson:rate=-1"],
    "gpu_list": ["P4", "P4,NOPE"],
    "ref_gpu": ["NOPE"],
    "weights": ["resnet50=abc", "resnet50=-1"],
    "seeds": ["-1", "x", ""],
    "types_file": BAD_FILES,
    "profiles": ["{tmp}/badprof", "{tmp}/missing"],
    "plan_file": ["{tmp}/latin1.yaml", "{tmp}/missing.json", "{tmp}/binary.bin"],
    "path": ["{tmp}/latin1.yaml", "{tmp}/binary.bin", "{tmp}/missing.csv"],
    "folder": ["{tmp}/corrupt", "{tmp}/latin1run", "{tmp}/missing"],
    "config": ["{tmp}/latin1.yaml", "{tmp}/badkey.yaml", "{tmp}/badvalue.yaml"],
    "token_file": ["{tmp}/missing", "{tmp}/empty.txt"],
    "host": ["999.1.1.1", "no such host!"],
    "port": ["70000", "-1"],
    "max_body_mb": ["0", "nan"],
    "device": ["tpu"],
    "profile_device": ["tpu"],
    "layers_csv": ["{tmp}/latin1.yaml", "{tmp}/missing.csv", "{tmp}/binary.bin"],
    "streams_file": ["{tmp}/latin1.yaml", "{tmp}/missing.csv", "{tmp}/binary.bin"],
    "address": [],
    "out": [],
    "output": [],
}


def _cases():
    out = []

    def walk(cmd, path):
        if isinstance(cmd, click.Group):
            ctx = click.Context(cmd)  # (the group imports a command's module when asked)
            for n in cmd.list_commands(ctx):
                walk(cmd.get_command(ctx, n), [*path, n])
            return
        key = " ".join(path)
        for p in cmd.params:
            if p.name in ("help", "version") or getattr(p, "is_flag", False):
                continue
            bad = list(BY_NAME.get(p.name, []))
            if isinstance(p.type, Finite):
                bad += ["nan", "inf", "-inf", "abc"]
                if p.type.min is not None:
                    bad.append(str(p.type.min - 1))
            elif isinstance(p.type, click.IntRange):
                bad += ["abc", "1.5"]
                if p.type.min is not None:
                    bad.append(str(p.type.min - 1))
            elif isinstance(p.type, click.types.IntParamType):
                bad += ["abc"]
            elif isinstance(p.type, click.Choice):
                bad += ["zzz"]
            if key in CLICK_ONLY:  # values Click's own types refuse
                bad = [b for b in bad if b in ("nan", "inf", "-inf", "abc", "zzz", "1.5")]
            elif key not in BASE:
                continue
            for b in bad:
                out.append((key, p, b))

    walk(cli, [])
    return out


CASES = _cases()
NUMERIC = sorted(
    {(k, p.name): p for k, p, _ in CASES if isinstance(p.type, (Finite, click.IntRange))}.items()
)


def _outside(p):
    """Numbers a numeric option must refuse: non-finite, or outside its range."""
    lo, hi = p.type.min, p.type.max

    def bad(x):
        if x != x or x in (float("inf"), float("-inf")):
            return isinstance(p.type, Finite)
        if isinstance(p.type, click.IntRange) and x != int(x):
            return True
        return (
            (lo is not None and x < lo)
            or (hi is not None and x > hi)
            or (isinstance(p.type, Finite) and p.type.min_open and lo is not None and x == lo)
        )

    return st.floats(allow_nan=True, allow_infinity=True).filter(bad)


@st.composite
def numeric_cases(draw):
    (key, _), p = draw(st.sampled_from(NUMERIC))
    x = draw(_outside(p))
    text = repr(int(x)) if isinstance(p.type, click.IntRange) and x == int(x) else repr(x)
    return key, p, text


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return make_files(tmp_path_factory.mktemp("fuzz"))


def make_files(tmp):
    (tmp / "latin1.yaml").write_bytes("name: caf\xe9\n".encode("latin-1"))
    (tmp / "binary.bin").write_bytes(bytes(range(256)) * 4)
    (tmp / "empty.txt").write_text("")
    (tmp / "badkey.yaml").write_text("no_such_option: 1\n")
    (tmp / "badvalue.yaml").write_text("port: 70000\n")
    (tmp / "good.csv").write_text("arrival_s,stream,model,slo_s\n0.1,s,resnet50,0.1\n")
    (tmp / "badprof").mkdir()
    (tmp / "badprof" / "latency.csv").write_bytes(b"model,gpu\n\xff\xfe\n")
    (tmp / "corrupt").mkdir()
    (tmp / "corrupt" / "summary.json").write_text('{"latency_ms": 5}')
    (tmp / "latin1run").mkdir()
    (tmp / "latin1run" / "summary.json").write_bytes(b'{"a": "\xe9"}')
    (tmp / "run").mkdir()
    return tmp


def test_every_command_has_fuzz_cases():
    covered = {k for k, _, _ in CASES}
    assert set(BASE) - {"gpus", "cluster show"} <= covered | {"gpus", "cluster show"}
    assert len(CASES) > 200


@settings(
    max_examples=400,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
    derandomize=True,
)
@given(case=st.sampled_from(CASES) | numeric_cases())
def test_bad_values_and_files_give_one_line_and_status_2(case, files, capsys):
    key, param, value = case
    tmp = str(files)
    args = [a.replace("{tmp}", tmp) for a in BASE.get(key, [])]
    value = value.replace("{tmp}", tmp)
    if isinstance(param, click.Argument):
        pos = [i for i, a in enumerate(args) if not a.startswith("-")][:1]
        args = [value] if not args else [value, *args[1:]] if pos == [0] else [*args, value]
    else:
        args = [*args, param.opts[0], value]
    rc = main([*key.split(), *args])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    shown = f"hetserve {key} {' '.join(args)}"
    assert rc == 2, f"{shown}: exit {rc}, stderr {err!r}"
    assert len(lines) == 1 and "Traceback" not in err, f"{shown}: stderr {err!r}"
