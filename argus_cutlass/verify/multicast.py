"""G5 across a cluster: ``tma.multicast``, what a multicast TMA load delivers to every CTA.

With a ``cluster_m x cluster_n`` cluster, CTA ``(i, j)`` computes output tile ``(m0 + i, n0 + j)``,
so the CTAs of a cluster row (same ``i``) need the same A tile and those of a cluster column the
same B tile. CUTLASS (``sm90_mma_tma_gmma_ss_warpspecialized.hpp``, ``load``) cuts the tile into
``multicast`` slices along MN: CTA ``(i, j)`` issues A slice ``j`` (rows
``[j * tile_m / cluster_n, (j + 1) * tile_m / cluster_n)`` of its own m-block ``i``) with a
``ctaMask`` naming every CTA ``(i, j')``, and B slice ``i`` to every CTA ``(i', j)``. The mask bit of
CTA ``(x, y)`` is its rank in the cluster, ``x + y * cluster_m`` (PTX ISA 9.7.9.25,
``cp.async.bulk.tensor ... .multicast::cluster`` with a 16-bit ``ctaMask``; the rank is
``%cluster_ctarank``, x fastest).

The check enumerates every sender, slice row and mask bit of the cluster and requires, for every
receiving CTA and every row of its stage: exactly one delivery, from the gmem block the
receiver computes with (A: its own m-block, B: its own n-block). A missing delivery also means
the receiver's full barrier never sees its ``expect_tx`` bytes (a hang); a duplicate overfills it.
"""

from __future__ import annotations

import numpy as np

from argus_cutlass.dsl.ir import DslProgram, TmaLoad
from argus_cutlass.verify.report import Counterexample, Proof, Violation

__all__ = ["check_multicast", "deliveries"]


def _coord(cta: tuple[int, int], axis: str) -> int:
    return cta[0] if axis == "m" else cta[1]


def _mask(load: TmaLoad, sender: tuple[int, int]) -> list[tuple[int, int]]:
    """The CTAs whose bit the sender sets, decoded back through the hardware's rank order."""
    cm, cn = load.cluster
    i, j = sender
    named = [(x, j) for x in range(cm)] if load.mask_axis == "m" else [(i, y) for y in range(cn)]
    if not load.mask_self:
        named = [c for c in named if c != sender]
    # the kernel computes bit = rank(c) in its own order; the hardware delivers to the CTA whose
    # %cluster_ctarank is that bit (x + y * cluster_m)
    bits = [(c[0] + c[1] * cm) if load.rank_order == "col" else (c[0] * cn + c[1]) for c in named]
    return [(b % cm, b // cm) for b in bits if b < cm * cn]


def deliveries(load: TmaLoad) -> tuple[np.ndarray, np.ndarray]:
    """For every receiving CTA ``(i, j)`` and stage row ``r`` of ``load`` (a multicast TMA load):
    how many deliveries it gets, and the gmem block (along the operand's own MN mode, relative
    to the receiver's) of the last one.

    Returns ``(count, source_offset)``, both ``(cluster_m, cluster_n, tile_mn)`` int64;
    ``source_offset`` is 0 where the row came from the receiver's own block, -1 where none came.
    """
    cm, cn = load.cluster
    mc = load.copy.multicast
    rows = load.tile_mn // mc
    count = np.zeros((cm, cn, load.tile_mn), dtype=np.int64)
    src = np.full((cm, cn, load.tile_mn), -1, dtype=np.int64)
    for i in range(cm):
        for j in range(cn):
            sender = (i, j)
            s = _coord(sender, load.slice_axis) % mc
            block = _coord(sender, "m" if load.share_axis == "n" else "n")  # the sender's gmem block
            for r in _mask(load, sender):
                own = _coord(r, "m" if load.share_axis == "n" else "n")
                count[r[0], r[1], s * rows:(s + 1) * rows] += 1
                src[r[0], r[1], s * rows:(s + 1) * rows] = block - own
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
                   if (_coord((x, y), load.slice_axis) % load.copy.multicast) == r // rows
                   and (i, j) in _mask(load, (x, y))]
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
