"""G5 across a cluster: ``tma.multicast``, what the TMA loads deliver to every CTA of a cluster.

The persistent kernel launches a 1-D cluster of ``cluster_m x cluster_n`` CTAs; the CTA of
hardware rank ``r`` (``%cluster_ctarank``) computes the output tile at its *placement* in the
cluster, the inverse of the tile scheduler's walk (``templates/gemm/scheduler.j2``,
``cluster_coord``): ``(r % cluster_m, r // cluster_m)`` when rastering along N, ``(r // cluster_n,
r % cluster_n)`` along M. Stream-K / split-K launch CUTLASS's 2-D cluster: ``(r % cluster_m, r //
cluster_m)`` whatever the raster (:func:`placement_of`). CTA ``(i, j)`` computes tile ``(m0 + i,
n0 + j)``, so the CTAs of a cluster row (same
``i``) need the same A block and those of a cluster column the same B block.

A load's stage is ``boxes`` TMA boxes (numbered as :class:`~argus_cutlass.dsl.ir.TmaLoad` says).
With ``copy.multicast = mc > 1`` the CTA whose coordinate along ``slice_axis`` is ``s`` issues
boxes ``[s * boxes / mc, (s + 1) * boxes / mc)`` of its own block (A: its m, B: its n) with a
16-bit ``ctaMask`` naming every CTA along ``mask_axis`` (itself too unless ``mask_self`` is
False); the kernel turns a cluster coordinate ``(x, y)`` into a mask bit by ``rank_order``
(``"col"``: ``x + y * cluster_m``, ``"row"``: ``x * cluster_n + y``) and the hardware delivers to
the CTA of that *rank* (PTX ISA 9.7.9.25, ``cp.async.bulk.tensor ... .multicast::cluster``). A
plain ``load`` (``copy.kind == "load"``) writes only the issuing CTA, whatever its mask; a
``load_multicast`` of a non-multicast load has an empty mask (``mcast_mask_* returns 0``).

The check enumerates every sender, box and mask bit and requires, for every receiving CTA and
every box of its stage: exactly one delivery, from the block the receiver computes with. A
missing delivery also means the receiver's full barrier never sees its ``expect_tx`` bytes (a
hang); a duplicate overfills it. It also requires ``copy.kind == "load_multicast"`` exactly when
``copy.multicast > 1`` (the TMA op kind vs the cluster).

Silicon: ``tests/gpu/test_multicast_gpu.py`` replays the slices and masks of a load
(:func:`probe_tables`, one 16-byte row per box) with ``cp.async.bulk ... .multicast::cluster`` on
a real cluster and compares every CTA's tile and barrier state with the prediction.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from argus_cutlass.dsl.ir import Program, TmaLoad
from argus_cutlass.verify.report import Counterexample, Proof, Violation

__all__ = ["MulticastProbe", "block_of", "check_multicast", "cta_of_rank", "deliveries", "mask_bits",
           "needs_multicast_check", "placement_of", "probe_tables", "rank_of", "slice_of"]


def _coord(cta: tuple[int, int], axis: str) -> int:
    return cta[0] if axis == "m" else cta[1]


def placement_of(program: Program) -> str:
    """How the kernel places the CTA of cluster rank ``r`` (``cluster_coord`` in
    ``templates/gemm/scheduler.j2``): the persistent walk places it by its raster; stream-K /
    split-K launch CUTLASS's 2-D cluster, M fastest, which is the ``"along_n"`` placement."""
    sch = program.schedule
    if sch is None or sch.decomposition != "persistent":
        return "along_n"
    return sch.raster


