"""The permutation of routed rows by expert, its invariants, the grouped GEMM's tiles, and
routing generators for tests and benchmarks (numpy only).

The ``T * k`` routed rows are numbered ``s = t * k + j`` (token ``t``, slot ``j``). The kernels
gather them in *expert-sorted order*: rows of expert 0 first, then expert 1, ... A
:class:`RoutingPlan` holds that order:

==================  ===============  ========================================================
``counts``          (E,) int64       rows routed to each expert
``offsets``         (E+1,) int64     ``0 = off_0 <= ... <= off_E = T*k``, ``off_{e+1} - off_e = count_e``
``permuted_row``    (T, k) int64     the permuted row of ``(t, j)``
``source``          (T*k,) int64     ``t * k + j`` of each permuted row (the inverse map)
==================  ===============  ========================================================

:meth:`RoutingPlan.from_ids` builds the stable order (by expert, then token, then slot); a
kernel's permutation (atomics) may order rows within a group differently and still satisfy
:meth:`RoutingPlan.check`, which states what the later kernels rely on:

- ``bijection``: ``permuted_row`` maps the ``T*k`` (token, slot) pairs onto ``[0, T*k)``;
- ``inverse``: ``source[permuted_row[t, j]] = t*k + j`` and ``permuted_row.flat[source[r]] = r``;
- ``offsets``: ``off_0 = 0``, non-decreasing, ``off_E = T*k``, ``off_{e+1} - off_e = count_e``;
- ``counts``: ``count_e`` = number of (t, j) with ``ids[t, j] = e``;
- ``group``: the row of a pair routed to ``e`` lies in ``[off_e, off_{e+1})``.

:meth:`RoutingPlan.tiles` cuts each group into M-tiles that never straddle two groups (empty groups
give none); :func:`tile_violations` checks a tile list against a plan.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from argus_cutlass.errors import ConfigError, ProblemError

#: the kinds of :func:`make_routing`
ROUTING_KINDS = ("uniform", "skewed", "zero_experts", "all_to_one", "sizes")


@dataclass(frozen=True)
class RoutingPlan:
    """The expert-sorted order of the routed rows (see the module docstring).

    Attributes:
        topk_ids: (T, k) int64, the router's expert ids.
        experts: E.
        counts, offsets, permuted_row, source: the plan.
    """

    topk_ids: np.ndarray
    experts: int
    counts: np.ndarray
    offsets: np.ndarray
    permuted_row: np.ndarray
    source: np.ndarray

    @classmethod
    def from_ids(cls, topk_ids: Any, experts: int) -> RoutingPlan:
        """The stable plan of ``topk_ids`` ((T, k) integers in [0, experts)): rows sorted by expert,
        then token, then slot.

        Raises:
            ProblemError: ``problem.routing`` when the ids are not (T, k) integers in [0, E).
        """
        ids = np.asarray(topk_ids)
        if ids.ndim != 2 or ids.dtype.kind not in "iu":
            raise ProblemError("problem.routing", f"topk_ids must be a (T, k) integer array, got shape "
                               f"{ids.shape} dtype {ids.dtype}")
        if not (isinstance(experts, (int, np.integer)) and experts >= 1):
            raise ProblemError("problem.size", f"experts={experts!r} must be an integer >= 1")
        ids = ids.astype(np.int64)
        if ids.size and (ids.min() < 0 or ids.max() >= experts):
            t, j = (int(v) for v in np.argwhere((ids < 0) | (ids >= experts))[0])
            raise ProblemError("problem.routing", f"topk_ids[{t}, {j}]={int(ids[t, j])} is outside [0, {experts})")
        flat = ids.reshape(-1)
        n = flat.size
        source = np.argsort(flat, kind="stable").astype(np.int64)  # ties keep t*k + j order
        permuted = np.empty(n, dtype=np.int64)
        permuted[source] = np.arange(n, dtype=np.int64)
        counts = np.bincount(flat, minlength=experts).astype(np.int64)
        offsets = np.zeros(experts + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        return cls(ids, int(experts), counts, offsets, permuted.reshape(ids.shape), source)

    @property
    def tokens(self) -> int:
        return int(self.topk_ids.shape[0])

    @property
    def topk(self) -> int:
        return int(self.topk_ids.shape[1])

    @property
    def rows(self) -> int:
        """``T * k``."""
        return self.tokens * self.topk

    def expert_of_row(self) -> np.ndarray:
        """(T*k,) the expert of each permuted row (from ``source``; assumes the plan is valid)."""
        return self.topk_ids.reshape(-1)[self.source]

    # ---- invariants -------------------------------------------------------------------

    def check(self, stable: bool = False) -> list[str]:
        """Every invariant the plan breaks, each as ``"<invariant>: <counterexample>"``; empty when
        the plan is valid. ``stable`` also requires the order of :meth:`from_ids` (by expert, then
        token, then slot) inside each group."""
        out: list[str] = []
        ids = np.asarray(self.topk_ids, dtype=np.int64)
        t_, k_ = ids.shape
        n, e_ = t_ * k_, self.experts
        pr, src = np.asarray(self.permuted_row), np.asarray(self.source)
        cnt, off = np.asarray(self.counts), np.asarray(self.offsets)
        shapes = [("permuted_row", pr.shape, (t_, k_)), ("source", src.shape, (n,)),
                  ("counts", cnt.shape, (e_,)), ("offsets", off.shape, (e_ + 1,))]
        bad_shapes = [f"{name} has shape {got}, expected {want}" for name, got, want in shapes if got != want]
        if bad_shapes:
            return [f"shape: {s}" for s in bad_shapes]
        pr = pr.astype(np.int64)
        src = src.astype(np.int64)
        cnt = cnt.astype(np.int64)
        off = off.astype(np.int64)
        flat_pr = pr.reshape(-1)

        # bijection of (t, j) onto [0, T*k)
        in_range = (flat_pr >= 0) & (flat_pr < n)
        if not in_range.all():
            s = int(np.flatnonzero(~in_range)[0])
            out.append(f"bijection: (token {s // k_}, slot {s % k_}) -> row {int(flat_pr[s])}, outside [0, {n})")
        else:
            order = np.argsort(flat_pr, kind="stable")
            dup = np.flatnonzero(flat_pr[order][1:] == flat_pr[order][:-1])
            if dup.size:
                s1, s2 = int(order[dup[0]]), int(order[dup[0] + 1])
                missing = np.setdiff1d(np.arange(n), flat_pr)
                out.append(f"bijection: (token {s1 // k_}, slot {s1 % k_}) and (token {s2 // k_}, slot {s2 % k_}) "
                           f"both map to row {int(flat_pr[s1])}; row {int(missing[0])} gets no (token, slot)")

        # inverse: source o permuted_row = id and permuted_row o source = id
        src_ok = (src >= 0) & (src < n)
        if not src_ok.all():
            r = int(np.flatnonzero(~src_ok)[0])
            out.append(f"inverse: source[{r}]={int(src[r])} is outside [0, {n})")
        else:
            safe_pr = np.where(in_range, flat_pr, 0)
            bad = np.flatnonzero(~in_range | (src[safe_pr] != np.arange(n)))
            if bad.size:
                s = int(bad[0])
                r = int(flat_pr[s])
                got = f"source[{r}]={int(src[r])}" if 0 <= r < n else "no such row"
                out.append(f"inverse: (token {s // k_}, slot {s % k_}) -> row {r}, but {got} "
                           f"(expected {s} = {s // k_}*{k_}+{s % k_})")
            else:
                bad_r = np.flatnonzero(flat_pr[src] != np.arange(n))
                if bad_r.size:
                    r = int(bad_r[0])
                    s = int(src[r])
                    out.append(f"inverse: row {r} -> source {s} (token {s // k_}, slot {s % k_}), which maps to "
                               f"row {int(flat_pr[s])}")

        # offsets
        if off[0] != 0:
            out.append(f"offsets: off_0={int(off[0])}, expected 0")
        dec = np.flatnonzero(off[1:] < off[:-1])
        if dec.size:
            e = int(dec[0])
            out.append(f"offsets: off_{e}={int(off[e])} > off_{e + 1}={int(off[e + 1])} (not monotone)")
        if off[-1] != n:
            out.append(f"offsets: off_E = off_{e_}={int(off[-1])}, expected T*k={n}")
        diff = np.flatnonzero(off[1:] - off[:-1] != cnt)
        if diff.size:
            e = int(diff[0])
            out.append(f"offsets: off_{e + 1} - off_{e} = {int(off[e + 1] - off[e])} but count_{e}={int(cnt[e])}")

        bad_ids = np.argwhere((ids < 0) | (ids >= e_))
        if bad_ids.size:
            t, j = (int(v) for v in bad_ids[0])
            out.append(f"ids: topk_ids[{t}, {j}]={int(ids[t, j])} is outside [0, {e_})")
            return out

        # counts agree with the ids
        true_cnt = np.bincount(ids.reshape(-1), minlength=e_)
        wrong = np.flatnonzero(true_cnt != cnt)
        if wrong.size:
            e = int(wrong[0])
            out.append(f"counts: count_{e}={int(cnt[e])}, but {int(true_cnt[e])} (token, slot) pairs route to expert {e}")

        # every row of group e inside [off_e, off_{e+1})
        if n:
            ex = ids.reshape(-1)
            lo, hi = off[ex], off[ex + 1]
            outside = np.flatnonzero((flat_pr < lo) | (flat_pr >= hi))
            if outside.size:
                s = int(outside[0])
                e = int(ex[s])
                out.append(f"group: (token {s // k_}, slot {s % k_}) routes to expert {e} but lands on row "
                           f"{int(flat_pr[s])}, outside [off_{e}, off_{e + 1}) = [{int(lo[s])}, {int(hi[s])})")

        if stable and not out:
            want = RoutingPlan.from_ids(ids, e_)
            diff = np.flatnonzero(want.source != src)
            if diff.size:
                r = int(diff[0])
                out.append(f"stable: row {r} holds source {int(src[r])}, the stable order puts {int(want.source[r])} "
                           "there (by expert, then token, then slot)")
        return out

    # ---- tiles ------------------------------------------------------------------------

    def tiles(self, tile_m: int) -> list[tuple[int, int, int]]:
        """``(expert, row_start, rows)`` for every M-tile of the grouped GEMM: group ``e`` is cut into
        ``ceil(count_e / tile_m)`` tiles inside ``[off_e, off_{e+1})`` (the last may be partial);
        empty groups give no tile.

        Raises:
            ConfigError: ``moe.tile_m`` when tile_m is not an integer >= 1.
        """
        if isinstance(tile_m, bool) or not isinstance(tile_m, (int, np.integer)) or tile_m < 1:
            raise ConfigError("moe.tile_m", f"tile_m={tile_m!r} must be an integer >= 1")
        out = []
        for e in range(self.experts):
            lo, hi = int(self.offsets[e]), int(self.offsets[e + 1])
            for start in range(lo, hi, int(tile_m)):
                out.append((e, start, min(int(tile_m), hi - start)))
        return out


def tile_violations(plan: RoutingPlan, tiles: list[tuple[int, int, int]], tile_m: int | None = None) -> list[str]:
    """What is wrong with ``tiles`` for ``plan`` (empty when nothing): a tile outside its group's
    ``[off_e, off_{e+1})`` (straddling two groups), an empty or over-long tile, a tile of an empty
    group, a row covered twice or not at all."""
    out: list[str] = []
    n = plan.rows
    cover = np.zeros(n, dtype=np.int64)
    for i, (e, start, rows) in enumerate(tiles):
        if not 0 <= e < plan.experts:
            out.append(f"tile {i} ({e}, {start}, {rows}): expert outside [0, {plan.experts})")
            continue
        lo, hi = int(plan.offsets[e]), int(plan.offsets[e + 1])
        if rows < 1 or (tile_m is not None and rows > tile_m):
            out.append(f"tile {i} ({e}, {start}, {rows}): {rows} rows, expected 1..{tile_m or 'tile_m'}")
        if lo == hi:
            out.append(f"tile {i} ({e}, {start}, {rows}): expert {e} has no row (empty groups do no work)")
        elif start < lo or start + rows > hi:
            out.append(f"tile {i} ({e}, {start}, {rows}): rows [{start}, {start + rows}) leave group {e}'s "
                       f"[{lo}, {hi})")
        a, b = max(0, start), min(n, start + max(rows, 0))
        cover[a:b] += 1
    twice = np.flatnonzero(cover > 1)
    if twice.size:
        out.append(f"cover: row {int(twice[0])} is in {int(cover[twice[0]])} tiles")
    never = np.flatnonzero(cover == 0)
    if never.size:
        out.append(f"cover: row {int(never[0])} is in no tile")
    return out


# ---- generators ---------------------------------------------------------------------------


def _distinct_choice(rng: np.random.Generator, tokens: int, pool: np.ndarray, k: int) -> np.ndarray:
    """(tokens, k) rows of k distinct draws from ``pool``, uniformly (chunked to bound memory)."""
    out = np.empty((tokens, k), dtype=np.int64)
    chunk = max(1, (1 << 22) // max(1, pool.size))
    for a in range(0, tokens, chunk):
        b = min(tokens, a + chunk)
        keys = rng.random((b - a, pool.size))
        out[a:b] = pool[np.argpartition(keys, k - 1, axis=1)[:, :k]] if k < pool.size else \
            pool[np.argsort(keys, axis=1)]
    return out


def _weights(rng: np.random.Generator, tokens: int, k: int) -> np.ndarray:
    w = rng.random((tokens, k)) + 0.05
    return (w / w.sum(axis=1, keepdims=True)).astype(np.float32)


def _ids_from_sizes(rng: np.random.Generator, tokens: int, topk: int, sizes: list[int]) -> np.ndarray:
    """ids whose per-expert counts are exactly ``sizes``: lay the experts' labels out one after
    another (expert e repeated sizes[e] times) and give position p to token p % T, slot p // T.
    A run of at most T labels covers distinct tokens, so no token sees an expert twice."""
    labels = np.repeat(np.arange(len(sizes), dtype=np.int64), sizes)
    ids = labels.reshape(topk, tokens).T.copy()
    ids = ids[rng.permutation(tokens)]  # shuffle tokens and, per token, the slots
    return np.take_along_axis(ids, np.argsort(rng.random(ids.shape), axis=1), axis=1)


def make_routing(kind: str, tokens: int, experts: int, topk: int, seed: int = 0, *,
                 sizes: Any = None, hot_fraction: float = 0.9) -> tuple[np.ndarray, np.ndarray]:
    """A router output ``(ids, weights)``: ``ids`` (T, k) int32 with distinct experts per token,
    ``weights`` (T, k) float32 in (0, 1), summing to 1 per token.

    Kinds:
        ``uniform``       each token draws k distinct experts uniformly.
        ``skewed``        one hot expert (a seeded choice) takes slot 0 of a ``hot_fraction`` of
                          the tokens (its count is about ``hot_fraction * T``; the rest uniform).
        ``zero_experts``  only ``max(k, E // 2)`` experts are used; the others, expert 0 and expert
                          E-1 among them when E allows, get no token. Needs E > k.
        ``all_to_one``    every token's slot 0 goes to expert 0, its other slots to distinct
                          experts drawn from 1..E-1.
        ``sizes``         the per-expert counts are exactly ``sizes`` (E entries or fewer, the
                          rest 0): ``sum(sizes) == T * k`` and every size in [0, T].

    Raises:
        ProblemError: ``problem.size`` / ``problem.topk`` / ``problem.routing`` for sizes or a kind
            that cannot be realised.
    """
    for name, v in (("tokens", tokens), ("experts", experts), ("topk", topk)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ProblemError("problem.size", f"{name}={v!r} must be an integer >= 1")
    if topk > experts:
        raise ProblemError("problem.topk", f"topk={topk} > experts={experts}: a token's k experts are distinct")
    rng = np.random.default_rng(seed)
    all_e = np.arange(experts, dtype=np.int64)
    if kind == "uniform":
        ids = _distinct_choice(rng, tokens, all_e, topk)
    elif kind == "skewed":
        hot = int(rng.integers(experts))
        ids = _distinct_choice(rng, tokens, all_e, topk)
        chosen = rng.random(tokens) < hot_fraction
        for t in np.flatnonzero(chosen):
            row = ids[t]
            where = np.flatnonzero(row == hot)
            if where.size:  # already there: move it to slot 0
                row[where[0]], row[0] = row[0], hot
            else:
                row[0] = hot
    elif kind == "zero_experts":
        if experts <= topk:
            raise ProblemError("problem.routing", f"zero_experts needs experts > topk (got E={experts}, k={topk}): "
                               "with E == k every token uses every expert")
        n_active = max(topk, experts // 2)
        inner = all_e[1:-1] if experts - 2 >= n_active else all_e
        active = np.sort(rng.choice(inner, size=n_active, replace=False))
        ids = _distinct_choice(rng, tokens, active, topk)
    elif kind == "all_to_one":
        ids = np.zeros((tokens, topk), dtype=np.int64)
        if topk > 1:
            ids[:, 1:] = _distinct_choice(rng, tokens, all_e[1:], topk - 1)
    elif kind == "sizes":
        if sizes is None:
            raise ProblemError("problem.routing", "make_routing('sizes', ...) needs sizes=(count_0, count_1, ...)")
        sz = [int(s) for s in sizes]
        if len(sz) > experts:
            raise ProblemError("problem.routing", f"{len(sz)} sizes for {experts} experts")
        if sum(sz) != tokens * topk:
            raise ProblemError("problem.routing", f"sizes {sz} sum to {sum(sz)}, expected T*k = {tokens * topk}")
        if any(s < 0 or s > tokens for s in sz):
            raise ProblemError("problem.routing", f"sizes {sz}: each must be in [0, T={tokens}] (an expert appears "
                               "at most once per token)")
        ids = _ids_from_sizes(rng, tokens, topk, sz)
    else:
        raise ProblemError("problem.routing", f"unknown routing kind {kind!r}", f"one of {list(ROUTING_KINDS)}")
    return ids.astype(np.int32), _weights(rng, tokens, topk)
