"""Experience store: learned action values and best known configurations, on disk.

One JSON file, ``<settings().cache_dir>/agent/experience.json``, shared by every process:
each update takes an exclusive ``fcntl.flock`` on ``experience.json.lock``, reads the
file, applies the change, writes a temporary file in the same folder and ``os.replace``-s
it (atomic on POSIX), so concurrent writers never lose an update and readers never see a
partial file.

Keys: ``<gpu>|<kernel>|<dtype>|<out_dtype>|<layout>|<bucket>`` where the bucket rounds
each of M, N, K up to a power of two (:meth:`argus_cutlass.agent.planner.Problem.bucket`).
Within a bucket the best entry is the one with the highest TFLOP/s (shapes may differ).

Lookups fall back: user store -> entries shipped in ``agent/tuned_h200.json`` -> the
heuristic :func:`argus_cutlass.kernels.gemm.heuristics.default_config`. A stored config is
re-verified before it is returned; one the verifier rejects is skipped.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import os
import tempfile
from collections.abc import Callable, Iterator
from importlib import resources
from pathlib import Path
from typing import Any

from argus_cutlass.agent.planner import ActionValues, Problem

from argus_cutlass.kernels.gemm.config import GemmConfig

#: format version of the store file
VERSION = 1
#: GPU name assumed for the shipped entries and when no GPU can be queried
DEFAULT_GPU = "NVIDIA H200"
SHIPPED = "tuned_h200.json"


def store_path() -> Path:
    """``<ARGUS_CACHE_DIR or ~/.cache/argus_cutlass>/agent/experience.json``."""
    from argus_cutlass.settings import settings

    return settings().cache_dir / "agent" / "experience.json"


def entry_key(gpu: str, kernel: str, problem: Problem) -> str:
    return "|".join((gpu, kernel, problem.dtype, problem.out_dtype, problem.layout, problem.bucket()))


def _empty() -> dict[str, Any]:
    return {"version": VERSION, "entries": {}, "action_values": {}}


class ExperienceStore:
    """The store at ``path`` (default :func:`store_path`)."""

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path) if path is not None else store_path()
        self.lock_path = self.path.with_name(self.path.name + ".lock")

    # ---- low level ------------------------------------------------------------------------

    def read(self) -> dict[str, Any]:
        """The current contents (an empty store when the file is missing or unreadable)."""
        try:
            data = json.loads(self.path.read_text("utf-8"))
        except (FileNotFoundError, json.JSONDecodeError):
            return _empty()
        if not isinstance(data, dict) or data.get("version") != VERSION:
            return _empty()
        data.setdefault("entries", {})
        data.setdefault("action_values", {})
        return data

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.lock_path, "a+") as lock:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock.fileno(), fcntl.LOCK_UN)

    def update(self, fn: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
        """Apply ``fn`` to the contents in place, under the lock, and write atomically."""
        with self._locked():
            data = self.read()
            fn(data)
            fd, tmp = tempfile.mkstemp(prefix=self.path.name, suffix=".tmp", dir=self.path.parent)
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as f:
                    json.dump(data, f, indent=1, sort_keys=True)
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, self.path)
            except BaseException:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp)
                raise
        return data

    # ---- entries ----------------------------------------------------------------------------

    def record_best(self, gpu: str, kernel: str, problem: Problem, cfg: GemmConfig, ms: float,
                    cublas_ms: float | None = None) -> bool:
        """Keep ``cfg`` as the bucket's best when its TFLOP/s beats the stored one.

        Returns True when the entry was written.
        """
        return self.keep_faster(entry_key(gpu, kernel, problem), make_entry(gpu, kernel, problem, cfg, ms, cublas_ms))

    def keep_faster(self, key: str, entry: dict[str, Any]) -> bool:
        """Store ``entry`` under ``key`` when no entry is there or its TFLOP/s beats the stored one's
        (one locked read-modify-write). Returns True when the entry was written."""
        written = [False]

        def fn(data: dict[str, Any]) -> None:
            old = data["entries"].get(key)
            if old is None or entry["tflops"] > old.get("tflops", 0.0):
                data["entries"][key] = entry
                written[0] = True

        self.update(fn)
        return written[0]

    def lookup(self, gpu: str, kernel: str, problem: Problem) -> dict[str, Any] | None:
        return self.read()["entries"].get(entry_key(gpu, kernel, problem))

    # ---- action values ----------------------------------------------------------------------

    def action_values(self, gpu: str, kernel: str, problem: Problem) -> ActionValues:
        return ActionValues.from_dict(self.read()["action_values"].get(entry_key(gpu, kernel, problem), {}))

    def add_rewards(self, gpu: str, kernel: str, problem: Problem,
                    rewards: list[tuple[str, float]]) -> None:
        """Add ``(technique, reward)`` observations (a merge: concurrent runs both count)."""
        key = entry_key(gpu, kernel, problem)

        def fn(data: dict[str, Any]) -> None:
            av = data["action_values"].setdefault(key, {})
            for tech, r in rewards:
                row = av.setdefault(tech, {"n": 0, "sum": 0.0})
                row["n"] = int(row["n"]) + 1
                row["sum"] = float(row["sum"]) + float(r)

        self.update(fn)


def make_entry(gpu: str, kernel: str, problem: Problem, cfg: GemmConfig, ms: float,
               cublas_ms: float | None = None) -> dict[str, Any]:
    """One entry in the format of the store and of ``agent/tuned_h200.json``."""
    return {
        "gpu": gpu, "kernel": kernel, "dtype": problem.dtype, "out_dtype": problem.out_dtype,
        "layout": problem.layout, "bucket": problem.bucket(), "shape": [problem.m, problem.n, problem.k],
        "config": cfg.model_dump(), "ms": ms, "tflops": problem.flops / (ms * 1e-3) / 1e12,
        "cublas_ms": cublas_ms,
    }


def shipped_entries() -> list[dict[str, Any]]:
    """Entries of the package's ``tuned_h200.json`` (measured on an H200; may be empty).
    The file is read once per process; callers get their own list."""
    return list(_shipped_table())


@functools.cache
def _shipped_table() -> tuple[dict[str, Any], ...]:
    text = resources.files("argus_cutlass.agent").joinpath(SHIPPED).read_text("utf-8")
    return tuple(json.loads(text).get("entries", []))


def gpu_name() -> str | None:
    """The current GPU's name, or None without a usable GPU (never raises)."""
    try:
        from argus_cutlass.runtime.cuda import device_info, gpu_available

        if not gpu_available():
            return None
        return device_info().name
    except Exception:  # noqa: BLE001 - any failure means "unknown GPU"
        return None