def cta_of_rank(cluster: tuple[int, int], raster: str, r: int) -> tuple[int, int]:
    """Cluster coordinate ``(i, j)`` of the CTA at hardware rank ``r`` (the scheduler's placement)."""
    cm, cn = cluster
    return (r % cm, r // cm) if raster == "along_n" else (r // cn, r % cn)


def rank_of(cluster: tuple[int, int], raster: str, cta: tuple[int, int]) -> int:
    """Hardware rank of the CTA at cluster coordinate ``cta`` (inverse of :func:`cta_of_rank`)."""
    cm, cn = cluster
    return cta[0] + cta[1] * cm if raster == "along_n" else cta[0] * cn + cta[1]


def mask_bits(load: TmaLoad, sender: tuple[int, int]) -> int:
    """The 16-bit ``ctaMask`` the kernel computes for ``sender`` (``mcast_mask_*``): one bit per
    CTA it names (along ``mask_axis``, without the sender unless ``mask_self``), at the bit
    ``rank_order`` gives (``"col"``: ``i + j * cluster_m``, ``"row"``: ``i * cluster_n + j``); 0 for
    a load that is not multicast."""
    if load.copy.multicast <= 1:
        return 0
    cm, cn = load.cluster
    i, j = sender
    named = [(x, j) for x in range(cm)] if load.mask_axis == "m" else [(i, y) for y in range(cn)]
    if not load.mask_self:
        named = [c for c in named if c != sender]
    bits = 0
    for x, y in named:
        bits |= 1 << (x + y * cm if load.rank_order == "col" else x * cn + y)
    return bits & 0xFFFF


def slice_of(load: TmaLoad, sender: tuple[int, int]) -> int:
    """The slice the kernel makes ``sender`` issue (its coordinate along ``slice_axis``; 0 when not
    multicast)."""
    if load.copy.multicast <= 1:
        return 0
    return _coord(sender, load.slice_axis) % load.copy.multicast


def block_of(load: TmaLoad, cta: tuple[int, int]) -> int:
    """The gmem block (along the operand's MN mode) CTA ``cta`` computes with: its cluster
    coordinate along the load's ``block_mode`` (A: m, B: n)."""
    return _coord(cta, load.block_mode)


def _receivers(load: TmaLoad, raster: str, sender: tuple[int, int]) -> list[tuple[int, int]]:
    """The CTAs a copy by ``sender`` writes: the sender itself for a plain load, else the CTAs at
    the ranks of the mask's bits."""
    if load.copy.kind != "load_multicast":
        return [sender]
    cm, cn = load.cluster
    bits = mask_bits(load, sender)
    return [cta_of_rank(load.cluster, raster, b) for b in range(cm * cn) if bits >> b & 1]


def _sends(load: TmaLoad, raster: str) -> Iterator[tuple[tuple[int, int], int, int, int, int, tuple[int, int]]]:
    """Every copy of one stage: ``(sender, slice, sender's block, first box, end box, receiver)``."""
    cm, cn = load.cluster
    mc = max(1, load.copy.multicast)
    per = load.boxes // mc
    for i in range(cm):
        for j in range(cn):
            s = slice_of(load, (i, j))
            for r in _receivers(load, raster, (i, j)):
                yield (i, j), s, block_of(load, (i, j)), s * per, (s + 1) * per, r


def deliveries(load: TmaLoad, raster: str = "along_n") -> tuple[np.ndarray, np.ndarray]:
    """For every receiving CTA ``(i, j)`` and box ``b`` of a stage of ``load``: how many deliveries
    it gets, and the gmem block (relative to the receiver's own) of the last one.

    Returns ``(count, source_offset)``, both ``(cluster_m, cluster_n, boxes)`` int64;
    ``source_offset`` is 0 where the box came from the receiver's own block, -1 where none came.
    """
    cm, cn = load.cluster
    count = np.zeros((cm, cn, load.boxes), dtype=np.int64)
    src = np.full((cm, cn, load.boxes), -1, dtype=np.int64)
    for _, _, block, lo, hi, r in _sends(load, raster):
        count[r[0], r[1], lo:hi] += 1
        src[r[0], r[1], lo:hi] = block - block_of(load, r)
    return count, src


def needs_multicast_check(program: Program) -> bool:
    """Whether ``tma.multicast`` has anything to prove: a cluster of more than one CTA, a
    multicast load, or a multicast op kind."""
    launch = program.launch
    clustered = launch is not None and launch.cluster_m * launch.cluster_n > 1
    return clustered or any(ld.copy.multicast > 1 or ld.copy.kind == "load_multicast" for ld in program.loads)


def check_multicast(program: Program) -> tuple[list[Proof], list[Violation]]:
    """``tma.multicast`` (G5) by enumeration over the cluster (see the module docstring)."""
    proofs: list[Proof] = []
    violations: list[Violation] = []
    raster = placement_of(program)
    for load in program.loads:
        cm, cn = load.cluster
        operand = program.tensor(load.src).tag.name if program.tensor(load.src).tag else load.src
        mode = load.block_mode
        want = "load_multicast" if load.copy.multicast > 1 else "load"
        if load.copy.kind != want:
            cex = Counterexample(
                "G5", "tma.multicast", "enum", "mainloop.tma", str(load.loc), -1, -1, -1, {}, {"cta": 0,
                "cluster_m": 0, "cluster_n": 0}, "", {}, f"TMA op {want} (multicast to {load.copy.multicast} CTAs)",
                f"TMA op {load.copy.kind}: " + ("the boxes of the other slices never reach this CTA (its full "
                                                "barrier waits for them forever)" if want == "load_multicast" else
                                                "an empty ctaMask: no CTA receives the boxes"),
                f"copy.kind {load.copy.kind}, multicast {load.copy.multicast}, cluster {cm}x{cn}",
                params={"cluster_m": cm, "cluster_n": cn, "multicast": load.copy.multicast})
            violations.append(Violation(
                "tma.multicast", "G5", f"{load.name}: TMA op kind {load.copy.kind!r} with multicast "
                f"{load.copy.multicast}: the kernel needs {want!r} (cp.async.bulk.tensor"
                f"{'.multicast::cluster' if want == 'load_multicast' else ''})",
                "multicast loads use SM90_TMA_LOAD_MULTICAST, the others SM90_TMA_LOAD", str(load.loc), cex))
            continue
        if cm * cn == 1 and load.copy.multicast <= 1:
            continue
        count, src = deliveries(load, raster)
        bad = np.argwhere((count != 1) | (src != 0))
        if bad.size == 0:
            what = (f"{load.copy.multicast} slices, mask along cluster {load.mask_axis}" if load.copy.multicast > 1
                    else "issued by itself")
            proofs.append(Proof("tma.multicast", "G5", "enum",
                                f"{load.name}: each of the {cm * cn} CTAs of the {cm}x{cn} cluster ({raster} "
                                f"placement) "
                                f"receives every one of its {load.boxes} {operand} boxes exactly once, from its own "
                                f"{mode}-block ({what})", cm * cn * load.boxes))
            continue
        i, j, b = (int(x) for x in bad[0])
        mc = max(1, load.copy.multicast)
        per = load.boxes // mc
        senders = [(x, y) for x in range(cm) for y in range(cn)
                   if per and slice_of(load, (x, y)) == b // per and (i, j) in _receivers(load, raster, (x, y))]
        n = int(count[i, j, b])
        if n == 0:
            actual = (f"no CTA delivers box {b}: " + (f"its slice's sender leaves CTA ({i},{j}) out of the mask"
                                                       if per and b < per * mc else
                                                       f"the {mc} slices of {per} boxes cover only {per * mc} of "
                                                       f"{load.boxes}"))
            hint = "the mask must name every CTA that shares the operand, the issuing CTA included"
        elif n > 1:
            actual = f"box {b} arrives {n} times (from CTAs {senders}): the full barrier gets more bytes than expect_tx"
            hint = "each slice index must be issued by exactly one CTA of the sharing group"
        else:
            actual = (f"box {b} arrives from CTA {senders[0] if senders else '?'}, whose {operand} tile is "
                      f"{mode}-block {'+' if src[i, j, b] > 0 else ''}{int(src[i, j, b])} relative to CTA ({i},{j})'s")
            hint = (f"multicast {operand} only to the CTAs of the same cluster {'row' if mode == 'm' else 'column'}; "
                    "the mask's rank order must invert the scheduler's placement")
        cex = Counterexample(
            "G5", "tma.multicast", "enum", "mainloop.tma", str(load.loc), -1, -1, -1, {"box": b},
            {"cta": rank_of((cm, cn), raster, (i, j)), "cluster_m": i, "cluster_n": j}, "", {},
            f"CTA ({i},{j}) receives {operand} box {b} of its own {mode}-block once", actual,
            f"{mc} slices of {per} boxes; slice = cluster {load.slice_axis or '-'} index; mask along cluster "
            f"{load.mask_axis or '-'}{'' if load.mask_self else ' without the issuing CTA'}; rank order "
            f"{load.rank_order}; placement {raster}",
            element={"tensor": operand, "box": b},
            chain=tuple(f"CTA {c} issues {operand} slice {b // per if per else 0}" for c in senders)
            + (f"CTA ({i},{j}) smem",),
            params={"cluster_m": cm, "cluster_n": cn, "multicast": load.copy.multicast, "boxes": load.boxes})
        violations.append(Violation(
            "tma.multicast", "G5",
            f"{load.name}: CTA ({i},{j}) of the {cm}x{cn} cluster: {actual}", hint, str(load.loc), cex))
    return proofs, violations


@dataclass(frozen=True)
class MulticastProbe:
    """Host tables that replay one multicast load's slices and masks on a GPU cluster
    (``templates/multicast_probe.cu.j2``, one 16-byte row of 8 codes per box), with the model's
    prediction.

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


def probe_tables(load: TmaLoad, raster: str = "along_n") -> MulticastProbe:
    """The probe tables of ``load`` (a multicast TMA load of a program), one row per box.

    The probe launches a 2-D cluster whose rank ``r`` sits at ``(r % cluster_m, r // cluster_m)``;
    the tables are per rank, so they replay the kernel's ranks under any ``raster`` placement.

    Raises:
        ValueError: ``load`` is not a multicast load.
    """
    if load.copy.multicast <= 1:
        raise ValueError(f"{load.name} is not a multicast load")
    cm, cn = load.cluster
    ranks, rows = cm * cn, load.boxes // load.copy.multicast
    blocks = cm if load.block_mode == "m" else cn
    tile = load.boxes
    src = ((np.arange(blocks)[:, None, None] * tile + np.arange(tile)[None, :, None]) * 8
           + np.arange(8)[None, None, :]).astype(np.uint16)
    sl = np.zeros(ranks, dtype=np.int32)
    sb = np.zeros(ranks, dtype=np.int32)
    mk = np.zeros(ranks, dtype=np.int32)
    for r in range(ranks):
        c = cta_of_rank((cm, cn), raster, r)
        sl[r], sb[r], mk[r] = slice_of(load, c), block_of(load, c), mask_bits(load, c)
    predicted = np.full((ranks, tile, 8), 0xFFFF, dtype=np.uint16)
    count = np.zeros((ranks, tile), dtype=np.int64)
    first = np.full((ranks, tile), -1, dtype=np.int64)
    ambiguous = np.zeros((ranks, tile), dtype=bool)
    for _, _, block, lo, hi, dst in _sends(load, raster):
        d = rank_of((cm, cn), raster, dst)
        seen = first[d, lo:hi]
        ambiguous[d, lo:hi] |= (seen >= 0) & (seen != block)
        first[d, lo:hi] = np.where(seen >= 0, seen, block)
        count[d, lo:hi] += 1
        predicted[d, lo:hi] = src[block, lo:hi]
    delivered = count.sum(axis=1)
    return MulticastProbe((cm, cn), tile, rows, src, sl, sb, mk, predicted, delivered == tile, delivered > tile,
                          ambiguous)
