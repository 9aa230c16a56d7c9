"""``serve --profile-device`` (the device of the start-up profile measurement), and its old
name ``--device``, refused with a one-line error that says what it was renamed to."""

from hetserve.cli import main

BASE = ["serve", "--cluster", "hc1-s", "--models", "resnet50", "--emulate", "--check",
        "--port", "0"]  # fmt: skip
RENAMED = (
    "hetserve: error: --device was renamed --profile-device: it only chose where the "
    "start-up profile measurement runs; workers run on their planned GPU's device"
)


def test_the_old_device_option_says_it_was_renamed(capsys, tmp_path):
    for value in ("cuda", "cpu"):
        rc = main([*BASE, "--device", value])
        err = capsys.readouterr().err
        assert rc == 2 and err.strip() == RENAMED and "Traceback" not in err
    config = tmp_path / "serve.yaml"
    config.write_text("device: cuda\n")
    rc = main([*BASE, "--config", str(config)])
    assert rc == 2 and capsys.readouterr().err.strip() == RENAMED


def test_profile_device_is_checked_and_documented(capsys):
    rc = main([*BASE, "--profile-device", "bogus"])
    err = capsys.readouterr().err
    assert rc == 2 and err.strip() == (
        "hetserve: error: --profile-device: expected cpu or cuda[:N], got 'bogus'"
    )
    assert main([*BASE, "--profile-device", "cuda:1"]) == 0  # checked, not measured
    capsys.readouterr()
    assert main(["serve", "--help"]) == 0
    text = capsys.readouterr().out
    assert "--profile-device" in text and "--device " not in text
    assert "Workers run on the device of their planned GPU" in " ".join(text.split())
