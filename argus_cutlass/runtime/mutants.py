"""Render, build and run the mutation-suite kernel (``templates/mutant_sm90.cu.j2``).

Each :class:`~argus_cutlass.verify.mutants.Mutant` with a GPU realisation is rendered with
its template knobs, compiled (all at once, :func:`~argus_cutlass.build.nvcc.compile_many`)
and run in a **child process with a timeout**, so a planted pipeline mistake that deadlocks
the GPU is reported as ``hang`` and the child is killed instead of blocking the caller.

The kernel computes ``D[M,N] = A[M,K] @ B[N,K]^T``: A and B bf16 row-major (K-major),
D fp32 row-major, fp32 accumulation. The run draws fresh random bf16 inputs, poisons D (and
a guard region after it) with NaN, and compares against a float64 numpy reference of the
same bf16-rounded inputs. Verdicts: ``correct``, ``wrong``, ``hang``, ``error``.

No CUDA library is imported at module import time (the catalogue tests render on CPU).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from argus_cutlass import __version__
from argus_cutlass.verify.mutants import BASELINE_KNOBS, CATALOGUE, Mutant, knobs_of

MUTANT_TEMPLATE = "mutant_sm90.cu.j2"

#: relative-error tolerance of a correct result (bf16 inputs, fp32 accumulate, vs float64)
REL_TOL = 1e-3
#: default shape for the mutant runs: residues on M, N and K; 5 x 6 = 30 output tiles of
#: 64 x 64 walked by 8 persistent CTAs (3-4 tiles each); 6 k-tiles of 64, not a multiple of
#: 2 x stages, so a per-tile pipeline reset is visible (VERIFIER.md pitfall 3).
MUTANT_SHAPE = (300, 360, 328, 8)


def kernel_name_of(mutant_id: str) -> str:
    """C identifier of a mutant's kernel: ``argus_mutant_<id>``."""
    return f"argus_mutant_{mutant_id}"


def render_mutant(mutant: Mutant | str | Mapping[str, Any] = "baseline") -> str:
    """The ``.cu`` source of a mutant (a :class:`Mutant`, a catalogue id or ``"baseline"``,
    or a mapping of knob overrides rendered as mutant ``custom``).

    Raises:
        KeyError: an unknown catalogue id or knob name.
        ValueError: the mutant has no GPU realisation.
        jinja2.UndefinedError: the template needs a variable the knobs lack (StrictUndefined).
    """
    from argus_cutlass.render.render import template_environment

    if isinstance(mutant, Mapping):
        mid, overrides = "custom", dict(mutant)
    elif mutant == "baseline":
        mid, overrides = "baseline", {}
    else:
        m = mutant if isinstance(mutant, Mutant) else CATALOGUE.get(mutant)
        if m is None:
            raise KeyError(f"no mutant {mutant!r}; have {sorted(CATALOGUE)}")
        if m.knobs is None:
            raise ValueError(f"mutant {m.id!r} has no GPU realisation: {m.gpu_note}")
        mid, overrides = m.id, dict(m.knobs)
    knobs = knobs_of(overrides)
    return template_environment().get_template(MUTANT_TEMPLATE).render(
        name=kernel_name_of(mid), version=__version__, mutant_id=mid, **knobs)


def gpu_mutants() -> list[Mutant]:
    """The catalogue entries that have a GPU realisation, in catalogue order."""
    return [m for m in CATALOGUE.values() if m.knobs is not None]


def build_mutants(ids: Sequence[str], max_workers: int | None = None) -> dict[str, Any]:
    """Render and compile the kernels of ``ids`` (``"baseline"`` allowed) in one parallel
    :func:`~argus_cutlass.build.nvcc.compile_many` call.

    Returns ``{id: Artifact or CompileError}``; a failed build does not hide the others.
    """
    from argus_cutlass.build.nvcc import CompileJob, compile_many

    jobs = [CompileJob(render_mutant(i), kernel_name_of(i), "shared") for i in ids]
    results = compile_many(jobs, max_workers=max_workers, return_exceptions=True)
    return dict(zip(ids, results, strict=True))


@dataclass(frozen=True)
class MutantRun:
    """Outcome of one mutant kernel run on the GPU.

    Attributes:
        id: the mutant id (``baseline`` for the unmutated kernel).
        verdict: ``correct``, ``wrong``, ``hang`` or ``error``.
        shape: (M, N, K, grid).
        max_err: max |D - ref| over written, finite outputs (``nan`` when none).
        rel_err: ``max_err / max |ref|``.
        bad: outputs whose error exceeds ``REL_TOL * max |ref|`` (NaN/inf included).
        unwritten: outputs still holding the NaN poison.
        oob_writes: guard-region floats after D that were overwritten (writes past M x N).
        seconds: wall time of the child process.
        detail: error text, or the child's last output lines for ``hang``/``error``.
    """

    id: str
    verdict: str
    shape: tuple[int, int, int, int]
    max_err: float = float("nan")
    rel_err: float = float("nan")
    bad: int = 0
    unwritten: int = 0
    oob_writes: int = 0
    seconds: float = 0.0
    detail: str = ""

    def summary(self) -> str:
        """One line, e.g. ``wrong (max err 3.1e+01, #bad 1234, #unwritten 0)``."""
        if self.verdict == "wrong":
            return (f"wrong (max err {self.max_err:.3g}, #bad {self.bad}, #unwritten {self.unwritten}"
                    f"{f', #oob writes {self.oob_writes}' if self.oob_writes else ''})")
        if self.verdict == "correct":
            return f"correct (rel err {self.rel_err:.2e})"
        return f"{self.verdict}{': ' + self.detail.splitlines()[-1] if self.detail else ''}"

    @property
    def misbehaves(self) -> bool:
        """The run shows the mutant: wrong results, a hang, or a launch/runtime error."""
        return self.verdict in ("wrong", "hang", "error")


