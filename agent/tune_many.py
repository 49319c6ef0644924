"""``argus-cutlass tune --shapes FILE`` / ``--model CONFIG.json``: fill the tuned table for many GEMM shapes.

For every shape the first ``budget`` candidates in the planner's order (the heuristic's configuration
when it is feasible, then :func:`argus_cutlass.agent.planner.ranked_feasible`: best predicted first,
each accepted by the verifier) go through three stages, after a planning step:

0. **plan** (CPU workers): :func:`plan_candidates`. It ranks the whole space (about 285k
   configurations) and runs the verifier's fast tiers down the list until ``budget`` pass: seconds
   for a large shape, a minute or more for a small one whose best predicted points are infeasible
   (the verdicts are cached per worker process, so later shapes are faster); journaled, so a
   resumed run does not plan again;
1. **compile** (CPU workers): :func:`argus_cutlass.generate.generate` (build, full verification,
   render) and :func:`argus_cutlass.generate.compile_kernel` (nvcc through the content-addressed
   cache), one candidate per task;
2. **measure** (GPU workers, one per GPU): :func:`argus_cutlass.generate.load`, the numerics check
   (:func:`argus_cutlass.generate.check` on a bounded copy of the problem,
   :func:`~argus_cutlass.agent.measure.check_shape`)
   and, when it passes, :func:`argus_cutlass.generate.time_kernel`; cuBLAS once per shape
   (:func:`argus_cutlass.generate.baseline`);
   the fp32 reference GEMM of each dtype/layout is built once beforehand, on a CPU worker;
3. **record**: each shape's fastest passing candidate goes to the
   :class:`~argus_cutlass.agent.store.ExperienceStore` (:meth:`~argus_cutlass.agent.store.ExperienceStore.record_best`),
   where ``argus-cutlass gemm`` finds it (source ``store``).

Execution backends (:func:`make_backend`): **Ray** when it is importable (``pip install
argus_cutlass[tune]``): ``ray.init(address=...)`` joins an existing cluster, else a local one is
started; compiles are tasks with ``num_cpus=1`` (the built ``.so`` travels back in the object store, so
a GPU node need not share a file system with the compile nodes), measurements run in actors with
``num_gpus=1``, as many as there are GPUs (``--gpus`` caps them), each handed its next job as soon
as it is free; entries are keyed by the name of the GPU that measured them. Otherwise **local**: a process pool for the compiles
(a thread pool when the compile function is injected) and the measurements one after the other on the
one GPU of this machine. The first line printed names the backend.

Resumability: ``out_dir/tune_journal.jsonl`` is an append-only JSON-lines journal, one line per event
(``shape``, ``config``, ``stage``, ``outcome``, ``ms`` and details), each flushed and ``fsync``-ed
as soon as it is known. On a restart with ``resume=True`` every (shape, config) already measured is
skipped and its journaled result reused, a candidate the verifier or nvcc refused is not built again,
each shape's plan and cuBLAS time are reused; a crash therefore loses at most the measurements in
flight (one per GPU). A torn last line (a crash during a write) is ignored. ``resume=False`` moves an
old journal aside (``tune_journal.jsonl.1``, ``.2``, ...) and starts afresh.

Without a GPU the run compiles only: the journal says ``compiled`` for each built candidate and
nothing is recorded (a later run on a GPU machine with the same ``out_dir`` measures them, the
compiles coming from the cache). Without nvcc it stops after rendering (``rendered``).

Journal stages and outcomes:

==========  ==========================================================================================
stage       outcome
==========  ==========================================================================================
run         ``start`` (backend, budget, shapes) / ``end``
plan        ``planned`` (``candidates``: the config dicts, ``budget``)
compile     ``compiled``, ``rendered`` (no nvcc), ``rejected``, ``unproved``, ``render_error``,
            ``compile_error`` (``error``; these four are final), ``internal_error`` (an unexpected
            exception, tried again on resume)
measure     ``ok`` (``ms``), ``check_failed``, ``launch_error`` (``feedback``); ``gpu``
baseline    ``ok`` (``ms``: cuBLAS) or ``skipped`` (``feedback``)
record      ``recorded`` / ``kept`` (the store had a faster entry for the bucket); ``ms``, ``kernel``
==========  ==========================================================================================

Injectable for tests: ``measure`` (fake timings), ``compile`` (no nvcc), ``candidates`` (no ranking
of the full space), ``baseline``, ``store``.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from argus_cutlass.agent.planner import Measurement, Problem
from argus_cutlass.errors import ArgusError, ProblemError
from argus_cutlass.kernels.gemm.config import GemmConfig
from argus_cutlass.runtime.timing import DEFAULT_TIMING, LEGACY_TIMING
from argus_cutlass.settings import check_output_path, check_workers, output_dir

__all__ = [
    "JOURNAL", "Built", "Journal", "ShapeResult", "TuneManyResult", "compile_candidate", "config_key",
    "make_backend", "measure_candidate", "plan_candidates", "run_tune_shapes", "shape_key", "tune_shapes",
]

#: the journal's file name inside ``out_dir``
JOURNAL = "tune_journal.jsonl"
#: the summary written at the end of a run
SUMMARY = "tune_summary.json"
#: compile outcomes that are final: the same candidate is not built again on resume
TERMINAL_COMPILE = frozenset({"rejected", "unproved", "render_error", "compile_error"})

Say = Callable[[str], None]


# ---------------------------------------------------------------------------------------- keys


def shape_key(problem: Any) -> str:
    """``<M>x<N>x<K>_<dtype>_<out_dtype>_<layout>``: a shape's key in the journal."""
    p = problem
    return f"{p.m}x{p.n}x{p.k}_{p.dtype}_{p.out_dtype}_{p.layout}"


def config_key(cfg: GemmConfig | dict[str, Any]) -> str:
    """The canonical JSON of a configuration (its key in the journal): dumped anew from a GemmConfig, so a journal
    line written before a field existed (e.g. ``pdl``, session 45) keys the same configuration."""
    data = (cfg if isinstance(cfg, GemmConfig) else GemmConfig(**cfg)).model_dump()
    return json.dumps(data, sort_keys=True, separators=(",", ":"), default=list)


def _as_problem(shape: Any) -> Problem:
    """A planner :class:`Problem` (store bucket) of a GemmShape (``.problem()``) or a GemmProblem."""
    p = shape.problem() if hasattr(shape, "problem") and callable(shape.problem) else shape
    for attr in ("m", "n", "k", "dtype", "out_dtype", "layout"):
        if not hasattr(p, attr):
            raise ProblemError("tune.shapes", f"{shape!r} is not a GEMM shape (no {attr!r})")
    return p if isinstance(p, Problem) else Problem(p.m, p.n, p.k, p.dtype, p.out_dtype, p.layout)


