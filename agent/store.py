"""Experience store: learned action values and best known configurations, on disk.

One JSON file, ``<settings().cache_dir>/agent/experience.json``, shared by every process:
each update takes an exclusive ``fcntl.flock`` on ``experience.json.lock``, reads the
file, applies the change, writes a temporary file in the same folder and ``os.replace``-s
it (atomic on POSIX), so concurrent writers never lose an update and readers never see a
partial file.

Keys (``|``-separated, the GPU name first; :data:`KEY_FIELDS`):

* GEMM ``<gpu>|gemm|<dtype>|<out_dtype>|<layout>|<bucket>``: the bucket rounds each of M, N, K up
  to a power of two (:meth:`argus_cutlass.agent.planner.Problem.bucket`);
* attention ``<gpu>|attention|<dtype>|d<D>|<causal|full>|<fixed|varlen>|s<bucket>``
  (:func:`attention_key`);
* MoE ``<gpu>|moe|<dtype>|e<E>k<k>h<H>i<I>|t<bucket>``: T rounded up to a power of two
  (:func:`moe_key`, :func:`moe_tokens_bucket`).

Within a bucket the best entry is the one with the highest TFLOP/s (shapes may differ) among those timed the same
way; a default-timed entry (from CUDA graphs) replaces one timed otherwise (:meth:`ExperienceStore.keep_faster`).

Lookups (:func:`lookup_config`, :func:`lookup_attention_config`, :func:`lookup_moe_config`) try:
user store -> entries shipped in ``agent/tuned_h200.json`` for the exact GPU name, then the same two
for another GPU of the same architecture (:func:`gpu_arch`: an H100 uses an H200 entry, and says so),
then, for a bf16 / fp16 problem, the same for the problem's key in the other 2-byte type (its configuration
run in the problem's type, :class:`_Sibling`), then the family's untuned rule (GEMM: the cost model's first
choice unless ``ARGUS_GEMM_UNTUNED=heuristic`` or the problem needs aligned staging; attention and MoE: the
heuristic). A stored config is re-checked by the family's feasibility function
before it is returned; one that no longer parses, has other dtypes or is refused is skipped. The
result is a :class:`Lookup`: ``(config, source)`` plus a line saying which key was found or missed.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import math
import os
import re
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from argus_cutlass.agent.planner import ActionValues, Problem
from argus_cutlass.errors import ArgusError
from argus_cutlass.kernels.gemm.config import GemmConfig
from argus_cutlass.runtime.timing import DEFAULT_TIMING, LEGACY_TIMING

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

    def _load(self) -> tuple[dict[str, Any], str | None]:
        """``(contents, None)``, an empty store and None when the file is missing, or an empty store and why the
        file that is there cannot be used (not UTF-8 / JSON, another format version, ``entries`` or
        ``action_values`` not objects)."""
        try:
            data = json.loads(self.path.read_text("utf-8"))
        except (FileNotFoundError, NotADirectoryError):  # no store yet (or no folder for one: _locked says so)
            return _empty(), None
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            return _empty(), f"not a JSON store ({type(exc).__name__}: {exc})"
        except OSError as exc:
            return _empty(), f"cannot be read ({type(exc).__name__}: {exc.strerror or exc})"
        if not isinstance(data, dict) or data.get("version") != VERSION:
            found = data.get("version") if isinstance(data, dict) else type(data).__name__
            return _empty(), f"format version {found!r}, this argus_cutlass reads version {VERSION}"
        data.setdefault("entries", {})
        data.setdefault("action_values", {})
        for field in ("entries", "action_values"):
            if not isinstance(data[field], dict):
                return _empty(), f"'{field}' is a {type(data[field]).__name__}, not an object"
        return data, None

    def read(self) -> dict[str, Any]:
        """The current contents: an empty store when the file is missing, or when it cannot be used (then a
        ``UserWarning`` names the file and why; the file is left as it is, and :meth:`update` moves it aside
        before writing, so no tuned entry is lost)."""
        data, problem = self._load()
        if problem:
            warnings.warn(f"experience store {self.path}: {problem}; ignored", stacklevel=2)
        return data

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ArgusError("store.path", f"experience store {self.path}: cannot create its folder {self.path.parent} "
                             f"({exc.strerror or exc})", hint="set ARGUS_CACHE_DIR to a writable folder") from None
        with open(self.lock_path, "a+") as lock:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock.fileno(), fcntl.LOCK_UN)

    def update(self, fn: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
        """Apply ``fn`` to the contents in place, under the lock, and write atomically."""
        with self._locked():
            data, problem = self._load()
            if problem:
                # never write over a store this version cannot read (another version's, a damaged one): keep it
                kept = self.path.with_name(f"{self.path.name}.unreadable-{time.strftime('%Y%m%d-%H%M%S')}")
                try:
                    os.replace(self.path, kept)
                except OSError as exc:
                    raise ArgusError("store.unreadable", f"experience store {self.path}: {problem}, and it cannot be "
                                     f"moved aside to {kept} ({exc.strerror or exc}); nothing written",
                                     hint="move or repair the file, or set ARGUS_CACHE_DIR to another folder") from None
                warnings.warn(f"experience store {self.path}: {problem}; moved to {kept}, a new store started",
                              stacklevel=2)
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
                    cublas_ms: float | None = None, timing: str | None = None) -> bool:
        """Keep ``cfg`` as the bucket's best when its TFLOP/s beats the stored one (``timing``: how ``ms`` was
        measured, :mod:`argus_cutlass.runtime.timing`; see :meth:`keep_faster`).

        Returns True when the entry was written.
        """
        return self.keep_faster(entry_key(gpu, kernel, problem),
                                make_entry(gpu, kernel, problem, cfg, ms, cublas_ms, timing))

    def keep_faster(self, key: str, entry: dict[str, Any]) -> bool:
        """Store ``entry`` under ``key`` when no entry is there, or by how the two were timed (``timing``; none
        recorded: :data:`~argus_cutlass.runtime.timing.LEGACY_TIMING`, one launch between events, as everything
        before session 28): of one method, when its TFLOP/s beats the stored one's; of two, when ``entry`` is
        timed the default way (:data:`~argus_cutlass.runtime.timing.DEFAULT_TIMING`) and the stored one is not --
        times of two methods do not compare (a ~25 us decode kernel reads 10-25 % faster from a CUDA graph), and
        an entry of another method never displaces a default-timed one. One locked read-modify-write. Returns True
        when the entry was written."""
        written = [False]

        def fn(data: dict[str, Any]) -> None:
            old = data["entries"].get(key)
            if old is None or _replaces(entry, old):
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


def _replaces(new: dict[str, Any], old: dict[str, Any]) -> bool:
    """:meth:`ExperienceStore.keep_faster`'s rule: does ``new`` replace ``old`` under one key?

    >>> _replaces({"tflops": 2.0, "timing": "graph"}, {"tflops": 9.0})   # the default method wins over the legacy
    True
    >>> _replaces({"tflops": 9.0}, {"tflops": 2.0, "timing": "graph"}), _replaces({"tflops": 3.0}, {"tflops": 2.0})
    (False, True)
    """
    a, b = new.get("timing") or LEGACY_TIMING, old.get("timing") or LEGACY_TIMING
    if a == b:
        return new["tflops"] > old.get("tflops", 0.0)
    return a == DEFAULT_TIMING


def make_entry(gpu: str, kernel: str, problem: Problem, cfg: GemmConfig, ms: float,
               cublas_ms: float | None = None, timing: str | None = None) -> dict[str, Any]:
    """One entry in the format of the store and of ``agent/tuned_h200.json`` (``timing``: how ``ms`` and
    ``cublas_ms`` were measured, recorded when given)."""
    return {
        "gpu": gpu, "kernel": kernel, "dtype": problem.dtype, "out_dtype": problem.out_dtype,
        "layout": problem.layout, "bucket": problem.bucket(), "shape": [problem.m, problem.n, problem.k],
        "config": cfg.model_dump(), "ms": ms, "tflops": problem.flops / (ms * 1e-3) / 1e12,
        "cublas_ms": cublas_ms, **({"timing": timing} if timing else {}),
    }


def table_entry_key(entry: dict[str, Any]) -> str:
    """The lookup key of an entry of ``agent/tuned_h200.json`` or of a store: its ``key`` (attention,
    MoE), else GEMM's ``gpu|kernel|dtype|out_dtype|layout|bucket`` (:func:`entry_key`)."""
    if entry.get("key"):
        return str(entry["key"])
    return "|".join(str(entry.get(f, "")) for f in ("gpu", "kernel", "dtype", "out_dtype", "layout", "bucket"))


