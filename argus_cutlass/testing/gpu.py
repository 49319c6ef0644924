"""Silicon runner of the mutant suite: build every mutant WITHOUT the verifier and run it.

For each mutant of :mod:`argus_cutlass.testing.mutants` (and one baseline per base
configuration) the production template prints the (mutated) program
(:func:`argus_cutlass.render.gemm.render_gemm`), nvcc builds it with the project's flags
(:func:`argus_cutlass.build.nvcc.nvcc_command`, all builds in parallel, no cache), and each
build runs in a **child process** with a deadline, so a hung kernel, an illegal address or a
poisoned CUDA context cannot stop the suite. Every run:

* draws random operands for the caller's layout (``A`` M x K, ``B`` K x N, ``C`` M x N row-major,
  ``D`` row-major with ``ldd = N + 8``), poisons all of D's storage, the padding columns past N
  and :data:`GUARD_ROWS` rows past M with NaN;
* calls the kernel's ``extern "C"`` entry with ``alpha`` = :data:`ALPHA`, ``beta`` = :data:`BETA`,
  polls its completion until ``kernel_timeout_s``;
* compares D with an fp32 reference ``alpha * A @ B + beta * C`` of the same rounded inputs.

Outcomes (per shape, then the first non-benign one over the shapes):

``wrong``     an element off by more than ``REL_TOL[out] * |ref| + ABS_TOL[out] * rms(ref)`` or NaN
              (unwritten, or NaN computed: ``nan``), or a write into the padding / guard rows
              (``out_of_bounds``);
``hung``      the kernel did not finish before the deadline (the child is killed);
``crashed``   the entry returned an error code, or CUDA reported a fault (illegal address...);
``benign``    every element correct, nothing written out of bounds;
``error``     the runner could not run the kernel (no GPU, library not loadable): no verdict;
``compile_fail`` nvcc refused the program (a printed ``static_assert``: its message is recorded).

Operands come from torch when it is importable, else from numpy through cuda-python. Children
fork from a ``forkserver`` that imported torch but never touched CUDA, so they start fast and
the caller may hold a CUDA context of its own.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import re
import subprocess
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from argus_cutlass.dsl.ir import Program
from argus_cutlass.kernels.gemm.config import GemmConfig
from argus_cutlass.testing.mutants import Mutant, baseline_program, load_catalogue, mutant_program

__all__ = [
    "ALPHA",
    "BASE_SHAPES",
    "BETA",
    "SHAPES",
    "Build",
    "Job",
    "Result",
    "build_jobs",
    "classify",
    "markdown_table",
    "plan_jobs",
    "run_job",
    "run_suite",
    "static_assert_messages",
]

#: (name, (M, N, K)) of the caller's problem. ``residue``: M, N and K residues for 128-wide tiles,
#: 17 k-tiles of 64 (not a multiple of 2, 3, 4 or 5 stages), about one tile per CTA; ``multi_tile``:
#: 17 x 17 tiles of 128 (289, more than the H200's 132 SMs), so the pipeline state crosses tiles.
SHAPES: tuple[tuple[str, tuple[int, int, int]], ...] = (
    ("residue", (1000, 1032, 1064)),
    ("multi_tile", (2056, 2072, 1064)),
)
#: shapes run only for the jobs of one base (session 29): ``short_k``, 2 k-tiles (K = 72), fewer than the
#: ranks of the cluster-K base's 4-CTA cluster (ranks with no k-tile)
BASE_SHAPES: dict[str, tuple[tuple[str, tuple[int, int, int]], ...]] = {
    "clusterk": (("short_k", (1000, 1032, 72)),),
}
ALPHA = 1.0
#: beta != 0, so the C source path matters
BETA = 0.5
#: D rows past M that stay NaN unless something writes past the matrix
GUARD_ROWS = 8
#: columns past N in each row of D (ldd = N + PAD_COLS); 8 keeps ldd * 2 bytes a multiple of 16
PAD_COLS = 8
#: per-element tolerance, relative to |ref| and to rms(ref), by D's dtype (bf16 rounds to 2^-9
#: relative, fp16 to 2^-12; fp32 differs only by the accumulation order)
REL_TOL = {"bf16": 1e-2, "fp16": 2e-3, "fp32": 1e-4}
ABS_TOL = {"bf16": 1e-3, "fp16": 1e-3, "fp32": 1e-4}
#: outcomes that show a mutant on silicon
SHOWN = ("wrong", "hung", "crashed", "compile_fail")


@dataclass(frozen=True)
class Job:
    """One kernel to build and run: a mutant (``mutant`` set) or the baseline of a base config
    (``config``: the family's configuration, e.g. a GemmConfig or an AttentionConfig)."""

    id: str
    base: str
    config: Any
    program: Program
    mutant: Mutant | None = None

    @property
    def name(self) -> str:
        return self.program.kernel_name()


@dataclass
class Build:
    """nvcc's result for one job: the ``.so`` (None on failure), wall seconds, ptxas resources,
    the error lines and every ``static_assert`` message that fired."""

    id: str
    so_path: str | None
    seconds: float
    registers: int | None = None
    spill_bytes: int | None = None
    error: str = ""
    static_asserts: list[str] = field(default_factory=list)


@dataclass
class Result:
    """One job's outcome over the shapes (see the module docstring)."""

    id: str
    cls: str
    rule: str
    base: str
    outcome: str
    shapes: list[dict[str, Any]]
    build: dict[str, Any]
    story: str = ""
    benign_reason: str = ""

    @property
    def shown(self) -> bool:
        return self.outcome in SHOWN


def plan_jobs(mutants: Sequence[Mutant] | None = None, family: str = "gemm") -> list[Job]:
    """Baselines (one per base configuration the mutants use, first) then the mutants (default:
    the family's whole catalogue)."""
    ms = list(load_catalogue(family=family).values()) if mutants is None else list(mutants)
    jobs: list[Job] = []
    seen: dict[Any, str] = {}
    for m in ms:
        key = (m.config, getattr(m, "staged", ()))
        if key not in seen:
            name = m.base_name if m.base_name != "inline" else f"inline{len(seen)}"
            seen[key] = name
            jobs.append(Job(f"baseline_{name}", name, m.config, baseline_program(m)))
    for m in ms:
        jobs.append(Job(m.id, seen[(m.config, getattr(m, "staged", ()))], m.config, mutant_program(m), m))
    return jobs


_STATIC_ASSERT = re.compile(r'static assertion failed(?: with "(.*?)")?\s*$')


def static_assert_messages(log: str) -> list[str]:
    """The messages of every ``static assertion failed with "..."`` line of an nvcc log.

    >>> static_assert_messages('x.cu(3): error: static assertion failed with "G6 pipeline.buffers: a == b"')
    ['G6 pipeline.buffers: a == b']
    """
    out = []
    for line in log.splitlines():
        m = _STATIC_ASSERT.search(line)
        if m:
            out.append(m.group(1) or line.strip())
    return out


def _compile(job: Job, work: Path, timeout_s: float) -> Build:
    from argus_cutlass.build.nvcc import nvcc_command, parse_ptxas_resources, relevant_lines
    from argus_cutlass.build.toolchain import find_toolchain
    from argus_cutlass.render.gemm import render_gemm

    cu = work / f"{job.id}.cu"
    so = work / f"{job.id}.so"
    try:
        cu.write_text(render_gemm(job.program))
    except Exception as exc:  # noqa: BLE001 - an unprintable mutant is a result, not a crash of the suite
        return Build(job.id, None, 0.0, error=f"render: {type(exc).__name__}: {exc}")
    cmd = [*nvcc_command(find_toolchain(), "shared"), "-o", str(so), str(cu)]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        return Build(job.id, None, time.perf_counter() - t0, error=f"nvcc ran longer than {timeout_s:g} s")
    seconds = time.perf_counter() - t0
    log = (proc.stdout or "") + (proc.stderr or "")
    (work / f"{job.id}.log").write_text(log)
    funcs = parse_ptxas_resources(log)
    regs = max((f.registers for f in funcs), default=None)
    spill = max((f.spill_store_bytes + f.spill_load_bytes for f in funcs), default=None)
    if proc.returncode != 0 or not so.is_file():
        return Build(job.id, None, seconds, regs, spill, relevant_lines(log)[-3000:], static_assert_messages(log))
    return Build(job.id, str(so), seconds, regs, spill)


def build_jobs(jobs: Sequence[Job], work: str | Path, *, workers: int | None = None,
               timeout_s: float = 600.0) -> dict[str, Build]:
    """Render and compile every job in parallel (``workers`` nvcc processes, default the CPU
    count) into ``work``; a failed build is a :class:`Build` with ``so_path`` None."""
    work = Path(work)
    work.mkdir(parents=True, exist_ok=True)
    with ThreadPoolExecutor(max_workers=workers or os.cpu_count() or 1) as ex:
        builds = list(ex.map(lambda j: _compile(j, work, timeout_s), jobs))
    return {b.id: b for b in builds}


# ------------------------------------------------------------------------------------ one run


def classify(d_core: Any, ref: Any, pad_written: int, out_dtype: str) -> dict[str, Any]:
    """Compare D (``M x N``, numpy float64) with ``ref`` (float64); ``pad_written`` counts
    padding / guard elements that lost their NaN poison.

    >>> import numpy as np
    >>> ref = np.ones((2, 2)); d = np.array([[1.0, 1.0], [np.nan, 3.0]])
    >>> c = classify(d, ref, 0, "fp32"); (c["outcome"], c["bad"], c["nan"])
    ('wrong', 2, 1)
    >>> classify(ref.copy(), ref, 0, "bf16")["outcome"]
    'benign'
    """
    import numpy as np

    d = np.asarray(d_core, dtype=np.float64)
    r = np.asarray(ref, dtype=np.float64)
    rms = float(np.sqrt(np.mean(r * r))) or 1.0
    err = np.abs(d - r)
    finite = np.isfinite(d)
    nan = int(np.isnan(d).sum())  # still the poison, or NaN computed
    tol = REL_TOL[out_dtype] * np.abs(r) + ABS_TOL[out_dtype] * rms
    bad = int((~finite).sum() + (err[finite] > tol[finite]).sum())
    fro = float(np.sqrt(np.sum(np.where(finite, err, 0.0) ** 2)) / (np.sqrt(np.sum(r * r)) or 1.0))
    max_err = float(err[finite].max()) if finite.any() else float("nan")
    outcome = "benign" if bad == 0 and pad_written == 0 else "wrong"
    return {"outcome": outcome, "rel_err": fro, "max_abs_err": max_err, "bad": bad, "nan": nan,
            "out_of_bounds": int(pad_written), "elements": int(d.size)}


def _operands_torch(torch: Any, cfg: GemmConfig, m: int, n: int, k: int, gen: Any) -> dict[str, Any]:
    dt = {"bf16": torch.bfloat16, "fp16": torch.float16}[cfg.dtype]
    ot = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[cfg.out_dtype]
    a = torch.randn(m, k, device="cuda", generator=gen).to(dt)
    b = torch.randn(k, n, device="cuda", generator=gen).to(dt)
    c = torch.randn(m, n, device="cuda", generator=gen).to(ot)
    a_st, lda = (a.contiguous(), k) if cfg.layout[0] == "t" else (a.t().contiguous(), m)
    b_st, ldb = (b.t().contiguous(), k) if cfg.layout[1] == "n" else (b.contiguous(), n)
    ref = ALPHA * (a.float() @ b.float()) + BETA * c.float()
    ldd = n + PAD_COLS
    d = torch.full(((m + GUARD_ROWS) * ldd,), float("nan"), device="cuda", dtype=ot)
    return {"a": a_st, "b": b_st, "c": c, "d": d, "lda": lda, "ldb": ldb, "ldc": n, "ldd": ldd, "ref": ref}


def _entry(so_path: str, name: str) -> tuple[Any, Any]:
    import ctypes

    lib = ctypes.CDLL(so_path)
    fn = getattr(lib, name)
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_int] * 3 + [ctypes.c_int64] * 4 + [ctypes.c_float] * 2 + \
        [ctypes.c_void_p]
    es = getattr(lib, f"{name}_error_string")
    es.restype = ctypes.c_char_p
    es.argtypes = [ctypes.c_int]
    return fn, es