# ---------------------------------------------------------------------------------------- stage 0: plan


@functools.cache
def _space(dtype: str, out_dtype: str, layout: str) -> Any:
    from argus_cutlass.kernels.gemm.space import GemmSpace

    return GemmSpace(dtype, out_dtype, layout)


def plan_candidates(problem: Problem, budget: int) -> list[GemmConfig]:
    """The first ``budget`` candidates of ``problem`` in the planner's order: the tuning episode's seeds
    (:func:`~argus_cutlass.agent.planner.episode_seeds`: the heuristic's configuration, then the untuned choice), then
    :func:`~argus_cutlass.agent.planner.ranked_feasible` (cost model order, verifier-accepted)."""
    from argus_cutlass.agent.planner import episode_seeds, ranked_feasible

    space = _space(problem.dtype, problem.out_dtype, problem.layout)
    first = [p.config for p in episode_seeds(problem, space)]
    rest = ranked_feasible(space, problem, set(first), limit=max(0, budget - len(first)))
    return (first + rest)[:budget]


def _plan_task(plan: Callable[[Problem, int], list[GemmConfig]], problem: Problem, budget: int) -> list[dict]:
    return [c.model_dump() for c in plan(problem, budget)]


# ---------------------------------------------------------------------------------------- stage 1: compile


@dataclass(frozen=True)
class Built:
    """What a compile task returns for one candidate.

    Attributes:
        status: ``compiled``, ``rendered`` (no nvcc), ``rejected``, ``unproved``, ``render_error``
            or ``compile_error`` (the orchestrator's statuses).
        kernel: the kernel name (None when no program was built); path: the ``.so`` on the
            compiling node; k_bound_bits: the proved K range of the program.
        binary: the ``.so``'s bytes when the backend ships them (Ray: the driver swaps them for an
            object-store reference, so its memory does not hold every binary), else None.
        error: ``[rule] message`` of a failure.
    """

    status: str
    kernel: str | None = None
    path: str | None = None
    k_bound_bits: int | None = None
    binary: Any = None
    error: str | None = None
    seconds: float = 0.0


def compile_candidate(problem: Problem, cfg: GemmConfig, *, ship_binary: bool = False) -> Built:
    """Stage 1 for one candidate: generate (full verifier, z3 when installed) and nvcc it.
    Expected failures are a status; nvcc missing gives ``rendered``.

    Raises:
        ToolchainError: the CUTLASS headers are missing (nvcc present).
    """
    from argus_cutlass.errors import CompileError, ConfigError, DslError, ToolchainError
    from argus_cutlass.generate import Options, run

    t0 = time.perf_counter()
    try:  # the orchestrator's front half and compile (run=False: no GPU stage)
        r = run(problem, cfg, options=Options(smt=None, run=False, time=False, baseline=False))
    except (ConfigError, DslError) as exc:  # no program, or the template cannot print it
        status = "render_error" if exc.rule.startswith("render") else "rejected"
        return Built(status, error=_err(exc), seconds=time.perf_counter() - t0)
    except CompileError as exc:
        return Built("compile_error", error=_err(exc), seconds=time.perf_counter() - t0)
    except ToolchainError:
        raise
    except ArgusError as exc:
        return Built("rejected", error=_err(exc), seconds=time.perf_counter() - t0)
    bits = r.kernel.k_bound_bits if r.kernel is not None else None
    if r.status in ("rejected", "unproved"):
        return Built(r.status, error=_err(r.error), seconds=time.perf_counter() - t0)
    if r.artifact is None:  # no nvcc: rendered only
        return Built("rendered", r.name, None, bits, error=r.skipped.get("compile", ""),
                     seconds=time.perf_counter() - t0)
    binary = Path(r.artifact.path).read_bytes() if ship_binary else None
    return Built("compiled", r.name, str(r.artifact.path), bits, binary, seconds=time.perf_counter() - t0)


def compile_reference(dtype: str, out_dtype: str, layout: str) -> str:
    """Build the fp32 reference GEMM of a dtype/layout into the cache (the numerics check loads it)."""
    from argus_cutlass.generate import compile_reference as build_reference

    return str(build_reference(dtype, out_dtype, layout).path)


def _err(exc: BaseException) -> str:
    if isinstance(exc, ArgusError):
        return f"[{exc.rule}] {exc.message}"[:2000]
    return str(exc)[:2000]


def _compile_task(compile_fn: Callable[[Problem, GemmConfig], Built], problem: Problem, cfg: GemmConfig) -> Built:
    """One compile task; an unexpected exception (a bug, not a verdict on the candidate) becomes the
    non-final outcome ``internal_error`` (tried again on resume) instead of stopping every other build.
    A missing toolchain still stops the run."""
    from argus_cutlass.errors import ToolchainError

    try:
        return compile_fn(problem, cfg)
    except ToolchainError:
        raise
    except Exception as exc:  # noqa: BLE001 - journaled with its type and message
        return Built("internal_error", error=f"{type(exc).__name__}: {exc}"[:2000])


# ---------------------------------------------------------------------------------------- stage 2: measure


@dataclass(frozen=True)
class _KernelRef:
    """The fields of a GeneratedKernel that :func:`argus_cutlass.generate.load` reads."""

    name: str
    config: GemmConfig
    k_bound_bits: int | None


@dataclass(frozen=True)
class _ArtifactRef:
    path: Path


def _artifact(built: Built) -> _ArtifactRef:
    """The ``.so`` of ``built`` on this node: its path, or its shipped bytes written to a temporary file."""
    if built.path and Path(built.path).is_file():
        return _ArtifactRef(Path(built.path))
    if built.binary is None:
        from argus_cutlass.errors import LaunchError

        raise LaunchError("launch.load", f"{built.path}: the built library is not on this node and was not shipped")
    binary = built.binary
    if not isinstance(binary, bytes):  # a Ray object reference (RayBackend.keep)
        import ray

        binary = ray.get(binary)
    import tempfile

    folder = Path(tempfile.gettempdir()) / "argus_tune_many"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{built.kernel}.so"
    if not path.is_file():
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_bytes(binary)
        os.replace(tmp, path)
    return _ArtifactRef(path)