def entry_identity(entry: dict[str, Any]) -> str:
    """What :func:`merge_entries` replaces by: :func:`table_entry_key`, and for a GEMM entry its measured
    shape too (a bucket of the shipped table may hold entries measured at several shapes; the lookup takes
    the one measured nearest the problem, :func:`shape_distance`).

    >>> entry_identity({"gpu": "G", "kernel": "gemm", "dtype": "bf16", "out_dtype": "bf16", "layout": "tn",
    ...                 "bucket": "m4096_n4096_k4096", "shape": [3000, 4096, 4096]})
    'G|gemm|bf16|bf16|tn|m4096_n4096_k4096|3000x4096x4096'
    """
    key = table_entry_key(entry)
    shape = None if entry.get("key") else entry.get("shape")
    return f"{key}|{'x'.join(str(int(x)) for x in shape)}" if shape else key


def shape_distance(a: Any, b: Any) -> float:
    """Summed ``|log2|`` ratios of two (M, N, K) shapes: how far an entry's measured shape is from a problem
    of the same bucket (0 for the same shape).

    >>> shape_distance((3000, 4096, 4096), (2048, 4096, 4096)) < shape_distance((3000, 4096, 4096), (4096, 2048, 4096))
    True
    """
    return sum(abs(math.log2(max(1, int(x)) / max(1, int(y)))) for x, y in zip(a, b))


def entry_distance(entry: dict[str, Any], here: Any) -> float:
    """:func:`shape_distance` from a GEMM entry's measured shape (:func:`measured_shape`) to the problem
    shape ``here``; ``inf`` for an entry without a well-formed shape (it orders last). The order the lookup
    tries a bucket's entries in, and the order ``table`` lists them in.

    >>> entry_distance({"shape": [2048, 4096, 4096]}, (2048, 4096, 4096)), entry_distance({}, (1, 1, 1))
    (0.0, inf)
    """
    shape = measured_shape(entry)
    return shape_distance(shape, here) if shape is not None else math.inf


def merge_entries(table: dict[str, Any], new: list[dict[str, Any]]) -> dict[str, Any]:
    """``table`` (the JSON object of ``agent/tuned_h200.json``) with ``new`` entries added; an old entry
    of the same :func:`entry_identity` (key, and a GEMM entry's shape) is replaced, every other key of the
    table is kept.

    >>> t = {"note": "n", "entries": [{"key": "a", "ms": 1}, {"key": "b", "ms": 2}]}
    >>> merge_entries(t, [{"key": "b", "ms": 3}])
    {'note': 'n', 'entries': [{'key': 'a', 'ms': 1}, {'key': 'b', 'ms': 3}]}
    """
    keys = {entry_identity(e) for e in new}
    return {**table, "entries": [e for e in table.get("entries", []) if entry_identity(e) not in keys] + list(new)}


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


# ---- lookups: which entry, and why ------------------------------------------------------------

#: GPU name pattern (a regular expression, case-insensitive) -> architecture. Entries are keyed by
#: GPU name only, so the architecture of an entry's GPU is read off its name. Every Hopper
#: data-centre part is compute capability 9.0 (sm_90): H100 (SXM, PCIe, NVL), H200 (SXM, NVL), H800,
#: H20 and the GH200 superchip. A name no pattern matches has no known architecture: it matches
#: entries of exactly its own name only. (Other architectures are absent on purpose: the tool
#: refuses every GPU but sm_90 before it runs a kernel, ``runtime.cuda``.)
GPU_ARCH_PATTERNS: tuple[tuple[str, str], ...] = (
    (r"\bGH200\b", "sm_90"),
    (r"\bH(?:100|200|800|20)\b", "sm_90"),
)

