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
``ARGUS_REPORT_CACHE``     ``0`` (or ``false``, ``no``, ``off``) turns off the cache of verified reports (default
                           on: a program whose fingerprint and verifier source were proved before is not
                           re-verified); another value is refused
``ARGUS_GEMM_UNTUNED``     ``costmodel`` (default) or ``heuristic``: a GEMM with no tuned entry takes the
                           cost model's first choice of the declared sub-space
                           (``agent.costmodel.costmodel_choice``, also on the aligned-staging
                           path) or the heuristic's configuration
``ARGUS_UPDATE_GOLDEN``    ``1`` rewrites golden files in the tests instead of comparing
``ARGUS_MUTANT_TIMEOUT``   seconds one mutant-kernel child process may run before it is
                           killed and reported ``hang`` (default 30; GPU mutation suite)
``ARGUS_MUTANT_OUT``       file for the GPU mutation suite's per-mutant JSON summary
``ARGUS_PROBE_OUT``        file for the one-hot probe results (JSON)
``ARGUS_BENCH_CONFIG``     ``heuristic`` (default) or ``tuned``: configs of the GEMM benchmark
``ARGUS_BENCH_TABLE``      file for the GEMM benchmark's markdown table
``ARGUS_VERIFY_BENCH_TABLE`` file for the verifier benchmark's markdown table
``ARGUS_FUZZ_SEED``        seed of the GPU fuzz test's draws (``tests/gpu/test_fuzz_gpu.py``; an
                           integer from 0 to 2**64-1, default 2026; read by that test module)
