"""Declared search space of :class:`~argus_cutlass.kernels.attention.config.AttentionConfig`.

One space per ``(head_dim, causal, varlen, dtype)`` (fixed by the problem, never searched). Its knobs
are fragments (:mod:`argus_cutlass.plan.fragments`), as in the GEMM space
(:mod:`argus_cutlass.kernels.gemm.space`):

==============  =====================================  ==============================================
knob            domain                                 meaning
==============  =====================================  ==============================================
``tile_m``      64, 128, 192                           query rows per CTA: 1, 2 or 3 consumer warpgroups
``tile_n``      48, 64, ..., 256 (multiples of 16)     keys per kv block
``stages``      2, 3                                   K and V pipeline depth
``q_stages``    1, 2                                   Q pipeline depth (2: the next tile's Q lands early)
``pingpong``    True, False                            consumer warpgroups take turns issuing GEMMs
``scheduler``   static, dynamic                        persistent tile walk: round robin / atomic counter
``epilogue``    direct, quad16                         O stores: 4-byte from the accumulator / 16-byte
                                                       after the quad's lane exchange (whole sectors)
==============  =====================================  ==============================================

``epilogue`` has no modelled gain yet (:func:`estimate` scores both alike, so ``direct`` ranks first on
the tie-break by distance from FA3's defaults): bench/RESULTS.md's ncu of the short-sequence cells (L2
write sectors 4.8x the size of O) is why it is searched; ``bench/tune_attention_grid.py --variants``
measures both.

Defaults are FlashAttention-3's tile for the head dim (:mod:`.heuristics`), ping-pong on, 2 stages,
and the mask's scheduler (dynamic for causal, static otherwise). ``longest_first`` is not searched: it
stays ``None`` (longest first exactly for causal kernels). One cross-knob rule (:func:`admissible`):
ping-pong needs two or more consumer warpgroups (``tile_m >= 128``): a single warpgroup has nobody to
take turns with.

**No cluster knob.** Our attention kernels are 1-CTA: no thread-block cluster and no TMA multicast of
K / V between CTAs working on the same (batch, head). FA3's 2x1 cluster is therefore not a point of
this space; the knowledge base (``agent/knowledge_attention.toml``) lists it as the unavailable
technique ``cluster_2x1`` (``missing_knobs = ["cluster"]``).

Feasibility (:func:`feasible`) is the verifier: by default its resource rules
(:func:`argus_cutlass.verify.attention.check_resources`: shared memory, registers per role, GMMA
shapes, TMA boxes; about 2 ms a config), with ``full=True`` the whole verifier without the SMT tier
(:func:`~argus_cutlass.verify.attention.verify_attention`, ``smt=False``, about 0.5 s). Both are
memoised per config. The orchestrator runs the full verifier again before it renders a kernel.

:func:`candidates` orders the feasible configurations by :func:`estimate`, a small analytic model
documented there; FA3's configuration for the head dim always comes first.

>>> space = AttentionSpace(head_dim=128)
>>> space.size  # 3 x 14 x 2 x 2 x 2 x 2 x 2, less ping-pong with one warpgroup
1120
>>> space.default().tile_m, space.default().tile_n, space.default().scheduler
(128, 176, 'static')
>>> feasible(space.default())[0]
True
>>> ok, reasons = feasible(space.config(tile_n=256, stages=3))
>>> ok, reasons[0].split(":")[0]
(False, 'smem.capacity')
"""

from __future__ import annotations

import functools
import itertools
import math
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from argus_cutlass.kernels.attention.config import AttentionConfig
from argus_cutlass.plan.fragments import EnumFragment, Fragment

__all__ = [
    "KNOBS", "AttentionSpace", "admissible", "candidates", "estimate", "feasible", "knob_values", "program_name",
]

#: the searched AttentionConfig fields, in fragment order
KNOBS = ("tile_m", "tile_n", "stages", "q_stages", "pingpong", "scheduler", "epilogue")
#: streaming multiprocessors of an H100 / H200 SXM (the persistent grid is at most one CTA per SM:
#: the kernel's smem and its setmaxnreg register split leave room for one CTA)
SMS = 132
#: tile_n domain
TILE_N = tuple(range(48, 257, 16))

# ---- the analytic model's constants (see :func:`estimate`) ------------------------------------------