def _run_torch(so_path: str, name: str, cfg: GemmConfig, shapes: Sequence[tuple[str, tuple[int, int, int]]],
               seed: int, kernel_timeout_s: float, send: Any) -> None:
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    fn, es = _entry(so_path, name)
    gen = torch.Generator(device="cuda")
    gen.manual_seed(seed)
    for label, (m, n, k) in shapes:
        t0 = time.perf_counter()
        ops = _operands_torch(torch, cfg, m, n, k, gen)
        torch.cuda.synchronize()
        stream = torch.cuda.current_stream()
        send.launched = True  # type: ignore[attr-defined]
        rc = fn(ops["a"].data_ptr(), ops["b"].data_ptr(), ops["c"].data_ptr(), ops["d"].data_ptr(), m, n, k,
                ops["lda"], ops["ldb"], ops["ldc"], ops["ldd"], ALPHA, BETA, stream.cuda_stream)
        row: dict[str, Any] = {"shape": label, "mnk": [m, n, k]}
        if rc != 0:
            send({**row, "outcome": "crashed", "detail": f"entry returned {rc}: {es(rc).decode()}"})
            return
        done = torch.cuda.Event()
        done.record(stream)
        deadline = time.perf_counter() + kernel_timeout_s
        while not done.query():
            if time.perf_counter() > deadline:
                send({**row, "outcome": "hung", "detail": f"not finished after {kernel_timeout_s:g} s"})
                return
            time.sleep(0.001)
        torch.cuda.synchronize()  # raises on a device fault
        ldd = ops["ldd"]
        d = ops["d"].float()
        body = d[: m * ldd].view(m, ldd)
        pad = int((~torch.isnan(body[:, n:])).sum().item()) + int((~torch.isnan(d[m * ldd:])).sum().item())
        res = classify(body[:, :n].double().cpu().numpy(), ops["ref"].double().cpu().numpy(), pad, cfg.out_dtype)
        send({**row, **res, "seconds": time.perf_counter() - t0})
        del ops
        torch.cuda.empty_cache()