#: where an entry came from, in the words of :attr:`Lookup.detail`
_WHERE = {"store": "your experience store", "shipped": f"the shipped table (agent/{SHIPPED})"}
#: the command that fills the user store for a family (the re-tune hint of a same-architecture match)
_RETUNE = {"gemm": "argus-cutlass tune gemm", "attention": "argus-cutlass tune attention",
           "moe": "argus-cutlass tune moe"}
#: the key fields of each family, in key order (``|``-separated)
KEY_FIELDS = {
    "gemm": ("gpu", "kernel", "dtype", "out_dtype", "layout", "bucket"),
    "attention": ("gpu", "kernel", "dtype", "head_dim", "mask", "lengths", "bucket"),
    "moe": ("gpu", "kernel", "dtype", "shape", "tokens"),
}


def gpu_arch(name: str) -> str | None:
    """The architecture of the GPU called ``name`` by :data:`GPU_ARCH_PATTERNS` (None: unknown).

    >>> gpu_arch("NVIDIA H100 80GB HBM3"), gpu_arch("NVIDIA GH200 480GB"), gpu_arch("NVIDIA H20")
    ('sm_90', 'sm_90', 'sm_90')
    >>> gpu_arch("NVIDIA A100-SXM4-80GB") is None and gpu_arch("") is None
    True
    """
    for pattern, arch in GPU_ARCH_PATTERNS:
        if re.search(pattern, name or "", re.IGNORECASE):
            return arch
    return None


@dataclass(frozen=True)
class Lookup:
    """The configuration a lookup chose, where it came from, and why.

    It unpacks and indexes as the pair ``(config, source)`` (``cfg, source = configure(p)``,
    ``configure(p)[0]``), the result of the earlier tuple API.

    Attributes:
        config: the chosen GemmConfig, AttentionConfig or MoEConfig.
        source: ``"store"`` (the user's experience store), ``"shipped"`` (``agent/tuned_h200.json``),
            ``"heuristic"`` (no usable entry; a GEMM with ``ARGUS_GEMM_UNTUNED=heuristic`` or on the
            aligned-staging path), ``"costmodel"`` (no usable entry, GEMM: the default untuned rule) or
            ``"forced"`` (the heuristic was asked for).
        detail: one line for people: the key found; or the key that missed and why (no entry, with
            the shipped table's coverage and the nearest entry; an entry refused by the verifier's
            rules; a stale entry; a dtype/layout mismatch); and an entry of another GPU of the same
            architecture, or of the other 2-byte type (bf16 / fp16), when that is what was used.
        key: the problem's key on this GPU (None for ``forced``).
        entry_key: the key of the entry used (None for ``heuristic`` / ``forced``); its GPU field
            differs from ``key``'s when the same-architecture rule applied, its dtype when the sibling-dtype
            rule did (:class:`_Sibling`).
        entry_shape: the (M, N, K) the GEMM entry used was measured at (a bucket may hold several; None
            for other families and without an entry).
    """

    config: Any
    source: str
    detail: str
    key: str | None = None
    entry_key: str | None = None
    entry_shape: tuple[int, int, int] | None = None

    def __iter__(self) -> Iterator[Any]:
        return iter((self.config, self.source))

    def __len__(self) -> int:
        return 2

    def __getitem__(self, i: int) -> Any:
        return (self.config, self.source)[i]

    @classmethod
    def forced(cls, config: Any) -> Lookup:
        """The heuristic's ``config``, asked for (source ``"forced"``: no table read)."""
        return cls(config, "forced",
                   "the heuristic was asked for (--heuristic / heuristic=True): no table read")


def _stale(exc: Exception) -> str:
    """The first complaint of a config class about an entry's ``config`` (one line)."""
    from pydantic import ValidationError

    if isinstance(exc, ValidationError) and exc.errors():
        e = exc.errors()[0]
        return f"{'.'.join(str(x) for x in e['loc']) or 'config'}: {e['msg']}"
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def _shipped_key(e: dict[str, Any]) -> str:
    """An entry's key: its ``key`` field (attention, MoE), else the GEMM key of its fields (the bucket
    recomputed from its shape, as the store computes it)."""
    if "key" in e:
        return str(e["key"])
    try:
        return entry_key(e.get("gpu", ""), e.get("kernel", ""),
                         Problem(*e["shape"], e["dtype"], e["out_dtype"], e["layout"]))
    except (KeyError, TypeError, ValueError):
        return ""


def _tables(store: ExperienceStore) -> list[tuple[str, list[tuple[str, dict[str, Any]]]]]:
    """``[("store", [(key, entry), ...]), ("shipped", [...])]`` in lookup order (store keys sorted)."""
    stored = sorted(store.read().get("entries", {}).items())
    return [("store", stored), ("shipped", [(_shipped_key(e), e) for e in shipped_entries()])]


def key_distance(a: str, b: str) -> float:
    """How far two values of a key field are: the summed log2 ratios of their numbers (buckets, head
    dims), or 1 when they hold different numbers of numbers (dtypes, layouts)."""
    na, nb = re.findall(r"\d+", a), re.findall(r"\d+", b)
    if not na or len(na) != len(nb):
        return 1.0
    return sum(abs(math.log2(max(1, int(x))) - math.log2(max(1, int(y)))) for x, y in zip(na, nb))


def key_rank(want: list[str], have: list[str], same_gpu: bool) -> tuple[int, float]:
    """How near an entry's key ``have`` is to the wanted key ``want`` (both split on ``|``, same
    family): ``(fields that differ, summed key_distance of those past the GPU)``; the GPU field
    counts as equal when ``same_gpu`` (the same architecture). Smaller is nearer; the lookup's
    "nearest" and ``argus-cutlass table``'s list both sort by it."""
    differ = [i for i in range(len(want)) if have[i] != want[i] and not (i == 0 and same_gpu)]
    return len(differ), sum(key_distance(have[i], want[i]) for i in differ if i > 0)