#: MMA throughput of a CTA by its consumer warpgroups, relative to two: one warpgroup has no other
#: warpgroup to overlap its softmax with; three keep more rows in flight (FA3 takes 3 for d = 64)
WG_EFFICIENCY = {1: 0.6, 2: 1.0, 3: 1.05}
#: gain of ping-pong (FA3 paper, Shah et al. 2024, sec. 3.1: ~570 -> ~620 TFLOP/s at d = 128)
PINGPONG_GAIN = 1.08
#: per kv block cost beside its MMAs (softmax, rescale, barrier round trips), in keys of MMA work
KV_BLOCK_OVERHEAD_KEYS = 32
#: per tile cost beside its kv blocks (Q load, epilogue, LSE), in keys of MMA work
TILE_OVERHEAD_KEYS = 64
#: the same with two Q stages (the next tile's Q is loaded during this tile). Measured on the H200
#: (bench/RESULTS.md, issue 10, session 16): 1-3% faster at S = 512 for d = 64, within noise elsewhere
TILE_OVERHEAD_KEYS_Q2 = 44
#: a third K/V stage: more loads in flight for small head dims (short MMAs), none for large ones
STAGE3_GAIN = {64: 1.02, 96: 1.01}
#: dynamic scheduler: one atomicAdd per tile on the producer's path
DYNAMIC_OVERHEAD = 1.002


def default_fragments(head_dim: int = 128, causal: bool = False) -> dict[str, Fragment]:
    """The attention knobs with FA3's defaults for ``head_dim`` (128's for a head dim outside FA3's set)."""
    from argus_cutlass.kernels.attention.heuristics import FA3_TILES

    tile_m, tile_n, tile_n_causal = FA3_TILES.get(head_dim, FA3_TILES[128])
    return {
        "tile_m": EnumFragment((64, 128, 192), tile_m),
        "tile_n": EnumFragment(TILE_N, tile_n_causal if causal else tile_n),
        "stages": EnumFragment((2, 3), 2),
        "q_stages": EnumFragment((1, 2), 1),
        "pingpong": EnumFragment((True, False), True),
        "scheduler": EnumFragment(("static", "dynamic"), "dynamic" if causal else "static"),
        "epilogue": EnumFragment(("direct", "quad16"), "direct"),
    }


def admissible(values: dict[str, Any]) -> bool:
    """Cross-knob rule: ping-pong needs at least two consumer warpgroups (``tile_m >= 128``)."""
    return not values.get("pingpong", False) or values.get("tile_m", 128) >= 128


def knob_values(cfg: AttentionConfig) -> dict[str, Any]:
    """The knob values of ``cfg``, ``scheduler`` resolved (``None`` -> the mask's default)."""
    return {"tile_m": cfg.tile_m, "tile_n": cfg.tile_n, "stages": cfg.stages, "q_stages": cfg.q_stages,
            "pingpong": cfg.pingpong,
            "scheduler": "dynamic" if cfg.dynamic_scheduler else "static", "epilogue": cfg.epilogue}


@dataclass(frozen=True)
class AttentionSpace:
    """The search space of one (head dim, mask, length mode, dtype).

    Attributes:
        head_dim, causal, varlen, dtype: fixed by the problem.
        fragments: knob name -> :class:`~argus_cutlass.plan.fragments.Fragment` (default:
            :func:`default_fragments`).
    """

    head_dim: int = 128
    causal: bool = False
    varlen: bool = False
    dtype: str = "bf16"
    fragments: dict[str, Fragment] = field(default=None)  # type: ignore[assignment]

    def __post_init__(self) -> None:
        if self.fragments is None:
            object.__setattr__(self, "fragments", default_fragments(self.head_dim, self.causal))

    def __hash__(self) -> int:
        return hash((self.head_dim, self.causal, self.varlen, self.dtype, tuple(self.fragments)))

    @classmethod
    def for_problem(cls, problem: Any) -> AttentionSpace:
        """The space of an :class:`~argus_cutlass.kernels.attention.problem.AttentionProblem`."""
        return cls(problem.head_dim, bool(problem.causal), bool(problem.varlen), problem.dtype)

    def config(self, **values: Any) -> AttentionConfig:
        """A configuration from knob values; missing knobs take their defaults."""
        full = {name: frag.default for name, frag in self.fragments.items()}
        full.update(values)
        return AttentionConfig(dtype=self.dtype, head_dim=self.head_dim, causal=self.causal, varlen=self.varlen,
                               **full)

    def default(self) -> AttentionConfig:
        """Every knob at its default: FA3's configuration for the head dim."""
        return self.config()

    @property
    def size(self) -> int:
        """Number of configurations (admissible, before feasibility)."""
        return sum(1 for _ in self._values())

    def _values(self) -> Iterator[dict[str, Any]]:
        names = list(self.fragments)
        for combo in itertools.product(*(self.fragments[n].domain() for n in names)):
            values = dict(zip(names, combo))
            if admissible(values):
                yield values

    def enumerate(self) -> Iterator[AttentionConfig]:
        """Every admissible configuration, in a fixed order (the fragments' product)."""
        for values in self._values():
            yield self.config(**values)

    @functools.cached_property
    def all(self) -> tuple[AttentionConfig, ...]:
        return tuple(self.enumerate())

    def contains(self, cfg: AttentionConfig) -> bool:
        """Whether ``cfg`` is a point of the space (``scheduler=None`` counts as its resolved value)."""
        if (cfg.head_dim, cfg.causal, cfg.varlen, cfg.dtype) != (self.head_dim, self.causal, self.varlen, self.dtype):
            return False
        if cfg.longest_first is not None and cfg.longest_first != cfg.causal:
            return False
        values = knob_values(cfg)
        return admissible(values) and all(frag.contains(values[n]) for n, frag in self.fragments.items())

    def neighbours(self, cfg: AttentionConfig) -> list[AttentionConfig]:
        """Configurations one knob move away from ``cfg`` (admissible ones)."""
        values = knob_values(cfg)
        out = []
        for name, frag in self.fragments.items():
            for v in frag.neighbours(values[name]):
                moved = {**values, name: v}
                if admissible(moved):
                    out.append(self.config(**moved))
        return out


