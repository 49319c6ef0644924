"""Typed search space of :class:`~argus_cutlass.kernels.gemm.config.GemmConfig` (Helion-style fragments).

A space is a set of *fragments* (:mod:`argus_cutlass.plan.fragments`), one per knob, each with
a default and a neighbour move, kept apart from the frozen config. Derived fields are not searched: the epilogue subtile
rows ``epi_m`` follow the schedule (128 cooperative, 64 ping-pong; rule ``epilogue.tile``).
The cluster is one fragment (``(cluster_m, cluster_n)`` pairs) because only three shapes
make sense for the kernel; so is the work decomposition (``(scheduler, splits)``: the
persistent data-parallel scheduler, stream-K, split-K by 2 or 4). The accumulator sets (``acc_sets``
1 / 2, rule ``k.acc_sets``) are searched since session 26, on narrow swap-AB ping-pong tiles. Constraints tie
fragments together: stream-K and split-K need the cooperative schedule
(:func:`admissible`).

The single feasibility function is :func:`feasible`: it *is* the verifier
(:func:`argus_cutlass.verify.verify_gemm`), so tests, the planner and the CLI agree.

>>> space = GemmSpace()
>>> space.size
296208
>>> space.default().tile
(128, 256, 64)
>>> feasible(space.default())[0]
True
>>> ok, reasons = feasible(space.default().replace(stages=9))
>>> ok, reasons[0].split(":")[0]
(False, 'smem.capacity')
"""

from __future__ import annotations

import functools
import itertools
import random
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from argus_cutlass.kernels.gemm.config import GemmConfig
from argus_cutlass.plan.fragments import EnumFragment, Fragment, IntRangeFragment

__all__ = [
    "DERIVED_FIELDS", "EnumFragment", "Fragment", "GemmSpace", "IntRangeFragment", "admissible",
    "declared_subspace", "derive", "epilogue_width", "feasible", "knob_values", "UNSEARCHED_FIELDS",
]

#: the fragments :func:`admissible` relates (it reads no other); the rest combine freely
COUPLED_FRAGMENTS = ("schedule", "decomposition", "tile_m", "acc_sets", "swap_ab", "tile_n", "cluster", "swizzle",
                     "epi_n")
#: GemmConfig fields computed from others, never searched
DERIVED_FIELDS = ("epi_m",)
#: GemmConfig fields built and verified but not searched (their default in every point of the space) until a
#: measurement backs them. Empty since session 26: ``acc_sets`` (independent accumulator sets) took 9-11 % off the
#: 64 x 16 swap-AB decode kernel on the few-tile shapes (device step gemm-k128, ``bench/data/gemm_k128_h200_s26.log``)
#: ``reduction`` (stream-K / split-K partial sums added nondeterministically, session 26): not measured yet (device
#: step gemm-k128b times it on the decode K splits); ``mma_in_flight`` (wgmma batches left outstanding, CUTLASS
#: K_PIPE_MMAS; session 32, ``bench/data/explore_tiles_mma_in_flight_h200_s32.log``, on the template before the
#: uniform descriptors: 2 within -3 .. +5 % of 1 on 12 kernels of 10 rows, decode to 3000x14336x4096, 3 up to 1.6x
#: slower, the producer a stage short; not re-timed on the current template); ``pdl`` (programmatic launch, session
#: 45): whether it pays depends on the caller's stream, not on the shape -- set by hand, never searched
UNSEARCHED_FIELDS: tuple[str, ...] = ("reduction", "mma_in_flight", "pdl")


def default_fragments() -> dict[str, Fragment]:
    """The full GEMM space: tiles, cluster, stages, schedule, raster, swizzle, epilogue N, work
    decomposition, swap-AB and accumulator sets (``acc_sets`` 1 or 2: k-block ``b`` into set ``b % S``, rule
    ``k.acc_sets``; 4 sets were slower than 2 on every decode shape measured, session 26; the DSL and verifier
    take any divisor of ``tile_k / 16``, a configuration may set one outside the space)."""
    return {
        "tile_m": EnumFragment((64, 128, 256), 128),
        "tile_n": EnumFragment((16, 32, 56, 64, 80, 96, 104, 112, 128, 160, 168, 192, 256), 256),
        "tile_k": EnumFragment((64, 128), 64),
        "cluster": EnumFragment(((1, 1), (2, 1), (1, 2)), (2, 1)),
        "stages": IntRangeFragment(2, 12, 4),
        "schedule": EnumFragment(("cooperative", "pingpong"), "cooperative"),
        "raster": EnumFragment(("along_n", "along_m"), "along_n"),
        "swizzle": EnumFragment((1, 2, 4, 8), 1),
        "epi_n": EnumFragment((8, 16, 32, 64), 32),
        "decomposition": EnumFragment((("persistent", 1), ("streamk", 1), ("splitk", 2), ("splitk", 4),
                                       ("clusterk", 2), ("clusterk", 4), ("clusterk", 8)), ("persistent", 1)),
        "swap_ab": EnumFragment((False, True), False),
        "acc_sets": EnumFragment((1, 2), 1),
    }


