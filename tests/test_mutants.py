"""The mutation check (``python -m dxgemm.testing.mutants``).

In CI: every mutant's snippet still applies exactly once to this checkout (the host code
moves; a mutant that stopped applying would silently test nothing), and the planted bug
differs from the original.  The full run — each mutant against its tests, ~3.5 minutes on
one core — is ``python -m pytest -m slow tests/test_mutants.py``; its last output is
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


@pytest.mark.slow
def test_every_mutant_is_caught():
    out = io.StringIO()
    caught = mutants.run(out=out)
    print(out.getvalue())
    assert caught, out.getvalue()