def _miss_text(key: str, tables: list[tuple[str, list[tuple[str, dict[str, Any]]]]]) -> str:
    """``no entry for key '<key>' (<what the shipped table has>; nearest: '<key>', differs in ...)``."""
    want = key.split("|")
    family = want[1]
    fields = KEY_FIELDS[family]
    arch = gpu_arch(want[0])

    def same_gpu(g: str) -> bool:
        return g == want[0] or (arch is not None and gpu_arch(g) == arch)

    def natural(v: str) -> tuple[int, str]:
        n = re.findall(r"\d+", v)
        return (int(n[0]) if n else -1, v)

    keys = [(source, k.split("|")) for source, rows in tables for k, _ in rows]
    keys = [(s, k) for s, k in keys if len(k) == len(fields) and k[1] == family]
    if not keys:
        return (f"no entry for key {key!r} (no tuned {family} entries: neither your experience store nor the "
                "shipped table has one)")
    parts = []
    shipped = [k for s, k in keys if s == "shipped"]
    cover = []
    if shipped and not any(same_gpu(k[0]) for k in shipped):
        cover.append(f"gpu {'/'.join(sorted({k[0] for k in shipped}))}")
    for i, f in enumerate(fields[2:-1], start=2):  # dtype .. (not the bucket: that is the nearest's job)
        have = sorted({k[i] for k in shipped}, key=natural)
        if have and want[i] not in have:
            cover.append(f"{f} {'/'.join(have)}")
    if cover:
        parts.append(f"shipped table has {', '.join(cover)} only")
    if arch is None:
        parts.append(f"{want[0]!r} is no known sm_90 GPU name, so only entries of exactly that name match")

    def differs(k: list[str]) -> list[str]:
        return [f for i, f in enumerate(fields) if k[i] != want[i] and not (i == 0 and same_gpu(k[0]))]

    def score(item: tuple[str, list[str]]) -> tuple[int, float, bool, str]:
        s, k = item   # ties: the user's store first, then the key's text (not the table's entry order)
        return (*key_rank(want, k, same_gpu(k[0])), s != "store", "|".join(k))

    _, near = min(keys, key=score)
    parts.append(f"nearest: {'|'.join(near)!r}, differs in {', '.join(differs(near)) or 'nothing'}")
    return f"no entry for key {key!r} ({'; '.join(parts)})"


def _find(key: str, family: str, usable: Callable[[dict[str, Any]], tuple[Any, str]],
          tables: list[tuple[str, list[tuple[str, dict[str, Any]]]]],
          nearness: Callable[[dict[str, Any]], float] | None = None,
          found_note: Callable[[dict[str, Any]], str] | None = None) -> tuple[Lookup | None, list[str]]:
    """:func:`_lookup`'s search of one key in ``tables`` (:func:`_tables`): ``(lookup, notes)``, the lookup
    None when no entry of ``key`` is usable, ``notes`` the entries skipped on the way (each with why)."""
    gpu, _, rest = key.partition("|")
    arch = gpu_arch(gpu)
    notes: list[str] = []
    passes: list[tuple[str, Callable[[str], bool]]] = [("exact", lambda g: g == gpu)]
    if arch is not None:
        passes.append(("arch", lambda g: g != gpu and gpu_arch(g) == arch))
    for kind, match in passes:
        cands = [(source, k, e) for source, rows in tables for k, e in rows
                 if k.partition("|")[2] == rest and match(k.partition("|")[0])]
        order = {source: i for i, (source, _) in enumerate(tables)}
        # the same-architecture pass: GPU names in sorted order first; then (GEMM) the entry measured nearest
        # the problem, whichever table holds it; then the user's store before the shipped table
        cands.sort(key=lambda c: (c[1].partition("|")[0] if kind == "arch" else "",
                                  nearness(c[2]) if nearness is not None else 0.0, order[c[0]]))
        for source, k, e in cands:
            g = k.partition("|")[0]
            cfg, why = usable(e)
            if cfg is None:
                notes.append(f"entry {k!r} of {_WHERE[source]} skipped: {why}")
                continue
            if kind == "exact":
                text = f"key {k!r} found in {_WHERE[source]}{found_note(e) if found_note else ''}"
            else:
                text = (f"{'no usable' if notes else 'no'} entry for key {key!r}; using {k!r} of "
                        f"{_WHERE[source]}{found_note(e) if found_note else ''}: tuned on {g}, "
                        f"used on {gpu} (same {arch}); re-tune for this GPU with {_RETUNE[family]}")
            return Lookup(cfg, source, "; ".join([*notes, text]), key, k,
                          measured_shape(e) if family == "gemm" else None), notes
    return None, notes


#: the other 2-byte input type of the lookups' sibling-dtype rule (:class:`_Sibling`)
_SIBLING_DTYPE = {"bf16": "fp16", "fp16": "bf16"}


@dataclass(frozen=True)
class _Sibling:
    """The same problem in the other 2-byte input type (bf16 <-> fp16), whose entry a problem without a
    usable one of its own runs (:func:`_lookup`, all three families): Hopper's wgmma has the same rate and
    the same shared-memory layouts for both (PTX ISA 9.7.15, wgmma.mma_async: .f16 and .bf16 share every
    shape), so only the element type printed differs. The entry's configuration is checked by the family's
    own check for the problem, its types replaced by the problem's (the verifier runs in the type the kernel
    is built in).

    Attributes:
        key: the sibling problem's key (the problem's key, its type fields the sibling's).
        types: config field -> (the sibling's type, the problem's): ``dtype``, and GEMM's ``out_dtype``.
        tune: the end of the detail, after ``not measured in <dtype>: ``: how to measure the problem itself.
        explain: name the entries skipped on the way (the problem's own key's, the sibling's: refused in
            the problem's type, stale) in the detail. False: GEMM's wording of the rule, as it was before
            the rule covered attention and MoE (a hit says only "no entry for key"; a miss does not name
            the sibling's entries).
    """

    key: str
    types: dict[str, tuple[str, str]]
    tune: str
    explain: bool = True

    @classmethod
    def of(cls, key: str, dtype: str, tune: str) -> _Sibling | None:
        """The sibling of an attention or MoE problem of ``key`` and element type ``dtype`` (its key's
        ``dtype`` field swapped, :data:`KEY_FIELDS`), or None for a type without one."""
        other = _SIBLING_DTYPE.get(dtype)
        if other is None:
            return None
        parts = key.split("|")
        parts[KEY_FIELDS[parts[1]].index("dtype")] = other
        return cls("|".join(parts), {"dtype": (other, dtype)}, tune)

    def usable_as(self, usable: Callable[[dict[str, Any]], tuple[Any, str]]
                  ) -> Callable[[dict[str, Any]], tuple[Any, str]]:
        """``usable`` (the family's check for the problem) of a sibling entry, its configuration's types
        replaced by the problem's: verified once, in those types."""
        theirs = "->".join(t for t, _ in self.types.values())
        mine = "->".join(t for _, t in self.types.values())

        def check(e: dict[str, Any]) -> tuple[Any, str]:
            c = e.get("config")
            if not isinstance(c, dict) or any(c.get(f) != t for f, (t, _) in self.types.items()):
                return None, f"its config is not {theirs}"
            cfg, why = usable({**e, "config": {**c, **{f: t for f, (_, t) in self.types.items()}}})
            return cfg, (f"run as {mine}, {why}" if cfg is None else "")

        return check

    def taken(self, key: str, other: Lookup, skipped: list[str],
              found_note: Callable[[dict[str, Any]], str] | None) -> Lookup:
        """The lookup of a problem of ``key`` that runs the sibling's entry ``other`` found (``skipped``: the
        entries skipped before it, named when :attr:`explain`)."""
        sib, mine = self.types["dtype"]
        gpu, entry_gpu = key.partition("|")[0], str(other.entry_key).partition("|")[0]
        shape = found_note({"shape": list(other.entry_shape)}) if found_note and other.entry_shape else ""
        where = _WHERE[other.source] + shape + (f", tuned on {entry_gpu}" if entry_gpu != gpu else "")
        notes = skipped if self.explain else []
        text = (f"{'no usable' if notes else 'no'} entry for key {key!r}; using the {sib} entry "
                f"{other.entry_key!r} of {where}: {sib} and {mine} are both 2-byte types with the same "
                f"tensor-core rate, so its configuration runs as {mine}; not measured in {mine}: {self.tune}")
        return Lookup(other.config, other.source, "; ".join([*notes, text]), key, other.entry_key,
                      other.entry_shape)


