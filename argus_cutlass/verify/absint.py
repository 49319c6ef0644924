"""Enumeration tier of the verifier: tag images and tag assertions on numpy arrays.

The TMA writer's tag function (:meth:`argus_cutlass.dsl.ir.TmaLoad.write_offsets`) fills an
smem *tag image* (per element: gmem coordinate, k, producer iteration); the MMA side reads it
back through its own layout object; tag assertions are then checked at every slot.
Pipeline pass covered: the first ``stages`` k-tiles (k-tile ``i`` fills stage ``i``).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from argus_cutlass.dsl.ir import DslProgram, MmaRead, TagAssertion, TmaLoad
from argus_cutlass.layout.algebra import layout_image
from argus_cutlass.layout.gmma import gmma_c_layout
from argus_cutlass.verify.report import Counterexample, Proof, Violation
from argus_cutlass.hw.semantics import INT_OPS, gmma_read_offset, k_of_slot, k_tiles_of, tma_box_offset

#: tag value of an smem element no TMA wrote
UNWRITTEN = -1
#: tag value of a read outside its buffer
OUT_OF_BUFFER = -2


@dataclass(frozen=True)
class TagImage:
    """Per-element tags of one smem buffer: ``fields[name]`` is an int64 array over the buffer's
    element offsets (``UNWRITTEN`` where no TMA wrote). ``outside`` counts writes that left the
    buffer, ``collisions`` elements written more than once."""

    buffer: str
    fields: dict[str, np.ndarray]
    outside: int
    collisions: int


def tag_image(dsl: DslProgram, load: TmaLoad) -> TagImage:
    """Run ``load``'s tag function over stages 0..S-1 (k-tile ``s`` into stage ``s``)."""
    t = dsl.tensor(load.dst)
    s_count = dsl.stages
    cells = load.tile_mn * load.tile_k * s_count
    mn, k, s = np.meshgrid(np.arange(load.tile_mn), np.arange(load.tile_k), np.arange(s_count),
                           indexing="ij")
    mn, k, s = mn.ravel(), k.ravel(), s.ravel()
    off = np.asarray(tma_box_offset(INT_OPS, load, mn, k, s, t.base_bytes, t.elem_bytes), dtype=np.int64)
    inb = (off >= 0) & (off < cells)
    f_mn, f_k = load.src_tag.fields
    fields = {name: np.full(cells, UNWRITTEN, dtype=np.int64) for name in (f_mn, f_k, load.stage_tag.fields[0])}
    fields[f_mn][off[inb]] = mn[inb]
    fields[f_k][off[inb]] = k[inb] + s[inb] * load.tile_k
    fields[load.stage_tag.fields[0]][off[inb]] = s[inb]
    counts = np.bincount(off[inb], minlength=cells)
    return TagImage(load.dst, fields, int((~inb).sum()), int((counts > 1).sum()))


def check_tma_image(dsl: DslProgram) -> tuple[list[Proof], list[Violation]]:
    """tma.image: every TMA load writes inside its buffer and fills each element of every stage
    exactly once (the TMA image is a bijection onto the stage buffer; VERIFIER.md G5).

    Source: PTX ISA 9.7.9.25 (``cp.async.bulk.tensor`` box placement and swizzle modes).
    """
    rule = "tma.image"
    proofs: list[Proof] = []
    violations: list[Violation] = []
    for load in dsl.loads:
        img = tag_image(dsl, load)
        cells = next(iter(img.fields.values())).shape[0]
        unwritten = int((img.fields[load.stage_tag.fields[0]] == UNWRITTEN).sum())
        if img.outside or img.collisions or unwritten:
            violations.append(Violation(
                rule, "G5",
                f"TMA load into {load.dst} (box {load.copy.box}, SW{load.copy.swizzle_bytes}): "
                f"{img.outside} writes outside the {cells}-element buffer, {img.collisions} elements "
                f"written twice, {unwritten} elements never written",
                "the TMA boxes must tile the stage exactly; check box extents against the tile",
                str(load.loc)))
        else:
            proofs.append(Proof(rule, "G5", "enum",
                                f"TMA into {load.dst} fills all {cells} elements of {dsl.stages} stages "
                                f"exactly once", cells))
    return proofs, violations