=========================  ==========================================================
"""

from __future__ import annotations

import operator
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
    report_cache: bool
    mutant_timeout_s: float = 30.0
    mutant_out: str | None = None
    probe_out: str | None = None
    bench_config: str = "heuristic"
    bench_table: str | None = None
    verify_bench_table: str | None = None
    gemm_untuned: str = "costmodel"


#: values of ``ARGUS_GEMM_UNTUNED`` (the first is the default): the cost model's untuned choice scored
#: 59 % of held-out shapes within 3 % of the sweep's best and 1.085x cuBLAS (geomean) against the
#: heuristic's 32 % and 1.026x (H200, session 20, ``bench/calibrate_costmodel.py --cv``: groups of
#: nearby projections held out at every M)
GEMM_UNTUNED = ("costmodel", "heuristic")


def settings() -> Settings:
    """Read the environment now.

    Raises:
        argus_cutlass.errors.ProblemError: ``settings.gemm_untuned`` when ``ARGUS_GEMM_UNTUNED`` is not one
            of :data:`GEMM_UNTUNED`; ``settings.smt_timeout`` when ``ARGUS_SMT_TIMEOUT_MS`` is not a positive integer;
            ``settings.seconds`` when ``ARGUS_NVCC_TIMEOUT`` or ``ARGUS_MUTANT_TIMEOUT`` is not a positive, finite
            number of seconds; ``settings.flag`` when ``ARGUS_REPORT_CACHE`` is not one of :data:`FLAG_VALUES`.
    """
    env = os.environ
    untuned = env.get("ARGUS_GEMM_UNTUNED") or GEMM_UNTUNED[0]
    if untuned not in GEMM_UNTUNED:
        from argus_cutlass.errors import ProblemError

        raise ProblemError("settings.gemm_untuned", f"ARGUS_GEMM_UNTUNED={untuned!r} is not one of {GEMM_UNTUNED}",
                           "unset it (the default, costmodel) or use costmodel / heuristic")
    smt_ms = env.get("ARGUS_SMT_TIMEOUT_MS") or "5000"
    if not (smt_ms.strip().isascii() and smt_ms.strip().isdigit() and int(smt_ms) >= 1):
        from argus_cutlass.errors import ProblemError

        raise ProblemError("settings.smt_timeout", f"ARGUS_SMT_TIMEOUT_MS={smt_ms!r} is not a positive number of "
                           "milliseconds", "unset it (the default, 5000) or give e.g. 20000")
    cache_root = env.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Settings(
        cutlass_path=Path(env["CUTLASS_PATH"]) if env.get("CUTLASS_PATH") else None,
        nvcc=env.get("ARGUS_NVCC") or None,
        cache_dir=Path(env.get("ARGUS_CACHE_DIR") or Path(cache_root) / "argus_cutlass"),
        nvcc_timeout_s=_env_seconds("ARGUS_NVCC_TIMEOUT", 600.0),
        smt_timeout_ms=int(smt_ms),
        update_golden=env.get("ARGUS_UPDATE_GOLDEN", "") == "1",
        report_cache=_env_flag("ARGUS_REPORT_CACHE", True),
        mutant_timeout_s=_env_seconds("ARGUS_MUTANT_TIMEOUT", 30.0),
        mutant_out=env.get("ARGUS_MUTANT_OUT") or None,
        probe_out=env.get("ARGUS_PROBE_OUT") or None,
        bench_config=env.get("ARGUS_BENCH_CONFIG", "heuristic"),
        bench_table=env.get("ARGUS_BENCH_TABLE") or None,
        verify_bench_table=env.get("ARGUS_VERIFY_BENCH_TABLE") or None,
        gemm_untuned=untuned,
    )


#: the spellings of an on/off variable (``ARGUS_REPORT_CACHE``), any case: value -> on
FLAG_VALUES = {"1": True, "true": True, "yes": True, "on": True, "0": False, "false": False, "no": False, "off": False}


def _env_seconds(name: str, default: float) -> float:
    """The environment variable ``name`` as a positive, finite number of seconds (``default`` when unset or empty).

    Raises:
        argus_cutlass.errors.ProblemError: ``settings.seconds`` naming the variable and its value (``abc`` was a
            ValueError traceback, ``nan`` one inside subprocess, ``-5`` a timeout before nvcc started).

    >>> _env_seconds("ARGUS_SURELY_UNSET_FOR_THIS_DOCTEST", 30.0)
    30.0
    """
    import math

    text = os.environ.get(name, "").strip()
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        from argus_cutlass.errors import ProblemError

        raise ProblemError("settings.seconds", f"{name}={os.environ[name]!r} is not a positive, finite number of "
                           "seconds", f"unset it (the default, {default:g}) or give e.g. {default * 2:g}")
    return value


def _env_flag(name: str, default: bool) -> bool:
    """The on/off environment variable ``name`` (:data:`FLAG_VALUES`; ``default`` when unset or empty).

    Raises:
        argus_cutlass.errors.ProblemError: ``settings.flag`` naming the variable and its value (``false`` was
            silently read as on: only ``0`` turned it off).
    """
    text = os.environ.get(name, "").strip().lower()
    if not text:
        return default
    if text not in FLAG_VALUES:
        from argus_cutlass.errors import ProblemError

        raise ProblemError("settings.flag", f"{name}={os.environ[name]!r} is neither on nor off",
                           f"{name}=0 (or false, no, off) turns it off; 1 (or true, yes, on) turns it on")
    return FLAG_VALUES[text]


def check_output_path(path: str | Path, option: str = "--out") -> Path:
    """Check, without creating anything, that ``path`` (the value of ``option``) can become the output
    folder: not empty (an empty path would silently mean the current folder), not an existing file, and
    its nearest existing ancestor a writable folder. :func:`output_dir` runs this first; a command that
    must refuse bad input before a slow or GPU stage (``tune gemm``) runs it up front.

    Raises:
        argus_cutlass.errors.ProblemError: ``cli.out`` naming ``option``, the path and why.

    >>> check_output_path("out").name
    'out'
    """
    from argus_cutlass.errors import ProblemError

    if path is None or (isinstance(path, str) and not path.strip()):
        raise ProblemError("cli.out", f"{option} {path!r}: an empty or blank path cannot be used as "
                           "the output folder (it would silently mean the current folder)",
                           f"name a folder, e.g. {option} out (or {option} . for the current folder)")
    out = Path(path)
    for folder in (out, *out.parents):
        if not folder.exists():
            continue
        if not folder.is_dir():
            what = "is a file" if folder == out else f"lies under {str(folder)!r}, which is a file"
            raise ProblemError("cli.out", f"{option} {str(path)!r} cannot be used as the output folder: it {what}, "
                               "not a folder", "pass a folder path (it is created when missing)")
        if not os.access(folder, os.W_OK | os.X_OK):
            raise ProblemError("cli.out", f"{option} {str(path)!r} cannot be used as the output folder: "
                               f"{str(folder)!r} is not writable", "pass a writable folder path")
        break
    return out


def output_dir(path: str | Path, option: str = "--out") -> Path:
    """Create the output folder ``path`` (the value of ``option``) and check that it is writable.

    Raises:
        argus_cutlass.errors.ProblemError: ``cli.out`` when it cannot be a writable folder, or it is
            empty (:func:`check_output_path`).
    """
    import tempfile

    from argus_cutlass.errors import ProblemError

    out = check_output_path(path, option)
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=out):  # writable (an existing read-only folder fails here, not later)
            pass
    except OSError as exc:
        raise ProblemError("cli.out", f"{option} {str(path)!r} cannot be used as the output folder: {exc.strerror}",
                           "pass a writable folder path") from None
    return out


#: the largest seed of the check inputs: numpy's and torch's generators take an unsigned 64-bit seed
MAX_SEED = 2**64 - 1


def check_seed(seed: int, option: str = "--seed") -> int:
    """Check a seed of the random check inputs (the value of ``option``): an integer from 0 to
    :data:`MAX_SEED` (numpy's ``default_rng`` refuses a negative seed, torch's generators one above
    2**64 - 1, and both only after the kernel was built, on the GPU). Returns it.

    Raises:
        argus_cutlass.errors.ProblemError: ``cli.seed`` naming ``option`` and the value.

    >>> check_seed(0), check_seed(2**64 - 1) == MAX_SEED
    (0, True)
    """
    from argus_cutlass.errors import ProblemError

    value = as_index(seed)
    if value is None or not 0 <= value <= MAX_SEED:
        raise ProblemError("cli.seed", f"{option} {seed!r}: a seed must be an integer from 0 to 2**64-1 "
                           "(numpy's and torch's random generators take unsigned 64-bit seeds)",
                           f"{option} 0 (the default) or 1234, for example")
    return value


def as_index(value: object) -> int | None:
    """``value`` as a Python int when it is an integer (``int``, ``numpy.int64``, anything with ``__index__``)
    other than a bool, else None."""
    if isinstance(value, bool):
        return None
    try:
        return operator.index(value)
    except TypeError:
        return None


def check_workers(workers: int | None, option: str = "--workers", code: str = "tune.workers") -> int | None:
    """Check a count of parallel compile processes (the value of ``option``): None (the CPU count) or
    an integer >= 1 (0 is refused, not read as "the default"). Returns it.

    Raises:
        argus_cutlass.errors.ProblemError: ``code`` (default ``tune.workers``) naming ``option`` and the value.

    >>> check_workers(None), check_workers(4)
    (None, 4)
    """
    from argus_cutlass.errors import ProblemError

    if workers is None:
        return None
    value = as_index(workers)
    if value is None or value < 1:
        raise ProblemError(code, f"{option} {workers!r}: need at least 1 compile process",
                           f"leave {option} out (None) for one per CPU core")
    return value