def _lookup(key: str, family: str, usable: Callable[[dict[str, Any]], tuple[Any, str]], fallback: Any,
            store: ExperienceStore, nearness: Callable[[dict[str, Any]], float] | None = None,
            found_note: Callable[[dict[str, Any]], str] | None = None,
            sibling: _Sibling | None = None) -> Lookup:
    """The first usable entry for ``key``: exact GPU (user store, then shipped), then another GPU of the
    same architecture (:func:`gpu_arch`; user store, then shipped; GPU names in sorted order); then the
    same for the ``sibling`` key (the problem in the other 2-byte type, :class:`_Sibling`), its
    configuration run in the problem's type; else ``fallback`` (source ``heuristic``; a callable is called
    only then and returns ``(config, source, note)``). ``usable(entry)`` is ``(config, "")`` or ``(None,
    why)``. Several entries of one key (GEMM: measured at several shapes of the bucket, in either table) are
    tried nearest first by ``nearness(entry)``, the user's store first among equally near ones: an entry
    measured at the problem's own shape wins over one measured elsewhere in the bucket, whichever table
    holds it. ``found_note(entry)`` is added to the detail of the entry taken."""
    tables = _tables(store)
    found, notes = _find(key, family, usable, tables, nearness, found_note)
    if found is not None:
        return found
    later: list[str] = []
    if sibling is not None:
        other, skipped = _find(sibling.key, family, sibling.usable_as(usable), tables, nearness, found_note)
        if other is not None:
            return sibling.taken(key, other, notes + skipped, found_note)
        later = skipped if sibling.explain else []
    if not notes:
        notes.append(_miss_text(key, tables))
    notes += later
    source = "heuristic"
    if callable(fallback):
        fallback, source, note = fallback()
        notes += [note] if note else []
    return Lookup(fallback, source, "; ".join(notes), key, None)


# ---- GEMM ---------------------------------------------------------------------------------------


def _usable(entry: dict[str, Any] | None, problem: Problem) -> tuple[GemmConfig | None, str]:
    from argus_cutlass.kernels.gemm.space import feasible

    if not entry:
        return None, "empty entry"
    try:
        cfg = GemmConfig(**entry["config"])
    except (ValueError, TypeError, KeyError) as exc:  # a stale or hand-edited entry is skipped
        return None, f"stale (its config no longer parses: {_stale(exc)})"
    if (cfg.dtype, cfg.out_dtype, cfg.layout) != (problem.dtype, problem.out_dtype, problem.layout):
        return None, (f"its config is {cfg.dtype}->{cfg.out_dtype} {cfg.layout}, the problem "
                      f"{problem.dtype}->{problem.out_dtype} {problem.layout}")
    ok, reasons = feasible(cfg)
    return (cfg, "") if ok else (None, f"refused by the verifier ({'; '.join(reasons[:1]) or 'a violation'})")


def tuned_or_default(kernel: str, m: int, n: int, k: int, dtype: str = "bf16", out_dtype: str = "bf16",
                     layout: str = "tn", *, gpu: str | None = None,
                     store: ExperienceStore | None = None) -> GemmConfig:
    """The best known configuration for the problem: user store, then shipped, then the untuned rule
    (``ARGUS_GEMM_UNTUNED``: the cost model's first choice by default, or the heuristic's).

    Args:
        kernel: ``"gemm"``.
        m, n, k: problem size (elements). dtype, out_dtype, layout: as GemmConfig.
        gpu: GPU name to match (default: the current GPU, or ``NVIDIA H200`` without one).
        store: the user store (default: :func:`store_path`).

    >>> tuned_or_default("gemm", 8192, 8192, 8192, store=ExperienceStore("/nonexistent/x.json")).tile
    (128, 256, 64)
    """
    return lookup_config(kernel, m, n, k, dtype, out_dtype, layout, gpu=gpu, store=store).config


