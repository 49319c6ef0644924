"""Run the docstring examples of every argus_cutlass module (they are documentation that must hold)."""

from __future__ import annotations

import doctest
import importlib
import importlib.util
import pkgutil

import pytest

#: the package's own subpackages (walked) and top-level modules
_SUBPACKAGES = ("hw", "dsl", "layout", "plan", "kernels", "render", "build", "runtime", "verify", "testing", "agent")
_MODULES = ("api", "cli", "errors", "generate", "settings")


def _modules() -> list[str]:
    names = [f"argus_cutlass.{m}" for m in _MODULES]
    for sub in _SUBPACKAGES:
        if importlib.util.find_spec(f"argus_cutlass.{sub}") is None:
            continue  # a subpackage this checkout does not have (yet)
        pkg = importlib.import_module(f"argus_cutlass.{sub}")
        names.append(pkg.__name__)
        names += [i.name for i in pkgutil.walk_packages(pkg.__path__, prefix=f"{pkg.__name__}.")]
    return sorted(set(names))


@pytest.mark.parametrize("name", _modules())
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE | doctest.ELLIPSIS)
    assert result.failed == 0, f"{result.failed} of {result.attempted} doctest examples failed in {name}"


def test_doctests_exist():
    attempted = sum(
        doctest.testmod(importlib.import_module(n), report=False).attempted for n in _modules()
    )
    assert attempted >= 10, f"only {attempted} doctest examples found"