def measure_candidate(problem: Problem, cfg: GemmConfig, built: Built, *, warmup: int = 10,
                      iters: int = 50) -> Measurement:
    """Stage 2 for one compiled candidate on this process's GPU: load, check numerics on the
    bounded problem (:func:`~argus_cutlass.agent.measure.check_shape`), then time the real problem.
    A refused launch or a failed check is a status."""
    from argus_cutlass.agent.measure import check_shape
    from argus_cutlass.errors import DeviceError, LaunchError
    from argus_cutlass.generate import check, load, time_kernel
    from argus_cutlass.kernels.gemm.problem import GemmProblem

    try:
        lib = load(_KernelRef(built.kernel or "", cfg, built.k_bound_bits), _artifact(built))
        m, n, k = check_shape(problem)
        result = check(lib, GemmProblem(m, n, k, problem.dtype, problem.out_dtype, problem.layout))
        if not result.passed:
            return Measurement("check_failed", None, result.summary()[:2000])
        ms = time_kernel(lib, GemmProblem(problem.m, problem.n, problem.k, problem.dtype, problem.out_dtype,
                                          problem.layout), warmup=warmup, iters=iters)
    except (LaunchError, ProblemError, DeviceError) as exc:
        return Measurement("launch_error", None, _err(exc))
    return Measurement("ok", float(ms))


def baseline_candidate(problem: Problem) -> float | None:
    """cuBLAS on ``problem`` (:func:`argus_cutlass.generate.baseline`; None without torch)."""
    from argus_cutlass.generate import baseline
    from argus_cutlass.kernels.gemm.problem import GemmProblem

    p = problem
    return baseline(GemmProblem(p.m, p.n, p.k, p.dtype, p.out_dtype, p.layout))


@dataclass(frozen=True)
class _Job:
    kind: str  # "measure" or "baseline"
    shape: str
    problem: Problem
    config: GemmConfig | None = None
    built: Built | None = None


@dataclass(frozen=True)
class _Outcome:
    status: str
    ms: float | None
    feedback: str | None
    gpu: str | None


class GpuWorker:
    """Runs measurement jobs on one GPU (a Ray actor with ``num_gpus=1``, or in-process).

    Args:
        measure: ``measure(problem, cfg, built) -> Measurement | float`` (ms).
        baseline: ``baseline(problem) -> float | None`` or None (no vendor baseline).
        real: the default measurement: check that the device is a Hopper and take its name.
        gpu: the name to report (default: the device's, or the store's default without one).
    """

    def __init__(self, measure: Callable[..., Any], baseline: Callable[[Problem], float | None] | None,
                 real: bool, gpu: str | None = None) -> None:
        self.measure_fn, self.baseline_fn = measure, baseline
        self.gpu = gpu
        if real:
            from argus_cutlass.runtime.cuda import require_sm90

            info = require_sm90()
            self.gpu = self.gpu or info.name
        if self.gpu is None:
            from argus_cutlass.agent.store import DEFAULT_GPU

            self.gpu = DEFAULT_GPU

    def name(self) -> str:
        return self.gpu or ""

    def run(self, job: _Job) -> _Outcome:
        if job.kind == "baseline":
            if self.baseline_fn is None:
                return _Outcome("skipped", None, "no baseline function", self.gpu)
            try:
                ms = self.baseline_fn(job.problem)
            except ArgusError as exc:
                return _Outcome("skipped", None, _err(exc), self.gpu)
            if ms is None:
                return _Outcome("skipped", None, "torch is not installed", self.gpu)
            return _Outcome("ok", float(ms), None, self.gpu)
        try:
            r = self.measure_fn(job.problem, job.config, job.built)
        except (ProblemError,) + _launch_errors() as exc:
            return _Outcome("launch_error", None, _err(exc), self.gpu)
        if isinstance(r, Measurement):
            return _Outcome(r.status, r.ms, r.feedback or None, self.gpu)
        if r is None:
            return _Outcome("launch_error", None, "the measure function returned None", self.gpu)
        return _Outcome("ok", float(r), None, self.gpu)


def _launch_errors() -> tuple[type[BaseException], ...]:
    from argus_cutlass.errors import DeviceError, LaunchError

    return (LaunchError, DeviceError)


# ---------------------------------------------------------------------------------------- backends


class LocalBackend:
    """This machine: a process pool (or a thread pool) for CPU work, measurements in this process on
    its one GPU (device 0), one after the other."""

    name = "local"
    ship_binaries = False

    def __init__(self, workers: int | None = None, processes: bool = True) -> None:
        self.workers = max(1, workers or os.cpu_count() or 1)
        self.processes = processes

    def describe(self, gpus: int) -> str:
        pool = "processes" if self.processes else "threads"
        gpu = "no GPU" if gpus == 0 else "measurements on GPU 0, one at a time"
        why = "backend=local" if ray_available() else "Ray is not installed: pip install 'argus_cutlass[tune]'"
        return f"local ({self.workers} compile {pool}; {gpu}; {why})"

    def gpu_count(self, requested: int | None, real: bool) -> tuple[int, str | None]:
        if not real:
            return (1 if requested is None else min(1, requested)), None
        from argus_cutlass.runtime.cuda import gpu_available

        ok, why = gpu_available()
        if not ok:
            return 0, why
        return (1 if requested is None else min(1, requested)), None

    def map_cpu(self, fn: Callable[..., Any], arglist: Sequence[tuple]) -> Iterator[tuple[int, Any]]:
        """``fn(*args)`` for each item, ``(index, result)`` in completion order."""
        if not arglist:
            return
        from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, ThreadPoolExecutor, wait

        workers = min(self.workers, len(arglist))
        if workers == 1 and not self.processes:
            for i, args in enumerate(arglist):
                yield i, fn(*args)
            return
        if self.processes:
            import multiprocessing

            pool: Any = ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"))
        else:
            pool = ThreadPoolExecutor(max_workers=workers)
        with pool:
            futures = {pool.submit(fn, *args): i for i, args in enumerate(arglist)}
            pending = set(futures)
            try:
                while pending:
                    done, pending = wait(pending, return_when=FIRST_COMPLETED)
                    for f in sorted(done, key=lambda f: futures[f]):
                        yield futures[f], f.result()
            finally:
                for f in pending:
                    f.cancel()

    def keep(self, built: Built) -> Built:
        return built

    def measure(self, jobs: Sequence[_Job], worker_args: tuple, gpus: int) -> Iterator[tuple[_Job, _Outcome]]:
        worker = GpuWorker(*worker_args)
        for job in jobs:
            yield job, worker.run(job)

    def close(self) -> None:
        pass