def _run_numpy(so_path: str, name: str, cfg: GemmConfig, shapes: Sequence[tuple[str, tuple[int, int, int]]],
               seed: int, kernel_timeout_s: float, send: Any, inputs: tuple[Any, Any] | None = None) -> None:
    """The same run without torch: numpy operands, cuda-python buffers and events. With
    ``inputs`` = (A (M x K), B (K x N)) float arrays (one shape, rounded to the input dtype),
    C is zero and the row also carries D (``"d"``, float64 M x N) for probe comparisons."""
    import numpy as np

    from argus_cutlass.runtime.check import bits_to_float32, float32_to_bits
    from argus_cutlass.runtime.cuda import DeviceBuffer, check, cudart, require_sm90

    require_sm90()
    rt = cudart()
    fn, es = _entry(so_path, name)
    rng = np.random.default_rng(seed)
    for label, (m, n, k) in shapes:
        t0 = time.perf_counter()
        row: dict[str, Any] = {"shape": label, "mnk": [m, n, k]}

        def rounded(x: np.ndarray, dtype: str) -> tuple[np.ndarray, np.ndarray]:
            if dtype == "fp32":
                v = x.astype(np.float32)
                return v, v.astype(np.float64)
            bits = float32_to_bits(x.astype(np.float32), dtype)
            return bits, bits_to_float32(bits, dtype).astype(np.float64)

        a_in = rng.standard_normal((m, k)) if inputs is None else np.asarray(inputs[0], np.float64)
        b_in = rng.standard_normal((k, n)) if inputs is None else np.asarray(inputs[1], np.float64)
        a_raw, a = rounded(a_in, cfg.dtype)
        b_raw, b = rounded(b_in, cfg.dtype)
        c_raw, c = rounded(rng.standard_normal((m, n)) if inputs is None else np.zeros((m, n)), cfg.out_dtype)
        a_st, lda = (a_raw, k) if cfg.layout[0] == "t" else (np.ascontiguousarray(a_raw.T), m)
        b_st, ldb = (np.ascontiguousarray(b_raw.T), k) if cfg.layout[1] == "n" else (b_raw, n)
        ref = ALPHA * (a @ b) + BETA * c
        ldd = n + PAD_COLS
        out_np = np.float32 if cfg.out_dtype == "fp32" else np.uint16
        nan_bits = {"bf16": 0x7FC0, "fp16": 0x7E00}
        poison = (np.full((m + GUARD_ROWS) * ldd, np.nan, np.float32) if cfg.out_dtype == "fp32"
                  else np.full((m + GUARD_ROWS) * ldd, nan_bits[cfg.out_dtype], np.uint16))
        bufs = [DeviceBuffer.from_numpy(np.ascontiguousarray(x)) for x in (a_st, b_st, c_raw, poison)]
        send.launched = True  # type: ignore[attr-defined]
        rc = fn(int(bufs[0]), int(bufs[1]), int(bufs[2]), int(bufs[3]), m, n, k, lda, ldb, n, ldd, ALPHA, BETA, None)
        if rc != 0:
            send({**row, "outcome": "crashed", "detail": f"entry returned {rc}: {es(rc).decode()}"})
            return
        ev = check("cudaEventCreate", rt.cudaEventCreate())
        check("cudaEventRecord", rt.cudaEventRecord(ev, 0))
        deadline = time.perf_counter() + kernel_timeout_s
        while True:
            err = rt.cudaEventQuery(ev)
            err = err[0] if isinstance(err, tuple) else err
            if int(err) == 0:
                break
            if int(err) != int(rt.cudaError_t.cudaErrorNotReady):
                check("kernel", (err,))
            if time.perf_counter() > deadline:
                send({**row, "outcome": "hung", "detail": f"not finished after {kernel_timeout_s:g} s"})
                return
            time.sleep(0.001)
        raw = bufs[3].to_numpy(out_np, ((m + GUARD_ROWS) * ldd,))
        full = raw.astype(np.float64) if cfg.out_dtype == "fp32" else bits_to_float32(raw, cfg.out_dtype).astype(np.float64)
        body = full[: m * ldd].reshape(m, ldd)
        pad = int((~np.isnan(body[:, n:])).sum() + (~np.isnan(full[m * ldd:])).sum())
        res = classify(body[:, :n], ref, pad, cfg.out_dtype)
        if inputs is not None:
            res["d"] = body[:, :n].copy()
        send({**row, **res, "seconds": time.perf_counter() - t0})
        for buf in bufs:
            buf.free()


