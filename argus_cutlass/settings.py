"""Every environment variable argus_cutlass reads, declared once and typed.

Values are read when a function asks for them (never at import time).

=========================  ==========================================================
variable                   meaning
=========================  ==========================================================
``CUTLASS_PATH``           CUTLASS source root (has ``include/`` and ``tools/util/include``);
                           overrides the headers of the ``nvidia-cutlass`` wheel
``ARGUS_NVCC``             nvcc executable (default: ``$CUDA_HOME/bin/nvcc``, then ``PATH``)
``ARGUS_CACHE_DIR``        compile cache and experience store
                           (default: ``$XDG_CACHE_HOME/argus_cutlass`` or ``~/.cache/argus_cutlass``)
``ARGUS_NVCC_TIMEOUT``     seconds one nvcc call may take (default 600)
``ARGUS_SMT_TIMEOUT_MS``   per-query z3 timeout of the verifier's SMT tier, ms (default 5000);
                           a query that times out is reported "unknown", never proved
``ARGUS_UPDATE_GOLDEN``    ``1`` rewrites golden files in the tests instead of comparing
=========================  ==========================================================
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Settings:
    cutlass_path: Path | None
    nvcc: str | None
    cache_dir: Path
    nvcc_timeout_s: float
    smt_timeout_ms: int
    update_golden: bool


def settings() -> Settings:
    """Read the environment now."""
    env = os.environ
    cache_root = env.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Settings(
        cutlass_path=Path(env["CUTLASS_PATH"]) if env.get("CUTLASS_PATH") else None,
        nvcc=env.get("ARGUS_NVCC") or None,
        cache_dir=Path(env.get("ARGUS_CACHE_DIR") or Path(cache_root) / "argus_cutlass"),
        nvcc_timeout_s=float(env.get("ARGUS_NVCC_TIMEOUT", "600")),
        smt_timeout_ms=int(env.get("ARGUS_SMT_TIMEOUT_MS", "5000")),
        update_golden=env.get("ARGUS_UPDATE_GOLDEN", "") == "1",
    )
