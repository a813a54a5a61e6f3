"""The mutation check (``python -m dxgemm.testing.mutants``), in CI.

Every mutant's snippet still applies exactly once to this checkout (the host code moves; a
mutant that stopped applying would silently test nothing), and every mutant is caught by its
deterministic tests (~1 minute on one core: the unmutated baseline is left out here, since
this suite runs those tests itself).  The command's last full output, baseline included, is
committed in ``benchmarks/results/mutants.txt``.
"""

from __future__ import annotations

import io
import shutil
from pathlib import Path

import pytest

from dxgemm.testing import mutants

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("mutant", mutants.MUTANTS, ids=[m.name for m in mutants.MUTANTS])
def test_every_mutant_applies_exactly_once(mutant, tmp_path):
    assert mutant.old != mutant.new and mutant.tests
    target = tmp_path / mutant.path
    target.parent.mkdir(parents=True)
    shutil.copy2(ROOT / mutant.path, target)
    mutants.apply(mutant, tmp_path)
    assert target.read_text() != (ROOT / mutant.path).read_text()
    compile(target.read_text(), str(target), "exec")  # still Python
    with pytest.raises(LookupError, match="occurs 0 times"):
        mutants.apply(mutant, tmp_path)  # applied already: the old text is gone, and that is loud


def test_a_missing_file_is_loud(tmp_path):
    ghost = mutants.Mutant("ghost", "dxgemm/moved_away.py", "x", "y", ("tests",))
    with pytest.raises(LookupError, match="does not exist"):
        mutants.apply(ghost, tmp_path)


def test_every_mutant_is_caught():
    out = io.StringIO()
    caught = mutants.run(out=out, baseline=False)
    print(out.getvalue())
    assert caught, out.getvalue()