def _child(conn: Any, so_path: str, name: str, cfg: GemmConfig, shapes: Any, seed: int,
           kernel_timeout_s: float, use_torch: bool, inputs: Any = None) -> None:
    def send(row: dict[str, Any]) -> None:
        conn.send(row)

    send.launched = False  # type: ignore[attr-defined]  # set just before the first kernel launch
    try:
        if inputs is not None:
            _run_numpy(so_path, name, cfg, shapes, seed, kernel_timeout_s, send, inputs)
        else:
            (_run_torch if use_torch else _run_numpy)(so_path, name, cfg, shapes, seed, kernel_timeout_s, send)
    except BaseException as exc:  # noqa: BLE001 - a device fault is a result (crashed)
        # before any launch it is the runner's problem (no GPU, library not loadable): error
        outcome = "crashed" if send.launched else "error"  # type: ignore[attr-defined]
        send({"shape": "?", "outcome": outcome, "detail": f"{type(exc).__name__}: {str(exc)[:2000]}"})
    finally:
        conn.send(None)
        conn.close()
        os._exit(0)  # skip interpreter teardown: a hung kernel's context dies with the process


def _have_torch() -> bool:
    import importlib.util

    return importlib.util.find_spec("torch") is not None


_CTX: Any = None


def _context() -> Any:
    """Children fork from a fork server that imported this module (and torch) but never touched
    CUDA: a child starts in well under a second, and a caller that already initialised CUDA
    (the GPU tests' fixtures) can still start children (a plain fork of it could not)."""
    global _CTX
    if _CTX is None:
        if "forkserver" in multiprocessing.get_all_start_methods():
            _CTX = multiprocessing.get_context("forkserver")
            _CTX.set_forkserver_preload(["argus_cutlass.testing.gpu", "torch"])
        else:
            _CTX = multiprocessing.get_context("spawn")
    return _CTX