def lookup_config(kernel: str, m: int, n: int, k: int, dtype: str = "bf16", out_dtype: str = "bf16",
                  layout: str = "tn", *, gpu: str | None = None,
                  store: ExperienceStore | None = None) -> Lookup:
    """:func:`tuned_or_default` as a :class:`Lookup` (unpacks as ``(config, source)``): source
    ``"store"`` (the user's experience store), ``"shipped"`` (``agent/tuned_h200.json``), or the untuned
    rule's (``ARGUS_GEMM_UNTUNED``): ``"costmodel"`` (the default; on the aligned-staging path too, where the
    GEMM is the same TMA kernel over the staged copies) or ``"heuristic"``, and the detail of which key was found or missed. Entries are matched by (GPU,
    kernel, dtypes, layout, shape bucket), an exact GPU first, then another GPU of the same
    architecture (:func:`gpu_arch`), and used only when the verifier accepts them. Several entries of one
    bucket (measured at several shapes, in the user's store or the shipped table): the one measured nearest
    the problem (:func:`shape_distance`), the user's store first at equal distance.
    No entry of its own for a bf16 / fp16 problem: the entry of the same problem in the other 2-byte type
    (:func:`_sibling_problem`), run in the problem's type, the detail naming both keys.

    >>> lk = lookup_config("gemm", 4096, 4096, 4096, "fp16", "fp16", "nn", gpu="NVIDIA H200",
    ...                    store=ExperienceStore("/nonexistent/x.json"))
    >>> lk.source, lk.detail.startswith("no entry for key 'NVIDIA H200|gemm|fp16|fp16|nn|m4096_n4096_k4096'")
    ('costmodel', True)
    >>> lookup_config("gemm", 4096, 4096, 4096, "fp16", "fp16", "tn", gpu="NVIDIA H200",
    ...               store=ExperienceStore("/nonexistent/x.json")).source
    'shipped'
    """
    from argus_cutlass.kernels.gemm.heuristics import default_config
    from argus_cutlass.settings import settings

    if kernel != "gemm":
        from argus_cutlass.errors import ProblemError

        raise ProblemError("lookup.kernel", f"lookup_config(kernel={kernel!r}): only 'gemm' is looked up here",
                           "attention: lookup_attention_config(problem); MoE: lookup_moe_config(problem)")
    problem = Problem(m, n, k, dtype, out_dtype, layout)
    gpu = gpu or gpu_name() or DEFAULT_GPU
    untuned = settings().gemm_untuned

    def fallback() -> tuple[GemmConfig, str, str]:
        """The untuned choice (``ARGUS_GEMM_UNTUNED``): the heuristic's, or the cost model's first choice."""
        if untuned == "costmodel":
            from argus_cutlass.agent.costmodel import costmodel_choice
            from argus_cutlass.kernels.gemm.problem import GemmProblem

            # a problem no path can run raises here, naming the input and the rule (ProblemError)
            staged = GemmProblem(m, n, k, dtype, out_dtype, layout).validate_any().staging()
            cfg = costmodel_choice(m, n, k, dtype, out_dtype, layout)
            if cfg is not None:
                from argus_cutlass.agent.costmodel import calibrated_residuals

                res = calibrated_residuals()
                measured = ("; its corrections were measured on " + " ".join(res.flavor) + " only"
                            if res is not None and res.flavor != (dtype, out_dtype, layout) else "")
                # the aligned-staging path runs the same TMA GEMM over the staged copies (M x N x K unchanged)
                # plus copy kernels whose cost does not depend on the configuration; the calibration timed the
                # direct path only
                on_staged = ("; ranked for the GEMM of the aligned-staging path (staged "
                             + ", ".join(s.name for s in staged) + "), whose copies the calibration did not time"
                             if staged else "")
                return cfg, "costmodel", ("the cost model's first choice of the declared sub-space "
                                          f"(ARGUS_GEMM_UNTUNED=heuristic takes the heuristic's){measured}{on_staged}")
            return (default_config(m, n, k, dtype, out_dtype, layout), "heuristic",
                    "the heuristic's configuration: the cost model's sub-space had no configuration the "
                    "verifier accepts")
        return default_config(m, n, k, dtype, out_dtype, layout), "heuristic", ""

    here = (m, n, k)

    def nearness(e: dict[str, Any]) -> float:
        return entry_distance(e, here)

    def found_note(e: dict[str, Any]) -> str:
        shape = measured_shape(e)
        if shape is None or shape == here:
            return ""
        return f" (measured at {'x'.join(str(x) for x in shape)}, the nearest shape of the bucket)"

    sib = _sibling_problem(problem)
    tune = (f"argus-cutlass tune gemm --m {m} --n {n} --k {k} --dtype {dtype}"
            + (f" --out-dtype {out_dtype}" if out_dtype != dtype else "") + f" --layout {layout}")
    sibling = None if sib is None else _Sibling(
        entry_key(gpu, kernel, sib), {"dtype": (sib.dtype, dtype), "out_dtype": (sib.out_dtype, out_dtype)},
        f"tune with `{tune}`", explain=False)
    return _lookup(entry_key(gpu, kernel, problem), kernel, lambda e: _usable(e, problem), fallback,
                   store or ExperienceStore(), nearness, found_note, sibling)


def measured_shape(entry: dict[str, Any]) -> tuple[int, int, int] | None:
    """A GEMM entry's measured ``shape`` as three ints in [1, 2^31), or None (absent or malformed: a hand-edited
    store entry must not break the lookups of other keys, which order every entry by it).

    >>> measured_shape({"shape": [3000, 4096, 4096]}), measured_shape({"shape": [None, 1, 1]})
    ((3000, 4096, 4096), None)
    """
    shape = entry.get("shape")
    if not isinstance(shape, list) or len(shape) != 3:
        return None
    if not all((isinstance(x, int) and not isinstance(x, bool) or isinstance(x, float) and math.isfinite(x))
               and 1 <= x < 2**31 for x in shape):
        return None
    return int(shape[0]), int(shape[1]), int(shape[2])


def _sibling_problem(problem: Problem) -> Problem | None:
    """The same GEMM problem in the other 2-byte input type (bf16 <-> fp16; a 2-byte output follows the input,
    an fp32 output stays), whose tuned entry a GEMM without one of its own may run (:class:`_Sibling`, which
    says why). None for other types."""
    other = _SIBLING_DTYPE.get(problem.dtype)
    if other is None:
        return None
    out = other if problem.out_dtype == problem.dtype else problem.out_dtype
    if out not in ("bf16", "fp16", "fp32"):
        return None
    return Problem(problem.m, problem.n, problem.k, other, out, problem.layout)


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


