"""G5 across a cluster: ``tma.multicast``, what a multicast TMA load delivers to every CTA.

With a ``cluster_m x cluster_n`` cluster, CTA ``(i, j)`` computes output tile ``(m0 + i, n0 + j)``,
so the CTAs of a cluster row (same ``i``) need the same A tile and those of a cluster column the
same B tile. CUTLASS (``sm90_mma_tma_gmma_ss_warpspecialized.hpp``, ``load``) cuts the tile into
``multicast`` slices (CuTe ``tma_partition`` splits the TMA's outermost box mode, which may be MN
or K depending on the layout; the model numbers the slices' elements as ``tile_mn`` "rows", and
the properties checked, once-delivery and source block, do not depend on that axis): CTA
``(i, j)`` issues A slice ``j`` of its own m-block ``i`` with a ``ctaMask`` naming every CTA
``(i, j')``, and B slice ``i`` of its n-block ``j`` to every CTA ``(i', j)``. The mask bit of
CTA ``(x, y)`` is its rank in the cluster, ``x + y * cluster_m`` (PTX ISA 9.7.9.25,
``cp.async.bulk.tensor ... .multicast::cluster`` with a 16-bit ``ctaMask``; the rank is
``%cluster_ctarank``, x fastest).

The check enumerates every sender, slice row and mask bit of the cluster and requires, for every
receiving CTA and every row of its stage: exactly one delivery, from the gmem block the
receiver computes with (A: its own m-block, B: its own n-block). A missing delivery also means
the receiver's full barrier never sees its ``expect_tx`` bytes (a hang); a duplicate overfills it.

Silicon: ``tests/gpu/test_multicast_gpu.py`` replays the slices and masks of a load
(:func:`probe_tables`) with ``cp.async.bulk ... .multicast::cluster`` (the same ``ctaMask``
semantics as the tensor form) on a real cluster and compares every CTA's tile and barrier
state with the prediction, for CUTLASS's choices and for the ``multicast_mask`` mutants.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from argus_cutlass.dsl.ir import DslProgram, TmaLoad
from argus_cutlass.verify.report import Counterexample, Proof, Violation

__all__ = ["MulticastProbe", "block_of", "check_multicast", "deliveries", "mask_bits", "probe_tables", "rank_of",
           "slice_of"]


def _coord(cta: tuple[int, int], axis: str) -> int:
    return cta[0] if axis == "m" else cta[1]


def rank_of(load: TmaLoad, cta: tuple[int, int]) -> int:
    """``%cluster_ctarank`` of cluster coordinate ``cta = (m, n)``: ``m + n * cluster_m``."""
    return cta[0] + cta[1] * load.cluster[0]


def mask_bits(load: TmaLoad, sender: tuple[int, int]) -> int:
    """The 16-bit ``ctaMask`` the kernel computes for ``sender``: one bit per CTA it names (the
    CTAs varying along ``mask_axis``, without the sender unless ``mask_self``), each at the rank
    the kernel computes (``rank_order`` "col" = the hardware's :func:`rank_of`, "row" =
    ``m * cluster_n + n``)."""
    cm, cn = load.cluster
    i, j = sender
    named = [(x, j) for x in range(cm)] if load.mask_axis == "m" else [(i, y) for y in range(cn)]
    if not load.mask_self:
        named = [c for c in named if c != sender]
    bits = 0
    for c in named:
        bits |= 1 << (rank_of(load, c) if load.rank_order == "col" else c[0] * cn + c[1])
    return bits & 0xFFFF


def slice_of(load: TmaLoad, sender: tuple[int, int]) -> int:
    """The slice the kernel makes ``sender`` issue (its coordinate along ``slice_axis``)."""
    return _coord(sender, load.slice_axis) % load.copy.multicast


def block_of(load: TmaLoad, cta: tuple[int, int]) -> int:
    """The gmem block (along the operand's MN mode) CTA ``cta`` computes with: its m coordinate
    for A (shared along n), its n coordinate for B."""
    return _coord(cta, "m" if load.share_axis == "n" else "n")


def _mask(load: TmaLoad, sender: tuple[int, int]) -> list[tuple[int, int]]:
    """The CTAs that receive the sender's slice: the hardware decodes each ``ctaMask`` bit as a
    ``%cluster_ctarank`` (x fastest)."""
    cm, cn = load.cluster
    bits = mask_bits(load, sender)
    return [(b % cm, b // cm) for b in range(cm * cn) if bits >> b & 1]


def _sends(load: TmaLoad) -> Iterator[tuple[tuple[int, int], int, int, int, int, tuple[int, int]]]:
    """Every copy of one stage: ``(sender, slice, sender's block, first row, end row, receiver)``."""
    cm, cn = load.cluster
    rows = load.tile_mn // load.copy.multicast
    for i in range(cm):
        for j in range(cn):
            s = slice_of(load, (i, j))
            for r in _mask(load, (i, j)):
                yield (i, j), s, block_of(load, (i, j)), s * rows, (s + 1) * rows, r


def deliveries(load: TmaLoad) -> tuple[np.ndarray, np.ndarray]:
    """For every receiving CTA ``(i, j)`` and stage row ``r`` of ``load`` (a multicast TMA load):
    how many deliveries it gets, and the gmem block (along the operand's own MN mode, relative
    to the receiver's) of the last one.

    Returns ``(count, source_offset)``, both ``(cluster_m, cluster_n, tile_mn)`` int64;
    ``source_offset`` is 0 where the row came from the receiver's own block, -1 where none came.
    """
    cm, cn = load.cluster
    count = np.zeros((cm, cn, load.tile_mn), dtype=np.int64)
    src = np.full((cm, cn, load.tile_mn), -1, dtype=np.int64)
    for _, _, block, lo, hi, r in _sends(load):
        count[r[0], r[1], lo:hi] += 1
        src[r[0], r[1], lo:hi] = block - block_of(load, r)
    return count, src


def check_multicast(dsl: DslProgram) -> tuple[list[Proof], list[Violation]]:
    """``tma.multicast`` (G5) by enumeration over the cluster (see the module docstring)."""
    proofs: list[Proof] = []
    violations: list[Violation] = []
    for load in dsl.loads:
        if load.copy.multicast <= 1:
            continue
        cm, cn = load.cluster
        count, src = deliveries(load)
        bad = np.argwhere((count != 1) | (src != 0))
        operand = load.src[-1]
        mode = "m" if load.share_axis == "n" else "n"
        if bad.size == 0:
            proofs.append(Proof("tma.multicast", "G5", "enum",
                                f"{load.name}: each of the {cm * cn} CTAs of the {cm}x{cn} cluster receives every "
                                f"one of its {load.tile_mn} {operand} rows exactly once, from its own {mode}-block "
                                f"({load.copy.multicast} slices, mask along cluster {load.mask_axis})",
                                cm * cn * load.tile_mn))
            continue
        i, j, r = (int(x) for x in bad[0])
        rows = load.tile_mn // load.copy.multicast
        senders = [(x, y) for x in range(cm) for y in range(cn)
                   if slice_of(load, (x, y)) == r // rows and (i, j) in _mask(load, (x, y))]
        n = int(count[i, j, r])
        if n == 0:
            actual = f"no CTA delivers row {r}: its slice's sender leaves CTA ({i},{j}) out of the mask"
            hint = "the mask must name every CTA that shares the operand, the issuing CTA included"
        elif n > 1:
            actual = f"row {r} arrives {n} times (from CTAs {senders}): the full barrier gets more bytes than expect_tx"
            hint = "each slice index must be issued by exactly one CTA of the sharing group"
        else:
            actual = (f"row {r} arrives from CTA {senders[0]}, whose {operand} tile is {mode}-block "
                      f"{'+' if src[i, j, r] > 0 else ''}{int(src[i, j, r])} relative to CTA ({i},{j})'s")
            hint = f"multicast {operand} only to the CTAs of the same cluster {'row' if mode == 'm' else 'column'}"
        cex = Counterexample(
            "G5", "tma.multicast", "enum", "mainloop.tma", str(load.loc), -1, -1, -1, {"mn": r},
            {"cta": i + j * cm, "cluster_m": i, "cluster_n": j}, "", {},
            f"CTA ({i},{j}) receives {operand} row {r} of its own {mode}-block once",
            actual,
            f"{load.copy.multicast} slices of {rows} rows; slice = cluster {load.slice_axis} index; mask along "
            f"cluster {load.mask_axis}{'' if load.mask_self else ' without the issuing CTA'}; rank order "
            f"{load.rank_order}",
            element={"tensor": operand, mode: r},
            chain=tuple(f"CTA {c} issues {operand} slice {r // rows}" for c in senders) + (f"CTA ({i},{j}) smem",),
            params={"cluster_m": cm, "cluster_n": cn, "multicast": load.copy.multicast})
        violations.append(Violation(
            "tma.multicast", "G5",
            f"{load.name}: CTA ({i},{j}) of the {cm}x{cn} cluster: {actual}", hint, str(load.loc), cex))
    return proofs, violations


@dataclass(frozen=True)
class MulticastProbe:
    """Host tables that replay one multicast load's slices and masks on a GPU cluster
    (``templates/multicast_probe.cu.j2``, 16-byte rows of 8 codes), with the model's prediction.

    All per-CTA arrays are indexed by ``%cluster_ctarank``. ``src`` is ``(blocks, tile_rows, 8)``
    uint16: element ``e`` of row ``r`` of block ``b`` holds ``(b * tile_rows + r) * 8 + e``.
    ``predicted`` is ``(ranks, tile_rows, 8)`` uint16 (0xFFFF where no row arrives);
    ``complete`` says whether each CTA's barrier sees exactly its ``expect_tx`` bytes;
    ``ambiguous`` marks rows that arrive twice from different blocks (not predicted).
    """

    cluster: tuple[int, int]
    tile_rows: int
    rows_per_slice: int
    src: np.ndarray
    slice: np.ndarray
    src_block: np.ndarray
    mask: np.ndarray
    predicted: np.ndarray
    complete: np.ndarray
    overfilled: np.ndarray
    ambiguous: np.ndarray


def probe_tables(load: TmaLoad) -> MulticastProbe:
    """The probe tables of ``load`` (a multicast TMA load of a DSL program).

    Raises:
        ValueError: ``load`` is not a multicast load.
    """
    if load.copy.multicast <= 1:
        raise ValueError(f"{load.name} is not a multicast load")
    cm, cn = load.cluster
    ranks, rows = cm * cn, load.tile_mn // load.copy.multicast
    blocks = cm if load.share_axis == "n" else cn
    tile = load.tile_mn
    src = ((np.arange(blocks)[:, None, None] * tile + np.arange(tile)[None, :, None]) * 8
           + np.arange(8)[None, None, :]).astype(np.uint16)
    sl = np.zeros(ranks, dtype=np.int32)
    sb = np.zeros(ranks, dtype=np.int32)
    mk = np.zeros(ranks, dtype=np.int32)
    for i in range(cm):
        for j in range(cn):
            r = rank_of(load, (i, j))
            sl[r], sb[r], mk[r] = slice_of(load, (i, j)), block_of(load, (i, j)), mask_bits(load, (i, j))
    predicted = np.full((ranks, tile, 8), 0xFFFF, dtype=np.uint16)
    count = np.zeros((ranks, tile), dtype=np.int64)
    first = np.full((ranks, tile), -1, dtype=np.int64)
    ambiguous = np.zeros((ranks, tile), dtype=bool)
    for _, _, block, lo, hi, dst in _sends(load):
        d = rank_of(load, dst)
        seen = first[d, lo:hi]
        ambiguous[d, lo:hi] |= (seen >= 0) & (seen != block)
        first[d, lo:hi] = np.where(seen >= 0, seen, block)
        count[d, lo:hi] += 1
        predicted[d, lo:hi] = src[block, lo:hi]
    delivered = count.sum(axis=1)
    return MulticastProbe((cm, cn), tile, rows, src, sl, sb, mk, predicted, delivered == tile, delivered > tile,
                          ambiguous)