# ---- feasibility ----------------------------------------------------------------------------------


@functools.lru_cache(maxsize=65536)
def feasible(cfg: AttentionConfig, *, full: bool = False) -> tuple[bool, tuple[str, ...]]:
    """Build ``cfg``'s program and check it: ``(ok, ("<rule>: <message>", ...))``, memoised.

    Args:
        full: run the whole verifier without its SMT tier (``verify_attention(smt=False)``, ~0.5 s)
            instead of its resource rules only (``check_resources``: smem, registers, GMMA and TMA
            shapes, stages; ~2 ms). The resource rules decide every rule a knob of this space moves.
    """
    from argus_cutlass.errors import ArgusError
    from argus_cutlass.kernels.attention.program import build_program
    from argus_cutlass.verify.attention import check_resources, verify_attention

    try:
        program = build_program(cfg)
    except ArgusError as exc:
        return False, (f"{exc.rule}: {exc.message}",)
    if full:
        report = verify_attention(program, smt=False)
        return report.ok, tuple(f"{v.rule}: {v.message}" for v in report.violations)
    _, bad = check_resources(program)
    return not bad, tuple(f"{v.rule}: {v.message}" for v in bad)


@functools.lru_cache(maxsize=65536)
def program_name(cfg: AttentionConfig) -> str:
    """The kernel name of ``cfg``'s program (configs with one program share it: :func:`candidates`
    keeps the first of them)."""
    from argus_cutlass.kernels.attention.program import build_program

    return build_program(cfg).kernel_name()


# ---- the analytic score ---------------------------------------------------------------------------