def admissible(values: dict[str, Any]) -> bool:
    """Cross-fragment constraints: stream-K / split-K / cluster-K only with the cooperative schedule
    (the CUTLASS StreamKScheduler reduction and the cluster-K reduction run in the cooperative kernel), cluster-K
    only with a 1x1 multicast cluster (its cluster is the k split); the cooperative
    schedule splits tile_m between 2 warpgroups of 64 rows, so tile_m is a multiple of 128 (the
    verifier's ``gmma.m_tile`` and ``epilogue.tile`` rules; PTX ISA 9.7.15.5: wgmma M = 64).
    Without the second constraint the planner verifies thousands of such tiles for a small M
    before it reaches a feasible one.

    The epilogue subtile's width ``epi_n`` divides ``tile_n`` (rule ``epilogue.tile``), and is 8 exactly on the
    tile widths that are an odd multiple of 8.

    Accumulator sets (``acc_sets`` > 1) only where one warpgroup's chain of narrow wgmmas is the whole tile's
    k loop: swap-AB, ping-pong, ``tile_n <= 32`` (measured on the H200, session 26, device step gemm-k128: 9-11 %
    faster on the 64 x 16 swap-AB tile; no gain on the 128-row cooperative tile, whose two warpgroups already run
    two chains, nor on persistent tiles, whose wide wgmmas are not latency-bound). Elsewhere each set count would
    be a twin with the same predicted time (the cost model does not model the chain)."""
    dec = values.get("decomposition", ("persistent", 1))
    schedule = values.get("schedule", "cooperative")
    tile_n, epi_n = values.get("tile_n", 256), values.get("epi_n", 32)
    if tile_n % epi_n or (epi_n == 8) != (tile_n % 16 != 0):
        # the epilogue subtile divides the tile (the verifier's epilogue.tile); 8-wide subtiles only on the widths
        # that are an odd multiple of 8 (56, 104, 168), where no wider one divides
        return False
    if schedule == "cooperative" and values.get("tile_m", 128) % 128:
        return False
    if values.get("acc_sets", 1) > 1 and not (values.get("swap_ab", False) and schedule == "pingpong"
                                               and values.get("tile_n", 256) <= 32):
        return False
    if dec[0] == "clusterk" and (tuple(values.get("cluster", (1, 1))) != (1, 1) or values.get("swizzle", 1) != 1):
        # the cluster is the k split (no multicast cluster beside it: the DSL refuses one); one tile per cluster,
        # so a swizzle's padding units would launch whole clusters of idle CTAs
        return False
    return dec[0] == "persistent" or schedule == "cooperative"


def derive(values: dict[str, Any]) -> dict[str, Any]:
    """GemmConfig fields from fragment values: split ``cluster``, derive ``epi_m``."""
    out = dict(values)
    if "cluster" in out:
        out["cluster_m"], out["cluster_n"] = out.pop("cluster")
    if "decomposition" in out:
        out["scheduler"], out["splits"] = out.pop("decomposition")
    if "schedule" in out:
        out["epi_m"] = 128 if out["schedule"] == "cooperative" else 64
    return out


def knob_values(cfg: GemmConfig) -> dict[str, Any]:
    """Fragment values of ``cfg`` (``cluster`` as a pair), inverse of :func:`derive`."""
    d = cfg.model_dump()
    d["cluster"] = (d.pop("cluster_m"), d.pop("cluster_n"))
    d["decomposition"] = (d.pop("scheduler"), d.pop("splits"))
    for f in ("dtype", "out_dtype", "layout", *DERIVED_FIELDS, *UNSEARCHED_FIELDS):
        d.pop(f)
    return d


