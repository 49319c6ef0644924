"""The README's Python examples are documentation that must hold: run them as doctests."""

from __future__ import annotations

import doctest
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_examples():
    result = doctest.testfile(str(README), module_relative=False,
                              optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted >= 10, f"only {result.attempted} README examples found"
    assert result.failed == 0, f"{result.failed} of {result.attempted} README examples failed"