def _usable(entry: dict[str, Any] | None, problem: Problem) -> GemmConfig | None:
    from argus_cutlass.kernels.gemm.space import feasible

    if not entry:
        return None
    try:
        cfg = GemmConfig(**entry["config"])
    except Exception:  # noqa: BLE001 - a stale or hand-edited entry is skipped
        return None
    if (cfg.dtype, cfg.out_dtype, cfg.layout) != (problem.dtype, problem.out_dtype, problem.layout):
        return None
    return cfg if feasible(cfg)[0] else None


def tuned_or_default(kernel: str, m: int, n: int, k: int, dtype: str = "bf16", out_dtype: str = "bf16",
                     layout: str = "tn", *, gpu: str | None = None,
                     store: ExperienceStore | None = None) -> GemmConfig:
    """The best known configuration for the problem: user store, then shipped, then heuristic.

    Args:
        kernel: ``"gemm"``.
        m, n, k: problem size (elements). dtype, out_dtype, layout: as GemmConfig.
        gpu: GPU name to match (default: the current GPU, or ``NVIDIA H200`` without one).
        store: the user store (default: :func:`store_path`).

    >>> tuned_or_default("gemm", 8192, 8192, 8192, store=ExperienceStore("/nonexistent/x.json")).tile
    (128, 256, 64)
    """
    return lookup_config(kernel, m, n, k, dtype, out_dtype, layout, gpu=gpu, store=store)[0]


def lookup_config(kernel: str, m: int, n: int, k: int, dtype: str = "bf16", out_dtype: str = "bf16",
                  layout: str = "tn", *, gpu: str | None = None,
                  store: ExperienceStore | None = None) -> tuple[GemmConfig, str]:
    """:func:`tuned_or_default` and where the configuration came from: ``"store"`` (the
    user's experience store), ``"shipped"`` (``agent/tuned_h200.json``) or ``"heuristic"``.
    Entries are matched by (GPU, kernel, dtypes, layout, shape bucket) and used only when
    the verifier accepts them."""
    from argus_cutlass.kernels.gemm.heuristics import default_config

    problem = Problem(m, n, k, dtype, out_dtype, layout)
    gpu = gpu or gpu_name() or DEFAULT_GPU
    store = store or ExperienceStore()
    cfg = _usable(store.lookup(gpu, kernel, problem), problem)
    if cfg is not None:
        return cfg, "store"
    key = entry_key(gpu, kernel, problem)
    for e in shipped_entries():
        if e.get("kernel") != kernel:
            continue
        if entry_key(e.get("gpu", ""), e.get("kernel", ""),
                     Problem(*e["shape"], e["dtype"], e["out_dtype"], e["layout"])) == key:
            cfg = _usable(e, problem)
            if cfg is not None:
                return cfg, "shipped"
    return default_config(m, n, k, dtype, out_dtype, layout), "heuristic"