#: the hint of every ``tune.address`` error
ADDRESS_HINT = ("check that the head node is up and the address is right (ray://HOST:10001 or HOST:6379), "
                "or leave --address out to tune on a local cluster")
#: seconds :func:`probe_address` waits for the head's port to accept a connection
ADDRESS_PROBE_S = 5.0


def probe_address(address: str, timeout_s: float = ADDRESS_PROBE_S) -> None:
    """Refuse a Ray ``--address`` whose host and port accept no TCP connection within ``timeout_s``: Ray's own
    ``ray.init`` retries such an address for minutes (20 GCS connection attempts of ~35 s each, printing
    warnings) before it raises. ``auto``, ``local`` and an address without a port are left to Ray.

    Raises:
        ProblemError: ``tune.address`` naming the address, the host and port and why (refused, timed out,
            unknown host); a blank address.

    >>> probe_address("auto")
    """
    import socket
    from urllib.parse import urlsplit

    if not address.strip():
        raise ProblemError("tune.address", f"--address {address!r}: an empty or blank Ray address",
                           "leave --address out to tune on a local cluster, or name the head (ray://HOST:10001 or "
                           "HOST:6379)")
    if address.strip() in ("auto", "local"):
        return
    text = address.strip()
    try:
        parts = urlsplit(text if "://" in text else f"tcp://{text}")
        host, port = parts.hostname, parts.port
    except ValueError:   # a port that is not a number, or out of range: Ray names it
        return
    if not host or port is None:
        return
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            pass
    except OSError as exc:
        why = "no answer within {:g} s".format(timeout_s) if isinstance(exc, TimeoutError) else (
            exc.strerror or type(exc).__name__)
        raise ProblemError("tune.address", f"could not join the Ray cluster at --address {address!r}: nothing "
                           f"answers at {host}:{port} ({why})", ADDRESS_HINT) from None


class RayBackend:
    """A Ray cluster: compile tasks (``num_cpus=1``) and one measuring actor per GPU (``num_gpus=1``)."""

    name = "ray"
    ship_binaries = True

    def __init__(self, address: str | None = None, workers: int | None = None, gpus: int | None = None) -> None:
        import ray

        self.ray = ray
        self.started = False
        if not ray.is_initialized():
            kwargs: dict[str, Any] = {"ignore_reinit_error": True, "log_to_driver": False}
            if address is not None:
                probe_address(address)
                try:
                    ray.init(address=address, **kwargs)
                except Exception as exc:  # noqa: BLE001 - Ray raises ConnectionError, RuntimeError, ValueError...
                    raise ProblemError(
                        "tune.address", f"could not join the Ray cluster at --address {address!r}: "
                        f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else 'no answer'}",
                        ADDRESS_HINT) from None
            else:
                if workers is not None:
                    kwargs["num_cpus"] = workers
                if gpus is not None:
                    kwargs["num_gpus"] = gpus
                ray.init(include_dashboard=False, **kwargs)
            self.started = True
        res = ray.cluster_resources()
        self.cpus = int(res.get("CPU", 1))
        self.cluster_gpus = int(res.get("GPU", 0))
        self.address = address
        self.workers = max(1, min(workers or self.cpus, self.cpus))

    def describe(self, gpus: int) -> str:
        where = f"cluster at {self.address}" if self.address else "local cluster"
        return (f"ray ({where}: {self.cpus} CPUs, {self.cluster_gpus} GPUs; {self.workers} compile tasks at a "
                f"time, {gpus} measuring actor{'s' if gpus != 1 else ''})")

    def gpu_count(self, requested: int | None, real: bool) -> tuple[int, str | None]:
        n = self.cluster_gpus if requested is None else min(requested, self.cluster_gpus)
        return n, (None if n else "the Ray cluster has no GPU")

    def _bounded(self, submit: Callable[[Any], Any], items: Sequence[Any], limit: int) -> Iterator[tuple[Any, Any]]:
        ray = self.ray
        queue = list(enumerate(items))[::-1]
        inflight: dict[Any, int] = {}
        try:
            while queue or inflight:
                while queue and len(inflight) < limit:
                    i, item = queue.pop()
                    inflight[submit(item)] = i
                done, _ = ray.wait(list(inflight), num_returns=1)
                for ref in done:
                    i = inflight.pop(ref)
                    yield i, ray.get(ref)
        finally:
            for ref in inflight:
                try:
                    ray.cancel(ref)
                except Exception:  # noqa: BLE001 - best effort on the way out
                    pass

    def map_cpu(self, fn: Callable[..., Any], arglist: Sequence[tuple]) -> Iterator[tuple[int, Any]]:
        if not arglist:
            return
        task = self.ray.remote(num_cpus=1)(_call)
        fn_ref = self.ray.put(fn)  # shipped once, not with every task
        yield from self._bounded(lambda args: task.remote(fn_ref, *args), arglist, self.workers)

    def keep(self, built: Built) -> Built:
        """``built`` with its shipped bytes moved into the object store (owned by the driver)."""
        if isinstance(built.binary, bytes):
            import dataclasses

            return dataclasses.replace(built, binary=self.ray.put(built.binary))
        return built

    def measure(self, jobs: Sequence[_Job], worker_args: tuple, gpus: int) -> Iterator[tuple[_Job, _Outcome]]:
        ray = self.ray
        actor_cls = ray.remote(num_gpus=1, num_cpus=0)(GpuWorker)
        actors = [actor_cls.remote(*worker_args) for _ in range(max(1, min(gpus, len(jobs))))]
        free = list(actors)
        queue = list(jobs)[::-1]
        inflight: dict[Any, tuple[_Job, Any]] = {}
        try:
            while queue or inflight:
                while queue and free:
                    actor, job = free.pop(), queue.pop()
                    inflight[actor.run.remote(job)] = (job, actor)
                done, _ = ray.wait(list(inflight), num_returns=1)
                for ref in done:
                    job, actor = inflight.pop(ref)
                    free.append(actor)
                    yield job, ray.get(ref)
        finally:
            for a in actors:
                try:
                    ray.kill(a)
                except Exception:  # noqa: BLE001 - best effort on the way out
                    pass

    def close(self) -> None:
        if self.started:
            self.ray.shutdown()


def _call(fn: Callable[..., Any], *args: Any) -> Any:
    """A Ray task: ``fn(*args)`` (``ray.remote`` takes functions, not partials)."""
    return fn(*args)


def ray_available() -> bool:
    try:
        import ray  # noqa: F401
    except ImportError:
        return False
    return True