def _usable_attention(entry: dict[str, Any] | None, problem: Any) -> tuple[Any, str]:
    from argus_cutlass.kernels.attention.config import AttentionConfig

    if not entry:
        return None, "empty entry"
    try:
        cfg = AttentionConfig(**entry["config"])
    except (ValueError, TypeError, KeyError) as exc:  # a stale or hand-edited entry is skipped
        return None, f"stale (its config no longer parses: {_stale(exc)})"
    have = (cfg.head_dim, cfg.dtype, cfg.causal, cfg.varlen)
    want = (problem.head_dim, problem.dtype, problem.causal, problem.varlen)
    if have != want:
        return None, f"its config is (head_dim, dtype, causal, varlen) {have}, the problem {want}"
    from argus_cutlass.kernels.attention.space import feasible

    ok, reasons = feasible(cfg)  # the resource rules of the verifier (the full run follows)
    return (cfg, "") if ok else (None, f"refused by the verifier ({'; '.join(reasons[:1]) or 'a violation'})")


def lookup_attention_config(problem: Any, *, heuristic: bool = False, gpu: str | None = None,
                            store: ExperienceStore | None = None) -> Lookup:
    """The configuration of an attention problem as a :class:`Lookup` (unpacks as ``(config,
    source)``): source ``"store"`` (an entry the user's tuning recorded under :func:`attention_key`),
    ``"shipped"`` (``agent/tuned_h200.json``), ``"heuristic"``
    (:func:`argus_cutlass.kernels.attention.heuristics.default_config`: FA3's tile per head dim) or
    ``"forced"`` (``heuristic=True``), and the detail of which key was found or missed. An exact GPU
    first, then another GPU of the same architecture (:func:`gpu_arch`). No usable entry of its own for a
    bf16 / fp16 problem: the entry of the same key in the other 2-byte type (:class:`_Sibling`), its
    configuration run (and checked by the verifier's resource rules) in the problem's type, the detail naming
    both keys; the shipped table holds bf16 entries only, so an fp16 problem of a shipped bucket runs one.

    >>> from argus_cutlass.kernels.attention.problem import AttentionProblem
    >>> none = ExperienceStore("/nonexistent/x.json")
    >>> lk = lookup_attention_config(AttentionProblem(8, 16, 16, 2048, 2048, 128, "fp16", causal=True),
    ...                              gpu="NVIDIA H200", store=none)
    >>> lk.source, lk.config.dtype, lk.entry_key
    ('shipped', 'fp16', 'NVIDIA H200|attention|bf16|d128|causal|fixed|s2048')
    >>> print(lk.detail)  # doctest: +NORMALIZE_WHITESPACE
    no entry for key 'NVIDIA H200|attention|fp16|d128|causal|fixed|s2048'; using the bf16 entry
    'NVIDIA H200|attention|bf16|d128|causal|fixed|s2048' of the shipped table (agent/tuned_h200.json):
    bf16 and fp16 are both 2-byte types with the same tensor-core rate, so its configuration runs as fp16;
    not measured in fp16: tune with `argus-cutlass tune attention --batch 8 --heads 16 --seqlen-q 2048
    --head-dim 128 --causal --dtype fp16`

    Raises:
        ConfigError: ``attention.head_dim`` for a head dim the family does not build.
    """
    from argus_cutlass.kernels.attention.heuristics import default_config

    p = problem
    fallback = default_config(p.head_dim, p.dtype, p.causal, p.varlen)
    if heuristic:
        return Lookup.forced(fallback)
    gpu = gpu or gpu_name() or DEFAULT_GPU
    key = attention_key(gpu, p)
    return _lookup(key, "attention", lambda e: _usable_attention(e, p), fallback, store or ExperienceStore(),
                   sibling=_Sibling.of(key, p.dtype, _attention_tune(p)))


def _attention_tune(p: Any) -> str:
    """How to measure the attention problem ``p`` in its own type (the end of a sibling entry's detail,
    :class:`_Sibling`): the ``tune attention`` command of its sizes, or for a varlen problem (the command
    measures fixed lengths) the API's record.

    >>> from argus_cutlass.kernels.attention.problem import AttentionProblem
    >>> print(_attention_tune(AttentionProblem(2, 16, 4, 1, 3000, 128, "fp16", causal=True)))
    ... # doctest: +NORMALIZE_WHITESPACE
    tune with `argus-cutlass tune attention --batch 2 --heads 16 --kv-heads 4 --seqlen-q 1 --seqlen-k 3000
    --head-dim 128 --causal --dtype fp16`
    """
    if p.varlen:
        return ("`argus-cutlass tune attention` measures fixed lengths only; record a varlen measurement "
                "with argus_cutlass.agent.store.record_attention_best")
    return (f"tune with `argus-cutlass tune attention --batch {p.batch} --heads {p.heads}"
            + (f" --kv-heads {p.kv_heads}" if p.kv_heads != p.heads else "") + f" --seqlen-q {p.seqlen_q}"
            + (f" --seqlen-k {p.seqlen_k}" if p.seqlen_k != p.seqlen_q else "")
            + f" --head-dim {p.head_dim}{' --causal' if p.causal else ''} --dtype {p.dtype}`")


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


# ---- MoE ---------------------------------------------------------------------------------------


def moe_tokens_bucket(tokens: int) -> int:
    """T rounded up to a power of two: the token bucket of :func:`moe_key`, the heuristic's own
    (:func:`argus_cutlass.kernels.moe.heuristics.tokens_bucket`, which says why).

    >>> [moe_tokens_bucket(t) for t in (1, 2, 3, 256, 257, 4096, 5000)]
    [1, 2, 4, 256, 512, 4096, 8192]
    """
    from argus_cutlass.kernels.moe.heuristics import tokens_bucket

    return tokens_bucket(tokens)


def moe_key(gpu: str, problem: Any) -> str:
    """``<gpu>|moe|<dtype>|e<E>k<k>h<H>i<I>|t<bucket>``: E, k, H, I exact (compile-time constants of
    the layer), T by :func:`moe_tokens_bucket`.

    >>> from argus_cutlass.kernels.moe.problem import MoEProblem
    >>> moe_key("NVIDIA H200", MoEProblem(100, 8, 2, 4096, 14336))
    'NVIDIA H200|moe|bf16|e8k2h4096i14336|t128'
    """
    p = problem
    return "|".join((gpu, "moe", p.dtype, f"e{p.experts}k{p.topk}h{p.hidden}i{p.ffn}",
                     f"t{moe_tokens_bucket(p.tokens)}"))