# ---- attention -------------------------------------------------------------------------------


def attention_key(gpu: str, problem: Any) -> str:
    """``<gpu>|attention|<dtype>|d<D>|<causal|full>|<fixed|varlen>|s<bucket>``: the shape bucket rounds
    the key length (the longest, with varlen) up to a power of two (at least 128)."""
    s = max(128, int(problem.seqlen_k))
    bucket = 1 << (s - 1).bit_length()
    return "|".join((gpu, "attention", problem.dtype, f"d{problem.head_dim}",
                     "causal" if problem.causal else "full", "varlen" if problem.varlen else "fixed", f"s{bucket}"))


def attention_entry(gpu: str, problem: Any, cfg: Any, ms: float, cudnn_ms: float | None = None) -> dict[str, Any]:
    """One attention entry of ``agent/tuned_h200.json`` (or of the user store)."""
    import dataclasses

    return {"gpu": gpu, "kernel": "attention", "key": attention_key(gpu, problem),
            "problem": dataclasses.asdict(problem), "config": cfg.model_dump(), "ms": ms,
            "tflops": problem.flops / (ms * 1e-3) / 1e12, "cudnn_ms": cudnn_ms}


def _usable_attention(entry: dict[str, Any] | None, problem: Any) -> Any:
    from argus_cutlass.kernels.attention.config import AttentionConfig

    if not entry:
        return None
    try:
        cfg = AttentionConfig(**entry["config"])
    except Exception:  # noqa: BLE001 - a stale or hand-edited entry is skipped
        return None
    if (cfg.head_dim, cfg.dtype, cfg.causal, cfg.varlen) != (problem.head_dim, problem.dtype, problem.causal,
                                                             problem.varlen):
        return None
    from argus_cutlass.kernels.attention.space import feasible

    return cfg if feasible(cfg)[0] else None  # the resource rules of the verifier (the full run follows)


def lookup_attention_config(problem: Any, *, heuristic: bool = False, gpu: str | None = None,
                            store: ExperienceStore | None = None) -> tuple[Any, str]:
    """The configuration of an attention problem and where it came from: ``"store"`` (an entry the
    user's tuning recorded under :func:`attention_key`), ``"shipped"`` (``agent/tuned_h200.json``),
    ``"heuristic"`` (:func:`argus_cutlass.kernels.attention.heuristics.default_config`: FA3's tile
    per head dim) or ``"forced"`` (``heuristic=True``).

    Raises:
        ConfigError: ``attention.head_dim`` for a head dim the family does not build.
    """
    from argus_cutlass.kernels.attention.heuristics import default_config

    p = problem
    fallback = default_config(p.head_dim, p.dtype, p.causal, p.varlen)
    if heuristic:
        return fallback, "forced"
    gpu = gpu or gpu_name() or DEFAULT_GPU
    key = attention_key(gpu, p)
    store = store or ExperienceStore()
    cfg = _usable_attention(store.read().get("entries", {}).get(key), p)
    if cfg is not None:
        return cfg, "store"
    for e in shipped_entries():
        if e.get("kernel") == "attention" and e.get("key") == key:
            cfg = _usable_attention(e, p)
            if cfg is not None:
                return cfg, "shipped"
    return fallback, "heuristic"


def record_attention_best(problem: Any, cfg: Any, ms: float, cudnn_ms: float | None = None, *,
                          gpu: str | None = None, store: ExperienceStore | None = None) -> bool:
    """Keep ``cfg`` as the best configuration of ``problem``'s attention bucket (:func:`attention_key`)
    in the user store when its TFLOP/s beats the stored entry's (or there is none).

    Args:
        problem: an AttentionProblem; cfg: the measured AttentionConfig; ms: its median time.
        cudnn_ms: cuDNN's time for the same problem, when measured.
        gpu: the GPU name of the key (default: the current GPU, or ``NVIDIA H200`` without one).
        store: the user store (default: :func:`store_path`).

    Returns:
        True when the entry was written. :func:`lookup_attention_config` then returns it (source
        ``"store"``).
    """
    gpu = gpu or gpu_name() or DEFAULT_GPU
    store = store or ExperienceStore()
    entry = attention_entry(gpu, problem, cfg, ms, cudnn_ms)
    return store.keep_faster(entry["key"], entry)