@dataclass(frozen=True)
class GemmSpace:
    """The search space for one problem's dtypes and layout.

    Attributes:
        dtype, out_dtype, layout: fixed by the problem (not searched).
        fragments: knob name -> :class:`Fragment`.
        allowed: when set, the space is this explicit list of configurations (a declared
            sub-space, e.g. the evaluation's); fragments then only give defaults/moves.
    """

    dtype: str = "bf16"
    out_dtype: str = "bf16"
    layout: str = "tn"
    fragments: dict[str, Fragment] = field(default_factory=default_fragments)
    allowed: tuple[GemmConfig, ...] | None = None

    # ---- construction -------------------------------------------------------------------

    @classmethod
    def from_configs(cls, configs: Iterable[GemmConfig]) -> GemmSpace:
        """An explicit sub-space (deduplicated, in the given order)."""
        cfgs = tuple(dict.fromkeys(configs))
        if not cfgs:
            raise ValueError("an explicit sub-space needs at least one configuration")
        c0 = cfgs[0]
        return cls(c0.dtype, c0.out_dtype, c0.layout, default_fragments(), cfgs)

    def config(self, **values: Any) -> GemmConfig:
        """A config from fragment values; missing knobs take their defaults."""
        full = {name: frag.default for name, frag in self.fragments.items()}
        full.update(values)
        return GemmConfig(dtype=self.dtype, out_dtype=self.out_dtype, layout=self.layout,
                          **derive(full))

    def default(self) -> GemmConfig:
        """Every knob at its default (the first allowed config for an explicit sub-space)."""
        if self.allowed is not None:
            return self.allowed[0]
        return self.config()

    # ---- membership and enumeration ----------------------------------------------------

    @property
    def size(self) -> int:
        """Number of configurations (before feasibility)."""
        if self.allowed is not None:
            return len(self.allowed)
        coupled = COUPLED_FRAGMENTS
        n = 1
        for name, frag in self.fragments.items():
            if name not in coupled:
                n *= len(frag.domain())
        pairs = itertools.product(*(self.fragments[c].domain() if c in self.fragments else (None,)
                                    for c in coupled))
        return n * sum(admissible({c: v for c, v in zip(coupled, pair) if v is not None}) for pair in pairs)

    def contains(self, cfg: GemmConfig) -> bool:
        """Whether ``cfg`` is a point of this space (dtypes, derived fields and all)."""
        if self.allowed is not None:
            return cfg in self._allowed_set
        if (cfg.dtype, cfg.out_dtype, cfg.layout) != (self.dtype, self.out_dtype, self.layout):
            return False
        values = knob_values(cfg)
        if any(not frag.contains(values.get(name)) for name, frag in self.fragments.items()):
            return False
        return admissible(values) and cfg == self.config(**values)

    @functools.cached_property
    def _allowed_set(self) -> frozenset[GemmConfig]:
        return frozenset(self.allowed or ())

    def enumerate(self) -> Iterator[GemmConfig]:
        """Every configuration, in a fixed order (cartesian product of the fragments)."""
        if self.allowed is not None:
            yield from self.allowed
            return
        # admissible() reads only the coupled fragments: its verdict is cached per combination of them (the product
        # has 4.6 million points, 16 for each admissible one; testing each took longer than building the configs)
        names = list(self.fragments)
        coupled = [i for i, n in enumerate(names) if n in COUPLED_FRAGMENTS]
        verdict: dict[tuple, bool] = {}
        for combo in itertools.product(*(self.fragments[n].domain() for n in names)):
            key = tuple(combo[i] for i in coupled)
            ok = verdict.get(key)
            if ok is None:
                ok = verdict[key] = admissible({names[i]: combo[i] for i in coupled})
            if ok:
                yield self.config(**dict(zip(names, combo)))

    @functools.cached_property
    def all(self) -> tuple[GemmConfig, ...]:
        """:meth:`enumerate` as a cached tuple."""
        return tuple(self.enumerate())

    def sample(self, rng: random.Random) -> GemmConfig:
        """One configuration drawn uniformly (per fragment, or over ``allowed``)."""
        if self.allowed is not None:
            return rng.choice(self.allowed)
        while True:
            values = {n: f.random(rng) for n, f in self.fragments.items()}
            if admissible(values):
                return self.config(**values)

    def neighbours(self, cfg: GemmConfig) -> list[GemmConfig]:
        """Configs one fragment move away from ``cfg`` that lie in the space."""
        values = knob_values(cfg)
        out: list[GemmConfig] = []
        for name, frag in self.fragments.items():
            for v in frag.neighbours(values[name]):
                c = self.config(**{**values, name: v})
                if c != cfg and self.contains(c):
                    out.append(c)
        return out

    def moves(self, cfg: GemmConfig, fields: Sequence[str]) -> list[GemmConfig]:
        """Configs of the space that differ from ``cfg`` only in ``fields`` (GemmConfig field
        names; derived fields may follow), at least in one of them."""
        names = list(GemmConfig.model_fields)
        fixed = [i for i, f in enumerate(names) if f not in set(fields) | set(DERIVED_FIELDS)]
        searched = [i for i, f in enumerate(names) if f in fields]
        base = tuple(getattr(cfg, f) for f in names)
        out = []
        for c, row in zip(self.all, self._rows):
            if all(row[i] == base[i] for i in fixed) and any(row[i] != base[i] for i in searched):
                out.append(c)
        return out

    @functools.cached_property
    def memo(self) -> dict[Any, Any]:
        """A per-space scratch dict for callers' derived data (e.g. a planner's ranking)."""
        return {}

    @functools.cached_property
    def _rows(self) -> tuple[tuple[Any, ...], ...]:
        names = list(GemmConfig.model_fields)
        return tuple(tuple(getattr(c, f) for f in names) for c in self.all)