def run_job(so_path: str, name: str, cfg: GemmConfig,
            shapes: Sequence[tuple[str, tuple[int, int, int]]] = SHAPES, *, seed: int = 0,
            kernel_timeout_s: float = 10.0, setup_timeout_s: float = 120.0,
            use_torch: bool | None = None, inputs: tuple[Any, Any] | None = None) -> list[dict[str, Any]]:
    """Run one built kernel over ``shapes`` in a child process; one row per shape run (the run
    stops at the first hung or crashed shape). The parent never initialises CUDA.

    ``inputs``: explicit operands (A as M x K, B as K x N, logical, float) for one shape
    ``(M, N, K)``; the run then uses numpy + cuda-python, beta's C is zero, and the row
    carries the kernel's D (``row["d"]``).

    A child that sends nothing for ``setup_timeout_s + kernel_timeout_s`` seconds is killed and
    its current shape reported ``hung``.
    """
    if use_torch is None:
        use_torch = _have_torch()
    ctx = _context()
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(send, so_path, name, cfg, tuple(shapes), seed, kernel_timeout_s,
                                            use_torch, inputs), daemon=True)
    proc.start()
    send.close()
    rows: list[dict[str, Any]] = []
    limit = setup_timeout_s + kernel_timeout_s
    while True:
        if not recv.poll(limit):
            done = {r.get("shape") for r in rows}
            label = next((s for s, _ in shapes if s not in done), "?")
            rows.append({"shape": label, "outcome": "hung", "detail": f"child silent for {limit:g} s; killed"})
            break
        try:
            row = recv.recv()
        except EOFError:
            rows.append({"shape": "?", "outcome": "crashed", "detail": f"child died (exit {proc.exitcode})"})
            break
        if row is None:
            break
        rows.append(row)
    proc.join(5)
    if proc.is_alive():
        proc.kill()
        proc.join(30)
    recv.close()
    return rows