@functools.lru_cache(maxsize=64)
def accumulator_partition(tile_m: int, tile_n: int, op_m: int, op_n: int,
                          warpgroups: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Every accumulator register of one ``tile_m x tile_n`` output tile.

    Warpgroup ``w`` of ``warpgroups`` owns rows ``64 * (rep * warpgroups + w)`` onward; inside a
    64 x N atom, CuTe ``CLayout_64xN`` (PTX ISA 9.7.15.4) maps (thread, value) to (m, n); atoms
    along N follow the value index.

    Returns:
        ``(wg, thread, reg, m, n)``: int64 arrays of length ``tile_m * tile_n`` (consumer
        warpgroup, its thread 0..127, register index, tile coordinate). Read-only (cached).
    """
    c_img = layout_image(gmma_c_layout(op_n))  # t + 128 v -> mm + 64 nn
    tv = np.arange(c_img.size)
    t, v = tv % 128, tv // 128
    mm, nn = c_img % op_m, c_img // op_m
    reps = tile_m // (op_m * warpgroups)
    n_atoms = tile_n // op_n
    per_atom = op_n // 2
    wgs, ts, regs, ms, ns = [], [], [], [], []
    for w in range(warpgroups):
        for r in range(reps):
            for a in range(n_atoms):
                wgs.append(np.full(t.size, w))
                ts.append(t)
                regs.append(r * per_atom * n_atoms + a * per_atom + v)
                ms.append((r * warpgroups + w) * op_m + mm)
                ns.append(a * op_n + nn)
    out = tuple(np.concatenate(x).astype(np.int64) for x in (wgs, ts, regs, ms, ns))
    for arr in out:
        arr.flags.writeable = False
    return out  # type: ignore[return-value]


def consumer_thread(warpgroup: int, t: int) -> dict[str, int]:
    """Thread record of thread ``t`` of consumer warpgroup ``warpgroup`` (the producer is WG 0)."""
    idx = 128 * (1 + warpgroup) + t
    return {"cta": 0, "threadIdx": idx, "warpgroup": warpgroup, "warp": idx // 32, "lane": t % 32}


def accumulator_thread(ra: MmaRead, rb: MmaRead, m: int, n: int) -> tuple[dict[str, int], str]:
    """The consumer thread and register holding D(m, n) of the CTA tile (CTA 0).

    SS operands are shared by the warpgroup, so an operand fault is reported through the
    accumulator it feeds (VERIFIER.md pitfall 5); the map is :func:`accumulator_partition`.
    """
    wg, th, reg, ms, ns = accumulator_partition(ra.tile_mn, rb.tile_mn, ra.op.m, ra.op.n, ra.warpgroups)
    i = int(np.flatnonzero((ms == m) & (ns == n))[0])
    return consumer_thread(int(wg[i]), int(th[i])), f"accum[{int(reg[i])}]=D({m},{n})"


def _read(dsl: DslProgram, read: MmaRead, image: TagImage) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Offsets (MN, K, S) the MMA reads and the tags found there."""
    mn, k, s = np.meshgrid(np.arange(read.tile_mn), np.arange(read.tile_k), np.arange(dsl.stages),
                           indexing="ij")
    off = np.asarray(gmma_read_offset(INT_OPS, read, mn, k, s), dtype=np.int64)
    cells = next(iter(image.fields.values())).shape[0]
    inb = (off >= 0) & (off < cells)
    safe = np.where(inb, off, 0)
    tags = {name: np.where(inb, arr[safe], OUT_OF_BUFFER) for name, arr in image.fields.items()}
    return off, tags


def _tagstr(op: str, tags: dict[str, np.ndarray], idx: tuple[int, int, int]) -> str:
    vals = []
    for name, arr in tags.items():
        v = int(arr[idx])
        vals.append(f"{name}={'unwritten' if v == UNWRITTEN else 'outside' if v == OUT_OF_BUFFER else v}")
    return f"{op}({', '.join(vals)})"


def check_k_agreement(dsl: DslProgram, assertion: TagAssertion) -> tuple[list[Proof], list[Violation]]:
    """Check ``A.k == B.k`` (or the assertion's fields) at every MMA slot by enumeration.

    Domain: stage s in [0,S), k in [0,tile_k) (k_block = k // 16), every m of A's tile and
    every n of B's tile. SS-mode operands are shared by the warpgroup, so the slot pair (m, n)
    is reported through the accumulator register holding D(m, n) (CuTe ``CLayout_64xN``).
    Returns the first violation in (stage, k_block, k, m, n) order as a counterexample.
    """
    (opa, fa), (opb, fb) = assertion.lhs, assertion.rhs
    ra, rb = dsl.read(opa), dsl.read(opb)
    la, lb = dsl.load_into(ra.src), dsl.load_into(rb.src)
    img_a, img_b = tag_image(dsl, la), tag_image(dsl, lb)
    off_a, tags_a = _read(dsl, ra, img_a)
    off_b, tags_b = _read(dsl, rb, img_b)
    ka, kb = tags_a[fa], tags_b[fb]  # (MN, K, S)
    ref = kb[0]  # (K, S)
    bad_a = ka != ref[None]
    bad_b = kb != ref[None]
    bad_ks = bad_a.any(axis=0) | bad_b.any(axis=0)  # (K, S)
    points = ka.size + kb.size
    rule, inv = assertion.rule, assertion.invariant
    S, tile_k = dsl.stages, ra.tile_k
    if not bad_ks.any():
        summary = (f"{assertion.lhs[0]}.{fa} == {assertion.rhs[0]}.{fb} at all {S} stages x "
                   f"{tile_k // ra.op.k} k-blocks x {ra.op.k} k x {ra.tile_mn} m x {rb.tile_mn} n "
                   f"MMA slots ({points} operand slots enumerated)")
        return [Proof(rule, inv, "enum", summary, points)], []
    flat = np.flatnonzero(bad_ks.T.ravel())[0]
    s, k = divmod(int(flat), tile_k)
    col_a = np.flatnonzero(bad_a[:, k, s])
    if col_a.size:
        m, n = int(col_a[0]), 0
    else:
        m, n = 0, int(np.flatnonzero(bad_b[:, k, s])[0])
    op = ra.op
    thread, register = accumulator_thread(ra, rb, m, n)
    k_expected = s * tile_k + k
    a_idx, b_idx = (m, k, s), (n, k, s)
    actual = (f"{_tagstr(opa, tags_a, a_idx)} vs {_tagstr(opb, tags_b, b_idx)}")
    expected = (f"{opa}.{fa} == {opb}.{fb} (both k={k_expected}: "
                f"{opa}(m={m}, k={k_expected}), {opb}(n={n}, k={k_expected}))")
    sw = lambda lay: lay.describe() if hasattr(lay, "describe") else str(lay)  # noqa: E731
    provenance = (
        f"TMA {opa} box {la.copy.box} SW{la.copy.swizzle_bytes} / {opb} box {lb.copy.box} "
        f"SW{lb.copy.swizzle_bytes}; GMMA {opa} reads {sw(ra.layout)}, {opb} reads {sw(rb.layout)}"
    )
    cex = Counterexample(
        invariant=inv, rule=rule, engine="enum", program_point=assertion.at,
        where=f"{assertion.loc} (reads at {ra.loc})", iteration=s, stage=s, k_block=k // op.k,
        slot={"m": m, "n": n, "k": k % op.k},
        thread=thread, register=register,
        smem_offset={opa: int(off_a[a_idx]), opb: int(off_b[b_idx])},
        expected=expected, actual=actual, provenance=provenance,
        k_tile=s, element=_element(opa, fa, tags_a, a_idx, opb, fb, tags_b, b_idx),
        chain=_chain(dsl, ra, la, opa, tags_a, a_idx, int(off_a[a_idx]), k),
        params={"stages": S, "tile_k": tile_k},
    )
    n_bad = int(bad_a.sum() + bad_b.sum())
    msg = (f"{assertion} fails: {n_bad} of {points} operand slots disagree; first at stage {s} "
           f"k_block {k // op.k} k {k % op.k}, m={m} n={n}: {actual}")
    hint = ("the MMA-side smem layout (descriptor swizzle/atom) must equal the layout the TMA "
            "writes; build both from the same smem atom")
    return [], [Violation(rule, inv, msg, hint, str(assertion.loc), cex)]


def check_k_coverage(dsl: DslProgram) -> tuple[list[Proof], list[Violation]]:
    """k.coverage (G3) by enumeration for every K in [1, 2 * tile_k + 1]: each k < K is summed
    by exactly one MMA slot (k_tile, k_block, kk), every slot reads inside its k-tile, and
    slots past K read TMA's zero fill. The SMT tier proves the same for all K < 2^24
    (:func:`argus_cutlass.verify.smt.check_k_coverage_smt`); this tier's first failure (smallest
    K) is reported by the caller only when the SMT tier is off.
    """
    import time

    kl = dsl.kloop
    assert kl is not None
    t0 = time.perf_counter()
    rule = "k.coverage"
    points = 0
    for K in range(1, 2 * kl.tile_k + 2):
        kts = int(k_tiles_of(INT_OPS, K, kl.tile_k, kl.rounding))
        j, b, kk = np.meshgrid(np.arange(kts), np.arange(kl.k_blocks), np.arange(kl.block_k), indexing="ij")
        k = k_of_slot(INT_OPS, j, b, kk, kl.tile_k, kl.block_k).ravel()
        points += k.size
        counts = np.bincount(k[k < K], minlength=K)[:K] if k.size else np.zeros(K, dtype=np.int64)
        local = (b * kl.block_k + kk).ravel()
        bad = (counts != 1).any() or (local >= kl.tile_k).any() or (kl.oob_fill != "zero" and (k >= K).any())
        if bad:
            first = int(np.flatnonzero(counts != 1)[0]) if (counts != 1).any() else -1
            msg = (f"K={K} ({kts} k-tiles x {kl.k_blocks} k-blocks x {kl.block_k}): "
                   + (f"k={first} summed {int(counts[first])} times" if first >= 0 else
                      "a slot reads outside its k-tile or past K without zero fill"))
            return [], [Violation(rule, "G3", msg, "k_tiles = ceil_div(K, tile_k), k_blocks = tile_k / block_k, "
                                  "TMA zero fill past K", str(kl.loc))]
    return [Proof(rule, "G3", "enum", f"every k < K summed exactly once for all K in [1, {2 * kl.tile_k + 1}] "
                  f"({points} slots)", points, time.perf_counter() - t0)], []


def _element(opa: str, fa: str, tags_a: dict, a_idx: tuple, opb: str, fb: str, tags_b: dict,
             b_idx: tuple) -> dict[str, str]:
    """The gmem elements the two operand slots actually read (tensor and global coordinate)."""
    def coord(tags: dict, idx: tuple) -> str:
        vals = {name: int(arr[idx]) for name, arr in tags.items()}
        if any(v < 0 for v in vals.values()):
            return "unwritten" if UNWRITTEN in vals.values() else "outside the buffer"
        return "(" + ", ".join(f"{k}={v}" for k, v in vals.items()) + ")"

    return {"tensor": f"{opa}, {opb}", opa: coord(tags_a, a_idx), opb: coord(tags_b, b_idx)}


def _chain(dsl: DslProgram, read: MmaRead, load: TmaLoad, op: str, tags: dict, idx: tuple, off: int,
           k: int) -> tuple[str, ...]:
    """Provenance of operand ``op``'s slot: gmem -> TMA box -> smem byte -> descriptor -> MMA slot."""
    t = dsl.tensor(load.dst)
    f_mn, f_k = load.src_tag.fields
    mn_v, k_v = int(tags[f_mn][idx]), int(tags[f_k][idx])
    byte = t.base_bytes + off * t.elem_bytes
    if mn_v < 0 or k_v < 0:
        src = f"no TMA write reaches smem elem {off}"
    else:
        s_w = k_v // load.tile_k
        inner, outer = load.copy.box
        src = (f"gmem {op}({f_mn}={mn_v}, {f_k}={k_v}) -> TMA k-tile {s_w} box {load.copy.box} "
               f"SW{load.copy.swizzle_bytes} elem ({(k_v % load.tile_k) % inner if load.major == 'K' else mn_v % inner}, "
               f"{mn_v % outer if load.major == 'K' else (k_v % load.tile_k) % outer})")
    sw = read.layout.describe() if hasattr(read.layout, "describe") else str(read.layout)
    mn_slot, _, s = idx
    return (src, f"smem byte {byte:#x} (elem {off} of {t.name})", f"descriptor {sw}",
            f"MMA slot {op}({'m' if op == 'A' else 'n'}={mn_slot}, k={k}) of stage {s}")


def _descriptor_walk(dsl: DslProgram, read: MmaRead) -> tuple[int, set, str | None]:
    """Encode and decode every descriptor of ``read``: ``(descriptors, {(type, LBO, SBO)}, first
    mismatch message or None)``. Raises ``DescriptorError`` for a non-canonical layout."""
    from argus_cutlass.layout.gmma_desc import decode_bytes, encode

    t = dsl.tensor(read.src)
    major = "K" if dsl.load_into(read.src).major == "K" else "MN"
    sw = getattr(read.layout, "swizzle", None)
    inner = getattr(read.layout, "layout", read.layout)
    bits = sw.bits if sw is not None else 0
    op_mn = read.op.m if read.operand == "A" else read.op.n
    mn, kk = np.meshgrid(np.arange(op_mn), np.arange(read.op.k), indexing="ij")
    seen: set = set()
    count = 0
    for s in range(dsl.stages):
        for k0 in range(0, read.tile_k, read.op.k):
            for mn0 in range(0, read.tile_mn, op_mn):
                desc = encode(inner, bits, major, t.elem_bytes, t.base_bytes, mn0, k0, s, op_mn, read.op.k)
                hw = decode_bytes(desc, major, t.elem_bytes, mn, kk)
                model = t.base_bytes + t.elem_bytes * np.asarray(read.layout(mn0 + mn, k0 + kk, s), dtype=np.int64)
                bad = np.argwhere(hw != model)
                if bad.size:
                    i, j = (int(x) for x in bad[0])
                    return count, seen, (
                        f"operand {read.operand} stage {s} k_block {k0 // read.op.k} mn0 {mn0}: descriptor {desc} "
                        f"reads byte {int(hw[i, j])} for slot (mn={mn0 + i}, k={k0 + j}) but the layout places it "
                        f"at {int(model[i, j])} (buffer not aligned to the swizzle period?)")
                seen.add((desc.layout_type, desc.lbo, desc.sbo))
                count += 1
    return count, seen, None


def check_descriptors(dsl: DslProgram) -> tuple[list[Proof], list[Violation]]:
    """gmma.descriptor: the 64-bit matrix descriptor of every wgmma (stage, k-block, MN atom) can
    be encoded from the layout the MMA reads through, and decoding it gives back that layout's
    byte address at every operand slot (:mod:`argus_cutlass.layout.gmma_desc`, PTX ISA
    9.7.15.5.1). This ties G1/G5, which reason about layouts, to the descriptor fields the
    hardware consumes (start address, LBO, SBO, layout type)."""
    from argus_cutlass.layout.gmma_desc import DescriptorError

    rule = "gmma.descriptor"
    proofs: list[Proof] = []
    violations: list[Violation] = []
    for read in dsl.reads:
        try:
            count, seen, mismatch = _descriptor_walk(dsl, read)
        except DescriptorError as exc:
            violations.append(Violation(rule, "G1", f"operand {read.operand}: {exc}",
                                        "the MMA-side layout must be a GMMA canonical layout (tile a "
                                        "GMMA::Layout_*_Atom)", str(read.loc)))
            continue
        if mismatch:
            violations.append(Violation(rule, "G1", mismatch, "align the buffer to 8 x swizzle bytes "
                                        "(R8 smem.alignment)", str(read.loc)))
            continue
        slots = count * (read.op.m if read.operand == "A" else read.op.n) * read.op.k
        fields = ", ".join(f"{('INTER', 'SW128', 'SW64', 'SW32')[lt]} LBO={lbo} SBO={sbo}" for lt, lbo, sbo in sorted(seen))
        proofs.append(Proof(rule, "G1", "enum",
                            f"operand {read.operand}: {count} descriptors ({fields}) decode to the read layout at all "
                            f"{slots} slots", slots))
    return proofs, violations