@functools.lru_cache(maxsize=65536)
def feasible(cfg: GemmConfig, *, smt: bool = False) -> tuple[bool, tuple[str, ...]]:
    """The one feasibility function: build the config's program and run the verifier on it.

    Args:
        cfg: the configuration.
        smt: also run the verifier's z3 tier (about 0.3 s per config). Off by default for
            search: the arithmetic and enumeration tiers decide every config-dependent rule;
            the orchestrator (:func:`argus_cutlass.generate.generate`) runs the full verifier
            again before each render.

    Returns:
        ``(ok, reasons)``: ``ok`` is "no violation" (an SMT ``unknown`` is not a violation; the
        orchestrator refuses to render it unless asked); each reason is ``"<rule>: <message>"``
        (the verifier's rule names, or ``smem.atom`` etc. for a config whose program cannot be
        built). Results are memoised.
    """
    from argus_cutlass.errors import ArgusError
    from argus_cutlass.kernels.gemm.program import build_program
    from argus_cutlass.verify import verify_gemm

    try:
        program = build_program(cfg)
    except ArgusError as exc:
        return False, (f"{exc.rule}: {exc.message}",)
    report = verify_gemm(program, smt=smt)
    return report.ok, tuple(f"{v.rule}: {v.message}" for v in report.violations)