def make_backend(backend: str = "auto", *, address: str | None = None, workers: int | None = None,
                 gpus: int | None = None, processes: bool = True) -> LocalBackend | RayBackend:
    """``"ray"``, ``"local"`` or ``"auto"`` (Ray when importable, else local).

    Raises:
        ProblemError: ``tune.backend``: Ray was asked for (or ``address`` given) and is not installed.
    """
    if backend not in ("auto", "ray", "local"):
        raise ProblemError("tune.backend", f"backend {backend!r}: use auto, ray or local")
    use_ray = backend == "ray" or (backend == "auto" and (ray_available() or address is not None))
    if use_ray:
        if not ray_available():
            raise ProblemError("tune.backend", "Ray is not installed (--address needs it)",
                               "pip install 'argus_cutlass[tune]'")
        return RayBackend(address, workers, gpus)
    return LocalBackend(workers, processes)


# ---------------------------------------------------------------------------------------- journal


def read_journal(path: Path) -> tuple[list[dict[str, Any]], int]:
    """The journal's valid lines and the number of unreadable ones (a torn last line)."""
    lines: list[dict[str, Any]] = []
    bad = 0
    try:
        text = path.read_text("utf-8", errors="replace")
    except FileNotFoundError:
        return lines, 0
    for raw in text.splitlines():
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except json.JSONDecodeError:
            bad += 1
            continue
        if isinstance(obj, dict):
            lines.append(obj)
        else:
            bad += 1
    return lines, bad


class Journal:
    """The append-only JSON-lines journal; every line is flushed and fsync-ed when written.

    ``state`` of the lines read at start (``resume=True``): ``plans[shape]``, ``compiles[(shape, ckey)]``,
    ``measures[(shape, ckey)]`` and ``baselines[shape]`` (the last line of each). ``timing``: how this run
    measures (:data:`argus_cutlass.runtime.timing.DEFAULT_TIMING`: :func:`measure_candidate` and
    :func:`baseline_candidate` time with the orchestrator's default; written into its measure and baseline lines);
    a resumed measure or baseline line timed another way (none recorded: one launch between events, the
    journals of before session 28) is not reused, since times of two methods do not compare: it is measured again.
    """

    def __init__(self, path: Path, resume: bool = True) -> None:
        self.path, self.timing = path, DEFAULT_TIMING
        path.parent.mkdir(parents=True, exist_ok=True)
        self.moved_to: Path | None = None
        if not resume and path.exists() and path.stat().st_size > 0:
            i = 1
            while path.with_name(f"{path.name}.{i}").exists():
                i += 1
            self.moved_to = path.with_name(f"{path.name}.{i}")
            os.replace(path, self.moved_to)
        lines, self.torn = read_journal(path) if resume else ([], 0)
        self.plans: dict[str, dict[str, Any]] = {}
        self.compiles: dict[tuple[str, str], dict[str, Any]] = {}
        self.measures: dict[tuple[str, str], dict[str, Any]] = {}
        self.baselines: dict[str, dict[str, Any]] = {}
        for line in lines:
            self._index(line)
        self.previous = len(lines)
        self.resumed_measures = frozenset(self.measures)
        needs_newline = False
        if path.exists() and path.stat().st_size > 0:
            with open(path, "rb") as f:
                f.seek(-1, os.SEEK_END)
                needs_newline = f.read(1) != b"\n"
        self._f: TextIO = open(path, "a", encoding="utf-8")
        if needs_newline:  # a torn last line: start ours on a fresh line
            self._f.write("\n")

    def _index(self, line: dict[str, Any]) -> None:
        stage, shape = line.get("stage"), line.get("shape")
        if not isinstance(shape, str):
            return
        if stage == "plan":
            self.plans[shape] = line
        elif stage in ("baseline", "measure") and line.get("timing", LEGACY_TIMING) != self.timing:
            return   # timed another way: measured again
        elif stage == "baseline":
            self.baselines[shape] = line
        elif stage in ("compile", "measure") and isinstance(line.get("config"), dict):
            key = (shape, config_key(line["config"]))
            (self.compiles if stage == "compile" else self.measures)[key] = line

    def write(self, stage: str, outcome: str, *, shape: str | None = None, config: GemmConfig | dict | None = None,
              ms: float | None = None, **extra: Any) -> dict[str, Any]:
        cfg = config.model_dump() if isinstance(config, GemmConfig) else config
        line = {"shape": shape, "config": cfg, "stage": stage, "outcome": outcome, "ms": ms, **extra,
                "time": round(time.time(), 3)}
        self._f.write(json.dumps(line, default=str) + "\n")
        self._f.flush()
        os.fsync(self._f.fileno())
        self._index(line)
        return line

    def close(self) -> None:
        self._f.close()


# ---------------------------------------------------------------------------------------- progress


