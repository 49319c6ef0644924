"""Compile one ``.cu`` with nvcc in a subprocess (with a timeout), through the cache.

Every build uses the fixed flags :data:`BASE_FLAGS` plus the CUTLASS include paths:

    -std=c++17 -O3 -DNDEBUG --expt-relaxed-constexpr -gencode=arch=compute_90a,code=sm_90a
    -I<cutlass>/include -I<cutlass>/tools/util/include

plus ``--shared -Xcompiler -fPIC`` for a shared library, ``-cubin`` or ``-ptx`` for the
other kinds, and ``-Xptxas -v`` whenever ptxas runs (shared, cubin) so that its resource
report (registers, spills, stack) is parsed into the :class:`Artifact`.

A ptxas ``C7510`` message (wgmma.mma_async serialized: the kernel would run at a
fraction of its speed) fails the build with ``CompileError`` rule ``ptxas.C7510``.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Literal, Sequence

from argus_cutlass.build import cache
from argus_cutlass.build.toolchain import Toolchain, find_toolchain
from argus_cutlass.errors import CompileError
from argus_cutlass.settings import check_workers, settings

Kind = Literal["shared", "ptx", "cubin"]

BASE_FLAGS: tuple[str, ...] = (
    "-std=c++17",
    "-O3",
    "-DNDEBUG",
    "--expt-relaxed-constexpr",
    "-gencode=arch=compute_90a,code=sm_90a",
)
KIND_FLAGS: dict[str, tuple[str, ...]] = {
    "shared": ("--shared", "-Xcompiler", "-fPIC", "-Xptxas", "-v"),
    "cubin": ("-cubin", "-Xptxas", "-v"),
    "ptx": ("-ptx",),
}

#: lines of context kept around each error line in a CompileError message
ERROR_CONTEXT_LINES = 3
#: at most this many lines in a CompileError message (the full log stays in ``.log``)
ERROR_MAX_LINES = 40


@dataclass(frozen=True)
class FunctionResources:
    """ptxas's report for one entry function.

    Attributes:
        name: mangled function name.
        registers: registers per thread.
        spill_store_bytes, spill_load_bytes: bytes spilled to local memory per thread.
        stack_bytes: stack frame per thread (bytes).
        smem_bytes: static shared memory (bytes; dynamic smem is not reported by ptxas).
    """

    name: str
    registers: int = 0
    spill_store_bytes: int = 0
    spill_load_bytes: int = 0
    stack_bytes: int = 0
    smem_bytes: int = 0


@dataclass(frozen=True)
class Artifact:
    """One built file.

    Attributes:
        path: the ``.so``, ``.ptx`` or ``.cubin``.
        log: the full nvcc/ptxas output.
        seconds: wall time of the nvcc run (of the original build when ``cached``).
        cached: True when the file came from the cache and nvcc did not run.
        name: kernel name; kind: ``shared``, ``ptx`` or ``cubin``; key: cache key.
        log_path: the log on disk, beside the artifact.
        registers: max registers per thread over all entry functions (None for ptx).
        spill_bytes: max (spill stores + spill loads) bytes over all entry functions.
        stack_bytes: max stack frame bytes over all entry functions.
        functions: the per-function ptxas report.
    """

    path: Path
    log: str
    seconds: float
    cached: bool
    name: str = ""
    kind: str = "shared"
    key: str = ""
    log_path: Path | None = None
    registers: int | None = None
    spill_bytes: int | None = None
    stack_bytes: int | None = None
    functions: tuple[FunctionResources, ...] = field(default_factory=tuple)


@dataclass(frozen=True)
class CompileJob:
    """Arguments of one :func:`compile_cu` call, for :func:`compile_many`."""

    source: str
    name: str
    kind: Kind = "shared"
    extra_flags: tuple[str, ...] | list[str] = ()
    key_parts: tuple[str, ...] = ()

    @classmethod
    def for_program(cls, source: str, name: str, fingerprint: str) -> CompileJob:
        """The shared-library job of a printed DSL program: its fingerprint joins the cache key (two
        programs that print the same text still get their own entries and names)."""
        return cls(source, name, "shared", (), (f"program={fingerprint}",))


# ---------------------------------------------------------------------------------------
# log parsing (pure functions, unit-tested on captured logs)

_ENTRY = re.compile(r"ptxas info\s*: (?:Compiling entry function|Function properties for) '?([^'\s]+)'?")
_FRAME = re.compile(
    r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads"
)
_USED = re.compile(r"ptxas info\s*: Used (\d+) registers(?:.*?(\d+) bytes smem)?")
_C7510 = re.compile(r"C7510|wgmma\.mma_async instructions are serialized", re.IGNORECASE)
_ERROR = re.compile(r"\berror\b|\bfatal\b|undefined reference", re.IGNORECASE)
#: nvcc's report of a compiler stage killed by SIGINT (Ctrl-C reaches the whole process group)
_INTERRUPTED = re.compile(r"died due to signal 2\b")


def interrupted(returncode: int, log: str) -> bool:
    """True when nvcc (or a stage it ran: cudafe++, cicc, ptxas) was stopped by Ctrl-C (SIGINT), not by a
    compile error: a negative SIGINT exit, the shell's 130, or nvcc's ``died due to signal 2`` line.

    >>> interrupted(2, "nvcc error   : 'cudafe++' died due to signal 2 "), interrupted(1, "error: x")
    (True, False)
    """
    return returncode in (-2, 130) or bool(_INTERRUPTED.search(log))


def parse_ptxas_resources(log: str) -> tuple[FunctionResources, ...]:
    """Per-function resources from ``-Xptxas -v`` output (empty when ptxas did not run).

    Recognised lines (CUDA 12/13)::

        ptxas info    : Compiling entry function '_Z...' for 'sm_90a'
        ptxas info    : Function properties for _Z...
            0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
        ptxas info    : Used 168 registers, used 2 barriers, 1024 bytes smem
    """
    funcs: dict[str, dict] = {}
    order: list[str] = []
    current: str | None = None
    for line in log.splitlines():
        m = _ENTRY.search(line)
        if m:
            current = m.group(1)
            if current not in funcs:
                funcs[current] = {}
                order.append(current)
            continue
        if current is None:
            continue
        m = _FRAME.search(line)
        if m:
            funcs[current].update(
                stack_bytes=int(m.group(1)),
                spill_store_bytes=int(m.group(2)),
                spill_load_bytes=int(m.group(3)),
            )
            continue
        m = _USED.search(line)
        if m:
            funcs[current]["registers"] = int(m.group(1))
            if m.group(2):
                funcs[current]["smem_bytes"] = int(m.group(2))
    return tuple(FunctionResources(name=n, **funcs[n]) for n in order)


def find_c7510(log: str) -> list[str]:
    """The log lines reporting ptxas C7510 (wgmma serialized); empty when there are none."""
    return [line.strip() for line in log.splitlines() if _C7510.search(line)]


def check_c7510(log: str, name: str = "kernel") -> None:
    """Raise ``CompileError`` rule ``ptxas.C7510`` when ``log`` reports serialized wgmma.

    Raises:
        CompileError: ``ptxas.C7510`` naming the kernel and quoting the ptxas lines.
    """
    lines = find_c7510(log)
    if lines:
        shown = "\n".join(f"    {_clip(line)}" for line in lines[:5])
        raise CompileError(
            "ptxas.C7510",
            f"ptxas serialized the wgmma.mma_async instructions of {name} "
            f"(the kernel would run far below peak):\n{shown}",
            log=log,
            hint="usually register pressure or a non-inlined call in the mainloop: "
            "try a smaller tile_n, fewer epilogue registers or the other schedule",
        )


def relevant_lines(log: str, context: int = ERROR_CONTEXT_LINES, limit: int = ERROR_MAX_LINES) -> str:
    """The error lines of ``log`` with ``context`` lines after each (nvcc prints the
    offending source line and a caret there) and one before, at most ``limit`` lines.

    Falls back to the log's last lines when no line mentions an error.
    """
    lines = log.splitlines()
    keep: list[int] = []
    for i, line in enumerate(lines):
        if line.startswith("$ "):  # the command line we logged first
            continue
        if _ERROR.search(line) and "warning" not in line.lower():
            for j in range(max(0, i - 1), min(len(lines), i + context + 1)):
                if not keep or j > keep[-1]:
                    keep.append(j)
    if not keep:
        keep = list(range(max(0, len(lines) - limit // 2), len(lines)))
    out: list[str] = []
    prev = None
    for j in keep:
        if prev is not None and j != prev + 1:
            out.append("    ...")
        out.append(_clip(lines[j]))
        prev = j
        if len(out) >= limit:
            out.append(f"    ... ({len(lines)} log lines in all)")
            break
    return "\n".join(out)


def _clip(line: str, width: int = 300) -> str:
    return line if len(line) <= width else line[:width] + " ..."


# ---------------------------------------------------------------------------------------
# running nvcc


def nvcc_command(
    toolchain: Toolchain, kind: str, extra_flags: Sequence[str] = ()
) -> list[str]:
    """nvcc and its flags for ``kind`` (without the input and ``-o``)."""
    if kind not in KIND_FLAGS:
        raise CompileError(
            "nvcc.kind", f"unknown artifact kind {kind!r}; expected one of {sorted(KIND_FLAGS)}"
        )
    return [
        toolchain.nvcc.path,
        *BASE_FLAGS,
        *toolchain.cutlass.include_flags(),
        *KIND_FLAGS[kind],
        *extra_flags,
    ]


def _run_nvcc(cmd: list[str], timeout_s: float) -> subprocess.CompletedProcess:
    """The one place nvcc is executed (tests monkeypatch it to count runs)."""
    return subprocess.run(
        cmd, capture_output=True, text=True, timeout=timeout_s, check=False
    )


def _artifact_from_meta(meta: dict, log: str, cached: bool) -> Artifact:
    funcs = tuple(FunctionResources(**f) for f in meta.get("functions", []))
    return Artifact(
        path=Path(meta["path"]),
        log=log,
        seconds=float(meta.get("seconds", 0.0)),
        cached=cached,
        name=meta["name"],
        kind=meta["kind"],
        key=meta["key"],
        log_path=Path(meta["log_path"]),
        registers=meta.get("registers"),
        spill_bytes=meta.get("spill_bytes"),
        stack_bytes=meta.get("stack_bytes"),
        functions=funcs,
    )


def is_cached(source: str, kind: Kind = "shared", extra_flags: Sequence[str] = (), *,
              toolchain: Toolchain | None = None, key_parts: Sequence[str] = ()) -> bool:
    """Whether :func:`compile_cu` with the same arguments would be a cache hit (no nvcc run): the
    same cache key, a complete entry. Used to say "compiling ..." only when nvcc will run.

    Raises:
        ToolchainError: nvcc or the CUTLASS headers are missing (the key names their versions).
    """
    tc = toolchain or find_toolchain()
    return cache.lookup(_cache_key(source, tc, kind, extra_flags, key_parts)) is not None


def _cache_key(source: str, tc: Toolchain, kind: Kind, extra_flags: Sequence[str], key_parts: Sequence[str]) -> str:
    """The content-addressed cache key of one build (source, the full nvcc command, nvcc and CUTLASS versions,
    kind): :func:`compile_cu` and :func:`is_cached` share it."""
    cmd = nvcc_command(tc, kind, extra_flags)
    return cache.cache_key(source, [*cmd[1:], *key_parts], tc.nvcc.version_string, tc.cutlass.version, kind)


def compile_cu(
    source: str,
    name: str,
    kind: Kind = "shared",
    extra_flags: Sequence[str] = (),
    *,
    use_cache: bool = True,
    toolchain: Toolchain | None = None,
    key_parts: Sequence[str] = (),
) -> Artifact:
    """Build ``source`` into a shared library, PTX or cubin for sm_90a.

    Args:
        source: the full ``.cu`` text.
        name: a C identifier; names the files (``<name>.so`` ...).
        kind: ``shared`` (``.so`` for :class:`~argus_cutlass.kernels.gemm.library.GemmKernelLibrary`),
            ``ptx`` or ``cubin``.
        extra_flags: appended after the fixed flags (they are part of the cache key).
        key_parts: more text hashed into the cache key (the orchestrator passes the program's
            full fingerprint, so two programs never share an entry even if they printed alike).
        use_cache: look up / store the result in the content-addressed cache.
        toolchain: defaults to :func:`~argus_cutlass.build.toolchain.find_toolchain`.

    Returns:
        an :class:`Artifact`; ``cached`` says whether nvcc ran.

    Raises:
        ToolchainError: nvcc or the CUTLASS headers are missing.
        CompileError: ``nvcc.compile`` (nvcc/ptxas failed; message has the error lines,
            ``.log`` the full log, also kept under ``<cache>/kernels/failed/<key>/``),
            ``nvcc.timeout`` (ran past ``ARGUS_NVCC_TIMEOUT`` seconds),
            ``ptxas.C7510`` (wgmma serialized), ``nvcc.kind`` (unknown kind).
        KeyboardInterrupt: nvcc was stopped by Ctrl-C (:func:`interrupted`); nothing is cached.
    """
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise CompileError("nvcc.name", f"kernel name {name!r} is not a C identifier")
    tc = toolchain or find_toolchain()
    cmd = nvcc_command(tc, kind, extra_flags)
    key = _cache_key(source, tc, kind, extra_flags, key_parts)
    if use_cache:
        meta = cache.lookup(key)
        if meta is not None:
            try:
                log = Path(meta["log_path"]).read_text()
            except OSError:
                log = ""
            return _artifact_from_meta(meta, log, cached=True)

    timeout_s = settings().nvcc_timeout_s
    build_root = cache.cache_root() / "tmp"
    build_root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f"{name[:40]}-", dir=build_root) as tmp:
        src_path = Path(tmp) / f"{name}.cu"
        src_path.write_text(source)
        out_path = Path(tmp) / f"{name}{cache.KIND_SUFFIX[kind]}"
        full = [*cmd, "-o", str(out_path), str(src_path)]
        t0 = time.perf_counter()
        try:
            proc = _run_nvcc(full, timeout_s)
        except subprocess.TimeoutExpired as exc:
            log = _text(exc.stdout) + _text(exc.stderr)
            log_path = cache.store_failure(key, name, log, source)
            raise CompileError(
                "nvcc.timeout",
                f"nvcc ran longer than {timeout_s:g} s building {name}; log: {log_path}",
                log=log,
                hint="raise ARGUS_NVCC_TIMEOUT or build fewer kernels at once",
            ) from None
        seconds = time.perf_counter() - t0
        log = f"$ {' '.join(full)}\n" + (proc.stdout or "") + (proc.stderr or "")
        if proc.returncode != 0 and interrupted(proc.returncode, log):
            # Ctrl-C: not a compiler failure; nothing is cached or kept as a failed build
            raise KeyboardInterrupt(f"nvcc building {name} was interrupted")
        if proc.returncode != 0 or not out_path.is_file():
            log_path = cache.store_failure(key, name, log, source)
            raise CompileError(
                "nvcc.compile",
                f"nvcc failed building {name} ({kind}, exit {proc.returncode}):\n"
                f"{relevant_lines(log)}\n  full log: {log_path}",
                log=log,
            )
        try:
            check_c7510(log, name)
        except CompileError:
            cache.store_failure(key, name, log, source)
            raise
        funcs = parse_ptxas_resources(log)
        meta = {
            "seconds": seconds,
            "flags": cmd[1:],
            "nvcc_version": tc.nvcc.version_string,
            "cutlass_version": tc.cutlass.version,
            "functions": [f.__dict__ for f in funcs],
            "registers": max((f.registers for f in funcs), default=None),
            "spill_bytes": max((f.spill_store_bytes + f.spill_load_bytes for f in funcs), default=None),
            "stack_bytes": max((f.stack_bytes for f in funcs), default=None),
        }
        if use_cache:
            stored = cache.store(key, name, kind, out_path, log, source, meta)
        else:
            d = cache.cache_root() / "uncached" / key
            dst = d / out_path.name
            cache.atomic_move(out_path, dst)
            cache.atomic_write(d / f"{name}.log", log)
            stored = {**meta, "key": key, "name": name, "kind": kind,
                      "path": str(dst), "log_path": str(d / f"{name}.log")}
    return _artifact_from_meta(stored, log, cached=False)


def _text(data: bytes | str | None) -> str:
    if data is None:
        return ""
    return data.decode(errors="replace") if isinstance(data, bytes) else data


def _as_job(job: CompileJob | tuple | dict) -> CompileJob:
    if isinstance(job, CompileJob):
        return job
    if isinstance(job, dict):
        return CompileJob(**job)
    if isinstance(job, (tuple, list)):
        return CompileJob(*job)
    raise CompileError("nvcc.job", f"cannot use {type(job).__name__} as a compile job; "
                       "pass CompileJob(source, name, kind, extra_flags) or such a tuple")


def compile_many(
    jobs: Iterable[CompileJob | tuple | dict],
    max_workers: int | None = None,
    *,
    use_cache: bool = True,
    return_exceptions: bool = False,
) -> list[Artifact] | list[Artifact | CompileError]:
    """Build several sources in parallel (threads, each waiting on its own nvcc process).

    Args:
        jobs: :class:`CompileJob` objects, or tuples ``(source, name, kind[, extra_flags[, key_parts]])``
            or dicts with those keys.
        max_workers: parallel nvcc processes: None for the CPU count, else an integer >= 1.
        return_exceptions: when True a failed build's :class:`CompileError` takes its place
            in the result (expected failures such as ptxas C7510 do not hide the others);
            when False (default) every build still finishes, then the first error is raised.

    Returns:
        one :class:`Artifact` (or CompileError) per job, in order.

    Raises:
        ProblemError: ``build.workers`` when ``max_workers`` is not None and not an integer >= 1.
        ToolchainError: nvcc or the headers are missing (raised once, before any build).
        CompileError: the first failed build, unless ``return_exceptions``.
    """
    max_workers = check_workers(max_workers, "max_workers", "build.workers")
    job_list = [_as_job(j) for j in jobs]
    if not job_list:
        return []
    tc = find_toolchain()
    workers = max(1, min(len(job_list), max_workers if max_workers is not None else os.cpu_count() or 1))

    def one(job: CompileJob) -> Artifact | CompileError:
        try:
            return compile_cu(job.source, job.name, job.kind, job.extra_flags,
                              use_cache=use_cache, toolchain=tc, key_parts=job.key_parts)
        except CompileError as err:
            return err

    pool = ThreadPoolExecutor(max_workers=workers)
    try:
        results = list(pool.map(one, job_list))
    except KeyboardInterrupt:  # Ctrl-C: start no queued build, wait for the running ones to stop
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown()
    if not return_exceptions:
        for r in results:
            if isinstance(r, CompileError):
                raise r
    return results