def declared_subspace(dtype: str = "bf16", out_dtype: str = "bf16", layout: str = "tn") -> list[GemmConfig]:
    """The declared sub-space (113 configs in layout ``tn``, 109-111 in the others, before the verifier; a
    new list of the memoised configurations,
    whose stages :func:`~argus_cutlass.kernels.gemm.heuristics.fit_stages` fits once per flavor): the
    candidate set of the sweeps
    (``bench/agent_eval.py``, ``bench/sweep_gemm.py``) and of the cost model's untuned choice
    (:func:`argus_cutlass.agent.costmodel.costmodel_choice`).

    6 tile/schedule pairs (128x256, 128x128, 256x128 cooperative; 64x64, 64x128, 64x256
    ping-pong) x 3 clusters (1x1, 2x1, 1x2) x 3 walks (raster N swizzle 1, raster M
    swizzle 1, raster N swizzle 4) = 54; 128x192 cooperative with 1x1 and 2x1 clusters; the
    work decompositions stream-K / split-K 2 / split-K 4 on 128x128, stream-K on 128x256 and
    128x64 (cluster 1x1); 64x128x128 ping-pong; 13 swap-AB kernels (kernel tiles 64x16,
    64x32, 64x64 ping-pong and 128x16, 128x32 cooperative, clusters 1x1 and 2x1, 8 stages;
    64x16, 64x32 and 128x16 also with 12); 6 swap-AB kernels with a work decomposition for decode
    (issue 13 item 2: 128x16 and 128x32 cooperative, stream-K and split-K 2 / 4, cluster 1x1, 8
    stages), because a weight of N rows gives only ceil(N / 64) swap-AB tiles (64 for N = 4096: half the
    132 SMs idle) and splitting K is what fills the SMs while still reading each weight byte once.
    6 swap-AB decode kernels measured in session 26 (device step gemm-k128: a few-tile decode GEMM is bound by a
    per-stage cost, not by bytes in flight): 128-deep k-tiles (64x16, 64x32 ping-pong 8 stages, 64x64
    the 6 that fit, 128x16 cooperative 6) and 2 accumulator sets (64x16 ping-pong at k 64 x 12 stages and at k 128 x 8);
    64x32 ping-pong at k 128 x 8 with 2 sets (session 27, device step gemm-k128b: 6-9 % off M = 32 / 64 decode rows).
    8 cluster-K kernels for few-tile GEMMs with a long k loop (session 29, device step gemm-clusterk: the k loop
    split over a cluster of 2 / 4 / 8 CTAs, partial sums added through distributed shared memory): swap-AB
    128x16 cooperative with 2, 4 and 8 ranks and 128x32 with 4; without swap-AB 128x16 with 4 and 8, 128x32
    with 4; swap-AB 128x64 with 4 (session 30, device step gemm-clusterk-wide: the 128x64 tile wins two mid-size
    rows from graphs, the 128x128 tile with 2 or 4 ranks none, not declared).
    10 kernels with tile widths between the powers of two, so that a mid-size GEMM's tiles fill whole waves of 132
    SMs (session 30, device steps cublas-kernels and explore-tiles: cuBLAS runs such widths on the rows it won):
    cooperative 128x80, 128x96, 128x112, 128x168 (clusters 1x1 and 2x1), 128x160 split-K 2, 256x160 (clusters 1x1
    and 1x2); swap-AB ping-pong 64x56 and 64x104 (M ~ 100 in 2 tiles of 56 or one of 104); the widths that are odd
    multiples of 8 (168, 56, 104) only where the operand they span is K-major.
    4 one-warpgroup ping-pong kernels for mid-size GEMMs (session 33): 64x80, 64x96, 64x112 and 64x64 at
    k 128.
    128x80 and 128x96 cooperative also rastered along M, and the 64x64 ping-pong tile at 13 stages (session 35).
    113 in all in layout ``tn``. Stages are fitted to shared memory.
    """
    return list(_declared_subspace(dtype, out_dtype, layout))


def epilogue_width(tile_n: int) -> int:
    """The epilogue subtile width ``epi_n`` the declared kernels use for ``tile_n``: the widest of 32, 16 and 8 that
    divides it (rule ``epilogue.tile``), so 8 exactly on the odd multiples of 8, as :func:`admissible` requires.

    >>> [epilogue_width(n) for n in (16, 56, 80, 96, 168, 256)]
    [16, 8, 16, 32, 8, 32]
    """
    return max(e for e in (32, 16, 8) if tile_n % e == 0)