def _tile_costs(cfg: AttentionConfig, problem: Any) -> np.ndarray:
    """Cost of every tile in the persistent walk's order (m_block fastest, then head, then batch;
    m_blocks reversed when longest first), in units of ``query rows x keys`` of MMA work."""
    tm, tn = cfg.tile_m, cfg.tile_n
    per_batch: dict[tuple[int, int], np.ndarray] = {}
    parts = []
    lengths = problem.lengths()
    for (lq, lk), n in (Counter(lengths).items() if not problem.varlen else ((x, 1) for x in lengths)):
        if lq <= 0:
            continue
        if (lq, lk) not in per_batch:
            mb = np.arange(math.ceil(lq / tm))
            if cfg.causal:
                last_row = np.minimum((mb + 1) * tm, lq)  # exclusive
                keys = np.clip(last_row + (lk - lq), 0, lk)
            else:
                keys = np.full(mb.shape, lk)
            blocks = -(-keys // tn)
            tile_overhead = TILE_OVERHEAD_KEYS_Q2 if cfg.q_stages >= 2 else TILE_OVERHEAD_KEYS
            cost = tm * (blocks * (tn + KV_BLOCK_OVERHEAD_KEYS) + tile_overhead)
            if cfg.walk_longest_first:
                cost = cost[::-1]
            per_batch[(lq, lk)] = np.tile(cost.astype(np.float64), problem.heads)
        parts.append(np.tile(per_batch[(lq, lk)], n))
    return np.concatenate(parts) if parts else np.zeros(0)


def estimate(cfg: AttentionConfig, problem: Any) -> float:
    """Relative run time of ``cfg`` on ``problem`` (arbitrary units; lower is better).

    The model, in four factors:

    1. **tile cost**: a tile of ``tile_m`` rows whose rows see ``keys`` keys reads
       ``ceil(keys / tile_n)`` kv blocks (bottom-right causal mask: the last row of the tile sees
       ``row + Lk - Lq + 1`` keys); a block costs ``tile_m x (tile_n + 32)`` (its MMAs plus softmax,
       rescale and barriers, :data:`KV_BLOCK_OVERHEAD_KEYS`), a tile ``64`` keys more (Q load,
       epilogue: :data:`TILE_OVERHEAD_KEYS`; 44 with two Q stages, :data:`TILE_OVERHEAD_KEYS_Q2`). Padding of the last query tile and the last kv block
       is paid in full.
    2. **makespan** over the persistent grid (``G = min(tiles, 132)`` CTAs): ``static`` gives CTA
       ``c`` the tiles ``c, c + G, ...`` of the walk (computed exactly); ``dynamic`` hands the next
       tile to the first free CTA, approximated by ``max(largest tile, total / G + half the mean of
       the last G tiles)`` (greedy list scheduling), times :data:`DYNAMIC_OVERHEAD`.
    3. **throughput** divides the makespan: :data:`WG_EFFICIENCY` by consumer warpgroups,
       :data:`PINGPONG_GAIN` with ping-pong, :data:`STAGE3_GAIN` for a third stage at small head dims.
    4. register and shared-memory limits are not modelled: :func:`feasible` removes what does not fit.
    """
    costs = _tile_costs(cfg, problem)
    if costs.size == 0:
        return 0.0
    g = min(SMS, costs.size)
    if cfg.dynamic_scheduler:
        tail = costs[-g:].mean()
        makespan = max(float(costs.max()), float(costs.sum()) / g + 0.5 * float(tail)) * DYNAMIC_OVERHEAD
    else:
        pad = (-costs.size) % g
        makespan = float(np.concatenate([costs, np.zeros(pad)]).reshape(-1, g).sum(axis=0).max())
    rate = WG_EFFICIENCY.get(cfg.consumer_warpgroups, 1.0)
    if cfg.pingpong and cfg.consumer_warpgroups >= 2:
        rate *= PINGPONG_GAIN
    if cfg.stages >= 3:
        rate *= STAGE3_GAIN.get(cfg.head_dim, 1.0)
    return makespan / rate


def candidates(problem: Any, limit: int | None = None, *, verify: bool = False) -> list[AttentionConfig]:
    """The feasible configurations of ``problem``'s space, best first.

    Order: FA3's configuration for the head dim (:func:`~argus_cutlass.kernels.attention.heuristics.default_config`
    with its scheduler made explicit) first; then by :func:`estimate`, ties broken by the number of
    knobs that differ from FA3's and then by the space order. Configurations whose programs are
    identical (the same kernel name) appear once.

    Args:
        problem: an :class:`~argus_cutlass.kernels.attention.problem.AttentionProblem`.
        limit: return at most this many.
        verify: also run the full verifier without SMT on the returned configs (``feasible(cfg,
            full=True)``; ~0.5 s each, memoised) and drop the ones it rejects.

    Raises:
        ConfigError: ``attention.head_dim`` for a head dim the family does not build.
    """
    from argus_cutlass.kernels.attention.heuristics import default_config

    space = AttentionSpace.for_problem(problem)
    fa3 = default_config(problem.head_dim, problem.dtype, problem.causal, problem.varlen)
    first = space.config(**knob_values(fa3))
    base = knob_values(first)
    ranked = []
    for i, cfg in enumerate(space.all):
        if not feasible(cfg)[0]:
            continue
        values = knob_values(cfg)
        distance = sum(values[k] != base[k] for k in KNOBS)
        ranked.append((cfg != first, estimate(cfg, problem), distance, i, cfg))
    ranked.sort(key=lambda r: r[:4])
    out: list[AttentionConfig] = []
    seen: set[str] = set()
    for *_, cfg in ranked:
        name = program_name(cfg)
        if name in seen:
            continue
        if verify and not feasible(cfg, full=True)[0]:
            continue
        seen.add(name)
        out.append(cfg)
        if limit is not None and len(out) >= limit:
            break
    return out