def moe_entry(gpu: str, problem: Any, cfg: Any, ms: float,
              grouped_mm_ms: float | None = None) -> dict[str, Any]:
    """One MoE entry of the user store (the format of ``agent/tuned_h200.json``'s entries):
    ``ms`` is the layer's median time, ``grouped_mm_ms`` torch ``_grouped_mm``'s for the same problem
    (the family's vendor baseline), ``tflops`` from the uniform-routing FLOP count."""
    import dataclasses

    return {"gpu": gpu, "kernel": "moe", "key": moe_key(gpu, problem), "problem": dataclasses.asdict(problem),
            "config": cfg.model_dump(), "ms": ms, "tflops": problem.flops() / (ms * 1e-3) / 1e12,
            "grouped_mm_ms": grouped_mm_ms}


def _usable_moe(entry: dict[str, Any] | None, problem: Any) -> tuple[Any, str]:
    from argus_cutlass.kernels.moe.config import MoEConfig
    from argus_cutlass.kernels.moe.space import feasible

    if not entry:
        return None, "empty entry"
    try:
        cfg = MoEConfig(**entry["config"])  # fields added since the entry was written take their defaults
    except (ValueError, TypeError, KeyError) as exc:  # a stale or hand-edited entry is skipped
        return None, f"stale (its config no longer parses: {_stale(exc)})"
    if cfg.dtype != problem.dtype:
        return None, f"its config is {cfg.dtype}, the problem {problem.dtype}"
    ok = feasible(cfg, problem)
    ok = ok[0] if isinstance(ok, tuple) else bool(ok)  # (ok, reasons) or a bool: either form of the check
    return (cfg, "") if ok else (None, "refused by the verifier (the layer does not verify for this problem)")


def lookup_moe_config(problem: Any, *, heuristic: bool = False, gpu: str | None = None,
                      store: ExperienceStore | None = None) -> Lookup:
    """The configuration of an MoE layer problem as a :class:`Lookup` (unpacks as ``(config, source)``):
    source ``"store"`` (an entry recorded under :func:`moe_key`, :func:`record_moe_best`), ``"shipped"``
    (``agent/tuned_h200.json``: the MoE bench cells, its ``note_moe``), ``"heuristic"``
    (:func:`argus_cutlass.kernels.moe.heuristics.default_config`, by T bucket) or ``"forced"``
    (``heuristic=True``). The order is GEMM's: user store, then shipped, an exact GPU first, then
    another GPU of the same architecture. An entry is used only when its configuration parses (a stale
    one is skipped, said in the detail), has the problem's dtype and its layer verifies for the problem
    (:func:`argus_cutlass.kernels.moe.space.feasible`). No usable entry of its own for a bf16 / fp16 layer:
    the entry of the same key in the other 2-byte type (:class:`_Sibling`), its configuration run as the
    problem's type, used when that layer verifies, the detail naming both keys.

    >>> from argus_cutlass.kernels.moe.problem import MoEProblem
    >>> none = ExperienceStore("/nonexistent/x.json")
    >>> lk = lookup_moe_config(MoEProblem(16, 8, 2, 4096, 8192), gpu="NVIDIA H200", store=none)
    >>> lk.source, lk.config.tile_m
    ('heuristic', 64)
    >>> lookup_moe_config(MoEProblem.for_model("mixtral", 16), gpu="NVIDIA H200", store=none).source   # a bench cell
    'shipped'
    >>> fp16 = MoEProblem.for_model("mixtral", 16, dtype="fp16")
    >>> lk = lookup_moe_config(fp16, gpu="NVIDIA H200", store=none)
    >>> lk.source, lk.config.dtype, lk.entry_key   # the bf16 cell's entry, run as fp16
    ('shipped', 'fp16', 'NVIDIA H200|moe|bf16|e8k2h4096i14336|t16')
    >>> print(lk.detail)  # doctest: +NORMALIZE_WHITESPACE
    no entry for key 'NVIDIA H200|moe|fp16|e8k2h4096i14336|t16'; using the bf16 entry
    'NVIDIA H200|moe|bf16|e8k2h4096i14336|t16' of the shipped table (agent/tuned_h200.json): bf16 and fp16 are
    both 2-byte types with the same tensor-core rate, so its configuration runs as fp16; not measured in fp16:
    tune with `argus-cutlass tune moe --tokens 16 --experts 8 --topk 2 --hidden 4096 --ffn 14336 --dtype fp16`
    """
    from argus_cutlass.kernels.moe.heuristics import default_config

    fallback = default_config(problem)
    if heuristic:
        return Lookup.forced(fallback)
    gpu = gpu or gpu_name() or DEFAULT_GPU
    p = problem
    key = moe_key(gpu, p)
    tune = (f"tune with `argus-cutlass tune moe --tokens {p.tokens} --experts {p.experts} --topk {p.topk} "
            f"--hidden {p.hidden} --ffn {p.ffn} --dtype {p.dtype}`")
    return _lookup(key, "moe", lambda e: _usable_moe(e, p), fallback, store or ExperienceStore(),
                   sibling=_Sibling.of(key, p.dtype, tune))


def record_moe_best(problem: Any, cfg: Any, ms: float, grouped_mm_ms: float | None = None, *,
                    gpu: str | None = None, store: ExperienceStore | None = None) -> bool:
    """Keep ``cfg`` as the best configuration of ``problem``'s MoE bucket (:func:`moe_key`) in the user
    store when its TFLOP/s beats the stored entry's (or there is none).

    Args:
        problem: an MoEProblem; cfg: the measured MoEConfig; ms: the layer's median time.
        grouped_mm_ms: torch ``_grouped_mm``'s time for the same problem, when measured.
        gpu: the GPU name of the key (default: the current GPU, or ``NVIDIA H200`` without one).
        store: the user store (default: :func:`store_path`).

    Returns:
        True when the entry was written. :func:`lookup_moe_config` then returns it (source ``"store"``).
    """
    gpu = gpu or gpu_name() or DEFAULT_GPU
    store = store or ExperienceStore()
    entry = moe_entry(gpu, problem, cfg, ms, grouped_mm_ms)
    return store.keep_faster(entry["key"], entry)