def _overall(rows: list[dict[str, Any]]) -> str:
    for r in rows:
        if r["outcome"] != "benign":
            return r["outcome"]
    return "benign" if rows else "error"


def run_suite(mutants: Sequence[Mutant] | None = None, *, work: str | Path = "/tmp/argus_mutants",
              shapes: Sequence[tuple[str, tuple[int, int, int]]] = SHAPES, workers: int | None = None,
              kernel_timeout_s: float = 10.0, seed: int = 0, log: Any = print) -> list[Result]:
    """Plan, build (parallel) and run the baselines and ``mutants`` (default: the catalogue).

    Returns one :class:`Result` per job, baselines first, then a final re-run of the first
    baseline (id ``<baseline>_after``) showing the GPU was still sound after the mutants.
    Operands come from torch when the parent can import it (children fork from a server that
    imported it), else from numpy.
    """
    jobs = plan_jobs(mutants)
    use_torch = _have_torch()
    t0 = time.perf_counter()
    builds = build_jobs(jobs, work, workers=workers)
    log(f"built {sum(b.so_path is not None for b in builds.values())}/{len(jobs)} in "
        f"{time.perf_counter() - t0:.1f} s ({'torch' if use_torch else 'numpy'} operands)")
    results: list[Result] = []
    for job in [*jobs, jobs[0]]:
        b = builds[job.id]
        rid = job.id if len(results) < len(jobs) else f"{job.id}_after"
        m = job.mutant
        if b.so_path is None:
            rows: list[dict[str, Any]] = []
            outcome = "error" if b.error.startswith("render:") else "compile_fail"
        else:
            rows = run_job(b.so_path, job.name, job.config, (*shapes, *BASE_SHAPES.get(job.base, ())), seed=seed,
                           kernel_timeout_s=kernel_timeout_s, use_torch=use_torch)
            outcome = _overall(rows)
        res = Result(rid, m.cls if m else "baseline", m.rule if m else "-", job.base, outcome, rows, asdict(b),
                     m.story if m else "", m.benign_reason if m else "")
        results.append(res)
        log(f"{rid:36s} {outcome:12s} {_numbers(res)}")
    return results


