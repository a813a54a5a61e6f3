"""The support table (``dxgemm._info.support``): derived from the policy, and the README's is the same."""

from __future__ import annotations

from pathlib import Path

from dxgemm import _info, policy
from dxgemm.gpus import DEVICES, target_device
from dxgemm.pipelines import config

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_table_is_the_derived_one():
    """Rebuild README's table with ``python -c "from dxgemm import _info; print(_info.support_markdown())"``."""
    assert _info.support_markdown() in README.read_text()


def test_rows_follow_the_policy():
    rows = {row["cc"]: row for row in _info.support()}
    assert set(rows) == {f"{d.cc[0]}.{d.cc[1]}" for d in DEVICES.values()}
    for text, row in rows.items():
        cc = tuple(int(x) for x in text.split("."))
        device = target_device(cc)
        tf32x3, tf32, ieee = row["float32"].split(" / ")
        assert ("tf32mma" in tf32x3) == policy.tf32_auto(device)
        assert ("pipeline" in row["float64"]) == (cc in config.TARGETS)
        assert ("pipeline" in tf32) == (cc in config.TARGETS)
        assert "tf32mma" not in ieee
        assert row["status"].startswith("measured") == (cc in _info.MEASURED_ON)
        for key, record in DEVICES.items():
            assert (key in row["gpus"].split(", ")) == (record.cc == cc)


def test_a_new_pipeline_target_shows(monkeypatch):
    """The table reads the pipeline's targets: adding 10.0 there puts the pipeline on the B200's row."""
    before = {row["cc"]: row for row in _info.support()}["10.0"]
    assert "pipeline" not in before["float64"]
    targets = config.TARGETS + ((10, 0),)
    monkeypatch.setattr(config, "TARGETS", targets)
    monkeypatch.setattr(policy, "PIPELINE_TARGETS", targets)  # the policy's name for the same tuple
    after = {row["cc"]: row for row in _info.support()}["10.0"]
    assert "pipeline" in after["float64"] and after["pipeline"] == "yes (sm_100a)"