def compare(d: np.ndarray, ref: np.ndarray, guard: np.ndarray) -> dict[str, Any]:
    """Compare a kernel's D (M x N fp32, NaN-poisoned before the run) against ``ref``
    (float64) and count guard floats that lost their NaN poison.

    >>> ref = np.ones((2, 2)); d = np.array([[1, 1], [np.nan, 3]], np.float32)
    >>> c = compare(d, ref, np.full(4, np.nan, np.float32))
    >>> (c["verdict"], c["bad"], c["unwritten"], c["max_err"])
    ('wrong', 2, 1, 2.0)
    """
    scale = float(np.max(np.abs(ref))) or 1.0
    err = np.abs(d.astype(np.float64) - ref)
    unwritten = int(np.isnan(d).sum())
    finite = np.isfinite(err)
    bad = int((~finite).sum() + (err[finite] > REL_TOL * scale).sum())
    max_err = float(err[finite].max()) if finite.any() else float("nan")
    oob = int((~np.isnan(guard)).sum())
    verdict = "correct" if bad == 0 and oob == 0 else "wrong"
    return {"verdict": verdict, "max_err": max_err, "rel_err": max_err / scale, "bad": bad,
            "unwritten": unwritten, "oob_writes": oob}


def _bf16(x: np.ndarray) -> np.ndarray:
    """Values rounded to bf16 (nearest-even), as the uint16 bit patterns the kernel reads."""
    from argus_cutlass.runtime.check import float32_to_bits

    return float32_to_bits(np.asarray(x, dtype=np.float32), "bf16")


def bf16_values(x: np.ndarray) -> np.ndarray:
    """``x`` rounded to bf16, as float64 (the values the kernel multiplies)."""
    from argus_cutlass.runtime.check import bits_to_float32

    return bits_to_float32(_bf16(x), "bf16").astype(np.float64)


def _load_entry(so_path: str, name: str) -> tuple[Any, Any]:
    """``(entry, error_string)`` of a mutant kernel library (loaded once per process)."""
    import ctypes

    from argus_cutlass.runtime.launch import load_function

    entry = load_function(so_path, name, [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int,
                                          ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_void_p])
    return entry, load_function(so_path, f"{name}_error_string", [ctypes.c_int], ctypes.c_char_p)


def run_in_process(so_path: str, name: str, m: int, n: int, k: int, grid: int, seed: int = 0) -> dict[str, Any]:
    """Run the built kernel ``name`` from ``so_path`` once in *this* process and compare.

    Blocks forever on a hung kernel: call it through :func:`run_mutant` (child process)
    unless the kernel is known to terminate.

    Raises:
        argus_cutlass.errors.CudaError: no usable sm_90 GPU or a failing CUDA call.
    """
    from argus_cutlass.runtime.check import bits_to_float32
    from argus_cutlass.runtime.cuda import DeviceBuffer, require_sm90, synchronize

    require_sm90()
    rng = np.random.default_rng(seed)
    a = _bf16(rng.uniform(-1, 1, (m, k)))
    b = _bf16(rng.uniform(-1, 1, (n, k)))
    ref = bits_to_float32(a, "bf16").astype(np.float64) @ bits_to_float32(b, "bf16").astype(np.float64).T
    guard_floats = 64 * n + 4096  # one 64-row tile of spill plus slack
    poison = np.full(m * n + guard_floats, np.nan, np.float32)
    entry, err_str = _load_entry(str(so_path), name)
    with DeviceBuffer.from_numpy(a) as da, DeviceBuffer.from_numpy(b) as db, \
            DeviceBuffer.from_numpy(poison) as dd:
        code = entry(int(da), int(db), int(dd), m, n, k, grid, None)
        if code != 0:
            return {"verdict": "error", "detail": f"entry returned {code}: {err_str(code).decode()}"}
        synchronize()
        out = dd.to_numpy(np.float32, (m * n + guard_floats,))
    return compare(out[: m * n].reshape(m, n), ref, out[m * n:])


