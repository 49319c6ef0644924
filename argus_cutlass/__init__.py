"""argus_cutlass: verified CuTe/CUTLASS kernel generation for NVIDIA Hopper (sm_90a).

Importing the package has no side effects beyond its own import path: no GPU, compiler
or solver is touched until a function that needs one is called.

The repository keeps ``templates/``, ``invariants/`` and ``agent/`` at its top level;
an install maps them to ``argus_cutlass.templates``, ``.invariants`` and ``.agent``
(setup.py). Run from a source checkout without installing, the same names resolve
to those folders because the checkout root is appended to this package's search path.
"""

from __future__ import annotations

from pathlib import Path

__version__ = "0.1.0"

_CHECKOUT_ROOT = Path(__file__).resolve().parent.parent
if (_CHECKOUT_ROOT / "templates" / "gemm" / "kernel.cu.j2").is_file() and (_CHECKOUT_ROOT / "setup.py").is_file():
    __path__.append(str(_CHECKOUT_ROOT))  # noqa: F821 - the package's own __path__