class _Progress:
    """A tqdm bar when tqdm is importable, else plain lines (every item up to 50, then about 20
    lines); nothing when ``quiet``."""

    def __init__(self, total: int, desc: str, say: Say, quiet: bool) -> None:
        self.total, self.desc, self.say, self.quiet = total, desc, say, quiet
        self.done = 0
        self.bar: Any = None
        self.every = 1 if total <= 50 else max(1, total // 20)
        if quiet or total == 0:
            return
        try:
            from tqdm import tqdm
        except ImportError:
            return
        self.bar = tqdm(total=total, desc=desc, unit="cand", file=sys.stderr, dynamic_ncols=True)

    def step(self, text: str, *, important: bool = False) -> None:
        self.done += 1
        if self.quiet:
            return
        if self.bar is not None:
            self.bar.update(1)
            self.bar.set_postfix_str(text[:60])
            if important:
                self.bar.write(f"{self.desc:<9} {text}", file=sys.stderr)
        elif important or self.done % self.every == 0 or self.done == self.total:
            self.say(f"{self.desc:<9} [{self.done}/{self.total}] {text}")

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


# ---------------------------------------------------------------------------------------- results


@dataclass
class ShapeResult:
    """One shape's outcome: ``best`` / ``best_ms`` over every measured candidate (journaled ones
    included), ``baseline_ms`` (cuBLAS), ``recorded`` (True: written to the store; False: the store
    kept a faster entry; None: nothing recorded)."""

    key: str
    problem: Problem
    candidates: int = 0
    compiled: int = 0
    measured: int = 0
    failed: int = 0
    best: GemmConfig | None = None
    best_ms: float | None = None
    kernel: str | None = None
    baseline_ms: float | None = None
    recorded: bool | None = None
    gpu: str | None = None


@dataclass
class TuneManyResult:
    """What :func:`tune_shapes` did: ``backend`` (its description), per-shape results, the journal,
    how many measurements ran now and how many were reused from the journal, and ``compile_only``
    with its ``reason`` (no GPU / no nvcc)."""

    backend: str
    shapes: list[ShapeResult]
    journal: Path
    compiled_now: int = 0
    measured_now: int = 0
    reused: int = 0
    compile_only: bool = False
    reason: str | None = None
    seconds: float = 0.0


# ---------------------------------------------------------------------------------------- driver


def tune_shapes(shapes: Iterable[Any], *, budget: int, out_dir: str | Path, address: str | None = None,
                workers: int | None = None, gpus: int | None = None, resume: bool = True, quiet: bool = False,
                measure: Callable[..., Any] | None = None,
                compile: Callable[[Problem, GemmConfig], Built] | None = None,
                candidates: Callable[[Problem, int], list[GemmConfig]] | None = None,
                baseline: Callable[[Problem], float | None] | None | bool = True, backend: str = "auto",
                store: Any = None, gpu: str | None = None, say: Say = print) -> TuneManyResult:
    """Tune every shape: plan, compile (CPU workers), measure (GPU workers), record each best.

    Args:
        shapes: GemmShape objects (``.problem()``) or GEMM problems; duplicates are tuned once.
        budget: candidates per shape (the first ``budget`` in the planner's order).
        out_dir: the journal (``tune_journal.jsonl``) and the summary (``tune_summary.json``) go here.
        address: join this Ray cluster (else a local one is started when Ray is installed).
        workers: compile tasks at a time (default: the CPU count). gpus: measuring GPUs (default:
            every GPU found; 0: compile only).
        resume: reuse the journal of an earlier run in ``out_dir`` (module docstring).
        quiet: no progress bar or progress lines (the summary lines still print).
        measure: ``measure(problem, cfg, built) -> Measurement | float`` instead of the GPU
            (:func:`measure_candidate`); with it the run does not look for a GPU (one worker
            unless ``gpus`` says more) and takes no cuBLAS baseline unless ``baseline`` is a function.
        compile: ``compile(problem, cfg) -> Built`` instead of :func:`compile_candidate` (run in
            threads by the local backend).
        candidates: ``candidates(problem, budget) -> [GemmConfig]`` instead of :func:`plan_candidates`.
        baseline: ``baseline(problem) -> ms | None``; True: cuBLAS with the real measurement;
            False/None: none.
        backend: ``auto`` (Ray when importable), ``ray`` or ``local``.
        store: the ExperienceStore to record into (default: the user's).
        gpu: the GPU name of the store keys (default: the measuring device's).
        say: prints one line (the CLI passes its printer).

    Returns:
        a :class:`TuneManyResult`.

    Raises:
        ProblemError: a bad shape, budget or worker count, an ``out_dir`` that is empty or a file (``cli.out``),
            or Ray asked for and missing.
        ToolchainError: nvcc present but the CUTLASS headers missing.
        DeviceError: the GPU is not a Hopper.
        anything the measure function raises other than a launch/device/problem error: the run
        stops there (the journal keeps every finished measurement).
    """
    t0 = time.perf_counter()
    if budget < 1:
        raise ProblemError("tune.budget", f"--budget {budget}: need at least 1 candidate per shape")
    check_workers(workers)
    if gpus is not None and gpus < 0:
        raise ProblemError("tune.gpus", f"--gpus {gpus}: need 0 (compile only) or more")
    check_output_path(out_dir, "out_dir")   # "" would silently mean the current folder
    problems: dict[str, Problem] = {}
    for s in shapes:
        p = _as_problem(s)
        p.validate_any()  # the direct path or aligned staging, as `gemm` runs it
        problems.setdefault(shape_key(p), p)
    if not problems:
        raise ProblemError("tune.shapes", "no shapes to tune")
    real_measure = measure is None
    real_compile = compile is None
    measure_fn = measure or measure_candidate
    if baseline is True:
        baseline_fn = baseline_candidate if real_measure else None
    else:
        baseline_fn = baseline or None
    plan_fn = candidates or plan_candidates

    be = make_backend(backend, address=address, workers=workers, gpus=gpus,
                      processes=real_compile and candidates is None)
    compile_fn: Callable[[Problem, GemmConfig], Built] = compile or (
        functools.partial(compile_candidate, ship_binary=True) if be.ship_binaries else compile_candidate)
    out = Path(out_dir)
    journal = Journal(out / JOURNAL, resume)
    try:
        return _tune(problems, budget, be, journal, compile_fn, measure_fn, baseline_fn, plan_fn, real_measure,
                     real_compile, gpus, quiet, store, gpu, say, out, t0)
    finally:
        journal.close()
        be.close()


def _tune(problems: dict[str, Problem], budget: int, be: Any, journal: Journal, compile_fn: Callable,
          measure_fn: Callable, baseline_fn: Callable | None, plan_fn: Callable, real_measure: bool,
          real_compile: bool, gpus: int | None, quiet: bool, store: Any, gpu: str | None, say: Say, out: Path,
          t0: float) -> TuneManyResult:
    n_gpus, no_gpu_reason = be.gpu_count(gpus, real_measure)
    if gpus == 0:
        n_gpus, no_gpu_reason = 0, "--gpus 0"
    desc = be.describe(n_gpus)
    say(f"backend   {desc}")
    result = TuneManyResult(desc, [], journal.path)
    if journal.moved_to is not None:
        say(f"journal   --no-resume: the old journal moved to {journal.moved_to}")
    elif journal.previous:
        say(f"journal   resuming {journal.path}: {len(journal.measures)} measurements and "
            f"{len(journal.compiles)} compiles already done"
            + (f" ({journal.torn} torn line ignored)" if journal.torn else ""))
    journal.write("run", "start", backend=be.name, budget=budget, shapes=list(problems), gpus=n_gpus,
                  timing=journal.timing)

    # ---- stage 0: plan (reused from the journal when the budget is the same)
    plans: dict[str, list[GemmConfig]] = {}
    to_plan, unreadable = [], []
    for key, p in problems.items():
        line = journal.plans.get(key)
        if line is not None and line.get("budget") == budget and isinstance(line.get("candidates"), list):
            try:
                plans[key] = [GemmConfig(**c) for c in line["candidates"]]
                continue
            except (TypeError, ValueError):   # another version's fields (pydantic's ValidationError is a ValueError)
                unreadable.append(key)
        to_plan.append(key)
    if unreadable:
        say(f"journal   {len(unreadable)} plan line(s) this version cannot read ({', '.join(unreadable[:3])}"
            f"{', ...' if len(unreadable) > 3 else ''}): planned again; measurements of the same kernels are kept")
    if to_plan:
        progress = _Progress(len(to_plan), "plan", say, quiet)
        for i, cfgs in be.map_cpu(functools.partial(_plan_task, plan_fn),
                                  [(problems[k], budget) for k in to_plan]):
            key = to_plan[i]
            plans[key] = [GemmConfig(**c) for c in cfgs]
            journal.write("plan", "planned", shape=key, budget=budget, candidates=cfgs)
            progress.step(f"{key}: {len(cfgs)} candidates")
        progress.close()

    # ---- stage 1: compile
    nvcc_reason = None
    if real_compile:
        from argus_cutlass.build.toolchain import find_cutlass, find_nvcc
        from argus_cutlass.errors import ToolchainError

        try:
            find_nvcc()
        except ToolchainError as exc:
            nvcc_reason = exc.message
        else:
            find_cutlass()  # headers missing with nvcc present: an error (raised here, once)
    compile_items: list[tuple[str, GemmConfig]] = []
    built: dict[tuple[str, str], Built] = {}
    for key, cfgs in plans.items():
        for cfg in cfgs:
            ck = (key, config_key(cfg))
            if ck in journal.measures:
                continue
            line = journal.compiles.get(ck)
            if line is not None and line.get("outcome") in TERMINAL_COMPILE:
                continue
            if line is not None and n_gpus == 0 and line.get("outcome") in ("compiled", "rendered"):
                continue  # compile-only again: nothing to gain
            compile_items.append((key, cfg))
    if real_compile and nvcc_reason is None and n_gpus > 0:  # the check's fp32 reference, once per dtype/layout
        pending = {key for key, _ in compile_items}
        refs = sorted({(p.dtype, p.out_dtype, p.layout) for k, p in problems.items() if k in pending})
        for _ in be.map_cpu(compile_reference, refs):
            pass
    progress = _Progress(len(compile_items), "compile", say, quiet)
    for i, b in be.map_cpu(functools.partial(_compile_task, compile_fn),
                           [(problems[k], c) for k, c in compile_items]):
        key, cfg = compile_items[i]
        built[(key, config_key(cfg))] = be.keep(b)
        journal.write("compile", b.status, shape=key, config=cfg, kernel=b.kernel,
                      **({"error": b.error} if b.error and b.status != "rendered" else {}),
                      seconds=round(b.seconds, 3))
        result.compiled_now += b.status == "compiled"
        progress.step(f"{key} {b.kernel or ''}: {b.status}", important=b.status not in ("compiled", "rendered"))
    progress.close()

    # ---- stage 2: measure
    compile_only = n_gpus == 0 or nvcc_reason is not None
    if nvcc_reason is not None:
        result.reason = f"{nvcc_reason}: stopped after rendering"
    elif n_gpus == 0:
        result.reason = f"no GPU ({no_gpu_reason}): compiled only"
    result.compile_only = compile_only
    if not compile_only:
        jobs: list[_Job] = []
        for key, p in problems.items():
            mine = [(cfg, built[(key, config_key(cfg))]) for cfg in plans[key]
                    if (key, config_key(cfg)) in built and built[(key, config_key(cfg))].status == "compiled"]
            if baseline_fn is not None and key not in journal.baselines and (mine or _measured(journal, key)):
                jobs.append(_Job("baseline", key, p))
            jobs += [_Job("measure", key, p, cfg, b) for cfg, b in mine]
        n_measure = sum(j.kind == "measure" for j in jobs)
        progress = _Progress(n_measure, "measure", say, quiet)
        worker_args = (measure_fn, baseline_fn, real_measure, gpu)
        for job, o in be.measure(jobs, worker_args, n_gpus):
            if job.kind == "baseline":
                journal.write("baseline", o.status, shape=job.shape, ms=o.ms, gpu=o.gpu, timing=journal.timing,
                              **({"feedback": o.feedback} if o.feedback else {}))
                continue
            assert job.built is not None and job.config is not None
            journal.write("measure", o.status, shape=job.shape, config=job.config, ms=o.ms, kernel=job.built.kernel,
                          gpu=o.gpu, timing=journal.timing, **({"feedback": o.feedback} if o.feedback else {}))
            result.measured_now += 1
            text = f"{job.shape} {job.built.kernel}: " + (f"{o.ms:.4f} ms" if o.ms is not None else o.status)
            progress.step(text, important=o.status != "ok" and not quiet)
        progress.close()

    # ---- stage 3: record each shape's best (over every journaled measurement)
    from argus_cutlass.agent.store import ExperienceStore

    st = None if compile_only else (store if store is not None else ExperienceStore())
    for key, p in problems.items():
        sr = ShapeResult(key, p, candidates=len(plans[key]))
        ckeys = {config_key(c) for c in plans[key]}
        for (shape, ck), line in journal.compiles.items():
            if shape == key and ck in ckeys:
                sr.compiled += line.get("outcome") == "compiled"
                sr.failed += line.get("outcome") in TERMINAL_COMPILE
        ok = []
        for (shape, ck), line in journal.measures.items():
            if shape != key:
                continue
            sr.measured += 1
            if line.get("outcome") == "ok" and isinstance(line.get("ms"), (int, float)):
                ok.append(line)
            else:
                sr.failed += 1
        result.reused += sum(1 for shape, ck in journal.resumed_measures if shape == key and ck in ckeys)
        bl = journal.baselines.get(key)
        sr.baseline_ms = bl.get("ms") if bl and bl.get("outcome") == "ok" else None
        if ok and st is not None:
            best = min(ok, key=lambda line: (line["ms"], config_key(line["config"])))
            sr.best, sr.best_ms, sr.kernel = GemmConfig(**best["config"]), float(best["ms"]), best.get("kernel")
            sr.gpu = best.get("gpu") or gpu
            from argus_cutlass.agent.store import DEFAULT_GPU

            gname = sr.gpu or DEFAULT_GPU
            cublas = sr.baseline_ms if bl is None or bl.get("gpu") in (None, gname) else None
            sr.recorded = st.record_best(gname, "gemm", p, sr.best, sr.best_ms, cublas, timing=journal.timing)
            journal.write("record", "recorded" if sr.recorded else "kept", shape=key, config=sr.best, ms=sr.best_ms,
                          kernel=sr.kernel, gpu=gname, cublas_ms=cublas)
        result.shapes.append(sr)
    result.seconds = round(time.perf_counter() - t0, 2)
    journal.write("run", "end", compiled=result.compiled_now, measured=result.measured_now, reused=result.reused,
                  compile_only=compile_only, reason=result.reason, seconds=result.seconds)
    _write_summary(out / SUMMARY, result, budget)
    return result


def _measured(journal: Journal, key: str) -> bool:
    return any(shape == key for shape, _ in journal.measures)


def _write_summary(path: Path, result: TuneManyResult, budget: int) -> None:
    rows = [{"shape": s.key, "candidates": s.candidates, "compiled": s.compiled, "measured": s.measured,
             "failed": s.failed, "best": s.best.model_dump() if s.best else None, "best_ms": s.best_ms,
             "kernel": s.kernel, "tflops": s.problem.flops / (s.best_ms * 1e-3) / 1e12 if s.best_ms else None,
             "cublas_ms": s.baseline_ms, "recorded": s.recorded, "gpu": s.gpu} for s in result.shapes]
    data = {"backend": result.backend, "budget": budget, "compile_only": result.compile_only,
            "reason": result.reason, "measured_now": result.measured_now, "reused": result.reused,
            "compiled_now": result.compiled_now, "seconds": result.seconds, "shapes": rows}
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n", encoding="utf-8")
    os.replace(tmp, path)


# ---------------------------------------------------------------------------------------- CLI


def parse_m_values(text: str | None) -> list[int] | None:
    """``"1,8,64"`` -> ``[1, 8, 64]`` (None when not given).

    Raises:
        ProblemError: ``tune.m_values`` for anything but a comma-separated list of positive integers.
    """
    if text is None:
        return None
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        values = []
    if not values or any(v < 1 for v in values):
        raise ProblemError("tune.m_values", f"--m-values {text!r}: give positive integers separated by commas, "
                                            "e.g. 1,8,64,512")
    return list(dict.fromkeys(values))


def shapes_of(args: Any) -> list[Any]:
    """The shapes named by the CLI arguments: ``--shapes FILE`` (JSON or CSV) or ``--model CONFIG.json``
    (a Hugging Face config: its projections, for each of ``--m-values``).

    Raises:
        ProblemError: ``tune.shapes`` when neither or both are given, ``tune.m_values`` for a bad list
            (or one given with ``--shapes``); the loader's errors for a bad file.
    """
    shapes_path, model_path = getattr(args, "shapes", None), getattr(args, "model_config", None)
    if (shapes_path is None) == (model_path is None):
        got = "both" if shapes_path is not None else "neither"
        raise ProblemError("tune.shapes", f"give exactly one of --shapes FILE or --model CONFIG.json (got {got}), "
                                          "or a kernel: tune gemm ... / tune attention ...")
    m_values = parse_m_values(getattr(args, "m_values", None))
    from argus_cutlass.agent import shapes as shapes_mod

    if shapes_path is not None:
        if m_values is not None:
            raise ProblemError("tune.m_values", "--m-values applies to --model (a shapes file lists its own M)")
        return list(shapes_mod.load_shapes(shapes_path))
    if m_values is None:
        return list(shapes_mod.load_model(model_path))
    return list(shapes_mod.load_model(model_path, m_values))


def run_tune_shapes(args: Any, say: Say = print) -> int:
    """The ``tune --shapes FILE`` / ``tune --model CONFIG.json`` command (args: shapes, model_config,
    m_values, budget, address, workers, gpus, no_resume, quiet, out); ``say`` prints a line (the CLI's
    printer). Returns the exit code: 0 every shape got a best (compile only: every shape has a built
    candidate); 1 some shape has none; bad input raises (the CLI exits 2).
    """
    budget = args.budget
    if budget < 1:
        raise ProblemError("tune.budget", f"--budget {budget}: need at least 1 candidate per shape")
    check_workers(args.workers)
    if args.gpus is not None and args.gpus < 0:
        raise ProblemError("tune.gpus", f"--gpus {args.gpus}: need 0 (compile only) or more")
    check_output_path(args.out)   # before the shapes are read: an empty --out, or a file, is refused first
    if args.address is not None:
        probe_address(args.address)   # seconds, not Ray's minutes of retries, before any work
    import warnings

    from argus_cutlass.agent.shapes import DuplicateShapesWarning

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", DuplicateShapesWarning)
        shapes = shapes_of(args)
    for w in caught:
        if issubclass(w.category, DuplicateShapesWarning):
            print(f"argus-cutlass: warning: [{DuplicateShapesWarning.rule}] {w.message}", file=sys.stderr, flush=True)
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    out = output_dir(args.out)
    distinct = len({shape_key(_as_problem(s)) for s in shapes})
    say(f"shapes    {len(shapes)} from {args.shapes or args.model_config}"
        + (f" ({distinct} distinct GEMMs)" if distinct != len(shapes) else "") + f"; {budget} candidates each")
    r = tune_shapes(shapes, budget=budget, out_dir=out, address=args.address, workers=args.workers, gpus=args.gpus,
                    resume=not args.no_resume, quiet=args.quiet, say=say)
    failed = 0
    for s in r.shapes:
        if s.best is not None:
            tflops = s.problem.flops / (s.best_ms * 1e-3) / 1e12  # type: ignore[operator]
            line = f"best      {s.key}: {s.best_ms:.4f} ms ({tflops:.0f} TFLOP/s) {s.kernel}"
            if s.baseline_ms:
                ratio = s.baseline_ms / s.best_ms  # type: ignore[operator]
                line += f"; cuBLAS {s.baseline_ms:.4f} ms (ratio cuBLAS/ours {ratio:.3f})"
            line += "; recorded" if s.recorded else "; the store kept a faster entry"
            say(line)
        elif r.compile_only:
            say(f"built     {s.key}: {s.compiled} of {s.candidates} candidates compiled, {s.failed} refused")
            failed += s.compiled == 0 and r.reason is not None and not r.reason.startswith("nvcc")
        else:
            say(f"no best   {s.key}: none of {s.measured} measured candidates passed ({s.failed} failed)")
            failed += 1
    if r.compile_only:
        say(f"stopped   {r.reason}; nothing measured or recorded (run again on a GPU machine with the same "
            f"--out to measure, compiles come from the cache)")
    say(f"done      {r.measured_now} measured now, {r.reused} reused from the journal, {r.seconds:.1f} s")
    say(f"wrote     {r.journal} and {r.journal.with_name(SUMMARY)}")
    return 1 if failed else 0
