"""Enumeration tier of the verifier: tag images, tag assertions, descriptors, k coverage.

* :func:`tag_image` runs a TMA load's boxes, in the order the generated producer issues them
  (:func:`~argus_cutlass.hw.semantics.tma_load_box_coords`), into an smem *tag image*: per buffer
  element, the gmem coordinate it holds (relative to the tile's block) and the producer iteration
  that wrote it. Pipeline pass covered: the first ``stages`` k-tiles (k-tile ``i`` fills stage ``i``).
* :func:`check_tma_image` (``tma.image``, G5): the boxes fill every element of every stage exactly
  once with the tile's own elements, and nothing else.
* :func:`check_assertion`: a **generic**, slot-wise checker of :class:`~argus_cutlass.dsl.ir.TagAssertion`
  nodes at an MMA (``A.k == B.k``, ``A.m == slot.m``...): the values are operand tags (read back
  through the MMA's own smem view), the slot's own coordinate (``("slot", "m")``), the
  accumulator's (``("acc", "n")``), the slot's k-tile (``("stage", "iter")``) or constants
  (``("const", "0")``); relations ``==  != <= < >= >``, ``in_range`` and ``bijection``. A new
  invariant is data: no verifier code names ``A`` or ``B``.
* :func:`check_descriptors` (``gmma.descriptor``, G1): the descriptors the kernel forms
  (:func:`~argus_cutlass.layout.gmma_desc.descriptor_plan`, 14-bit start-address field masked as
  the kernel masks it) decode to the view's read address at every slot.
* :func:`check_k_coverage` (``k.coverage``, G3) for small K and :func:`check_residue_load`
  (``residue.load``, G8).

The stage-dependent checks (:func:`tag_image`, :func:`check_tma_image`, :func:`check_assertion`,
:func:`check_descriptors`) take a ``stage_cap``: enumerate only stages ``0..stage_cap-1`` of each
buffer. The verifiers pass one (:func:`enumerated_stages`) only for a program that breaks rule
``smem.capacity`` (it cannot launch); a program that fits shared memory is enumerated over every stage.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from argus_cutlass.dsl.ir import Mma, MmaRead, Program, Tag, TagAssertion, TmaLoad
from argus_cutlass.hw.semantics import (
    INT_OPS,
    TMA_SWIZZLE_BITS,
    box_element_offset,
    k_of_slot,
    k_tiles_of,
    swizzle,
    tma_load_box_coords,
)
from argus_cutlass.layout.algebra import LayoutError, layout_image
from argus_cutlass.layout.gmma import gmma_c_layout
from argus_cutlass.verify.report import Counterexample, Proof, Unknown, Violation

__all__ = ["MIN_ENUMERATED_STAGES", "OUT_OF_BUFFER", "UNWRITTEN", "TagImage", "accumulator_partition",
           "accumulator_thread", "check_acc_sets", "check_assertion", "check_descriptors", "check_k_agreement",
           "check_k_coverage", "check_residue_load", "desc_add", "check_tma_image", "consumer_thread",
           "enumerated_stages", "read_tags", "stage_note", "tag_image", "view_layout"]

#: tag value of an smem element no TMA wrote
UNWRITTEN = -1
#: tag value of a read outside its buffer
OUT_OF_BUFFER = -2
#: the TMA-issuing thread (warp 0, lane 0 of the producer warpgroup)
PRODUCER_THREAD = {"cta": 0, "threadIdx": 0, "warpgroup": 0, "warp": 0, "lane": 0, "role": "producer"}
#: tile coordinates (tm, tn) the assertions are enumerated at: both sides of an operand-identity
#: equality are affine in (tm, tn), so equality at (0,0), (1,0), (0,1) is equality at every tile
TILE_POINTS = ((0, 0), (1, 0), (0, 1))
#: largest broadcast domain a relation without a min/max shortcut (!=, bijection) enumerates
MAX_PAIR_DOMAIN = 1 << 23

Outcome = tuple[list[Proof], list[Violation]]


@functools.lru_cache(maxsize=256)
def view_layout(view: Any) -> Any:
    """``view.layout`` (a swizzled CuTe layout), memoised: views are frozen values."""
    return view.layout


#: the fewest stages a bounded enumeration covers: two consecutive stages exhibit the stage stride
#: (stage ``s`` at ``s * stage_bytes``), the only way a stage's image differs from stage 0's
MIN_ENUMERATED_STAGES = 2


def _stages(program: Program, buffer: str, stage_cap: int | None = None) -> int:
    """The stages of ``buffer`` the enumeration covers: all of them (its shape's third mode), or the
    first ``stage_cap``."""
    t = program.tensor(buffer)
    n = int(t.shape[2]) if len(t.shape) >= 3 else 1
    return n if stage_cap is None else max(1, min(n, int(stage_cap)))


def enumerated_stages(stages: int, fit: int) -> int | None:
    """The stage cap of the data-flow enumeration of a program that breaks rule ``smem.capacity``:
    ``max(MIN_ENUMERATED_STAGES, fit)``, or ``None`` (every stage) when that is not below ``stages``.

    ``fit`` is the deepest pipeline of the program's buffers that fits the 227 KiB of dynamic shared
    memory of an sm_90 CTA (CUDA C++ Programming Guide, compute capability 9.0; the hint of rule
    ``smem.capacity``). Rule: a program whose buffers do not fit cannot launch, so its data flow is
    refused by ``smem.capacity`` whatever the enumeration finds; enumerating its first ``fit`` stages
    checks every stage a buildable pipeline of the same buffers has (the same work as the deepest
    buildable one), and at least two stages show the stage stride. Every violation that does not
    depend on the stage (tile layout, swizzle, descriptors of stage 0, bindings) is still reported.
    The enumeration of ``stages`` stages costs time and memory linear in ``stages`` (tag images of
    every stage, every slot of every stage): 21 s for a 1024-stage GEMM before this cap.

    >>> [enumerated_stages(s, fit) for s, fit in ((1024, 4), (1024, 0), (4, 4), (1, 0))]
    [4, 2, None, None]
    """
    cap = max(MIN_ENUMERATED_STAGES, int(fit))
    return cap if cap < stages else None


def stage_note(stages: int, cap: int, fit: int, checks: str) -> str:
    """The report's note on a bounded enumeration (:func:`enumerated_stages`)."""
    return (f"{checks} enumerated stages 0..{cap - 1} of {stages}: the program does not fit shared memory "
            f"(smem.capacity), so it cannot launch; {fit} stage(s) of these buffers fit 227 KiB (at least "
            f"{MIN_ENUMERATED_STAGES} are enumerated, to show the stage stride)")


# --------------------------------------------------------------------------------- tag images


@dataclass(frozen=True)
class TagImage:
    """Per-element tags of one smem buffer.

    ``fields[name]`` is an int64 array over the buffer's element offsets (``UNWRITTEN`` where no
    box element landed): the operand's MN coordinate inside its tile (field 0 of the data tag),
    its k (``iteration * tile_k + k`` when the loop advances k, GEMM; the MN coordinate advances instead
    when the load's ``advance`` is ``"mn"``, neither for ``"none"``) and the producer iteration. ``tag`` is the tag of the
    gmem tensor the load reads (``A:(m,k)``...). ``outside`` counts box elements that land outside
    their own stage, ``collisions`` elements written more than once, ``foreign`` box elements that
    carry gmem data outside the tile, ``unwritten`` elements no box reaches.
    """

    buffer: str
    tag: Tag | None
    fields: dict[str, np.ndarray]
    outside: int
    collisions: int
    foreign: int
    unwritten: int
    first_bad: dict[str, int]


def _box_grid(load: TmaLoad) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    inner, outer = load.copy.box[0], load.copy.box[1]
    b, j, i = np.meshgrid(np.arange(load.boxes), np.arange(outer), np.arange(inner), indexing="ij")
    return b.ravel(), i.ravel(), j.ravel()


def tag_image(program: Program, load: TmaLoad, stage_cap: int | None = None) -> TagImage:
    """Run ``load``'s boxes over stages ``0..S-1`` (k-tile ``s`` into stage ``s``) into its buffer.

    Byte address of box element ``(i, j)`` of box ``b`` at stage ``s``: ``base + s * stage_bytes +
    (b * inner * outer + j * inner + i) * elem_bytes``, then the tensor map's swizzle on the
    absolute address (PTX ISA 9.7.9.25, 5.5.7); ``stage_bytes`` is the buffer's stage size, as
    the kernel computes it (``kStageBytes``). ``stage_cap``: run only stages ``0..stage_cap-1``
    (the image then covers those stages; :func:`enumerated_stages` says when a verifier does).
    """
    t = program.tensor(load.dst)
    data_tag = program.tensor(load.src).tag
    S = _stages(program, load.dst, stage_cap)
    stage_elems = int(t.shape[0]) * int(t.shape[1])
    cells = stage_elems * S
    eb = t.elem_bytes
    copy_eb = max(1, load.copy.elem_bits // 8)
    inner, outer = load.copy.box[0], load.copy.box[1]
    b, i, j = _box_grid(load)
    mn, k = tma_load_box_coords(load, b, i, j)
    box_off = box_element_offset(b, i, j, inner, outer)
    s = np.repeat(np.arange(S), b.size)
    mn, k, box_off = np.tile(mn, S), np.tile(k, S), np.tile(box_off, S)
    addr = t.base_bytes + s * stage_elems * eb + box_off * copy_eb
    addr = swizzle(INT_OPS, TMA_SWIZZLE_BITS.get(load.copy.swizzle_bytes, 0), 4, 3, addr)
    off = (addr - t.base_bytes) // eb
    in_stage = (off >= s * stage_elems) & (off < (s + 1) * stage_elems)
    in_tile = (mn >= 0) & (mn < load.tile_mn) & (k >= 0) & (k < load.tile_k)
    inb = (off >= 0) & (off < cells)
    f_mn = data_tag.fields[0] if data_tag is not None and data_tag.fields else "mn"
    f_k = data_tag.fields[1] if data_tag is not None and len(data_tag.fields) > 1 else "k"
    f_it = load.stage_tag.fields[0] if load.stage_tag.fields else "iter"
    fields = {name: np.full(cells, UNWRITTEN, dtype=np.int64) for name in (f_mn, f_k, f_it)}
    # the loop's iteration s (stage s) moves the box along the load's advancing mode
    adv = getattr(load, "advance", "k")
    fields[f_mn][off[inb]] = mn[inb] + (s[inb] * load.tile_mn if adv == "mn" else 0)
    fields[f_k][off[inb]] = k[inb] + (s[inb] * load.tile_k if adv == "k" else 0)
    fields[f_it][off[inb]] = s[inb]
    counts = np.bincount(off[inb], minlength=cells)[:cells]
    first_bad: dict[str, int] = {}
    twice = inb & (counts[np.clip(off, 0, cells - 1)] > 1)
    for kind, mask in (("outside", ~in_stage), ("foreign", ~in_tile), ("collision", twice)):
        hit = np.flatnonzero(mask)
        if hit.size and not first_bad:
            x = int(hit[0])
            first_bad = {"kind": kind, "stage": int(s[x]), "box": int(b[x % b.size]), "i": int(i[x % b.size]),
                         "j": int(j[x % b.size]), "mn": int(mn[x]), "k": int(k[x]), "offset": int(off[x])}
    unwritten = int((counts == 0).sum())
    if unwritten and not first_bad:
        x = int(np.flatnonzero(counts == 0)[0])
        first_bad = {"kind": "unwritten", "stage": x // stage_elems, "offset": x}
    return TagImage(load.dst, data_tag, fields, int((~in_stage).sum()), int((counts > 1).sum()),
                    int((~in_tile).sum()), unwritten, first_bad)


def check_tma_image(program: Program, stage_cap: int | None = None) -> Outcome:
    """tma.image: every TMA load's boxes, issued as the kernel issues them, write inside their
    stage, carry only the tile's own elements, and fill each element of every stage exactly once
    (the TMA image is a bijection onto the stage buffer; VERIFIER.md G5). ``stage_cap``: the
    first ``stage_cap`` stages of each buffer only (:func:`enumerated_stages`; the proof says so).

    Source: PTX ISA 9.7.9.25 (``cp.async.bulk.tensor`` box placement and swizzle modes).
    """
    rule = "tma.image"
    proofs: list[Proof] = []
    violations: list[Violation] = []
    for load in program.loads:
        wrong = _load_problems(program, load)
        if wrong:
            violations += [Violation(rule, "G5", f"{load.name}: {w}", "a TMA load copies a tagged gmem tensor into an "
                                     "smem buffer of the same dtype, boxes along the tensor's contiguous mode",
                                     str(load.loc)) for w in wrong]
            continue
        img = tag_image(program, load, stage_cap)
        cells = next(iter(img.fields.values())).shape[0]
        S = _stages(program, load.dst, stage_cap)
        S_all = _stages(program, load.dst)
        which = f"{load.dst}'s {S} stages" if S == S_all else f"the first {S} of {load.dst}'s {S_all} stages"
        if not (img.outside or img.collisions or img.unwritten or img.foreign):
            proofs.append(Proof(rule, "G5", "enum",
                                f"TMA {load.name}: {load.boxes} boxes {load.copy.box} SW{load.copy.swizzle_bytes} fill "
                                f"all {cells} elements of {which} exactly once with the "
                                f"{load.tile_mn}x{load.tile_k} tile", cells))
            continue
        fb = img.first_bad
        what = {
            "outside": f"box {fb.get('box')} element ({fb.get('i')}, {fb.get('j')}) lands at smem elem "
                       f"{fb.get('offset')}, outside stage {fb.get('stage')}",
            "foreign": f"box {fb.get('box')} element ({fb.get('i')}, {fb.get('j')}) carries tile element "
                       f"(mn={fb.get('mn')}, k={fb.get('k')}), outside the {load.tile_mn}x{load.tile_k} tile",
            "collision": f"smem elem {fb.get('offset')} of stage {fb.get('stage')} is written twice (box "
                         f"{fb.get('box')} element ({fb.get('i')}, {fb.get('j')}) among them)",
            "unwritten": f"smem elem {fb.get('offset')} of stage {fb.get('stage')} is never written",
        }[fb["kind"]]
        src = program.tensor(load.src)
        cex = Counterexample(
            "G5", rule, "enum", "mainloop.tma", str(load.loc), fb.get("stage", -1), fb.get("stage", -1), -1,
            {k: fb[k] for k in ("box", "i", "j") if k in fb}, dict(PRODUCER_THREAD), "",
            {load.dst: fb.get("offset", -1)},
            f"the {load.boxes} boxes of a stage fill its {cells // S} elements exactly once with the tile",
            what, f"box {load.copy.box} SW{load.copy.swizzle_bytes} {load.major}-major, tile {load.tile_mn}x"
            f"{load.tile_k}, buffer {load.dst} {tuple(program.tensor(load.dst).shape)}",
            k_tile=fb.get("stage", -1),
            element={"tensor": src.name, "mn": fb.get("mn", -1), "k": fb.get("k", -1)} if "mn" in fb else {},
            params={"boxes": load.boxes, "stages": S})
        violations.append(Violation(
            rule, "G5",
            f"TMA load into {load.dst} (box {load.copy.box}, SW{load.copy.swizzle_bytes}): {img.outside} box "
            f"elements land outside their stage, {img.foreign} carry data outside the tile, {img.collisions} "
            f"elements written twice, {img.unwritten} elements never written; first: {what}",
            "the TMA boxes must tile the stage exactly; check box extents against the tile", str(load.loc), cex))
    return proofs, violations


def _load_problems(program: Program, load: TmaLoad) -> list[str]:
    """What makes ``load`` not a copy of its gmem tensor into its buffer (empty when it is one):
    the tensor map the host encodes from the source tensor (``templates/gemm/host.j2``: dtype,
    contiguous mode) must agree with the load's boxes and its buffer."""
    src, dst = program.tensor(load.src), program.tensor(load.dst)
    out = []
    if src.space != "gmem" or dst.space != "smem":
        out.append(f"copies {src.name} ({src.space}) -> {dst.name} ({dst.space}); a TMA load reads gmem into smem")
    if src.tag is None:
        out.append(f"its source {src.name} carries no tag: nothing can be proved about the values it loads")
    elif load.src_tag != src.tag:
        out.append(f"its source tag {load.src_tag} is not the tag {src.tag} of {src.name}")
    if len(src.shape) != 2:
        out.append(f"its source {src.name} has shape {src.shape}; the tensor map is 2-D (MN, K)")
    if len(dst.shape) != 3:
        out.append(f"its buffer {dst.name} has shape {dst.shape}; expected (MN, K, stages)")
    if src.dtype != dst.dtype:
        out.append(f"copies {src.dtype} {src.name} into {dst.dtype} {dst.name}")
    if load.copy.elem_bits != 8 * dst.elem_bytes:
        out.append(f"copies {load.copy.elem_bits}-bit elements into the {dst.dtype} buffer {dst.name}")
    # the box's inner extent runs along the tile's k mode (K-major) or mn mode (MN-major): the gmem mode
    # in that position of the source's (MN, K) shape must be the contiguous one
    inner_mode = (src.shape[1] if load.major == "K" else src.shape[0]) if len(src.shape) == 2 else None
    if inner_mode != src.major:
        out.append(f"is {load.major}-major (box inner extent along {'K' if load.major == 'K' else 'MN'}: "
                   f"{src.name}'s mode {inner_mode!r}) but {src.name} is {src.major}-contiguous: the tensor map's "
                   f"inner dimension is {src.major}")
    return out


def read_tags(program: Program, read: MmaRead, image: TagImage, stages: int | None = None,
              extent: tuple[int, int] | None = None) -> tuple[np.ndarray, dict[str, np.ndarray], np.ndarray]:
    """Offsets ``(MN, K, S)`` the MMA reads through its view, the tags found there, and whether
    each read is inside the buffer and written. ``extent`` is the ``(MN, K)`` the MMA reads (default
    the read node's tile)."""
    S = _stages(program, read.src) if stages is None else stages
    n_mn, n_k = extent if extent is not None else (read.tile_mn, read.tile_k)
    mn, k, s = np.meshgrid(np.arange(n_mn), np.arange(n_k), np.arange(S), indexing="ij")
    off = np.asarray(view_layout(read.view)(mn, k, s), dtype=np.int64)
    cells = next(iter(image.fields.values())).shape[0]
    inb = (off >= 0) & (off < cells)
    safe = np.where(inb, off, 0)
    tags = {name: np.where(inb, arr[safe], OUT_OF_BUFFER) for name, arr in image.fields.items()}
    valid = inb & np.all(np.stack([v != UNWRITTEN for v in tags.values()]), axis=0)
    return off, tags, valid


# ------------------------------------------------------------------------- accumulator partition


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
    reps = max(1, tile_m // (op_m * warpgroups))
    n_atoms = max(1, tile_n // op_n)
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


def accumulator_thread(mma: Mma, m: int, n: int) -> tuple[dict[str, int], str]:
    """The consumer thread and register holding D(m, n) of the CTA tile (CTA 0) of ``mma``.

    SS operands are shared by the warpgroup, so an operand fault is reported through the
    accumulator it feeds (VERIFIER.md pitfall 5); the map is :func:`accumulator_partition`
    (PTX ISA 9.7.15.4: row ``m`` is warp ``(m % 64) / 16``, lane ``4 (m % 8) + (n % 8) / 2``).
    """
    op = mma.op
    atom = m // op.m
    w, r = atom % mma.atoms_m, atom // mma.atoms_m
    mm = m % op.m
    lane = 4 * (mm % 8) + (n % 8) // 2
    t = 32 * (mm // 16) + lane
    reg = r * (op.n // 2) + (n % 2) + 2 * ((mm % 16) // 8) + 4 * (n // 8)
    return consumer_thread(w, t), f"accum[{reg}]=D({m},{n})"


# --------------------------------------------------------------------------- tag assertions

#: axes of the MMA slot domain, in array order: tile point, m, n, k (in the k-tile), stage
_AXES = ("t", "m", "n", "k", "s")


@dataclass
class _Value:
    """One side of an assertion over the slot domain: ``arr`` (5-D, size-1 on axes it does not
    depend on), ``valid`` (same shape; False where the slot reads nothing meaningful)."""

    name: str
    arr: np.ndarray
    valid: np.ndarray
    axes: frozenset[str]


class _NotEvaluable(Exception):
    """An assertion operand the engine cannot evaluate (reported as an Unknown)."""


class _Broken(Exception):
    """An assertion operand whose data is not the operand at all (a violation of the rule)."""

    def __init__(self, message: str, point: dict[str, int] | None = None) -> None:
        super().__init__(message)
        self.point = point or {}


@dataclass
class _Ctx:
    program: Program
    mma: Mma
    reads: dict[str, MmaRead]
    S: int
    dims: tuple[int, int, int, int, int]
    images: dict[str, tuple[TmaLoad, TagImage, np.ndarray, dict[str, np.ndarray], np.ndarray]]
    stage_cap: int | None = None


def _mma_of(program: Program, at: str) -> Mma:
    name = at.split(".")[0]
    for m in program.mmas:
        if m.name == name:
            return m
    if program.mma is None:
        raise KeyError(f"no MMA for program point {at!r}")
    return program.mma


def _reads_of(program: Program, mma: Mma) -> dict[str, MmaRead]:
    out = {}
    for r in program.reads:
        if r.name in (mma.a, mma.b):
            out[r.operand] = r
    for op in ("A", "B"):
        if op not in out:
            try:
                out[op] = program.read(op)
            except KeyError:
                pass
    return out


def _context(program: Program, assertion: TagAssertion, stage_cap: int | None = None) -> _Ctx:
    """The slot domain is what the kernel executes: the MMA's rows (``atoms_m x reps_m x 64``) and
    columns (``op.n``), the k loop's ``k_blocks x op.k`` columns of a k-tile, ``stages`` k-tiles
    (the first ``stage_cap`` of them when one is given)."""
    mma = _mma_of(program, assertion.at)
    reads = _reads_of(program, mma)
    S = program.stages or 1
    if stage_cap is not None:
        S = max(1, min(S, int(stage_cap)))
    kl = program.kloop
    tile_k = kl.k_blocks * mma.op.k if kl is not None else mma.op.k
    return _Ctx(program, mma, reads, S, (len(TILE_POINTS), mma.tile_m, mma.op.n, tile_k, S), {}, stage_cap)


def _shape(ctx: _Ctx, axes: str) -> tuple[int, ...]:
    return tuple(d if a in axes else 1 for a, d in zip(_AXES, ctx.dims))


def _tile_coords(ctx: _Ctx) -> tuple[np.ndarray, np.ndarray]:
    tm = np.array([p[0] for p in TILE_POINTS], dtype=np.int64).reshape(_shape(ctx, "t"))
    tn = np.array([p[1] for p in TILE_POINTS], dtype=np.int64).reshape(_shape(ctx, "t"))
    return tm, tn


def _operand_data(ctx: _Ctx, operand: str):
    if operand in ctx.images:
        return ctx.images[operand]
    read = ctx.reads.get(operand)
    if read is None:
        raise _Broken(f"the MMA has no read of operand {operand}")
    if read.view is None:
        raise _NotEvaluable(f"operand {operand} is a register fragment (RS mode): checked by the fragment rules")
    try:
        load = ctx.program.load_into(read.src)
    except KeyError:
        raise _Broken(f"operand {operand} reads {read.src!r}, which no TMA load fills") from None
    img = tag_image(ctx.program, load, ctx.stage_cap)
    T, M, N, K, S = ctx.dims
    try:
        off, tags, valid = read_tags(ctx.program, read, img, ctx.S, (M if operand == "A" else N, K))
    except LayoutError as exc:
        raise _Broken(f"operand {operand}'s view {read.view.atom.name} {read.view.shape} is not a tiling of its "
                      f"atom: {exc}") from None
    ctx.images[operand] = (load, img, off, tags, valid)
    return ctx.images[operand]


def _value(ctx: _Ctx, side: tuple[str, str]) -> _Value:
    """Evaluate one side ``(value, field)`` of an assertion over the slot domain."""
    value, fld = side
    name = f"{value}.{fld}"
    T, M, N, K, S = ctx.dims
    tm, tn = _tile_coords(ctx)
    if value == "const":
        try:
            c = int(fld)
        except ValueError:
            raise _Broken(f"constant {fld!r} is not an integer") from None
        arr = np.full((1, 1, 1, 1, 1), c, dtype=np.int64)
        return _Value(name, arr, np.ones_like(arr, dtype=bool), frozenset())
    if value in ("slot", "acc"):
        if fld == "m":
            arr = tm * ctx.mma.tile_m + np.arange(M).reshape(_shape(ctx, "m"))
            axes = "tm"
        elif fld == "n":
            arr = tn * ctx.mma.op.n + np.arange(N).reshape(_shape(ctx, "n"))
            axes = "tn"
        elif fld == "k" and value == "slot":
            arr = np.arange(S).reshape(_shape(ctx, "s")) * K + np.arange(K).reshape(_shape(ctx, "k"))
            axes = "ks"
        else:
            raise _Broken(f"{value!r} has fields m, n{', k' if value == 'slot' else ''}, not {fld!r}")
        return _Value(name, arr, np.ones_like(arr, dtype=bool), frozenset(axes))
    if value == "stage":
        arr = np.arange(S).reshape(_shape(ctx, "s"))
        return _Value(name, arr, np.ones_like(arr, dtype=bool), frozenset("s"))
    load, img, _off, tags, valid = _operand_data(ctx, value)
    tag = img.tag
    own = "m" if value == "A" else "n"
    if tag is None:
        raise _Broken(f"operand {value} reads {load.dst}, filled from the untagged tensor {load.src!r}")
    if tag.name != value:
        raise _Broken(f"operand {value} reads {load.dst}, filled by {load.name} from {load.src!r} whose elements "
                      f"carry tag {tag}: {value}'s slots sum {tag.name} data, not {value}")
    it_field = load.stage_tag.fields[0] if load.stage_tag.fields else "iter"
    if fld not in tag.fields and fld != it_field:
        raise _Broken(f"tag {tag} of {load.src} has no field {fld!r}")
    # tags are (MN, K, S) arrays over the read's own MN axis
    raw = tags[fld]
    ok = valid
    if own == "m":
        arr = raw.reshape(1, raw.shape[0], 1, raw.shape[1], raw.shape[2])
        ok = ok.reshape(arr.shape)
    else:
        arr = raw.reshape(1, 1, raw.shape[0], raw.shape[1], raw.shape[2])
        ok = ok.reshape(arr.shape)
    axes = {own, "k", "s"}
    if tag.fields and fld == tag.fields[0]:
        block = tm if load.block_mode == "m" else tn
        arr = block * load.tile_mn + arr
        axes.add("t")
    return _Value(name, np.broadcast_to(arr, np.broadcast_shapes(arr.shape, _shape(ctx, "".join(axes)))),
                  np.broadcast_to(ok, np.broadcast_shapes(ok.shape, _shape(ctx, "".join(axes)))), frozenset(axes))


def _reduce(v: _Value, private: set[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(min, max, all-valid) of ``v`` over its ``private`` axes (kept as size-1 dims)."""
    ax = tuple(i for i, a in enumerate(_AXES) if a in private)
    if not ax:
        return v.arr, v.arr, v.valid
    return v.arr.min(axis=ax, keepdims=True), v.arr.max(axis=ax, keepdims=True), v.valid.all(axis=ax, keepdims=True)


_ORDER = {"<=": (lambda a_max, a_min, b_min, b_max: a_max <= b_min),
          "<": (lambda a_max, a_min, b_min, b_max: a_max < b_min),
          ">=": (lambda a_max, a_min, b_min, b_max: a_min >= b_max),
          ">": (lambda a_max, a_min, b_min, b_max: a_min > b_max)}
_PAIR = {"==": np.equal, "!=": np.not_equal, "<=": np.less_equal, "<": np.less, ">=": np.greater_equal,
         ">": np.greater}


def _first(mask: np.ndarray) -> tuple[int, ...] | None:
    """First True index of a 5-D mask in (s, k, m, n, t) order."""
    if not mask.any():
        return None
    perm = (4, 3, 1, 2, 0)  # s, k, m, n, t
    idx = np.argwhere(np.transpose(mask, perm))[0]
    out = [0] * 5
    for pos, ax in enumerate(perm):
        out[ax] = int(idx[pos])
    return tuple(out)


def _point_of(idx: tuple[int, ...]) -> dict[str, int]:
    return dict(zip(_AXES, idx))


def _find_pair(a: _Value, b: _Value, rel: str, idx: tuple[int, ...]) -> dict[str, int]:
    """A concrete slot point where ``a rel b`` fails (or a side is invalid), given the index
    ``idx`` of a failing point of the reduced (shared-axes) comparison."""
    sel: list[tuple[int, int] | None] = []
    for i, ax in enumerate(_AXES):
        if ax in a.axes and ax in b.axes:
            sel.append((idx[i], idx[i] + 1))
        elif ax in a.axes or ax in b.axes:
            sel.append(None)  # a private axis: search all of it
        else:
            sel.append((0, 1))

    def take(v: _Value) -> tuple[np.ndarray, np.ndarray]:
        cut = tuple(slice(None) if v.arr.shape[i] == 1 or r is None else slice(*r) for i, r in enumerate(sel))
        return v.arr[cut], v.valid[cut]

    va, oka = take(a)
    vb, okb = take(b)
    va, vb, oka, okb = np.broadcast_arrays(va, vb, oka, okb)
    bad = ~(oka & okb) | ~_PAIR[rel](va, vb)
    hit = _first(bad) or (0,) * 5
    return {ax: (sel[i][0] if sel[i] is not None else 0) + hit[i] for i, ax in enumerate(_AXES)}


def _evaluate(a: _Value, b: _Value, rel: str) -> tuple[dict[str, int] | None, int, str]:
    """The first failing slot point of ``a rel b`` over the joint domain (None if it holds), the
    number of points checked and a note."""
    shared = a.axes & b.axes
    pa, pb = set(a.axes - shared), set(b.axes - shared)
    points = int(np.prod([max(x, y) for x, y in zip(a.arr.shape, b.arr.shape)]))
    if rel == "==" or rel in _ORDER:
        a_min, a_max, a_ok = _reduce(a, pa)
        b_min, b_max, b_ok = _reduce(b, pb)
        if rel == "==":
            good = (a_min == a_max) & (b_min == b_max) & (a_min == b_min)
        else:
            good = _ORDER[rel](a_max, a_min, b_min, b_max)
        bad = ~(good & a_ok & b_ok)
        idx = _first(np.broadcast_to(bad, np.broadcast_shapes(bad.shape, a_min.shape, b_min.shape)))
        if idx is None:
            return None, points, ""
        return _find_pair(a, b, rel, idx), points, ""
    if rel != "!=":
        raise ValueError(rel)
    # != : at every shared point the two value sets are disjoint. Invalid reads fail first; the
    # min/max intervals rule out most shared points; the rest are intersected exactly.
    a_min, a_max, a_ok = _reduce(a, pa)
    b_min, b_max, b_ok = _reduce(b, pb)
    shape = np.broadcast_shapes(a_min.shape, b_min.shape)
    idx = _first(np.broadcast_to(~(a_ok & b_ok), shape))
    if idx is not None:
        return _find_pair(a, b, "!=", idx), points, ""
    overlap = np.broadcast_to((a_min <= b_max) & (b_min <= a_max), shape)
    perm = (4, 3, 1, 2, 0)
    for pos in np.argwhere(np.transpose(overlap, perm)):
        cand = [0] * 5
        for i, ax in enumerate(perm):
            cand[ax] = int(pos[i])
        sel_a = tuple(slice(None) if (_AXES[i] in pa) else (cand[i] if a.arr.shape[i] > 1 else 0) for i in range(5))
        sel_b = tuple(slice(None) if (_AXES[i] in pb) else (cand[i] if b.arr.shape[i] > 1 else 0) for i in range(5))
        if np.intersect1d(np.asarray(a.arr[sel_a]).ravel(), np.asarray(b.arr[sel_b]).ravel()).size:
            return _find_pair(a, b, "!=", tuple(cand)), points, ""
    return None, points, ""


def _bijection(a: _Value, b: _Value) -> tuple[dict[str, int] | None, dict[str, int] | None, int]:
    """Whether ``a`` and ``b`` correspond one-to-one over the joint domain: ``a(x) == a(y)`` iff
    ``b(x) == b(y)``. Returns two slot points that break it (or ``(None, None)``)."""
    points = int(np.prod([max(x, y) for x, y in zip(a.arr.shape, b.arr.shape)]))
    if points > MAX_PAIR_DOMAIN:
        raise _NotEvaluable(f"bijection over {points} slots exceeds the enumeration bound {MAX_PAIR_DOMAIN}")
    va, vb, oka, okb = np.broadcast_arrays(a.arr, b.arr, a.valid, b.valid)
    bad_valid = _first(~(oka & okb))
    if bad_valid is not None:
        return _point_of(bad_valid), _point_of(bad_valid), points
    fa, fb = va.ravel(), vb.ravel()
    order = np.lexsort((fb, fa))
    sa, sb = fa[order], fb[order]
    # same a, different b
    clash = np.flatnonzero((sa[1:] == sa[:-1]) & (sb[1:] != sb[:-1]))
    if not clash.size:
        order = np.lexsort((fa, fb))
        sa, sb = fa[order], fb[order]
        clash = np.flatnonzero((sb[1:] == sb[:-1]) & (sa[1:] != sa[:-1]))
    if not clash.size:
        return None, None, points
    x, y = int(order[clash[0]]), int(order[clash[0] + 1])
    return (_point_of(tuple(int(c) for c in np.unravel_index(x, va.shape))),
            _point_of(tuple(int(c) for c in np.unravel_index(y, va.shape))), points)


def _describe_point(ctx: _Ctx, values: list[_Value], p: dict[str, int]) -> tuple[str, dict[str, str]]:
    parts = []
    for v in values:
        idx = tuple(p[a] if v.arr.shape[i] > 1 else 0 for i, a in enumerate(_AXES))
        parts.append(f"{v.name}={int(v.arr[idx])}" if v.valid[idx] else f"{v.name}=<nothing: unwritten or outside>")
    elements: dict[str, str] = {}
    for op in ("A", "B"):
        if op in ctx.images:
            load, img, _off, tags, valid = ctx.images[op]
            mn = p["m"] if op == "A" else p["n"]
            idx = (mn, p["k"], p["s"])
            if not valid[idx]:
                elements[op] = "unwritten or outside the buffer"
                continue
            tm, tn = TILE_POINTS[p["t"]]
            blk = tm if load.block_mode == "m" else tn
            names = list(img.fields)
            vals = [int(tags[f][idx]) for f in names]
            vals[0] += blk * load.tile_mn
            tname = img.tag.name if img.tag is not None else load.src
            elements[op] = f"{tname}({', '.join(f'{f}={x}' for f, x in zip(names, vals))})"
    return ", ".join(parts), elements


def _chain(ctx: _Ctx, op: str, p: dict[str, int]) -> tuple[str, ...]:
    """Provenance of operand ``op``'s slot: gmem -> TMA box -> smem byte -> descriptor -> MMA slot."""
    if op not in ctx.images:
        return ()
    load, img, off, tags, valid = ctx.images[op]
    t = ctx.program.tensor(load.dst)
    read = ctx.reads[op]
    mn = p["m"] if op == "A" else p["n"]
    idx = (mn, p["k"], p["s"])
    o = int(off[idx])
    names = list(img.fields)
    mn_v, k_v = int(tags[names[0]][idx]), int(tags[names[1]][idx])
    if not valid[idx]:
        src = f"no TMA write reaches smem elem {o}"
    else:
        src = (f"gmem {load.src}({names[0]}={mn_v} of the tile's block, {names[1]}={k_v}) -> TMA k-tile "
               f"{k_v // load.tile_k} box {load.copy.box} SW{load.copy.swizzle_bytes}")
    lay = view_layout(read.view)
    sw = lay.describe() if hasattr(lay, "describe") else str(lay)
    return (src, f"smem byte {t.base_bytes + o * t.elem_bytes:#x} (elem {o} of {t.name})",
            f"view {read.view.atom.name} {sw}", f"MMA slot {op}({'m' if op == 'A' else 'n'}={mn}, k={p['k']}) of "
            f"stage {p['s']}")


def check_assertion(program: Program, assertion: TagAssertion,
                    stage_cap: int | None = None) -> tuple[list[Proof], list[Violation], list[Unknown]]:
    """Check one tag assertion at every slot of its MMA by enumeration (see the module docstring).

    Domain: tile coordinates :data:`TILE_POINTS`, every row ``m`` of A's tile and column ``n`` of
    B's, ``k`` in the k-tile (k-block ``k // op.k``), and the first ``S`` k-tiles (k-tile ``s`` in
    stage ``s``; ``S`` is the pipeline's stages, or ``stage_cap`` when given and smaller:
    :func:`enumerated_stages`, the proof then names both). An operand value is the tag of the
    element its slot reads through the MMA's smem view (G1); a slot that reads an unwritten
    element, or reads data whose tag is not the operand's (``sA`` filled from ``gB``), fails. The first failing slot, in (stage, k, m, n) order,
    is reported as a counterexample (thread and register through the accumulator it feeds).
    """
    rule, inv = assertion.rule, assertion.invariant
    t0 = time.perf_counter()
    for side in (assertion.lhs, assertion.rhs):
        if not (isinstance(side, tuple) and len(side) == 2 and all(isinstance(x, str) for x in side)):
            return [], [Violation("dsl.relation", "DSL", f"tag assertion {assertion.name!r} at {assertion.at}: side "
                                  f"{side!r} is not a (value, field) pair", "write sides as ('A', 'k'), ('slot', 'm'), "
                                  "('const', '0')", str(assertion.loc))], []
    try:
        ctx = _context(program, assertion, stage_cap)
    except KeyError as exc:
        return [], [Violation(rule, inv, f"{assertion}: {exc.args[0] if exc.args else exc}", None,
                              str(assertion.loc))], []
    try:
        lhs = _value(ctx, assertion.lhs)
        if assertion.relation == "in_range":
            lo_s, _, hi_s = assertion.rhs[1].partition(":")
            if assertion.rhs[0] == "const":
                rhs_pair = (_value(ctx, ("const", lo_s)), _value(ctx, ("const", hi_s)))
            else:
                rhs_pair = (_value(ctx, (assertion.rhs[0], lo_s)), _value(ctx, (assertion.rhs[0], hi_s)))
        else:
            rhs = _value(ctx, assertion.rhs)
        if assertion.relation == "bijection":
            p, q, points = _bijection(lhs, rhs)
            bad_point = p
            values = [lhs, rhs]
        elif assertion.relation == "in_range":
            p1, n1, _ = _evaluate(lhs, rhs_pair[0], ">=")
            p2, n2, _ = _evaluate(lhs, rhs_pair[1], "<")
            bad_point, points = p1 or p2, max(n1, n2)
            values = [lhs, *rhs_pair]
            q = None
        elif assertion.relation in _PAIR:
            bad_point, points, _ = _evaluate(lhs, rhs, assertion.relation)
            values = [lhs, rhs]
            q = None
        else:
            return [], [Violation("dsl.relation", "DSL", f"{assertion}: relation {assertion.relation!r} is not a "
                                  "tag relation (==, !=, <=, <, >=, >, in_range, bijection)", None,
                                  str(assertion.loc))], []
    except _NotEvaluable as exc:
        return [], [], [Unknown(rule, inv, str(assertion), f"not evaluable by enumeration: {exc}", 0)]
    except _Broken as exc:
        return [], [_broken_violation(ctx, assertion, str(exc))], []
    elapsed = time.perf_counter() - t0
    T, M, N, K, S = ctx.dims
    op = ctx.mma.op
    if bad_point is None:
        all_s = program.stages or 1
        which = f"all {S} stages" if S == all_s else f"the first {S} of {all_s} stages"
        summary = (f"{assertion.lhs[0]}.{assertion.lhs[1]} {assertion.relation} {assertion.rhs[0]}.{assertion.rhs[1]} "
                   f"at {which} x {K // max(1, op.k)} k-blocks x {op.k} k x {M} m x {N} n MMA slots "
                   f"({points} slot values; tiles (0,0), (1,0), (0,1): affine in the tile, so every tile)")
        return [Proof(rule, inv, "enum", summary, points, elapsed)], [], []
    return [], [_assertion_violation(ctx, assertion, values, bad_point, q)], []


def _broken_violation(ctx: _Ctx, assertion: TagAssertion, message: str) -> Violation:
    thread, register = accumulator_thread(ctx.mma, 0, 0)
    cex = Counterexample(
        invariant=assertion.invariant, rule=assertion.rule, engine="enum", program_point=assertion.at,
        where=str(assertion.loc), iteration=0, stage=0, k_block=0, slot={"m": 0, "n": 0, "k": 0}, thread=thread,
        register=register, smem_offset={}, expected=f"{assertion} (each operand slot reads its own operand)",
        actual=message, provenance=f"MMA {ctx.mma.name}: reads {[r.src for r in ctx.reads.values()]}", k_tile=0)
    return Violation(assertion.rule, assertion.invariant, f"{assertion} fails: {message}",
                     "load the operand's own gmem tensor into the buffer its MMA read names", str(assertion.loc), cex)


def _assertion_violation(ctx: _Ctx, assertion: TagAssertion, values: list[_Value], p: dict[str, int],
                         q: dict[str, int] | None) -> Violation:
    op = ctx.mma.op
    tm, tn = TILE_POINTS[p["t"]]
    m, n, k, s = p["m"], p["n"], p["k"], p["s"]
    thread, register = accumulator_thread(ctx.mma, m, n)
    actual, elements = _describe_point(ctx, values, p)
    if q is not None and q != p:
        actual2, _ = _describe_point(ctx, values, q)
        actual = f"{actual} at slot (m={m}, n={n}, k={k}, stage {s}) and {actual2} at slot (m={q['m']}, " \
                 f"n={q['n']}, k={q['k']}, stage {q['s']}): not one-to-one"
    offs = {}
    for o in ("A", "B"):
        if o in ctx.images:
            off = ctx.images[o][2]
            offs[o] = int(off[(m if o == "A" else n, k, s)])
    involved = [v.name.split(".")[0] for v in values]
    chain_op = next((o for o in involved if o in ctx.images), None)
    k_global = s * ctx.dims[3] + k
    expected = (f"{assertion} at slot (m={tm * ctx.dims[1] + m}, n={tn * ctx.dims[2] + n}, k={k_global}) of tile "
                f"({tm}, {tn})")
    reads = ", ".join(f"{o} reads {r.view.atom.name if r.view else 'registers'}" for o, r in sorted(ctx.reads.items()))
    loads = ", ".join(f"{ld.name}: {ld.src}->{ld.dst} box {ld.copy.box} SW{ld.copy.swizzle_bytes} block "
                      f"{ld.block_mode}" for ld, *_ in ctx.images.values())
    cex = Counterexample(
        invariant=assertion.invariant, rule=assertion.rule, engine="enum", program_point=assertion.at,
        where=f"{assertion.loc} (MMA at {ctx.mma.loc})", iteration=s, stage=s, k_block=k // max(1, op.k),
        slot={"m": m, "n": n, "k": k % max(1, op.k)}, thread=thread, register=register, smem_offset=offs,
        expected=expected, actual=actual, provenance=f"{loads}; {reads}", k_tile=s,
        element={"tensor": ", ".join(sorted(elements)), **elements},
        chain=_chain(ctx, chain_op, p) if chain_op else (),
        params={"stages": ctx.S, "tile_k": ctx.dims[3], "tm": tm, "tn": tn})
    msg = (f"{assertion} fails at tile ({tm}, {tn}) stage {s} k_block {k // max(1, op.k)} k {k % max(1, op.k)}, "
           f"m={m} n={n}: {actual}")
    hint = ("the MMA-side smem view (descriptor swizzle/atom) must equal the layout the TMA writes, and each "
            "operand's load must read its own gmem tensor at the tile's block (A: the tile's m, B: its n)")
    return Violation(assertion.rule, assertion.invariant, msg, hint, str(assertion.loc), cex)


#: the former name of the checker (it checked ``A.k == B.k`` only); any assertion works
check_k_agreement = check_assertion


def check_bindings(program: Program) -> Outcome:
    """mma.operand_identity (host side): the gmem tensor each operand is loaded from is bound to
    the caller's argument that holds it, with the caller's storage order. Without swap-AB the
    kernel's A is the caller's A; with it (``param swap_ab``) the kernel computes ``D^T = B A^T``
    and its A is the caller's B. The contiguous mode follows the caller's layout letters
    (``param layout``: ``t`` = K-contiguous A, ``n`` = K-contiguous B). The host entry encodes the
    tensor maps from ``binding`` and ``major`` (``templates/gemm/host.j2``)."""
    rule = "mma.operand_identity"
    swap = bool(program.param("swap_ab", False))
    layout = program.param("layout")
    bad: list[tuple[str, str]] = []
    want_bind = {"A": "B" if swap else "A", "B": "A" if swap else "B"}
    majors: dict[str, str] = {}
    if isinstance(layout, str) and len(layout) == 2 and set(layout) <= {"t", "n"}:
        a_k, b_k = layout[0] == "t", layout[1] == "n"
        if swap:
            a_k, b_k = b_k, a_k
        majors = {"A": "K" if a_k else "M", "B": "K" if b_k else "N"}
    for op in ("A", "B"):
        try:
            read = program.read(op)
            src = program.tensor(program.load_into(read.src).src)
        except KeyError:
            continue  # no such read / load: the tag assertions report it
        if src.binding != want_bind[op]:
            bad.append((f"operand {op}: {src.name} is bound to the caller's argument {src.binding!r}, but the kernel's "
                        f"{op} is the caller's {want_bind[op]}{' (swap-AB)' if swap else ''}", str(src.loc)))
        if op in majors and src.major != majors[op]:
            bad.append((f"operand {op}: {src.name} is {src.major}-contiguous, but layout {layout!r}"
                        f"{' under swap-AB' if swap else ''} stores it {majors[op]}-contiguous", str(src.loc)))
        if program.family == "gemm":
            ld = program.load_into(read.src)
            grouped = {f: getattr(ld, f) for f in ("expert_rows", "expert_shift", "pair_offset") if getattr(ld, f, 0)}
            if grouped:
                bad.append((f"operand {op}: load {ld.name} has {grouped}: the grouped-GEMM row offsets (family moe) "
                            "move rows of a plain GEMM's tile to other rows of the operand", str(ld.loc)))
            if ld.row_bound or ld.row_shift_delta:
                bad.append((f"operand {op}: load {ld.name} has row_bound {ld.row_bound!r}: row-bounded boxes (family "
                            "moe) read a per-m-tile routed-row count that a plain GEMM has no table for, through a 3-D "
                            "tensor map its host never encodes", str(ld.loc)))
    if program.family == "gemm":
        for st in program.stores:
            if st.row_bound or st.row_shift_delta:
                bad.append((f"store {st.name} has row_bound {st.row_bound!r}: row-bounded boxes (family moe) read a "
                            "per-m-tile routed-row count that a plain GEMM has no table for, through a 3-D tensor map "
                            "its host never encodes", str(st.loc)))
    # the caller's C and D are row-major M x N: the kernel's (M, N) are (N, M) under swap-AB, so they are
    # M-contiguous there and N-contiguous otherwise (templates/gemm/host_maps.j2 encodes D's map from it)
    want_cd = "M" if swap else "N"
    for tname in ("gC", "gD"):
        try:
            t = program.tensor(tname)
        except KeyError:
            continue
        if t.major != want_cd:
            bad.append((f"{tname} is {t.major}-contiguous, but the caller's row-major {t.binding} is "
                        f"{want_cd}-contiguous in the kernel's modes{' (swap-AB: D^T = B A^T)' if swap else ''}: "
                        "the kernel writes / reads its transpose", str(t.loc)))
    if bad:
        out = []
        for msg, where in bad:
            cex = Counterexample(
                "G1", rule, "arith", "host.tensor_map", where, -1, -1, -1, {}, dict(PRODUCER_THREAD),
                "", {}, "the tensor map of each operand is encoded over the caller's own operand in its storage order",
                msg, f"swap_ab {swap}, layout {layout!r}: gA -> {want_bind['A']}, gB -> {want_bind['B']}",
                element={"tensor": msg.split(":")[1].split()[0] if ":" in msg else "", "binding": msg})
            out.append(Violation(rule, "G1", msg, "bind gA/gB to the caller's arguments in its storage order", where,
                                 cex))
        return [], out
    return [Proof(rule, "G1", "arith", f"gA/gB are bound to the caller's {want_bind['A']}/{want_bind['B']} in its "
                  f"storage order (layout {layout!r}{', swap-AB' if swap else ''})", 1)], []


# ------------------------------------------------------------------------------ descriptors

#: the CTA-local address of the aligned dynamic shared memory the model places the kernel at
#: (after the 1 KiB the system reserves), and a cluster rank in the window address's high bits
WINDOW_LOCAL_BASE = 1024
WINDOW_RANK_BITS = 1 << 24


@dataclass(frozen=True)
class _DescMismatch:
    """The first slot where the kernel's descriptor and the view disagree."""

    message: str
    stage: int = 0
    wg: int = 0
    rep: int = 0
    k_block: int = 0
    mn: int = 0
    k: int = 0
    hw: int = -1
    model: int = -1
    desc: str = ""


def desc_add(desc: int, off: int) -> int:
    """The templates' ``desc_add`` (``templates/common/sm90.j2``, used by the GEMM, MoE and attention
    mainloops): ``off`` added to the 64-bit descriptor's low 32-bit word only, the high word kept, a carry
    out of bit 31 dropped.

    >>> hex(desc_add(0x4000004000000010, 0x20)), hex(desc_add(0x00000001FFFFFFFF, 1))
    ('0x4000004000000030', '0x100000000')
    """
    return (desc & ~0xFFFFFFFF) | ((desc + off) & 0xFFFFFFFF)


def _descriptor_walk(program: Program, read: MmaRead, atoms_m: int, reps_m: int, k_blocks: int, mma_op: Any,
                     stage_cap: int | None = None) -> tuple[int, set, _DescMismatch | None]:
    """Decode every descriptor the kernel forms for ``read`` (plan from the read, as the template
    prints it) at the slots the MMA ``mma_op`` really reads (the first ``stage_cap`` stages when
    given): ``(count, {(type, LBO, SBO)}, first mismatch or None)``. The templates (``desc_add`` of
    ``common/sm90.j2``) advance the base descriptor in its low 32-bit word only (``desc_add``),
    modelled here by :func:`desc_add`. Raises
    ``DescriptorError`` / ``LayoutError`` for a view no descriptor expresses."""
    from argus_cutlass.layout.gmma_desc import GmmaDescriptor, decode_bytes, descriptor_plan

    t = program.tensor(read.src)
    plan = descriptor_plan(read, atoms_m, reps_m)
    lay = view_layout(read.view)
    eb = t.elem_bytes
    major = read.view.atom.major
    op = mma_op
    op_mn = op.m if read.operand == "A" else op.n
    wgs = atoms_m if read.operand == "A" else 1
    reps = reps_m if read.operand == "A" else 1
    if len(read.view.shape) >= 3 and len(t.shape) >= 3 and int(read.view.shape[2]) != int(t.shape[2]):
        # the kernel advances the descriptors by the buffer's stages (the view's count is printed only as a
        # static_assert): a view of other stages is no view of this buffer (review, session 44)
        stage = min(int(read.view.shape[2]), int(t.shape[2]))
        return 0, set(), _DescMismatch(
            f"operand {read.operand}: the read view {read.view.shape} has {read.view.shape[2]} stages, the buffer "
            f"{t.name} {t.shape[2]} (its stage {stage} is read through no view stage or past the buffer)", stage=stage)
    if k_blocks > len(plan.kb_offsets):
        return 0, set(), _DescMismatch(
            f"operand {read.operand}: the k loop runs {k_blocks} k-blocks but the kernel's offset table has "
            f"{len(plan.kb_offsets)} (desc_{read.operand.lower()}_kblock_offset({k_blocks - 1}) is out of range)",
            k_block=k_blocks - 1)
    mn, kk = np.meshgrid(np.arange(op_mn), np.arange(op.k), indexing="ij")
    seen: set = set()
    count = 0
    window = WINDOW_RANK_BITS + WINDOW_LOCAL_BASE
    base_field = ((window + t.base_bytes) >> 4) & 0x3FFF
    d0 = plan.bits + base_field  # the kernel's desc_a0 / desc_b0
    for s in range(_stages(program, read.src, stage_cap)):
        for w in range(wgs):
            for r in range(reps):
                for kb in range(k_blocks):
                    add = ((s * plan.stage_bytes + w * plan.wg_bytes + r * plan.rep_bytes + plan.kb_offsets[kb])
                           & 0xFFFFFFFF) >> 4
                    value = desc_add(d0, add)
                    desc = GmmaDescriptor.from_bits(value)
                    row0 = op.m * (r * atoms_m + w) if read.operand == "A" else 0
                    if (value >> 14) & 0x3 or (desc.lbo, desc.sbo, desc.layout_type) != (plan.lbo, plan.sbo,
                                                                                          plan.layout_type):
                        return count, seen, _DescMismatch(
                            f"operand {read.operand} stage {s} warpgroup {w} rep {r} k_block {kb}: the start address "
                            f"field {base_field + add:#x} overflows its 14 bits (smem address "
                            f"{16 * (base_field + add) - WINDOW_LOCAL_BASE} + the 1 KiB reserved >= 2^18)",
                            s, w, r, kb, row0, kb * op.k)
                    hw = decode_bytes(desc, major, eb, mn, kk)
                    model = WINDOW_LOCAL_BASE + t.base_bytes + eb * np.asarray(lay(row0 + mn, kb * op.k + kk, s),
                                                                               dtype=np.int64)
                    bad = np.argwhere(hw != model)
                    if bad.size:
                        i, j = (int(x) for x in bad[0])
                        text = f"start {desc.start:#x}, LBO {desc.lbo}, SBO {desc.sbo}, type {desc.layout_type}"
                        if read.op != op:
                            why = (f"the read's GMMA op {read.op.m}x{read.op.n}x{read.op.k} is not the MMA's "
                                   f"{op.m}x{op.n}x{op.k}")
                        elif WINDOW_LOCAL_BASE + t.base_bytes >= 1 << 18:
                            why = (f"{t.name} starts at smem byte {t.base_bytes}, past the 2^18 bytes the 14-bit "
                                   "start address field holds (1 KiB reserved): the kernel's start address wraps")
                        else:
                            why = "buffer not aligned to the swizzle period?"
                        return count, seen, _DescMismatch(
                            f"operand {read.operand} stage {s} warpgroup {w} rep {r} k_block {kb}: the kernel's "
                            f"descriptor ({text}) reads byte {int(hw[i, j]) - WINDOW_LOCAL_BASE} for slot "
                            f"(mn={row0 + i}, k={kb * op.k + j}) but the view places it at "
                            f"{int(model[i, j]) - WINDOW_LOCAL_BASE} ({why})",
                            s, w, r, kb, row0 + i, kb * op.k + j, int(hw[i, j]) - WINDOW_LOCAL_BASE,
                            int(model[i, j]) - WINDOW_LOCAL_BASE, text)
                    seen.add((desc.layout_type, desc.lbo, desc.sbo))
                    count += 1
    return count, seen, None


def check_descriptors(program: Program, stage_cap: int | None = None) -> Outcome:
    """gmma.descriptor: every wgmma descriptor the kernel forms, ``desc_add(kDesc + ((smem + base) >> 4 &
    0x3FFF), uint32_t(s * stage + w * wg + r * rep + kb_offset[kb]) >> 4)`` (the offset added to the
    descriptor's low 32-bit word only, as the template's ``desc_add``) with the plan the template
    prints (:func:`~argus_cutlass.layout.gmma_desc.descriptor_plan` of the read), decodes to the
    read view's byte address at every (stage, warpgroup, repetition, k-block, slot) the MMA's
    instruction reads. The 14-bit start-address field is modelled as the kernel masks it (in a
    cluster launch the shared window address holds the CTA rank above bit 18; the model's window
    has one there). A view that no descriptor can express (not a GMMA canonical layout) is a
    violation. ``stage_cap``: the first ``stage_cap`` stages only (:func:`enumerated_stages`).
    PTX ISA 9.7.15.5.1."""
    from argus_cutlass.layout.gmma_desc import DescriptorError

    rule = "gmma.descriptor"
    proofs: list[Proof] = []
    violations: list[Violation] = []
    for mma in program.mmas:
        kl = program.kloop
        k_blocks = kl.k_blocks if kl is not None else 1
        for read in _reads_of(program, mma).values():
            if read.view is None:
                continue
            try:
                count, seen, mismatch = _descriptor_walk(program, read, mma.atoms_m, mma.reps_m, k_blocks, mma.op,
                                                         stage_cap)
            except (DescriptorError, LayoutError) as exc:
                mismatch = _DescMismatch(f"operand {read.operand}: no GMMA descriptor expresses the view "
                                         f"{read.view.atom.name} {read.view.shape}: {exc}")
                hint = ("the MMA-side view must be a GMMA canonical layout (tile a GMMA::Layout_*_Atom over the "
                        "buffer's shape)")
            else:
                hint = ("align the buffer to 8 x swizzle bytes (R8 smem.alignment) and form the descriptors from "
                        "the MMA's own op")
            if mismatch is not None:
                m = mismatch
                row, col = (m.mn, 0) if read.operand == "A" else (0, m.mn)
                thread, register = accumulator_thread(mma, row, col)
                cex = Counterexample(
                    "G1", rule, "enum", f"{mma.name}.gemm", str(read.loc), m.stage, m.stage, m.k_block,
                    {"mn": m.mn, "k": m.k % max(1, mma.op.k)}, thread, register,
                    {read.operand: m.hw} if m.hw >= 0 else {},
                    f"the descriptor reads {read.operand}'s view at byte {m.model}" if m.model >= 0 else
                    "a canonical GMMA descriptor of the view",
                    (f"it reads byte {m.hw} ({m.desc})" if m.hw >= 0 else m.message),
                    f"descriptor plan of {read.name} ({read.view.atom.name}, op {read.op.m}x{read.op.n}x{read.op.k}); "
                    f"MMA {mma.name} op {mma.op.m}x{mma.op.n}x{mma.op.k}, {mma.atoms_m} warpgroups x {mma.reps_m} "
                    "repetitions", k_tile=m.stage,
                    element={"tensor": read.operand, "mn": m.mn, "k": m.k},
                    params={"warpgroup": m.wg, "rep": m.rep})
                violations.append(Violation(rule, "G1", m.message, hint, str(read.loc), cex))
                continue
            slots = count * (mma.op.m if read.operand == "A" else mma.op.n) * mma.op.k
            names = ("INTER", "SW128", "SW64", "SW32")
            fields = ", ".join(f"{names[lt]} LBO={lbo} SBO={sbo}" for lt, lbo, sbo in sorted(seen))
            n_s, all_s = _stages(program, read.src, stage_cap), _stages(program, read.src)
            which = "" if n_s == all_s else f" of the first {n_s} of {all_s} stages"
            proofs.append(Proof(rule, "G1", "enum",
                                f"operand {read.operand}: the kernel's {count} descriptors ({fields}; 14-bit start "
                                f"address masked) decode to the view's address at all {slots} slots{which}", slots))
    return proofs, violations


# ------------------------------------------------------------------------------------ k loop


def check_k_coverage(program: Program) -> Outcome:
    """k.coverage (G3) by enumeration for every K in [1, 2 * tile_k + 1]: each k < K is summed
    by exactly one MMA slot (k_tile, k_block, kk) and every slot reads inside its k-tile. The SMT
    tier proves the same for all K < 2^bound_bits
    (:func:`argus_cutlass.verify.smt.check_k_coverage_smt`); this tier's first failure (smallest
    K) is reported by the caller only when the SMT tier is off. Slots past K read TMA's fill,
    which ``residue.load`` checks.
    """
    kl = program.kloop
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
        if (counts != 1).any() or (local >= kl.tile_k).any():
            first = int(np.flatnonzero(counts != 1)[0]) if (counts != 1).any() else -1
            msg = (f"K={K} ({kts} k-tiles x {kl.k_blocks} k-blocks x {kl.block_k}): "
                   + (f"k={first} summed {int(counts[first])} times" if first >= 0 else
                      "a slot reads outside its k-tile"))
            return [], [Violation(rule, "G3", msg, "k_tiles = ceil_div(K, tile_k), k_blocks = tile_k / block_k",
                                  str(kl.loc))]
    return [Proof(rule, "G3", "enum", f"every k < K summed exactly once for all K in [1, {2 * kl.tile_k + 1}] "
                  f"({points} slots)", points, time.perf_counter() - t0)], []


def check_acc_sets(program: Program) -> Outcome:
    """k.acc_sets (G3): the k loop's accumulator sets (:attr:`~argus_cutlass.dsl.ir.KLoop.acc_sets`) add up
    to D exactly once. Slot ``(kt, b, kk)`` accumulates into set ``b % S``; a k-block of k-tile 0 with ``b <
    acc_zeroed`` overwrites its set (``ScaleOut::Zero``), every other one adds; after the loop set 0 plus the
    sets of ``acc_summed`` (in order) is D. Simulated, for k-tiles 0 and 1 (every later k-tile repeats k-tile
    1's operations, so their k-blocks are counted as k-tile 1's), per set: the k-blocks it holds at the end
    and whether it was read before any write (stale registers: the previous tile's sums, or garbage). Holds
    iff every k-block of both k-tiles reaches D exactly once and no summed set was read stale. With
    :func:`check_k_coverage` (each k summed by exactly one slot) this gives each k in D exactly once. A work
    unit runs at least one k-tile (its k-tile 0 is the one with ``ScaleOut::Zero``): CUTLASS's schedulers
    skip units with no k-tile (``is_valid() == (k_tile_count > 0)``, modelled in :mod:`.decomposition`).
    """
    kl = program.kloop
    assert kl is not None
    t0 = time.perf_counter()
    rule = "k.acc_sets"
    S, zeroed, summed = kl.acc_sets, kl.acc_zeroed, kl.acc_summed
    held: list[list[tuple[int, int]]] = [[] for _ in range(S)]
    stale = [True] * S   # a set not yet written holds whatever its registers held
    for kt in (0, 1):
        for b in range(kl.k_blocks):
            s = b % S
            if kt == 0 and b < zeroed:
                held[s] = [(kt, b)]
                stale[s] = False
            else:
                held[s].append((kt, b))
    count: dict[tuple[int, int], int] = {}
    reads = (0,) + tuple(summed)
    for s in reads:
        for slot in held[s]:
            count[slot] = count.get(slot, 0) + 1
    slots = [(kt, b) for kt in (0, 1) for b in range(kl.k_blocks)]
    bad = next(((kt, b) for kt, b in slots if count.get((kt, b), 0) != 1), None)
    stale_set = next((s for s in reads if stale[s]), None)
    fix = (f"zero the first k-block of each set (k-tile 0, k-blocks 0..{S - 1}: acc_zeroed = {S}) and add sets "
           f"{tuple(range(1, S))} into set 0 once each (acc_summed)")
    mma = program.mma
    if bad is None and stale_set is None:
        return [Proof(rule, "G3", "enum", f"{S} accumulator set(s): k-tile 0 zeroes k-blocks {list(range(zeroed))}, "
                      f"set 0 + sets {list(summed)} hold every k-block of k-tiles 0 and 1 exactly once",
                      len(slots), time.perf_counter() - t0)], []
    if stale_set is not None:
        kt, b = next(((kt, b) for kt, b in slots if b % S == stale_set), (0, stale_set))
        msg = (f"accumulator set {stale_set} is never started with ScaleOut::Zero (acc_zeroed = {zeroed} of {S} "
               f"sets) but is added into D: its registers' previous contents (the last tile's sums) are added too")
        actual = f"D(0,0) += stale registers of set {stale_set}"
    else:
        kt, b = bad
        n = count.get(bad, 0)
        msg = (f"k-block {b} of k-tile {kt} (k = {kt * kl.tile_k + b * kl.block_k}..{kt * kl.tile_k + (b + 1) * kl.block_k - 1}"
               f", set {b % S}) reaches D {n} times (acc_sets {S}, acc_zeroed {zeroed}, acc_summed {tuple(summed)})")
        actual = f"summed {n} times"
    thread, register = accumulator_thread(mma, 0, 0) if mma is not None else ({}, "")
    cex = Counterexample(
        "G3", rule, "enum", "mainloop.k_loop", str(kl.loc), kt, -1, b, {"k_tile": kt, "k_block": b, "set": b % S},
        thread, register, {}, "summed exactly once", actual, f"k loop acc_sets={S} acc_zeroed={zeroed} "
        f"acc_summed={tuple(summed)}", k_tile=kt, element={"tensor": "D", "D": "(0, 0)", "k": kt * kl.tile_k + b * kl.block_k},
        params={"K": 2 * kl.tile_k, "k_tiles": 2})
    return [], [Violation(rule, "G3", msg, fix, str(kl.loc), cex)]


def check_residue_load(program: Program) -> Outcome:
    """residue.load (G8): the TMA loads fill box elements past K with zeros
    (``CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE``), so the slots ``k >= K`` of the last k-tile add 0. With
    ``oob_fill = "nan"`` (``..._NAN_REQUEST_ZERO_FMA``) they read NaN, and ``NaN * NaN`` (A and B
    both past K) poisons every accumulator of the tile. PTX ISA 9.7.9.25; CUDA driver API
    ``CUtensorMapFloatOOBfill``."""
    rule = "residue.load"
    kl = program.kloop
    assert kl is not None
    if kl.oob_fill == "zero":
        return [Proof(rule, "G8", "arith", f"TMA fills k >= K with zeros (oob_fill zero): the residue slots of the "
                      f"last of ceil(K/{kl.tile_k}) k-tiles add 0 for every K", 1)], []
    K = 1
    mma = program.mma
    thread, register = accumulator_thread(mma, 0, 0) if mma is not None else ({}, "")
    cex = Counterexample(
        "G8", rule, "arith", "mainloop.k_loop", str(kl.loc), 0, 0, 0, {"k": 1}, thread, register, {},
        f"slot k=1 >= K={K} reads 0 (zero fill) and adds nothing to D(0,0)",
        f"slot k=1 >= K={K} reads the {kl.oob_fill} fill: A(0,1) * B(0,1) = NaN * NaN poisons D(0,0)",
        f"k loop oob_fill={kl.oob_fill} (tensor map "
        f"{'CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA' if kl.oob_fill == 'nan' else kl.oob_fill})",
        k_tile=0, element={"tensor": "A, B", "A": "(m=0, k=1) past K", "B": "(n=0, k=1) past K"},
        params={"K": K, "k_tiles": 1})
    return [], [Violation(rule, "G8", f"the TMA loads fill elements past K with {kl.oob_fill}: with K={K} the slots "
                          f"k in [1, {kl.tile_k}) of k-tile 0 multiply {kl.oob_fill} fills and D(0,0) becomes NaN",
                          "encode the tensor maps with CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE (zero fill)", str(kl.loc),
                          cex)]
