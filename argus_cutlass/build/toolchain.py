"""Find the CUDA compiler and the CUTLASS headers.

Search order
------------
nvcc:
    1. ``ARGUS_NVCC`` (see :mod:`argus_cutlass.settings`)
    2. ``$CUDA_HOME/bin/nvcc`` (then ``$CUDA_PATH/bin/nvcc``)
    3. ``nvcc`` on ``PATH``
CUTLASS headers:
    1. ``CUTLASS_PATH`` (``include/`` and ``tools/util/include/``)
    2. the ``nvidia-cutlass`` wheel: ``cutlass_library/source/include`` and
       ``cutlass_library/source/tools/util/include``; the package directory is located with
       :func:`importlib.util.find_spec` without importing ``cutlass_library``.

Nothing is looked up at import time; :func:`find_toolchain` caches nothing either, so a
changed environment is seen by the next call.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from argus_cutlass.errors import ToolchainError
from argus_cutlass.settings import settings

_NVCC_HINT = "install the CUDA toolkit 12.4 or newer, or set ARGUS_NVCC to the nvcc executable"
_CUTLASS_HINT = (
    "pip install nvidia-cutlass, or set CUTLASS_PATH to a CUTLASS checkout "
    "(the directory holding include/ and tools/util/include/)"
)


@dataclass(frozen=True)
class Nvcc:
    """An nvcc executable and its version.

    Attributes:
        path: absolute path of the executable.
        version: ``(major, minor)`` of the CUDA release, e.g. ``(12, 8)``.
        version_string: the full ``nvcc --version`` output (hashed into cache keys).
    """

    path: str
    version: tuple[int, int]
    version_string: str


@dataclass(frozen=True)
class CutlassHeaders:
    """Where the CUTLASS/CuTe headers are.

    Attributes:
        include: directory holding ``cutlass/`` and ``cute/``.
        util_include: ``tools/util/include`` (``cutlass/util/...``).
        version: e.g. ``"4.2.0"`` (wheel metadata or ``cutlass/version.h``).
        source: ``"CUTLASS_PATH"`` or ``"nvidia-cutlass wheel"``.
    """

    include: Path
    util_include: Path
    version: str
    source: str

    def include_flags(self) -> tuple[str, ...]:
        return (f"-I{self.include}", f"-I{self.util_include}")


@dataclass(frozen=True)
class Toolchain:
    nvcc: Nvcc
    cutlass: CutlassHeaders


def _nvcc_candidates() -> list[tuple[str, str]]:
    """``(where it came from, path)`` in search order."""
    out: list[tuple[str, str]] = []
    s = settings()
    if s.nvcc:
        out.append(("ARGUS_NVCC", s.nvcc))
        return out  # an explicit choice is never silently replaced
    for var in ("CUDA_HOME", "CUDA_PATH"):
        root = os.environ.get(var)
        if root:
            out.append((f"${var}/bin/nvcc", str(Path(root) / "bin" / "nvcc")))
    on_path = shutil.which("nvcc")
    if on_path:
        out.append(("PATH", on_path))
    return out


def parse_nvcc_version(text: str) -> tuple[int, int]:
    """``(major, minor)`` from ``nvcc --version`` output.

    >>> parse_nvcc_version("Cuda compilation tools, release 12.8, V12.8.93")
    (12, 8)

    Raises:
        ToolchainError: ``toolchain.nvcc_version`` if no ``release X.Y`` is present.
    """
    m = re.search(r"release (\d+)\.(\d+)", text)
    if not m:
        raise ToolchainError(
            "toolchain.nvcc_version",
            f"cannot read the CUDA release from nvcc --version output: {text.strip()[:200]!r}",
            _NVCC_HINT,
        )
    return int(m.group(1)), int(m.group(2))


def find_nvcc() -> Nvcc:
    """The nvcc to use (see the module docstring for the search order).

    Raises:
        ToolchainError: ``toolchain.nvcc`` when none is found or it does not run;
            ``toolchain.nvcc_version`` when it is older than CUDA 12.4 (no sm_90a wgmma
            support good enough for CUTLASS 4).
    """
    tried: list[str] = []
    for origin, path in _nvcc_candidates():
        p = Path(path)
        if not (p.is_file() and os.access(p, os.X_OK)):
            tried.append(f"{origin}: {path} (not an executable file)")
            continue
        try:
            proc = subprocess.run(
                [str(p), "--version"], capture_output=True, text=True, timeout=60, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            tried.append(f"{origin}: {path} ({exc})")
            continue
        if proc.returncode != 0:
            tried.append(f"{origin}: {path} (--version exited {proc.returncode})")
            continue
        text = proc.stdout + proc.stderr
        version = parse_nvcc_version(text)
        if version < (12, 4):
            raise ToolchainError(
                "toolchain.nvcc_version",
                f"nvcc at {p} is CUDA {version[0]}.{version[1]}; sm_90a CUTLASS kernels need 12.4+",
                _NVCC_HINT,
            )
        return Nvcc(path=str(p.resolve()), version=version, version_string=text.strip())
    where = "; ".join(tried) if tried else "ARGUS_NVCC, $CUDA_HOME and PATH hold none"
    raise ToolchainError("toolchain.nvcc", f"nvcc not found ({where})", _NVCC_HINT)


def _version_from_header(include: Path) -> str | None:
    header = include / "cutlass" / "version.h"
    try:
        text = header.read_text()
    except OSError:
        return None
    parts = []
    for key in ("CUTLASS_MAJOR", "CUTLASS_MINOR", "CUTLASS_PATCH"):
        m = re.search(rf"#define\s+{key}\s+(\d+)", text)
        if not m:
            return None
        parts.append(m.group(1))
    return ".".join(parts)


def _check_headers(include: Path, util: Path, source: str) -> None:
    missing = [
        str(p)
        for p in (include / "cutlass" / "cutlass.h", include / "cute" / "tensor.hpp", util / "cutlass" / "util")
        if not p.exists()
    ]
    if missing:
        raise ToolchainError(
            "toolchain.cutlass",
            f"CUTLASS headers from {source} are incomplete: missing {', '.join(missing)}",
            _CUTLASS_HINT,
        )


def find_cutlass() -> CutlassHeaders:
    """The CUTLASS/CuTe headers to compile against.

    Raises:
        ToolchainError: ``toolchain.cutlass`` when neither ``CUTLASS_PATH`` nor the
            ``nvidia-cutlass`` wheel provides them.
    """
    s = settings()
    if s.cutlass_path is not None:
        root = s.cutlass_path
        include, util = root / "include", root / "tools" / "util" / "include"
        _check_headers(include, util, f"CUTLASS_PATH={root}")
        version = _version_from_header(include) or "unknown"
        return CutlassHeaders(include, util, version, "CUTLASS_PATH")
    try:
        spec = importlib.util.find_spec("cutlass_library")
    except (ImportError, ValueError):
        spec = None
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    if not locations:
        raise ToolchainError(
            "toolchain.cutlass",
            "CUTLASS headers not found: CUTLASS_PATH is unset and the nvidia-cutlass wheel "
            "(package cutlass_library) is not installed",
            _CUTLASS_HINT,
        )
    pkg = Path(locations[0])
    include = pkg / "source" / "include"
    util = pkg / "source" / "tools" / "util" / "include"
    _check_headers(include, util, f"the nvidia-cutlass wheel at {pkg}")
    try:
        version = importlib.metadata.version("nvidia-cutlass")
    except importlib.metadata.PackageNotFoundError:
        version = _version_from_header(include) or "unknown"
    return CutlassHeaders(include, util, version, "nvidia-cutlass wheel")


def find_toolchain() -> Toolchain:
    """nvcc plus the CUTLASS headers; raises :class:`ToolchainError` naming what is missing."""
    return Toolchain(nvcc=find_nvcc(), cutlass=find_cutlass())


def nvcc_available() -> bool:
    """True when :func:`find_nvcc` succeeds (never raises; for test skips)."""
    try:
        find_nvcc()
    except ToolchainError:
        return False
    return True
