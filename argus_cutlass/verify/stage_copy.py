"""G9: aligned staging, the any-alignment path (:class:`~argus_cutlass.dsl.ir.StageCopy` nodes).

A problem the direct TMA path refuses (a leading dimension or a contiguous extent that is not a
multiple of 16 bytes, an unaligned base pointer) runs the same verified TMA GEMM on staged
operands: the entry copies A / B into stream-ordered buffers with an aligned leading dimension and
zero padding before the GEMM, and copies a staged D back into the caller's ``M x N`` after it.

Rules (``invariants/gemm.toml``, G9):

* ``stage.cover`` (copy in): every caller element ``(r, c)``, ``r < rows``, ``c < cols``, reaches
  its staged position ``r * staged_ld + c`` exactly once and carries the caller's ``(r, c)``; no
  copy reads outside the caller's ``rows x cols`` matrix (its padding ``[cols, ld)`` may be
  anything, or no memory at all) or writes outside its staged buffer; the node copies the
  operand's own storage (``rows x cols`` are the size names the program's gmem tensor and layout
  give it); the copy kernel's launch is legal (``threads`` a multiple of 32, at most 1024; grid y
  at most 65535).
* ``stage.align``: the staged leading dimension ``round_up(cols, align)`` is a multiple of 16 bytes
  for every ``cols`` (``align * element bytes % 16 == 0``), so is the GEMM tensor map's contiguous
  extent over the staged buffer (``map_extent`` ``staged``: TMA stores write whole 16-byte chunks,
  and CUTLASS's ``can_implement`` asks the same of the extent), and every staged buffer starts
  16-byte aligned (the workspace from ``cudaMallocAsync`` is 256-byte aligned; each buffer's
  offset is a multiple of ``base_align``).
* ``stage.zero`` (copy in): every staged element the GEMM's tensor map can deliver, ``[0, rows) x
  [0, map extent)``, is written exactly once before the GEMM: the caller's value for ``c < cols``,
  zero for ``cols <= c < staged_ld``. For a K-contiguous operand the padded k of ``[K,
  round_up(K, 16 bytes))`` is then zero in this operand, and the other operand's k >= K is zero
  too (TMA's out-of-bounds fill, ``residue.load``; or its own zero padding), so the padded k adds
  nothing to any accumulator; past the staged ld the TMA fill applies.
* ``stage.writeback`` (copy out, D): a staged D is copied back after the GEMM (direction ``out``),
  the copy writes exactly ``[0, M) x [0, N)`` of the caller's D once each (nothing past N in a
  row, nothing past row M: the caller's padding ``[N, ldd)`` keeps its bytes) and reads each
  value from ``D'(m, n)``, where the GEMM's TMA store wrote it (pitch ``staged_ld``); no input
  operand is written back.

The model is the copy kernel of ``templates/gemm/stage.j2`` as printed: block ``(x, y)`` of
``grid.x = min(ceil(fill_cols / threads), grid_x)``, ``grid.y = min(rows + row_delta, grid_y)``
walks rows ``y + i grid.y`` and columns ``x threads + t + j grid.x threads``; element ``(r, c)``
of ``[0, rows + row_delta) x [0, fill_cols)`` is ``src[r * src_pitch + c]`` for ``c < cols +
col_delta`` and zero otherwise, stored at ``dst[r * dst_pitch + c]``. It is enumerated (numpy)
over every ``rows <= 3``, ``cols <= 2 align + 1`` and caller ``ld - cols <= align``, plus the
sizes where the grid-stride loops wrap (``grid_x * threads + threads + 1`` columns, ``grid_y + 2``
rows). The image is affine in ``(r, c)`` with pitches linear in the leading dimensions, and the
grid-stride loops cover ``[0, n)`` once for every ``n`` (Euclidean division by the grid's extent),
so the enumerated identity holds for every size.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from argus_cutlass.dsl.ir import DTYPE_BYTES, Program, StageCopy
from argus_cutlass.verify.report import Counterexample, Proof, Violation

__all__ = ["CopyImage", "STAGE_RULES", "check_stage_copies", "copy_image", "size_cases"]

#: the rules of this module, with their obligation text
STAGE_RULES = {
    "stage.cover": "every caller element reaches its staged position once, reads stay in the caller's matrix",
    "stage.align": "staged leading dimensions, tensor-map extents and buffer offsets are multiples of 16 bytes",
    "stage.zero": "every staged element the GEMM's tensor map reads is written: the caller's value or zero",
    "stage.writeback": "a staged D is copied back into exactly [0, M) x [0, N) of the caller's D, from D'",
}
#: value of an element the copy writes as zero (not read from the source)
ZERO = -1
#: the largest dimension of a wrap-around case the enumeration builds (elements)
_WRAP_CAP = 2**17
#: CUDA launch limits of the copy kernel (threads per block, grid.y)
_MAX_THREADS, _MAX_GRID_Y = 1024, 65535


def _launch_problem(node: StageCopy) -> str | None:
    """Why the copy kernel of ``node`` cannot launch (``threads`` a multiple of 32 and at most 1024,
    ``gridDim.y`` at most 65535: CUDA C Programming Guide, compute capability 9.0 limits), or None."""
    if node.threads % 32 or node.threads > _MAX_THREADS:
        return f"threads={node.threads}: a block is a multiple of 32 threads, at most {_MAX_THREADS}"
    if node.grid_y > _MAX_GRID_Y:
        return f"grid_y={node.grid_y}: gridDim.y is at most {_MAX_GRID_Y} (the launch fails for more rows)"
    return None


@dataclass(frozen=True)
class CopyImage:
    """Every element one copy kernel launch visits (flat arrays, one entry per visit).

    Attributes:
        r, c: the element's (row, column) in the copy's index space.
        src: the source element index (``r * src_pitch + c``), or :data:`ZERO`.
        dst: the destination element index (``r * dst_pitch + c``).
        bx, by, t: the visiting block (x, y) and thread.
        grid: ``(grid.x, grid.y)`` of the launch.
        staged_ld: the staged leading dimension.
    """

    r: np.ndarray
    c: np.ndarray
    src: np.ndarray
    dst: np.ndarray
    bx: np.ndarray
    by: np.ndarray
    t: np.ndarray
    grid: tuple[int, int]
    staged_ld: int


def _loop(start_count: int, step: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """``for (v = s; v < n; v += step)`` for every start ``s < start_count``: (values, starts)."""
    if n <= 0 or start_count <= 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    s = np.arange(start_count, dtype=np.int64)
    trips = -(-n // step)
    v = s[:, None] + step * np.arange(trips, dtype=np.int64)[None, :]
    ss = np.broadcast_to(s[:, None], v.shape)
    keep = v < n
    return v[keep], ss[keep]


def copy_image(node: StageCopy, rows: int, cols: int, ld: int) -> CopyImage:
    """The copy kernel of ``node`` for an operand of ``rows x cols`` with caller pitch ``ld`` (the
    module docstring's model, the loops of ``templates/gemm/stage.j2``)."""
    sld = node.staged_ld(cols)
    copy_rows, copy_cols = rows + node.row_delta, cols + node.col_delta
    fill_cols = sld if node.fill == "zero" else copy_cols
    pitch = {"caller": ld, "staged": sld}
    sp, dp = pitch[node.src_pitch], pitch[node.dst_pitch]
    if copy_rows <= 0 or fill_cols <= 0:
        e = np.zeros(0, np.int64)
        return CopyImage(e, e, e, e, e, e, e, (0, 0), sld)
    gx = min(-(-fill_cols // node.threads), node.grid_x)
    gy = min(copy_rows, node.grid_y)
    rv, by = _loop(gy, gy, copy_rows)
    cv, start = _loop(gx * node.threads, gx * node.threads, fill_cols)
    r = np.repeat(rv, cv.size)
    b_y = np.repeat(by, cv.size)
    c = np.tile(cv, rv.size)
    st = np.tile(start, rv.size)
    src = np.where(c < copy_cols, r * sp + c, ZERO)
    return CopyImage(r, c, src, r * dp + c, st // node.threads, b_y, st % node.threads, (gx, gy), sld)


def size_cases(node: StageCopy) -> Iterator[tuple[int, int, int]]:
    """``(rows, cols, ld)`` cases, smallest first: every ``rows <= 3``, ``cols <= 2 align + 1``,
    ``ld - cols <= align``; then the grid-stride wrap sizes (when they stay under 2^17)."""
    for rows in (1, 2, 3):
        for cols in range(1, 2 * node.align + 2):
            for ld in range(cols, cols + node.align + 1):
                yield rows, cols, ld
    wrap_c = node.grid_x * node.threads + node.threads + 1
    if wrap_c <= _WRAP_CAP:
        yield 1, wrap_c, wrap_c + 1
    if node.grid_y + 2 <= _WRAP_CAP:
        yield node.grid_y + 2, 1, 1


def _storage(program: Program, operand: str) -> tuple[str, str] | None:
    """The caller's ``(rows, cols)`` size names of ``operand``'s storage, from its gmem tensor (the
    kernel's modes, swapped back under swap-AB) and majorness; None when no gmem tensor binds it."""
    t = next((x for x in program.tensors if x.space == "gmem" and x.binding == operand), None)
    if t is None or len(t.shape) != 2 or t.major not in t.shape:
        return None
    conv = {"M": "N", "N": "M", "K": "K"} if program.param("swap_ab") else {"M": "M", "N": "N", "K": "K"}
    other = next(x for x in t.shape if x != t.major)
    return conv.get(other, other), conv.get(t.major, t.major)


def _coord(node: StageCopy, r: int, c: int, name: str | None = None) -> str:
    """``A(k=3, m=5)``: a storage element by its GEMM coordinates."""
    return f"{name or node.operand}({node.rows.lower()}={r}, {node.cols.lower()}={c})"


def _thread(img: CopyImage, i: int, node: StageCopy) -> dict:
    t = int(img.t[i])
    return {"cta": int(img.by[i]) * img.grid[0] + int(img.bx[i]), "threadIdx": t, "warp": t // 32, "lane": t % 32,
            "role": f"{node.name} copy kernel, block ({int(img.bx[i])}, {int(img.by[i])})"}


def _cex(node: StageCopy, rule: str, img: CopyImage | None, i: int | None, element: dict, expected: str,
         actual: str, params: dict, chain: tuple[str, ...] = ()) -> Counterexample:
    point = f"{node.name} (copy {'in, before' if node.direction == 'in' else 'back, after'} the GEMM)"
    thread = _thread(img, i, node) if img is not None and i is not None else {}
    model = (f"templates/gemm/stage.j2: grid {img.grid if img is not None else '-'} x {node.threads} threads, "
             f"src pitch {node.src_pitch}, dst pitch {node.dst_pitch}, fill {node.fill}, row/col delta "
             f"{node.row_delta}/{node.col_delta}")
    return Counterexample("G9", rule, "enum", point, str(node.loc), -1, -1, -1,
                          {"r": element.get("r", -1), "c": element.get("c", -1)}, thread, "", {}, expected, actual,
                          model, element={k: v for k, v in element.items() if k not in ("r", "c")}, chain=chain,
                          params=params)


def _params(node: StageCopy, rows: int, cols: int, ld: int) -> dict:
    ld_name = f"ld{node.operand.lower()}"
    return {node.rows: rows, node.cols: cols, ld_name: ld, f"{ld_name}_staged": node.staged_ld(cols)}


def _extent(node: StageCopy, cols: int) -> int:
    """The contiguous extent of the GEMM's tensor map over the staged buffer."""
    return node.staged_ld(cols) if node.map_extent == "staged" else cols


# ---------------------------------------------------------------------------------------- rules


def _check_align(node: StageCopy) -> tuple[list[Proof], list[Violation]]:
    eb = node.elem_bytes
    where = str(node.loc)
    bad = next((c for c in range(1, 2 * node.align + 2) if (node.staged_ld(c) * eb) % 16), None)
    what = None
    if bad is not None:
        what = (f"staged ld = round_up({node.cols}={bad}, {node.align}) = {node.staged_ld(bad)} elements = "
                f"{node.staged_ld(bad) * eb} bytes, not a multiple of 16 (TMA global stride rule)",
                f"{node.cols}={bad}")
    else:
        bad = next((c for c in range(1, 2 * node.align + 2) if (_extent(node, c) * eb) % 16), None)
        if bad is not None:
            what = (f"the GEMM's tensor map over {node.operand}' has contiguous extent {node.cols}={bad} "
                    f"({bad * eb} bytes, not a multiple of 16): TMA stores write whole 16-byte chunks past it and "
                    "CUTLASS can_implement refuses it", f"{node.cols}={bad}")
    if what is None and node.base_align % 16:
        what = (f"the staged buffer's offset in the workspace is a multiple of base_align={node.base_align} bytes "
                "only: not 16-byte aligned (TMA global address rule)", "base_align")
    if what is None:
        return [Proof("stage.align", "G9", "arith",
                      f"{node.name}: staged ld = round_up({node.cols}, {node.align}) x {eb} bytes and the tensor "
                      f"map's extent ({node.map_extent}) are multiples of 16 bytes for every {node.cols}; buffer "
                      f"offsets multiples of {node.base_align} in a 256-byte aligned cudaMallocAsync workspace",
                      2 * node.align + 1)], []
    cols = int(what[1].split("=")[1]) if "=" in what[1] else 1
    cex = _cex(node, "stage.align", None, None, {"tensor": f"{node.operand}'"}, "every staged stride, extent and "
               "base a multiple of 16 bytes", what[0], _params(node, 1, cols, cols))
    return [], [Violation("stage.align", "G9", f"{node.name}: {what[0]}",
                          f"round the staged leading dimension and extent up to {16 // eb} elements "
                          f"(align={16 // eb}) and place buffers at 16-byte multiples", where, cex)]


def _check_in(node: StageCopy, expect: tuple[str, str] | None) -> tuple[list[Proof], list[Violation]]:
    """stage.cover and stage.zero of a copy-in node."""
    where = str(node.loc)
    out_p: list[Proof] = []
    out_v: list[Violation] = []
    launch = _launch_problem(node)
    if expect is not None and (node.rows, node.cols) != expect:
        msg = (f"{node.name} copies a {node.rows} x {node.cols} storage, but {node.operand} is stored {expect[0]} x "
               f"{expect[1]} ({expect[1]} contiguous): the copy reads other elements than the GEMM expects")
        out_v.append(Violation("stage.cover", "G9", msg, "stage the operand's storage as the layout states it",
                               where, _cex(node, "stage.cover", None, None, {"tensor": node.operand},
                                           f"{node.operand} stored {expect[0]} x {expect[1]}",
                                           f"copied as {node.rows} x {node.cols}", {})))
    elif expect is None:
        out_v.append(Violation("stage.cover", "G9", f"{node.name}: no gmem tensor of the GEMM is bound to "
                               f"{node.operand}: nothing reads the staged buffer", None, where))
    if launch is not None:
        out_v.append(Violation("stage.cover", "G9", f"{node.name}: the copy kernel cannot launch: {launch}",
                               "keep threads a multiple of 32 <= 1024 and grid_y <= 65535", where))
    cover_bad = any(v.rule == "stage.cover" for v in out_v)
    zero_bad = False
    points = 0
    for rows, cols, ld in size_cases(node):
        img = copy_image(node, rows, cols, ld)
        sld = img.staged_ld
        points += img.r.size
        params = _params(node, rows, cols, ld)
        size = rows * sld
        # reads: inside the caller's rows x cols matrix
        if not cover_bad:
            rd = img.src >= 0
            rr, rc = np.divmod(np.where(rd, img.src, 0), ld)
            oob = rd & ~((rr < rows) & (rc < cols))
            oob |= img.src < ZERO
            if oob.any():
                i = int(np.flatnonzero(oob)[0])
                desc = (f"reads caller element {int(img.src[i])} = {_coord(node, int(rr[i]), int(rc[i]))}, outside "
                        f"the {rows} x {cols} matrix (pitch {ld})")
                out_v.append(Violation(
                    "stage.cover", "G9",
                    f"{node.name}: {desc}, for the copy's element {_coord(node, int(img.r[i]), int(img.c[i]), '')}",
                    "read the source with the caller's pitch, only c < cols and r < rows", where,
                    _cex(node, "stage.cover", img, i, {"tensor": node.operand, "r": int(img.r[i]), "c": int(img.c[i])},
                         "reads within the caller's matrix", desc, params)))
                cover_bad = True
        # writes: inside the staged buffer
        if not cover_bad:
            oob = (img.dst < 0) | (img.dst >= size)
            if oob.any():
                i = int(np.flatnonzero(oob)[0])
                desc = (f"writes staged element {int(img.dst[i])}, outside the {rows} x {sld} buffer "
                        f"({size} elements)")
                out_v.append(Violation(
                    "stage.cover", "G9", f"{node.name}: {desc}", "write only rows x staged_ld elements", where,
                    _cex(node, "stage.cover", img, i, {"tensor": f"{node.operand}'", "r": int(img.r[i]),
                                                       "c": int(img.c[i])},
                         f"writes within [0, {size})", desc, params)))
                cover_bad = True
        if cover_bad and zero_bad:
            break
        dst = np.clip(img.dst, 0, max(size - 1, 0))
        ok_w = (img.dst >= 0) & (img.dst < size)
        count = np.bincount(dst[ok_w], minlength=size)
        # the value that lands at each staged element (the last write; duplicates are flagged by count)
        value = np.full(size, -2, np.int64)
        value[dst[ok_w]] = img.src[ok_w]
        who = np.full(size, -1, np.int64)
        who[dst[ok_w]] = np.flatnonzero(ok_w)
        sr, sc = np.divmod(np.arange(size, dtype=np.int64), sld)
        ext = _extent(node, cols)
        want = np.where(sc < cols, sr * ld + sc, ZERO)
        read_by_map = sc < ext
        good = (count == 1) & (value == want)
        if not cover_bad:
            bad = np.flatnonzero((sc < cols) & ~good)
            if bad.size:
                j = int(bad[0])
                r, c = int(sr[j]), int(sc[j])
                i = int(who[j]) if who[j] >= 0 else None
                got = ("never written" if count[j] == 0 else f"written {int(count[j])} times" if count[j] > 1 else
                       "written 0" if value[j] == ZERO else
                       f"written with caller element {int(value[j])} = "
                       f"{_coord(node, *(int(x) for x in divmod(int(value[j]), ld)))}")
                desc = f"{_coord(node, r, c, node.operand + chr(39))} is {got}"
                out_v.append(Violation(
                    "stage.cover", "G9", f"{node.name}: {desc}; it must hold {_coord(node, r, c)}",
                    "copy every caller element once to the same (r, c) of the staged buffer", where,
                    _cex(node, "stage.cover", img, i, {"tensor": f"{node.operand}'", "r": r, "c": c},
                         f"{_coord(node, r, c, node.operand + chr(39))} = {_coord(node, r, c)} (written once)", desc,
                         params, chain=(f"{_coord(node, r, c)} at caller element {r * ld + c}",
                                        f"staged element {j} = {r} x {sld} + {c}"))))
                cover_bad = True
        if not zero_bad:
            bad = np.flatnonzero((sc >= cols) & read_by_map & ~good)
            if bad.size:
                j = int(bad[0])
                r, c = int(sr[j]), int(sc[j])
                i = int(who[j]) if who[j] >= 0 else None
                got = ("never written: uninitialised memory from cudaMallocAsync" if count[j] == 0 else
                       f"written {int(count[j])} times" if count[j] > 1 else
                       f"written with caller element {int(value[j])} (padding or the next row), not 0")
                desc = (f"{node.operand}'({node.rows.lower()}={r}, {node.cols.lower()}={c}) is read by the GEMM's "
                        f"tensor map (extent {ext}) but {got}")
                k_note = (" (padded k >= K enters the accumulators)" if node.cols == "K" else "")
                out_v.append(Violation(
                    "stage.zero", "G9", f"{node.name}: {desc}{k_note}",
                    "zero-fill the staged padding [cols, staged_ld) of every row (fill 'zero')", where,
                    _cex(node, "stage.zero", img, i, {"tensor": f"{node.operand}'", "r": r, "c": c},
                         f"{node.operand}'(r, c) = 0 for {node.cols} <= c < {sld}", desc, params)))
                zero_bad = True
        if cover_bad and zero_bad:
            break
    if not cover_bad:
        out_p.append(Proof("stage.cover", "G9", "enum",
                           f"{node.name}: every {node.operand}({node.rows.lower()}, {node.cols.lower()}) of the "
                           f"{node.rows} x {node.cols} storage reaches {node.operand}' once, reads stay in the caller's "
                           f"matrix (rows <= 3, {node.cols} <= {2 * node.align + 1}, ld - {node.cols} <= {node.align}, "
                           f"grid-stride wraps; affine, so all sizes)", points))
    if not zero_bad:
        out_p.append(Proof("stage.zero", "G9", "enum",
                           f"{node.name}: {node.operand}'(r, c) = 0 for {node.cols} <= c < round_up({node.cols}, "
                           f"{node.align}); every element the tensor map reads is written before the GEMM", points))
    return out_p, out_v


def _check_out(node: StageCopy, expect: tuple[str, str] | None) -> tuple[list[Proof], list[Violation]]:
    """stage.writeback of D's copy-back node."""
    where = str(node.loc)
    if expect is not None and (node.rows, node.cols) != expect:
        desc = f"{node.name} copies back a {node.rows} x {node.cols} storage, but D is {expect[0]} x {expect[1]}"
        return [], [Violation("stage.writeback", "G9", desc, "copy back D's own M x N storage", where,
                              _cex(node, "stage.writeback", None, None, {"tensor": "D"},
                                   f"D stored {expect[0]} x {expect[1]}", desc, {}))]
    launch = _launch_problem(node)
    if launch is not None:
        return [], [Violation("stage.writeback", "G9", f"{node.name}: the copy-back kernel cannot launch: {launch}",
                              "keep threads a multiple of 32 <= 1024 and grid_y <= 65535", where)]
    points = 0
    for rows, cols, ld in size_cases(node):
        img = copy_image(node, rows, cols, ld)
        sld = img.staged_ld
        points += img.r.size
        params = _params(node, rows, cols, ld)
        ext = _extent(node, cols)
        # writes into the caller's D: exactly [0, rows) x [0, cols), once each
        wr, wc = np.divmod(img.dst, ld)
        inside = (img.dst >= 0) & (wr < rows) & (wc < cols)
        problem = None
        if not inside.all():
            i = int(np.flatnonzero(~inside)[0])
            r, c = int(wr[i]), int(wc[i])
            what = (f"past N={cols} in row {r} (the caller's padding [N, ldd={ld}))" if c >= cols and r < rows else
                    f"past the last row M={rows}")
            problem = (i, r, c, f"writes D({r}, {c}) at element {int(img.dst[i])}, {what}")
        if problem is None:
            count = np.bincount(img.dst, minlength=rows * ld)
            grid_r, grid_c = np.divmod(np.arange(rows * ld, dtype=np.int64), ld)
            miss = np.flatnonzero((grid_c < cols) & (count != 1))
            if miss.size:
                j = int(miss[0])
                r, c = int(grid_r[j]), int(grid_c[j])
                hit = np.flatnonzero(img.dst == j)
                i = int(hit[0]) if hit.size else None
                problem = (i, r, c, f"D({r}, {c}) is written {int(count[j])} times (never: it keeps the caller's "
                                    "bytes)" if count[j] == 0 else f"D({r}, {c}) is written {int(count[j])} times")
        if problem is None:
            # values: D(r, c) must come from D'(r, c), which the GEMM's store wrote
            sr, sc = np.divmod(np.where(img.src >= 0, img.src, 0), sld)
            okv = (img.src >= 0) & (sr == wr) & (sc == wc) & (sc < min(cols, ext)) & (sr < rows)
            if not okv.all():
                i = int(np.flatnonzero(~okv)[0])
                r, c = int(wr[i]), int(wc[i])
                src = ("0 (zero fill), not D'" if img.src[i] < 0 else
                       f"D' element {int(img.src[i])} = D'({int(sr[i])}, {int(sc[i])}) (pitch {sld} holds it)")
                problem = (i, r, c, f"D({r}, {c}) is written from {src}; the GEMM stored D({r}, {c}) at D'({r}, {c}) "
                                    f"= element {r * sld + c}")
        if problem is not None:
            i, r, c, desc = problem
            return [], [Violation(
                "stage.writeback", "G9", f"{node.name}: {desc}",
                "copy back exactly D'(m, n) -> D(m, n) for m < M, n < N, after the GEMM", where,
                _cex(node, "stage.writeback", img if i is not None else None, i, {"tensor": "D", "r": r, "c": c},
                     f"D(m, n) = D'(m, n) for m < {rows}, n < {cols}, nothing else written", desc, params))]
    return [Proof("stage.writeback", "G9", "enum",
                  f"{node.name}: the copy back writes exactly [0, M) x [0, N) of D once each, from D'(m, n) at pitch "
                  f"round_up(N, {node.align}) (rows <= 3, N <= {2 * node.align + 1}, ldd - N <= {node.align}, "
                  "grid-stride wraps; affine, so all sizes)", points)], []


def _check_binding(program: Program, node: StageCopy) -> Violation | None:
    """stage.cover: the copy stages a TMA operand (A, B or D; C is read element by element by the
    epilogue, never through TMA, and may be null when beta = 0) in that operand's element type (the
    copy kernel's element and the workspace size are printed from ``node.dtype``)."""
    t = next((x for x in program.tensors if x.space == "gmem" and x.binding == node.operand), None)
    if node.operand == "C":
        msg = (f"{node.name} stages C, which the epilogue reads element by element (no TMA rule to meet) and which "
               "may be null when beta = 0: the copy would read through a null pointer")
        fix = "do not stage C"
    elif t is not None and t.dtype != node.dtype:
        msg = (f"{node.name} copies {node.operand} as {node.dtype} ({DTYPE_BYTES[node.dtype]} bytes) but "
               f"{node.operand} holds {t.dtype} ({DTYPE_BYTES[t.dtype]} bytes): the copy reads and writes "
               f"{node.operand}'s rows at the wrong element size, past the caller's matrix")
        fix = f"stage {node.operand} in its own element type ({t.dtype})"
    else:
        return None
    return Violation("stage.cover", "G9", msg, fix, str(node.loc),
                     _cex(node, "stage.cover", None, None, {"tensor": node.operand},
                          f"a TMA operand staged in {t.dtype if t is not None else node.dtype}", msg, {}))


def check_stage_copies(program: Program) -> tuple[list[Proof], list[Violation]]:
    """The ``stage.*`` rules on every :class:`StageCopy` of ``program`` (the module docstring)."""
    proofs: list[Proof] = []
    violations: list[Violation] = []
    copies = program.stage_copies
    for node in copies:
        p, v = _check_align(node)
        proofs += p
        violations += v
        v = _check_binding(program, node)
        if v is not None:
            violations.append(v)
            continue
        expect = _storage(program, node.operand)
        if node.direction == "in" and node.operand != "D":
            p, v = _check_in(node, expect)
        elif node.direction == "out" and node.operand == "D":
            p, v = _check_out(node, expect)
        elif node.direction == "out":
            msg = (f"{node.name} copies the staged {node.operand}' back into the caller's {node.operand}, an input "
                   f"the GEMM only reads (and {node.operand}' itself is never filled: the GEMM reads uninitialised "
                   "memory)")
            p, v = [], [Violation("stage.writeback", "G9", msg, f"stage {node.operand} with direction 'in'",
                                  str(node.loc), _cex(node, "stage.writeback", None, None,
                                                      {"tensor": node.operand}, "no write to an input",
                                                      msg, {}))]
        else:
            msg = (f"{node.name} copies the caller's D into D' before the GEMM and nothing copies D' back after it: "
                   "the GEMM's output never reaches D (D(0, 0) keeps the caller's bytes)")
            p, v = [], [Violation("stage.writeback", "G9", msg, "stage D with direction 'out'", str(node.loc),
                                  _cex(node, "stage.writeback", None, None, {"tensor": "D", "r": 0, "c": 0},
                                       "D(0, 0) = D'(0, 0) after the GEMM", msg, {}))]
        proofs += p
        violations += v
    names = [c.operand for c in copies]
    dup = sorted({x for x in names if names.count(x) > 1})
    if dup:
        violations.append(Violation("stage.cover", "G9", f"operands {dup} are staged twice: the GEMM reads one "
                                    "buffer, the other copy is wasted or races", None, str(copies[0].loc)))
    return proofs, violations