@functools.lru_cache(maxsize=None)
def _declared_subspace(dtype: str, out_dtype: str, layout: str) -> tuple[GemmConfig, ...]:
    from argus_cutlass.kernels.gemm.heuristics import fit_stages

    tiles = [(128, 256, "cooperative"), (128, 128, "cooperative"), (64, 128, "pingpong"),
             (64, 256, "pingpong"), (256, 128, "cooperative"), (64, 64, "pingpong")]
    clusters = [(1, 1), (2, 1), (1, 2)]
    walks = [("along_n", 1), ("along_m", 1), ("along_n", 4)]
    # (tile_m, tile_n, schedule, tile_k), (cluster), (raster, swizzle), (scheduler, splits)
    combos = [((tm, tn, sch, 64), c, w, ("persistent", 1)) for tm, tn, sch in tiles for c in clusters for w in walks]
    combos += [((128, 192, "cooperative", 64), c, ("along_n", 1), ("persistent", 1)) for c in ((1, 1), (2, 1))]
    for tile, dec in (((128, 128, "cooperative", 64), ("streamk", 1)), ((128, 128, "cooperative", 64), ("splitk", 2)),
                      ((128, 128, "cooperative", 64), ("splitk", 4)), ((128, 256, "cooperative", 64), ("streamk", 1)),
                      ((128, 64, "cooperative", 64), ("streamk", 1)), ((64, 128, "pingpong", 128), ("persistent", 1))):
        combos.append((tile, (1, 1), ("along_n", 1), dec))

    def plain(tile: tuple[int, int, str, int], cluster: tuple[int, int], walk: tuple[str, int],
              dec: tuple[str, int]) -> GemmConfig:
        (tm, tn, sch, tk), (cm, cn), (raster, swz), (scheduler, splits) = tile, cluster, walk, dec
        return fit_stages(GemmConfig(dtype=dtype, out_dtype=out_dtype, layout=layout, tile_m=tm, tile_n=tn, tile_k=tk,
                                     cluster_m=cm, cluster_n=cn, stages=8, schedule=sch,
                                     epi_m=128 if sch == "cooperative" else 64, epi_n=epilogue_width(tn),
                                     raster=raster, swizzle=swz, scheduler=scheduler, splits=splits))

    out = [plain(*combo) for combo in combos]
    # swap-AB (D^T = B A^T; tiles in the kernel's modes: tile_n tiles the problem's M)

    def swap(tm: int, tn: int, sch: str, stages: int, cluster: tuple[int, int] = (1, 1), tile_k: int = 64,
             acc_sets: int = 1, scheduler: str = "persistent", splits: int = 1) -> GemmConfig:
        return fit_stages(GemmConfig(dtype=dtype, out_dtype=out_dtype, layout=layout, tile_m=tm, tile_n=tn,
                                     tile_k=tile_k, cluster_m=cluster[0], cluster_n=cluster[1], stages=stages,
                                     schedule=sch, epi_m=128 if sch == "cooperative" else 64,
                                     epi_n=epilogue_width(tn), swap_ab=True, acc_sets=acc_sets, scheduler=scheduler, splits=splits))

    out += [swap(tm, tn, sch, 8, c) for tm, tn, sch in ((64, 16, "pingpong"), (64, 32, "pingpong"),
                                                         (64, 64, "pingpong"), (128, 16, "cooperative"),
                                                         (128, 32, "cooperative"))
            for c in ((1, 1), (2, 1))]
    out += [swap(64, 16, "pingpong", 12), swap(64, 32, "pingpong", 12), swap(128, 16, "cooperative", 12)]
    # decode: swap-AB with K split over the SMs
    out += [swap(128, tn, "cooperative", 8, scheduler=scheduler, splits=splits)
            for tn in (16, 32) for scheduler, splits in (("streamk", 1), ("splitk", 2), ("splitk", 4))]
    # decode: deeper k-tiles and independent accumulator sets (session 26, device step gemm-k128)
    out += [swap(64, 16, "pingpong", 8, tile_k=128), swap(64, 32, "pingpong", 8, tile_k=128),
            swap(64, 64, "pingpong", 8, tile_k=128), swap(128, 16, "cooperative", 6, tile_k=128),
            swap(64, 16, "pingpong", 12, acc_sets=2), swap(64, 16, "pingpong", 8, tile_k=128, acc_sets=2)]
    # decode at M = 32-64: 2 accumulator sets on the 64x32x128 tile (session 27, device step gemm-k128b:
    # 32x4096x14336 36.5 -> 34.2 us, 64x3584x14336 36.5 -> 33.1 us per launch against the set-less 64x32x128)
    out += [swap(64, 32, "pingpong", 8, tile_k=128, acc_sets=2)]
    # few-tile GEMMs with a long k loop: cluster-K (session 29, device step gemm-clusterk: a cluster splits the k
    # loop, partial sums added through distributed shared memory; from graphs 8x8x4096 9.8 -> 5.3 us, 1x1024x8192
    # 16.7 -> 8.8 us, 512x8x4096 12.6 -> 6.5 us, cuBLAS 5.7 / 9.7 / 7.2 us), swap-AB and not
    out += [swap(128, 16, "cooperative", 8, scheduler="clusterk", splits=s) for s in (2, 4, 8)]
    out += [swap(128, 32, "cooperative", 8, scheduler="clusterk", splits=4)]
    # mid-size swap-AB GEMMs: cluster-K 4 on the 128x64 tile (session 30, device step gemm-clusterk-wide, from graphs:
    # 100x1024x8192 17.0 -> 13.5 us, 256x768x2048 9.8 -> 8.5 us; the 128x128 tile with 2 / 4 ranks won no row)
    out += [swap(128, 64, "cooperative", 7, scheduler="clusterk", splits=4)]
    out += [fit_stages(GemmConfig(dtype=dtype, out_dtype=out_dtype, layout=layout, tile_m=128, tile_n=tn, tile_k=64,
                                  cluster_m=1, cluster_n=1, stages=8, schedule="cooperative", epi_m=128, epi_n=tn,
                                  scheduler="clusterk", splits=s))
            for tn, s in ((16, 4), (16, 8), (32, 4))]
    # tile widths between the powers of two (wgmma N a multiple of 8; PTX ISA 9.7.15.5), so that a mid-size GEMM's
    # tile count lands on a whole number of waves of 132 SMs (session 30, device steps cublas-kernels: cuBLAS runs
    # 56 / 80 / 96 / 104 / 112 / 160 / 168-wide tiles on the rows it won; explore-tiles: the same widths here took
    # e.g. 512x10240x8192 0.82x -> 1.01x cuBLAS, 256x5120x25600 0.72x -> 0.99x, each pair timed in one process; the
    # graph table's later re-time of those rows: 0.96x and 0.96x)
    # (only along a K-major operand, the kernel's B: the problem's B, or its A under swap-AB, can a tile width be an
    # odd multiple of 8: along an MN-major one no swizzled GMMA smem atom divides it -- CuTe's MN-major atoms span 16 /
    # 32 / 64 elements -- and the program falls back to the unswizzled interleaved atom, which no sweep has timed)
    for (tm, tn), cluster, dec in (((128, 80), (1, 1), ("persistent", 1)), ((128, 96), (1, 1), ("persistent", 1)),
                                   ((128, 112), (1, 1), ("persistent", 1)), ((128, 168), (1, 1), ("persistent", 1)),
                                   ((128, 168), (2, 1), ("persistent", 1)), ((128, 160), (1, 1), ("splitk", 2)),
                                   ((256, 160), (1, 1), ("persistent", 1)), ((256, 160), (1, 2), ("persistent", 1))):
        if tn % 16 == 0 or layout[1] == "n":
            out.append(plain((tm, tn, "cooperative", 64), cluster, ("along_n", 1), dec))
    # swap-AB at M ~ 100: 56 / 104 rows of M per tile (2 tiles of 56 or one of 104 cover 100; 64 / 128 waste 28 %)
    if layout[0] == "t":
        out += [swap(64, 56, "pingpong", 12), swap(64, 104, "pingpong", 9)]
    # mid-size GEMMs on one-warpgroup ping-pong tiles sized to a wave (session 33, after session 32's
    # uniform descriptors made the 64-row consumer cheap: explore-tiles from graphs, 1024x768x2048 on
    # 64x96 x 10 stages 0.84x cuBLAS against the table's 0.71x, 1024x512x2048 on 64x64x128 0.89x against
    # 0.82x): 64x80, 64x96, 64x112 (128 tiles on 1024 x 640 / 768 / 896) and the 64x64 tile at k 128,
    # stages fitted as every declared kernel's (8 for 64x96; session 33's gemm-extend timed these on 90
    # rows: bench/RESULTS.md)
    out += [plain((64, tn, "pingpong", 64), (1, 1), ("along_n", 1), ("persistent", 1))
            for tn in (80, 96, 112)]
    out += [plain((64, 64, "pingpong", 128), (1, 1), ("along_n", 1), ("persistent", 1))]
    # the wave-sized cooperative tiles 128x80 and 128x96 also rastered along M (session 35, explore-tiles
    # bench/plans/walks_s35{a,b}.json, from graphs: at M = 256 every walk but along N swizzle 1 took 256x6144x4096 on
    # 128x96 0.84x -> 0.97x cuBLAS and 256x5120x2048 on 128x80 0.87x -> 0.93x, not every such row; along N swizzle 1
    # the two CTAs reading one B tile are a row of tiles apart in launch order, and on 1024x512x2048 reads of CTAs
    # launched together put up to 31 % less traffic on the L2 slices: bench/RESULTS.md, session 35)
    out += [plain((128, tn, "cooperative", 64), (1, 1), ("along_m", 1), ("persistent", 1)) for tn in (80, 96)]
    # the 64x64 ping-pong tile at 13 stages, cuBLAS's depth on the rows it wins with 64x64 (session 35, same plans:
    # 3000x128x2048 0.81x -> 0.88x cuBLAS; session 34 timed it on 67 rows of M 512 / 1024, where it won none)
    out += [fit_stages(GemmConfig(dtype=dtype, out_dtype=out_dtype, layout=layout, tile_m=64, tile_n=64, tile_k=64,
                                  cluster_m=1, cluster_n=1, stages=13, schedule="pingpong", epi_m=64,
                                  epi_n=epilogue_width(64)))]
    return tuple(out)