def _numbers(r: Result) -> str:
    if not r.shapes:  # not built
        sa = r.build.get("static_asserts") or []
        if sa:
            return f"static_assert: {sa[0]}"
        lines = r.build.get("error", "").strip().splitlines()
        return lines[0][:200] if lines else ""
    parts = []
    for row in r.shapes:
        if "rel_err" in row:
            parts.append(f"{row['shape']}: rel {row['rel_err']:.2e}, bad {row['bad']}, NaN {row['nan']}, "
                         f"oob {row['out_of_bounds']}")
        else:
            parts.append(f"{row['shape']}: {row.get('detail', '')[:120]}")
    return "; ".join(parts)


def markdown_table(results: Sequence[Result]) -> str:
    """The results as a markdown table (id, class, rule, outcome, numbers, benign reason)."""
    lines = ["| mutant | class | rule | silicon | numbers |", "|---|---|---|---|---|"]
    for r in results:
        note = _numbers(r).replace("|", "/")
        if r.outcome == "benign" and r.benign_reason:
            note += f" (benign: {r.benign_reason})"
        note = " ".join(note.split())  # one table row per mutant
        lines.append(f"| `{r.id}` | {r.cls} | `{r.rule}` | {r.outcome} | {note} |")
    return "\n".join(lines) + "\n"


def write_results(results: Sequence[Result], out: str | Path, stem: str = "mutants_gpu") -> tuple[Path, Path]:
    """``<out>/<stem>.json`` (every field) and ``<out>/<stem>.md`` (the table)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    j, md = out / f"{stem}.json", out / f"{stem}.md"
    j.write_text(json.dumps([asdict(r) for r in results], indent=1, default=str))
    md.write_text(markdown_table(results))
    return j, md


def run_child_protocol(target: Any, args: tuple, *, setup_timeout_s: float,
                       problem_timeout_s: Any) -> list[dict[str, Any]]:
    """Run ``target(conn, *args)`` in a child started with ``multiprocessing``'s ``spawn`` (no CUDA
    state inherited; the parent never initialises CUDA) and collect the rows it sends.

    The child's protocol (the attention and MoE silicon runners): ``{"ready": ...}`` once set up,
    ``{"start": problem}`` before each problem, one result row per problem, ``None`` at the end.
    A child silent for ``setup_timeout_s`` while starting is an ``error`` row (problem ``setup``); a
    problem with no result ``problem_timeout_s(problem)`` seconds after its start is ``hung``; a child
    that dies is ``crashed`` (``error`` before its first problem). The child is killed on a timeout.
    """
    ctx = multiprocessing.get_context("spawn")
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=target, args=(send, *args), daemon=True)
    proc.start()
    send.close()
    rows: list[dict[str, Any]] = []
    current: str | None = None
    limit = setup_timeout_s
    try:
        while True:
            if not recv.poll(limit):
                if current is None:
                    rows.append({"problem": "setup", "outcome": "error",
                                 "detail": f"child silent for {limit:g} s while starting; killed"})
                else:
                    rows.append({"problem": current, "outcome": "hung",
                                 "detail": f"no result {limit:g} s after the start; child killed"})
                break
            try:
                msg = recv.recv()
            except EOFError:
                rows.append({"problem": current or "setup", "outcome": "crashed" if current else "error",
                             "detail": f"child died (exit {proc.exitcode})"})
                break
            if msg is None:
                break
            if "ready" in msg:
                limit = setup_timeout_s
            elif "start" in msg:
                current = msg["start"]
                limit = problem_timeout_s(current)
            else:
                rows.append(msg)
                current = None
    finally:
        proc.join(5)
        if proc.is_alive():
            proc.kill()
            proc.join(30)
        recv.close()
    return rows