def run_with_inputs(so_path: str | Path, name: str, a: np.ndarray, b: np.ndarray, grid: int = 1) -> np.ndarray:
    """Run a mutant kernel once in *this* process on given operands and return D.

    Only for mutants that terminate (layout mutants: wrong data, no protocol fault); a
    pipeline mutant can hang here, so those go through :func:`run_mutant`.

    Args:
        a: ``(M, K)`` float values, rounded to bf16 (A, K contiguous).
        b: ``(N, K)`` float values, rounded to bf16 (B stored N x K).
        grid: persistent CTAs.

    Returns:
        float64 ``(M, N)``: the kernel's D (NaN where it wrote nothing).

    Raises:
        argus_cutlass.errors.CudaError: no usable sm_90 GPU or a failing CUDA call.
        RuntimeError: the entry point returned an error code.
    """
    from argus_cutlass.runtime.cuda import DeviceBuffer, require_sm90, synchronize

    require_sm90()
    m, k = a.shape
    n = b.shape[0]
    entry, _ = _load_entry(str(so_path), name)
    with DeviceBuffer.from_numpy(_bf16(a)) as da, DeviceBuffer.from_numpy(_bf16(b)) as db, \
            DeviceBuffer.from_numpy(np.full(m * n, np.nan, np.float32)) as dd:
        code = entry(int(da), int(db), int(dd), m, n, k, grid, None)
        if code != 0:
            raise RuntimeError(f"{name} returned {code}")
        synchronize()
        return dd.to_numpy(np.float32, (m, n)).astype(np.float64)


def run_mutant(mutant_id: str, so_path: str | Path, shape: tuple[int, int, int, int] = MUTANT_SHAPE, *,
               timeout_s: float | None = None, seed: int = 0) -> MutantRun:
    """Run one built mutant in a child Python process, killed after ``timeout_s`` seconds.

    Args:
        mutant_id: catalogue id or ``baseline`` (names the kernel symbol).
        so_path: the built shared library.
        shape: (M, N, K, grid); grid = persistent CTAs (fewer than the output tiles).
        timeout_s: wall-clock limit of the child; past it the verdict is ``hang`` (default
            ``ARGUS_MUTANT_TIMEOUT``, :attr:`argus_cutlass.settings.Settings.mutant_timeout_s`).
    """
    import time

    if timeout_s is None:
        from argus_cutlass.settings import settings

        timeout_s = settings().mutant_timeout_s

    m, n, k, grid = shape
    code = ("import json, sys\n"
            "from argus_cutlass.runtime.mutants import run_in_process\n"
            "try:\n"
            f"    r = run_in_process({str(so_path)!r}, {kernel_name_of(mutant_id)!r}, {m}, {n}, {k}, {grid}, {seed})\n"
            "except Exception as exc:  # a device fault is a result too\n"
            "    r = {'verdict': 'error', 'detail': f'{type(exc).__name__}: {exc}'}\n"
            "print('@@RESULT@@' + json.dumps(r)); sys.stdout.flush()\n")
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env=env, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()  # the child only; a hung kernel dies with its context
        try:
            out, _ = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            out = ""
        return MutantRun(mutant_id, "hang", shape, seconds=time.perf_counter() - t0,
                         detail=f"no result after {timeout_s:g} s; child killed\n{(out or '')[-2000:]}")
    seconds = time.perf_counter() - t0
    for line in (out or "").splitlines():
        if line.startswith("@@RESULT@@"):
            r = json.loads(line[len("@@RESULT@@"):])
            return MutantRun(mutant_id, r.pop("verdict"), shape, seconds=seconds,
                             **{k2: v for k2, v in r.items() if k2 in MutantRun.__dataclass_fields__})
    return MutantRun(mutant_id, "error", shape, seconds=seconds,
                     detail=f"child exit {proc.returncode}\n{(out or '')[-2000:]}")


def run_suite(ids: Sequence[str] | None = None, shape: tuple[int, int, int, int] = MUTANT_SHAPE, *,
              timeout_s: float | None = None, max_workers: int | None = None) -> list[MutantRun]:
    """Build (one parallel compile) and run ``ids`` (default: every GPU mutant), one child
    process each. A failed build gives verdict ``error`` with the compiler message."""
    ids = list(ids) if ids is not None else [m.id for m in gpu_mutants()]
    built = build_mutants(ids, max_workers=max_workers)
    runs: list[MutantRun] = []
    for i in ids:
        art = built[i]
        if isinstance(art, Exception):
            runs.append(MutantRun(i, "error", shape, detail=f"build failed: {art}"))
            continue
        runs.append(run_mutant(i, art.path, shape, timeout_s=timeout_s))
    return runs


def summary_json(runs: Sequence[MutantRun]) -> str:
    """The runs as JSON (one object per mutant, with its class and catalogue description)."""
    rows = []
    for r in runs:
        row = asdict(r)
        m = CATALOGUE.get(r.id)
        row["class"] = m.cls if m else "baseline"
        row["description"] = m.description if m else "unmutated kernel"
        row["summary"] = r.summary()
        rows.append(row)
    return json.dumps(rows, indent=1, default=float)


__all__ = [
    "BASELINE_KNOBS",
    "MUTANT_SHAPE",
    "MUTANT_TEMPLATE",
    "MutantRun",
    "build_mutants",
    "compare",
    "gpu_mutants",
    "kernel_name_of",
    "render_mutant",
    "run_in_process",
    "run_mutant",
    "run_suite",
    "run_with_inputs",
    "summary_json",
    "bf16_values",
]
