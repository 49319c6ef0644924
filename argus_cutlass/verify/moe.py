"""Verifier of the MoE family (:class:`~argus_cutlass.dsl.moe_ir.MoELayer`): ``verify_moe``.

The two grouped GEMMs are checked by the GEMM verifier (:func:`argus_cutlass.verify.verify_gemm`:
TMA images, operand tags, descriptors, pipeline protocol and parity, k coverage, the epilogue's
staging and stores) on the very programs the templates print; for the gate+up program the plain
epilogue rules (``epilogue.coordinate``, ``output.bijection``) are replaced by ``moe.swiglu``, which
states the paired-register SwiGLU store with the same strength: every gate register's value is
stored at its own accumulator coordinate (thread / register / element in the counterexample), the
h tile once, and the epilogue writes the MMA's accumulator to the TMA store's tensor. The routing data are data, so the kernels that build them
are checked by running the printed semantics (every field of the routing, scheduler and combine
nodes) on a bounded family of routings, exhaustive for 2 tokens and generated for the issue's cases
(uniform, skewed, zero experts, all to one, group sizes 128 / 130 / 65, ids -1 and E), plus a z3
proof of the padded offsets for symbolic counts. Each failure carries a concrete counterexample.

================== ===========================================================================
rule               invariant (``invariants/moe.toml``)
================== ===========================================================================
moe.bijection      (token, slot) -> permuted row is one-to-one, inside its group; the rank is the
                   printed stable one (any other rank node is refused)
moe.inverse        the combine's row map (un-permute) is the inverse of the gather
moe.gather         route_permute's gather (every slicing field: grid y = slices, slice_cols,
                   slice_stride): every element of every real permuted row of xs is written once,
                   by the CTA (x, y) of its routed row's chunk, with x[token][col]; no padding row
                   and no column past H is written; each permuted_row entry has one writer (y == 0)
moe.offsets        offsets start at 0, are monotone, tile-aligned, grow by the padded count; the
                   valid rows sum to T*k; tile_expert names the owner of every m-tile (enum + z3)
moe.invalid_ids    an id outside [0, E) gets no row and adds nothing
moe.group_tiles    a tile of group e reads only padded group e's rows and expert e's weight rows
                   (gate / up rows of its own output columns); every (m-tile, n-block) once; row-bounded
                   tiles: the printed tile_rows shift loads exactly an m-tile's routed rows and stores
                   each routed row once, from the accumulator row loaded from it
moe.empty_groups   an empty group has no tile, TMA load or store; every unit runs the same k loop
                   in producer and consumer (no phase skew)
moe.swiglu         register i (gate) and i + act_pair (up) hold the same (row, column); each
                   SwiGLU value is stored at its own (row, column) of the h tile, once
moe.combine        y[t] adds exactly k gated terms, slot j's row and slot j's weight, in fp32
moe.index_width    every printed index product (printed from the node's factors and C type, the
                   site table INDEX_SITES shared with the renderer) fits its C type for
                   T <= 2^tokens_bits
moe.dtype          layer dtype == gA / gB / gD dtype of both GEMMs; gate+up gD == down gA
moe.launch         combine threads and routing chunk: whole warps, <= 1024; route_scan's scan_threads in
                   [E, 1024] (one expert per scan thread; a partial last warp is legal); E == the experts of both
                   grouped GEMMs' weights (their B maps' rows)
moe.pdl            launch order: conflicting accesses of the layer's kernels ordered by completion; with the
                   routing node's fused, over the 4 mixes of the two launch chains (route_fused or the three
                   routing kernels in each of two consecutive calls)
moe.handoff        gate+up -> down per m-tile: down reads an m-tile after all its gate+up units
moe.combine_handoff down -> combine per m-tile: the combine reads a term's row of out after all the down units of
                   its m-tile stored it and it waited on that row's m-tile; loads that cannot be stale
moe.workspace      the workspace node printed as workspace_layout(T): regions of the kernels' element
                   types, aligned (multiple of 16), disjoint (out reuses xs only after gate+up);
                   every index each kernel reads or writes inside its region's printed count, and
                   padded_rows / max_tiles above the worst routing, for every T <= 2^tokens_bits
                   (exact: the layout is periodic-affine in T) and on every simulated routing
================== ===========================================================================

Fused routing (routing node ``fused``): the host launches route_fused in place of route_count / route_scan /
route_permute when a call has one routing chunk (:func:`routing_path`); :func:`simulate_routing` runs the path the
dispatch takes for each routing case (both paths at the chunk's edge: the most tokens of one chunk and one more), so
moe.bijection / moe.offsets / moe.gather / moe.group_tiles / moe.handoff / moe.combine / moe.workspace read the fused
kernel's simulated tables on the one-chunk cases, and moe.bijection / moe.offsets also compare them with the three
kernels' on the same ids (bitwise the same tables and row map).
"""

from __future__ import annotations

import itertools
import math
import time
from typing import Any

import numpy as np

from argus_cutlass.dsl.ir import DTYPE_BYTES
from argus_cutlass.dsl.moe_ir import (CTYPES, GROUPED_EXTENTS, HANDOFF_EDGES, HANDOFF_TIMEOUT_MARGIN, INDEX_SITES,
                                      MAX_CTA_THREADS, MAX_EXPERTS, MAX_TOKENS_BITS, MIN_HANDOFF_TIMEOUT_MS,
                                      SIGNED_CTYPES, HandoffEdge, MoELayer, handoff_edge)
from argus_cutlass.verify.report import (Counterexample, Obligation, Proof, Skipped, Unknown, VerificationReport,
                                         Violation)
from argus_cutlass.verify.run import Run
from argus_cutlass.verify.run import report as _report

__all__ = ["LAYER_ACCESSES", "WORKSPACE_ELEMS", "WORKSPACE_ACCESSES", "workspace_needs", "workspace_tokens", "HANDOFF_ACCESSES",
           "HANDOFF_DOWN_PRE_WAIT", "HANDOFF_ORDERED", "handoff_sound",
           "COMBINE_HANDOFF_PRE_WAIT", "COMBINE_HANDOFF_ORDERED", "combine_handoff_sound", "MOE_RULES", "PDL_CHAIN",
           "pdl_chain", "pdl_early_trigger", "pdl_launches", "pdl_pre_wait", "PDL_PRE_WAIT", "PDL_PREFETCH_READS",
           "GROUP_PADDING_BEFORE_READS", "ROW_BOUND_ACCESSES", "row_bound_kernels", "row_bound_parts", "routing_cases", "simulate_gather",
           "simulate_routing", "verify_moe", "walk_visits", "workspace_accessors", "routing_path", "pdl_paths",
           "ROUTING_KERNELS", "PATH_KERNELS"]

#: rule -> (invariant id, description)
MOE_RULES = {
    "moe.bijection": ("M1", "(token, slot) -> permuted row is a bijection onto the rows of its group"),
    "moe.inverse": ("M1", "the combine's row map is the inverse of the gather (un-permute o permute = id)"),
    "moe.gather": ("M1", "the gather writes each element of each real row of xs once with x[token][col]; one "
                   "row-map writer per entry"),
    "moe.offsets": ("M2", "offsets: 0, monotone, tile-aligned, padded counts; valid rows sum to T*k; tile owners"),
    "moe.invalid_ids": ("M2", "ids outside [0, E) get no row and add nothing"),
    "moe.group_tiles": ("M3", "a tile of group e reads only group-e rows and expert-e weights; units cover once; "
                        "row-bounded boxes read and write exactly the m-tile's routed rows"),
    "moe.empty_groups": ("M4", "empty groups do no work and skew no pipeline phase"),
    "moe.swiglu": ("M5", "gate and up of one (row, column) meet in one thread; the h tile is stored once"),
    "moe.combine": ("M6", "the combine adds exactly k gated terms per token"),
    "moe.index_width": ("M7", "index products fit their C types for T <= 2^tokens_bits"),
    "moe.dtype": ("M8", "the layer's dtype is each GEMM's A / B / D dtype; gate+up's D (h) is down's A"),
    "moe.launch": ("M9", "launch shapes: CTAs of 32..1024 threads in whole warps; E within the scan's one CTA and "
                   "equal to the weights' experts"),
    "moe.workspace": ("M12", "the printed workspace layout holds every kernel's accesses for every T <= "
                      "2^tokens_bits: regions disjoint, aligned, of the kernels' types; aliases only of dead regions"),
    "moe.pdl": ("M10", "launch order: every access of one kernel that conflicts with an earlier kernel's (this call's "
                "or the previous call's) happens after that kernel completed"),
    "moe.handoff": ("M11", "gate+up -> down per m-tile: down reads an m-tile's h after every gate+up unit of it "
                    "stored its rows (complete, fenced, released); the counters start at 0 every call"),
    "moe.dynamic_walk": ("M14", "dynamic walk: every unit 0..units-1 taken exactly once by the tickets (atomicAdd, end on "
                         "t >= units), published to the consumers through the smem ring in the producer's order, "
                         "the counter zeroed every call before its first ticket, the int32 tickets never wrapping"),
    "moe.combine_handoff": ("M13", "down -> combine per m-tile: the combine reads a term's row of out after every "
                            "down unit of that row's m-tile stored it (complete, fenced, released) and it waited on "
                            "that m-tile, through loads that cannot be stale; the counters start at 0 every call"),
}
#: GEMM rules the gate+up program's fused activation replaces (they model a plain store)
_REPLACED_BY_SWIGLU = ("epilogue.coordinate", "output.bijection")
#: CUDA's limit on gridDim.y (route_permute's gather slices)
MAX_GRID_Y = 65535
#: resident CTAs assumed by the scheduler simulation (the H200's 132 SMs, one CTA each)
SIM_CTAS = 132


def _cex(rule: str, where: str, expected: str, actual: str, *, element: dict | None = None,
         params: dict | None = None, provenance: str = "", thread: dict | None = None) -> Counterexample:
    return Counterexample(MOE_RULES[rule][0], rule, "enum", rule, where, -1, -1, -1, {}, thread or {}, "", {},
                          expected, actual, provenance, element=element or {}, params=params or {})


def _route_thread(layer: MoELayer, s: int, kernel: str = "route_permute") -> dict[str, int]:
    """The routing CTA and thread that handle routed row ``s`` (``kChunk`` rows per CTA, one per thread)."""
    chunk = layer.routing.chunk
    i = s % chunk
    return {"cta": s // chunk, "threadIdx": i, "role": kernel, "warp": i // 32, "lane": i % 32}


def _scan_thread(e: int) -> dict[str, int]:
    """route_scan's thread of expert ``e`` (one CTA, thread e owns expert e)."""
    return {"cta": 0, "threadIdx": e, "role": "route_scan", "warp": e // 32, "lane": e % 32}


def _viol(rule: str, message: str, cex: Counterexample | None, where: str = "", hint: str | None = None) -> Violation:
    return Violation(rule, MOE_RULES[rule][0], message, hint, where, cex)


# ---------------------------------------------------------------------------------- routing cases


def routing_cases(layer: MoELayer) -> list[tuple[str, np.ndarray]]:
    """The routings the data-flow rules run on: ``(label, ids (T, k))``. Exhaustive over 2 tokens
    with ids from {0, 1, E-1}; generated: uniform / skewed / zero experts / all to one at T = 5 and
    T = 300 (crosses a routing CTA), group sizes 128, 130, 65 (+ filler), and ids -1 and E."""
    from argus_cutlass.hw.routing import make_routing

    e_, k = layer.experts, layer.topk
    out: list[tuple[str, np.ndarray]] = []
    pool = sorted({0, min(1, e_ - 1), e_ - 1})
    if len(pool) >= k:
        rows = [r for r in itertools.permutations(pool, k)]
        for a, b in itertools.product(rows, repeat=2):
            out.append((f"exhaustive {a},{b}", np.array([a, b], dtype=np.int64)))
    for t in (5, 300):
        for kind in ("uniform", "skewed", "zero_experts", "all_to_one"):
            if kind == "zero_experts" and e_ <= k:
                continue
            ids, _ = make_routing(kind, t, e_, k, seed=t)
            out.append((f"{kind} T={t}", ids.astype(np.int64)))
    t = 162
    base = [128, 130, 65]
    if e_ >= 3 and k * t >= sum(base):
        rest = k * t - sum(base)
        sizes = base + [0] * (e_ - 3)
        i = 3
        while rest and e_ > 3:
            add = min(rest, t - sizes[i])
            sizes[i] += add
            rest -= add
            i = 3 + (i - 2) % (e_ - 3)
            if i == 3 and all(s == t for s in sizes[3:]):
                break
        if rest == 0 and all(s <= t for s in sizes):
            ids, _ = make_routing("sizes", t, e_, k, seed=1, sizes=sizes)
            out.append(("sizes 128/130/65", ids.astype(np.int64)))
    ids, _ = make_routing("uniform", 7, e_, k, seed=7)
    ids = ids.astype(np.int64)
    ids[1, 0] = -1
    ids[4, k - 1] = e_
    out.append(("invalid ids -1 and E", ids))
    if layer.routing.fused:   # the fused path's edges: the most tokens of one chunk, and one more (two chunks)
        t1 = max(layer.routing.chunk // k, 1)
        for t in (t1, t1 + 1):
            for kind in ("uniform", "skewed", "all_to_one"):
                ids, _ = make_routing(kind, t, e_, k, seed=t)
                out.append((f"{kind} T={t} (T*k = {t * k}, chunk {layer.routing.chunk})", ids.astype(np.int64)))
        ids, _ = make_routing("uniform", t1, e_, k, seed=3)
        ids = ids.astype(np.int64)
        ids[0, 0] = -1
        ids[t1 - 1, k - 1] = e_
        out.append((f"invalid ids -1 and E T={t1}", ids))
    return out


def routing_path(layer: MoELayer, tokens: int) -> str:
    """The routing kernels the printed host launches for ``tokens`` T: ``"route_fused"`` when the routing node is
    ``fused`` and ``chunks = ceil(T k / chunk) <= fused_max_chunks`` (the host's dispatch ``w.chunks <=
    kFusedMaxChunks``), else ``"three"`` (route_count, route_scan, route_permute)."""
    r = layer.routing
    chunks = -(-tokens * layer.topk // r.chunk)
    return "route_fused" if r.fused and chunks <= r.fused_max_chunks else "three"


def _printed_rows_and_tiles(layer: MoELayer, tokens: int) -> tuple[int, int]:
    """``(padded_rows, tile_expert's count)`` the printed workspace_layout gives ``tokens`` T (the workspace
    node's formula and its tile_expert region; ``padded_rows // pad + E`` when the node has no such region, which
    rule moe.workspace refuses)."""
    q = layer.workspace_quantities(tokens)
    try:
        cap = int(layer.workspace.region("tile_expert").elements(q))
    except KeyError:
        cap = int(q["padded_rows"]) // layer.routing.pad + layer.experts
    return int(q["padded_rows"]), max(cap, 0)


def simulate_routing(layer: MoELayer, ids: np.ndarray, path: str | None = None) -> dict[str, Any]:
    """The routing kernels of ``layer`` (``templates/moe/layer.cu.j2``: route_count, route_scan,
    route_permute) run in numpy on ``ids`` (T, k): every field of the routing node is honoured; the padded
    rows and tile_expert's capacity are the printed workspace node's. The row map as printed by the routing
    node's ``group_padding``: ``"after"`` ``off_e + rank``, ``"before"`` ``off_{e+1} - count_e + rank`` (the group's
    padding rows first). With the routing node's ``tile_rows`` (only with the padding before) also ``tile_rows`` (the
    printed table: entry ``base_e + i`` = ``count_e - (t_e - 1) * pad`` for ``i == 0`` and ``pad`` for the others,
    plus ``tile_rows_delta``, every index route_scan writes;
    whether the printed region holds them is rule moe.workspace's) and ``tile_rows_written`` (which entries
    route_scan writes; the others hold whatever the workspace held).

    ``path`` (default :func:`routing_path`: the host's dispatch for this T): ``"three"`` the kernels above,
    ``"route_fused"`` the routing node's fused kernel (layer.cu.j2 route_fused, printed from the same macros): the
    histogram of the first chunk's rows only (its threads), the scan of ``fused_scan`` (the node's scan when
    empty), no earlier chunk's rows in the rank; a routed row past the first chunk is never ranked (``unrouted``:
    its permuted_row entry is never written, simulated -1). ``kernel`` / ``scan_kernel`` name the kernels that
    write the row map and the tables."""
    r = layer.routing
    e_ = layer.experts
    flat = np.asarray(ids, dtype=np.int64).reshape(-1)
    n = flat.size
    if path is None:
        path = routing_path(layer, int(np.asarray(ids).shape[0]))
    fused = path == "route_fused"
    if r.invalid == "skip":
        ex = np.where((flat >= 0) & (flat < e_), flat, -1)
    else:
        ex = np.clip(flat, 0, e_ - 1)
    routed_n = min(n, r.chunk) if fused else n   # route_fused: thread i ranks row i of the one chunk
    chunks = -(-routed_n // r.chunk)
    bc = np.zeros((chunks, e_), dtype=np.int64)
    for b in range(chunks):
        seg = ex[b * r.chunk:min((b + 1) * r.chunk, routed_n)]
        seg = seg[seg >= 0]
        bc[b] = np.bincount(seg, minlength=e_)
    counts = bc.sum(axis=0)
    bc_excl = np.cumsum(bc, axis=0) - bc
    tiles = -(-counts // r.pad)
    incl = np.cumsum(tiles)
    scan = r.fused_scan_kind if fused else r.scan
    base = incl - tiles if scan == "exclusive" else incl
    offsets = np.zeros(e_ + 1, dtype=np.int64)
    offsets[:e_] = base * r.pad
    offsets[e_] = incl[-1] * r.pad
    tiles_m = int(incl[-1])
    padded_rows, cap = _printed_rows_and_tiles(layer, int(np.asarray(ids).shape[0]))
    tile_expert = np.full(cap, -1, dtype=np.int64)
    oob = []
    for e in range(e_):
        for i in range(int(tiles[e])):
            j = int(base[e]) + i
            if 0 <= j < cap:
                tile_expert[j] = e
            else:
                oob.append((e, j))
    if r.tile_rows:
        # route_scan: tile_rows[base_e + i] = the routed rows of m-tile i of group e (the padding before them: all
        # pad but the first m-tile's) + tile_rows_delta (layer.cu.j2), every
        # index it writes (whether the printed region holds it is rule moe.workspace's: the writes are in
        # tile_expert's list, tile_expert / tile_oob)
        size = max([cap] + [int(base[e] + tiles[e]) for e in range(e_)])
        tile_rows = np.zeros(size, dtype=np.int64)
        rows_written = np.zeros(size, dtype=bool)
        for e in range(e_):
            for i in range(int(tiles[e])):
                j = int(base[e]) + i
                if j >= 0:
                    routed = int(counts[e]) - (int(tiles[e]) - 1) * r.pad if i == 0 else r.pad
                    tile_rows[j] = routed + r.tile_rows_delta
                    rows_written[j] = True
    permuted = np.full(n, -1, dtype=np.int64)
    for s in range(routed_n):
        e = int(ex[s])
        if e < 0:
            continue
        b = s // r.chunk
        rank = int(np.count_nonzero(ex[b * r.chunk:s] == e))
        start = offsets[e + 1] - counts[e] if r.group_padding == "before" else offsets[e]
        permuted[s] = start + bc_excl[b, e] + rank + r.rank_base
    out = {"ex": ex, "counts": counts, "offsets": offsets, "tiles_m": tiles_m, "tile_expert": tile_expert,
           "tile_oob": oob, "permuted": permuted, "padded_rows": padded_rows, "n": n, "path": path,
           "unrouted": [s for s in range(routed_n, n) if ex[s] >= 0],
           "kernel": "route_fused" if fused else "route_permute", "scan_kernel": "route_fused" if fused else "route_scan"}
    if r.tile_rows:
        out.update(tile_rows=tile_rows, tile_rows_written=rows_written)
    return out


def gather_slices_of(layer: MoELayer) -> list[tuple[int, int]]:
    """``(v0, width)`` in 16-byte vectors of each grid row y of route_permute's gather, as printed:
    the whole row for the unsliced kernel, else ``v0 = y * (slice_stride / vec)``, ``v1 = min(v0 +
    slice_cols / vec, H / vec)``, ``width = max(v1 - v0, 0)`` (C integer division)."""
    r = layer.routing
    vec = 16 // DTYPE_BYTES[layer.dtype]
    row_vecs = layer.hidden // vec
    if not r.sliced:
        return [(0, row_vecs)]
    out = []
    for y in range(r.slices):
        v0 = y * (r.slice_stride // vec)
        v1 = min(v0 + r.slice_cols // vec, row_vecs)
        out.append((v0, max(v1 - v0, 0)))
    return out


def _gather_steps(total: int, chunk: int, unroll: int) -> tuple[np.ndarray, np.ndarray]:
    """The gather loop of one CTA as printed: ``(q, thread)`` of every vector it copies, in loop order.
    ``unroll`` 1: ``for (q = thread; q < total; q += chunk)``; else ``for (q0 = thread; q0 < total; q0 +=
    chunk * unroll)`` over ``q = q0 + u * chunk``, ``u < unroll``, kept when ``q < total``.

    >>> [a.tolist() for a in _gather_steps(5, 2, 2)]
    [[0, 2, 4, 1, 3], [0, 0, 0, 1, 1]]
    """
    step = chunk * unroll
    i = np.arange(chunk, dtype=np.int64)[:, None, None]
    j = np.arange(-(-total // step) if total > 0 else 0, dtype=np.int64)[None, :, None]
    u = np.arange(unroll, dtype=np.int64)[None, None, :]
    q0 = i + j * step
    q = np.broadcast_to(q0 + u * chunk, (chunk, j.shape[1], unroll))
    thread = np.broadcast_to(i, q.shape)
    keep = (np.broadcast_to(q0, q.shape) < total) & (q < total)
    return q[keep], thread[keep]


def simulate_gather(layer: MoELayer, sim: dict[str, Any]) -> dict[str, Any]:
    """route_permute's stores (``templates/moe/layer.cu.j2``) on the routing ``sim`` of
    :func:`simulate_routing`: every (CTA (x, y), thread) store of a 16-byte vector of xs and of a
    ``permuted_row`` entry. Every y of chunk x computes the same ``pos`` for its rows (the rank reads
    ids, offsets and block_counts, which this kernel does not write), so ``sim["permuted"]`` is each
    y's ``spos``. Returns arrays over the xs stores: ``cta_x``, ``cta_y``, ``thread``, ``s`` (routed
    row), ``row`` (permuted row), ``vec`` (vector of the row), ``token`` (the x row read); and
    ``map_writes`` (per routed row, the (x, y, thread) storing its permuted_row entry)."""
    r = layer.routing
    pr, n, k = sim["permuted"], sim["n"], layer.topk
    fused = sim.get("path") == "route_fused"
    chunks = 1 if fused else -(-n // r.chunk)   # route_fused<<<(1, slices)>>>: the first chunk's rows only
    parts: dict[str, list] = {f: [] for f in ("cta_x", "cta_y", "thread", "s", "vec")}
    map_writes: list[list[tuple[int, int, int]]] = [[] for _ in range(n)]
    for y, (v0, width) in enumerate(gather_slices_of(layer)):
        for x in range(chunks):
            s0 = x * r.chunk
            nx = min(r.chunk, n - s0)
            # the row map's writers: y == 0 (route_fused: its `first`, routing node fused_writers)
            if not r.sliced or y == 0 or (fused and r.fused_writers == "all"):
                for i in range(nx):
                    map_writes[s0 + i].append((x, y, i))
            if width <= 0:
                continue
            q, thread = _gather_steps(nx * width, r.chunk, r.unroll)
            rr = q // width
            keep = pr[s0 + rr] >= 0
            q, rr = q[keep], rr[keep]
            parts["cta_x"].append(np.full(q.size, x, dtype=np.int64))
            parts["cta_y"].append(np.full(q.size, y, dtype=np.int64))
            parts["thread"].append(thread[keep])
            parts["s"].append(s0 + rr)
            parts["vec"].append(v0 + q % width)
    out = {f: (np.concatenate(v) if v else np.zeros(0, dtype=np.int64)) for f, v in parts.items()}
    out["row"] = pr[out["s"]] if out["s"].size else np.zeros(0, dtype=np.int64)
    out["token"] = out["s"] // k
    out["map_writes"] = map_writes
    return out


def _gather_cex(layer: MoELayer, label: str, what: str, want: str, got: str, *, row: int, s: int, vec: int,
                writer: tuple[int, int, int], params: dict) -> Violation:
    vec_el = 16 // DTYPE_BYTES[layer.dtype]
    x, y, i = writer
    col = vec * vec_el
    k = layer.topk
    thread = {"cta": x, "cta_y": y, "threadIdx": i, "role": "route_permute", "warp": i // 32, "lane": i % 32}
    r = layer.routing
    return _viol("moe.gather", f"{label}: {what} (CTA ({x}, {y}), thread {i}; xs row {row} = (token {s // k}, slot "
                 f"{s % k}), columns [{col}, {col + vec_el}) of H = {layer.hidden})",
                 _cex("moe.gather", "route_permute gather", want, got, thread=thread, params=params,
                      element={"tensor": "xs", "row": row, "column": col, "token": s // k, "slot": s % k},
                      provenance=f"slices {r.slices}, slice_cols {r.slice_cols}, slice_stride {r.slice_stride}, "
                                 f"slices as printed (v0, width in 16-byte vectors): {gather_slices_of(layer)[:4]}"))


def _expected_writer(layer: MoELayer, s: int, vec: int) -> tuple[int, int, int]:
    """The (x, y, thread) the correct slicing (``ceil(ceil(H / vec) / slices)`` vectors per y) gives
    vector ``vec`` of routed row ``s``."""
    r = layer.routing
    row_vecs = layer.hidden // (16 // DTYPE_BYTES[layer.dtype])
    per = -(-row_vecs // r.slices)
    y = vec // per
    width = min(per, row_vecs - y * per)
    x, i = divmod(s, r.chunk)
    return x, y, (i * width + vec - y * per) % r.chunk


def _check_gather(layer: MoELayer, cases: list) -> tuple[list[Proof], list[Violation]]:
    """``moe.gather`` on every routing of ``cases``: :func:`simulate_gather`'s stores write each
    16-byte vector of each real permuted row exactly once, with the x row of the routed row the
    combine maps to it (``permuted_row``'s inverse), nothing into padding rows or past H, and each
    routed row's permuted_row entry is stored by exactly one thread (of CTA (x, 0)) with its
    ``pos``."""
    r = layer.routing
    k = layer.topk
    vec_el = 16 // DTYPE_BYTES[layer.dtype]
    row_vecs = layer.hidden // vec_el
    if layer.hidden % vec_el:   # the printed gather copies kHidden / kVec whole vectors per row (auditor, s39)
        col = row_vecs * vec_el
        return [], [_viol("moe.gather", f"H = {layer.hidden} is not a multiple of the gather's {vec_el}-element "
                          f"(16-byte) vector: each permuted row gets H / {vec_el} = {row_vecs} vectors, so its columns "
                          f"[{col}, {layer.hidden}) are never written (gate+up reads whatever xs held)",
                          _cex("moe.gather", "route_permute (kRowVecs = kHidden / kVec)",
                               f"columns [0, {layer.hidden}) of every permuted row written",
                               f"columns [0, {col}) written", element={"tensor": "xs", "row": 0, "col": col},
                               params={"H": layer.hidden, "vec": vec_el}))]
    # the printed gather indexes in C int: v0 = y * stride_vecs, v0 + slice_vecs, and the loop bound
    # n * width (n <= chunk rows, width <= the slice's or the row's vectors) must fit 31 bits for every
    # y < slices (the simulation below computes in Python ints and would not see a wrap)
    int_max = 2**31 - 1
    if r.sliced:
        stride_v, cols_v = r.slice_stride // vec_el, r.slice_cols // vec_el
        worst = {"v0 = y * (slice_stride / vec)": (r.slices - 1) * stride_v,
                 "v0 + slice_cols / vec": (r.slices - 1) * stride_v + cols_v,
                 "n * width": r.chunk * min(max(cols_v, 0), row_vecs)}
    else:
        worst = {"n * (H / vec)": r.chunk * row_vecs}
    if r.unroll > 1:   # the unrolled loop's q0 + chunk * unroll and q0 + u * chunk pass the bound by one step
        worst = {**worst, "q0 + chunk * unroll": max(worst.values()) + r.chunk * r.unroll}
    for what, value in worst.items():
        if value > int_max:
            msg = (f"route_permute's gather computes {what} = {value} in C int for the last CTA (slices "
                   f"{r.slices}, chunk {r.chunk}, H {layer.hidden}): past 2^31 - 1, it wraps and the CTA stores "
                   "outside xs")
            return [], [_viol("moe.gather", msg, _cex(
                "moe.gather", "route_permute gather index", f"{what} <= 2^31 - 1", str(value),
                thread={"cta": 0, "cta_y": max(r.slices - 1, 0), "role": "route_permute"},
                element={"tensor": "xs", "expression": what},
                params={"H": layer.hidden, "chunk": r.chunk, "slices": r.slices}))]
    for label, ids in cases:
        sim = simulate_routing(layer, ids)
        g = simulate_gather(layer, sim)
        params = {"T": int(ids.shape[0]), "k": k, "H": layer.hidden, "chunk": r.chunk, "slices": r.slices}
        pr, n = sim["permuted"], sim["n"]
        for s in range(n):
            w = g["map_writes"][s]
            if len(w) != 1:
                x, i = divmod(s, r.chunk)
                wr = w[1] if w else (x, 0, i)
                kern = sim["kernel"]
                extra = (" (route_fused: routing node fused_writers 'all', every CTA y writes the tables; one printed "
                         "flag `first` guards each of its table stores)" if kern == "route_fused" and len(w) > 1 else "")
                return [], [_viol("moe.gather", f"{label}: permuted_row[{s}] (token {s // k}, slot {s % k}) is stored "
                                  f"by {len(w)} threads {w[:3]}, expected one (CTA ({x}, 0), thread {i}){extra}",
                                  _cex("moe.gather", f"{kern} permuted_row store", "one store, by CTA "
                                       f"({x}, 0) thread {i}", f"{len(w)} stores",
                                       thread={"cta": wr[0], "cta_y": wr[1], "threadIdx": wr[2],
                                               "role": kern, "warp": wr[2] // 32, "lane": wr[2] % 32},
                                       element={"tensor": "permuted_row", "index": s, "token": s // k, "slot": s % k},
                                       params=params))]
        rows = sim["padded_rows"]
        real = np.flatnonzero(pr >= 0)
        src = np.full(rows, -1, dtype=np.int64)
        ok_rows = (pr[real] >= 0) & (pr[real] < rows)
        src[pr[real][ok_rows]] = real[ok_rows]
        row, vec = g["row"], g["vec"]
        bad_at = np.flatnonzero((row < 0) | (row >= rows) | (vec < 0) | (vec >= row_vecs))
        if bad_at.size:
            j = int(bad_at[0])
            return [], [_gather_cex(layer, label, "a store outside xs's rows or past H", f"row < {rows}, column < "
                                    f"{layer.hidden}", f"row {int(row[j])}, column {int(vec[j]) * vec_el}",
                                    row=int(row[j]), s=int(g["s"][j]), vec=int(vec[j]),
                                    writer=(int(g["cta_x"][j]), int(g["cta_y"][j]), int(g["thread"][j])),
                                    params=params)]
        key = row * row_vecs + vec
        cnt = np.bincount(key, minlength=rows * row_vecs).reshape(rows, row_vecs)
        # wrong source: the x row read is not the token of the routed row the combine maps here
        wrong = np.flatnonzero(src[row] // k != g["token"])
        if wrong.size:
            j = int(wrong[0])
            return [], [_gather_cex(layer, label, f"stores x[{int(g['token'][j])}]", f"x[{int(src[row[j]]) // k}]",
                                    f"x[{int(g['token'][j])}]", row=int(row[j]), s=int(src[row[j]]),
                                    vec=int(vec[j]), writer=(int(g["cta_x"][j]), int(g["cta_y"][j]),
                                                             int(g["thread"][j])), params=params)]
        pad_rows = src < 0
        if cnt[pad_rows].any():
            j = int(np.flatnonzero(pad_rows[row])[0])
            return [], [_gather_cex(layer, label, "a store into a padding row", "no store (padding)", "a store",
                                    row=int(row[j]), s=int(g["s"][j]), vec=int(vec[j]),
                                    writer=(int(g["cta_x"][j]), int(g["cta_y"][j]), int(g["thread"][j])),
                                    params=params)]
        twice = np.argwhere(cnt[~pad_rows] > 1)
        if twice.size:
            rr = int(np.flatnonzero(~pad_rows)[twice[0][0]])
            v = int(twice[0][1])
            js = np.flatnonzero((row == rr) & (vec == v))
            wr = [(int(g["cta_x"][j]), int(g["cta_y"][j]), int(g["thread"][j])) for j in js]
            return [], [_gather_cex(layer, label, f"stored {len(js)} times, by {wr[:3]}", "one store",
                                    f"{len(js)} stores", row=rr, s=int(src[rr]), vec=v, writer=wr[1], params=params)]
        miss = np.argwhere(cnt[~pad_rows] == 0)
        if miss.size:
            rr = int(np.flatnonzero(~pad_rows)[miss[0][0]])
            v = int(miss[0][1])
            s = int(src[rr])
            x, y, i = _expected_writer(layer, s, v)
            return [], [_gather_cex(layer, label, f"never stored: CTA ({x}, {y}) copies vectors "
                                    f"{_slice_text(layer, y)}", f"x[{s // k}][{v * vec_el}:{v * vec_el + vec_el}]",
                                    "never written (poison)", row=rr, s=s, vec=v, writer=(x, y, i), params=params)]
    sl = gather_slices_of(layer)
    return [Proof("moe.gather", "M1", "enum", f"{len(sl)} slice(s) per chunk, (v0, width) in 16-byte vectors "
                  f"{sl[:4]}{' ...' if len(sl) > 4 else ''} of H/{vec_el} = {row_vecs}: each element of each real "
                  f"row of xs stored once with x[token][col], no padding row, one permuted_row store per routed row "
                  f"(y == 0): {len(cases)} routings", points=len(cases))], []


def _slice_text(layer: MoELayer, y: int) -> str:
    sl = gather_slices_of(layer)
    if y >= len(sl):
        return f"nothing (grid y has {len(sl)} CTAs)"
    v0, w = sl[y]
    return f"[{v0}, {v0 + w})" if w > 0 else f"none (v0 = {v0})"


# ------------------------------------------------------------------------------------------ rules


def _check_routing(layer: MoELayer, cases: list) -> tuple[list[Proof], list[Violation]]:
    proofs, bad = [], []
    seen: set[str] = set()
    e_, k = layer.experts, layer.topk
    if layer.routing.rank != "stable":
        # the printed route_permute ranks a row by counting the CTA's earlier rows of its expert (stable);
        # any other rank has no printed semantics, so nothing about it is proved
        chunk = layer.routing.chunk
        for label, ids in cases:
            flat = np.asarray(ids).reshape(-1)
            for s2 in range(flat.size):
                same = [s1 for s1 in range((s2 // chunk) * chunk, s2) if flat[s1] == flat[s2] and 0 <= flat[s2] < e_]
                if same:
                    s1 = same[0]
                    bad.append(_viol("moe.bijection", f"{label}: routing rank {layer.routing.rank!r}: (token {s2 // k}, "
                                     f"slot {s2 % k}) and (token {s1 // k}, slot {s1 % k}) both route to expert "
                                     f"{int(flat[s2])} in routing CTA {s2 // chunk}; only the stable rank (count of "
                                     "the CTA's earlier rows of the expert) is printed and proved, a "
                                     f"{layer.routing.rank!r} rank's order of these two rows is not defined",
                                     _cex("moe.bijection", "route_permute rank", "rank 'stable': row of (t, j) after "
                                          f"(token {s1 // k}, slot {s1 % k})", f"rank {layer.routing.rank!r}: order "
                                          "unspecified", element={"token": s2 // k, "slot": s2 % k,
                                                                 "expert": int(flat[s2])},
                                          thread=_route_thread(layer, s2), params={"T": int(ids.shape[0]), "k": k},
                                          provenance="templates/moe/layer.cu.j2 static_assert(kStableRank)")))
                    return proofs, bad
        bad.append(_viol("moe.bijection", f"routing rank {layer.routing.rank!r}: only 'stable' is printed and proved",
                         _cex("moe.bijection", "route_permute rank", "stable", layer.routing.rank)))
        return proofs, bad
    for label, ids in cases:
        sim = simulate_routing(layer, ids)
        pr, ex, off, cnt = sim["permuted"], sim["ex"], sim["offsets"], sim["counts"]
        params = {"T": int(ids.shape[0]), "k": k, "E": e_}
        valid = ex >= 0
        if sim["unrouted"] and "moe.bijection" not in seen:
            s = int(sim["unrouted"][0])
            r = layer.routing
            seen.add("moe.bijection")
            bad.append(_viol("moe.bijection", f"{label}: the host takes route_fused for chunks = "
                             f"{-(-sim['n'] // r.chunk)} (w.chunks <= kFusedMaxChunks = {r.fused_max_chunks}) but "
                             f"route_fused ranks only the first chunk's {r.chunk} rows: (token {s // k}, slot {s % k}) "
                             f"(routed row {s}, expert {int(ex[s])}) gets no row and its permuted_row entry is never "
                             "written (the combine reads whatever the workspace held)",
                             _cex("moe.bijection", "run(): the routing dispatch / route_fused",
                                  "every routed row ranked (route_fused only for chunks == 1)",
                                  f"routed row {s} never ranked", element={"token": s // k, "slot": s % k,
                                                                           "expert": int(ex[s])},
                                  params={**params, "chunks": -(-sim["n"] // r.chunk)},
                                  thread={"cta": 0, "threadIdx": s, "role": "route_fused (no such thread: "
                                          f"{r.chunk} per CTA)"},
                                  provenance=f"routing node fused_max_chunks {r.fused_max_chunks}")))
        # invalid ids: no row
        raw = ids.reshape(-1)
        inv = np.flatnonzero(((raw < 0) | (raw >= e_)) & (pr >= 0))
        if inv.size and "moe.invalid_ids" not in seen:
            s = int(inv[0])
            seen.add("moe.invalid_ids")
            bad.append(_viol("moe.invalid_ids", f"{label}: topk_ids[{s // k}, {s % k}]={int(raw[s])} is outside "
                             f"[0, {e_}) but gets row {int(pr[s])} (counted for expert {int(ex[s])}): y[{s // k}] "
                             "adds a term for a padding slot",
                             _cex("moe.invalid_ids", "route_expert", "row -1 (skipped)", f"row {int(pr[s])}",
                                  element={"token": s // k, "slot": s % k, "id": int(raw[s])}, params=params,
                                  thread=_route_thread(layer, s))))
        # bijection
        rows = pr[valid]
        in_range = (rows >= 0) & (rows < sim["padded_rows"])
        if "moe.bijection" not in seen:
            msg = None
            if not in_range.all():
                s = int(np.flatnonzero(valid)[np.flatnonzero(~in_range)[0]])
                msg = (f"(token {s // k}, slot {s % k}) -> row {int(pr[s])}, outside [0, {sim['padded_rows']})",
                       s, "a row in [0, padded rows)")
            else:
                u, c = np.unique(rows, return_counts=True)
                if (c > 1).any():
                    r2 = int(u[np.flatnonzero(c > 1)[0]])
                    s1, s2 = (int(x) for x in np.flatnonzero(pr == r2)[:2])
                    msg = (f"(token {s1 // k}, slot {s1 % k}) and (token {s2 // k}, slot {s2 % k}) both map to "
                           f"row {r2}", s1, "distinct rows")
                else:
                    # the group's routed rows: its first count_e rows, or with the padding before them its last
                    before = layer.routing.group_padding == "before"
                    g0 = (off[1:] - cnt) if before else off[:-1]
                    lo, hi = g0[ex[valid]], g0[ex[valid]] + cnt[ex[valid]]
                    out_g = np.flatnonzero((rows < lo) | (rows >= hi))
                    if out_g.size:
                        s = int(np.flatnonzero(valid)[out_g[0]])
                        e = int(ex[s])
                        span = (f"[off_{e + 1} - count_{e}, off_{e + 1})" if before
                                else f"[off_{e}, off_{e} + count_{e})")
                        msg = (f"(token {s // k}, slot {s % k}) routes to expert {e} but lands on row {int(pr[s])}, "
                               f"outside group {e}'s rows [{int(g0[e])}, {int(g0[e] + cnt[e])})", s,
                               f"a row in {span} (group_padding {layer.routing.group_padding!r})")
            if msg:
                seen.add("moe.bijection")
                text, s, want = msg
                bad.append(_viol("moe.bijection", f"{label}: {text}",
                                 _cex("moe.bijection", "route_permute", want, f"row {int(pr[s])}",
                                      element={"token": s // k, "slot": s % k, "expert": int(ex[s])}, params=params,
                                      thread=_route_thread(layer, s),
                                      provenance=f"offsets[{int(ex[s])}]={int(off[ex[s]])}, rank_base "
                                                 f"{layer.routing.rank_base}")))
        # offsets
        if "moe.offsets" not in seen:
            pad = layer.routing.pad
            msg = None
            e_thread = 0
            want_sizes = -(-cnt // pad) * pad
            if off[0] != 0:
                msg = (f"off_0 = {int(off[0])}, expected 0", "off_0 = 0", f"off_0 = {int(off[0])}")
            elif (np.diff(off) != want_sizes).any():
                e = e_thread = int(np.flatnonzero(np.diff(off) != want_sizes)[0])
                msg = (f"off_{e + 1} - off_{e} = {int(off[e + 1] - off[e])}, but group {e} has {int(cnt[e])} rows "
                       f"(padded {int(want_sizes[e])})", f"{int(want_sizes[e])}", f"{int(off[e + 1] - off[e])}")
            elif int(cnt.sum()) != int(valid.sum()):
                msg = (f"counts sum to {int(cnt.sum())}, expected T*k = {int(valid.sum())} valid rows",
                       str(int(valid.sum())), str(int(cnt.sum())))
            elif sim["tile_oob"]:
                e, j = sim["tile_oob"][0]
                e_thread = int(e)
                msg = (f"tile_expert[{j}] = {e} is written outside the {sim['tiles_m']} m-tiles", "< tiles_m", str(j))
            else:
                te = sim["tile_expert"][: sim["tiles_m"]]
                owner = np.searchsorted(off[1:], np.arange(sim["tiles_m"]) * pad, side="right")
                wrong = np.flatnonzero(te != owner)
                if wrong.size:
                    i = int(wrong[0])
                    e_thread = int(te[i]) if 0 <= int(te[i]) < e_ else int(owner[i])
                    msg = (f"m-tile {i} (rows [{i * pad}, {(i + 1) * pad})) is owned by group {int(owner[i])} but "
                           f"tile_expert[{i}] = {int(te[i])}", str(int(owner[i])), str(int(te[i])))
            if msg:
                seen.add("moe.offsets")
                bad.append(_viol("moe.offsets", f"{label}: {msg[0]}",
                                 _cex("moe.offsets", sim["scan_kernel"], msg[1], msg[2], params=params,
                                      thread={**_scan_thread(e_thread), "role": sim["scan_kernel"]},
                                      element={"counts": [int(c) for c in cnt[:8]]},
                                      provenance=f"scan {layer.routing.scan}"
                                                 + (f", route_fused's scan {layer.routing.fused_scan_kind}"
                                                    if sim["path"] == "route_fused" else "") + f", pad {pad}")))
    fused_text = ""
    if layer.routing.fused:   # simulate_routing follows the host's dispatch: these checks ran on route_fused's tables
        t1 = max(layer.routing.chunk // k, 1)
        fused = sum(routing_path(layer, int(ids.shape[0])) == "route_fused" for _label, ids in cases)
        fused_text = (f"; route_fused (routing node fused) on the {fused} one-chunk routings (T*k <= "
                      f"{layer.routing.chunk}, up to T = {t1}; T = {t1 + 1} takes the three kernels)")
    for rule, text in (("moe.bijection", "bijection onto group rows"), ("moe.offsets", "offsets and tile owners"),
                       ("moe.invalid_ids", "ids outside [0, E) skipped")):
        if rule not in seen:
            proofs.append(Proof(rule, MOE_RULES[rule][0], "enum", f"{text}: {len(cases)} routings (exhaustive T=2, "
                                "generated T=5/7/162/300)" + (fused_text if rule != "moe.invalid_ids" else ""),
                                points=len(cases)))
    return proofs, bad


def _b_rows(load: Any, expert: int, tn: int, tile_n: int) -> np.ndarray:
    """gB rows the tile's B stage holds, row r of the tile first (the template's load_B and b_mn0).

    The paired-halves remap is printed per TMA box (``gemm/mainloop.j2``: box ``b`` starts at tile
    row ``row_ = (b % boxes) * box_outer`` and reads ``mn0 + (row_ < half ? row_ : row_ - half +
    pair_offset)`` onward), so a box that straddles the two halves reads its up rows from the gate
    rows: modelled here box by box, as printed."""
    half = tile_n // 2
    blk = tn * (half if load.pair_offset else tile_n)
    origin = (expert + load.expert_shift) * load.expert_rows + blk
    r = np.arange(tile_n)
    if load.pair_offset:
        box_outer = max(1, int(load.copy.box[1]))
        start = (r // box_outer) * box_outer
        return origin + np.where(start < half, start, start - half + load.pair_offset) + (r - start)
    return origin + r


#: what ``templates/moe/gemm.j2::run_grouped`` encodes: A (xs / h) and B (W13 / W2) K-major (inner
#: extent K, outer the rows), D (h / out) N-major (inner N), the caller's A / B / D in the A / B / D slots
_GROUPED_MAPS = {"gA": ("K", "A"), "gB": ("K", "B"), "gD": ("N", "D")}


def _grouped_operand_problem(layer: MoELayer, part: str) -> Violation | None:
    """``moe.group_tiles``: the grouped GEMM's operands are what ``run_grouped`` (moe/gemm.j2) hands
    it: its tensor maps are printed, not read from the program, as xs / h and W13 / W2 K-major and h /
    out N-major, passed in the kernel's A, B, D slots. A program whose tensors, loads or store have
    another major (a layout other than ``tn``) or another binding (swap-AB) is verified by the GEMM
    rules against maps the host never encodes: its MN-major box (inner = rows) is read from a map
    whose inner extent is K, so tile element (m, k) is fetched from row k, column m."""
    p = layer.program(part)
    a_name, b_name, d_name = ("xs", "W13", "h") if part == "gate_up" else ("h", "W2", "out")
    names = {"gA": a_name, "gB": b_name, "gD": d_name}
    found = None
    for tname, (major, binding) in _GROUPED_MAPS.items():
        try:
            t = p.tensor(tname)
        except KeyError:
            found = (f"the program has no tensor {tname}", tname, f"{tname} ({names[tname]})", "none", {})
            break
        if t.binding != binding:
            found = (f"{tname} is bound to the caller's {t.binding!r} (swap_ab {dict(p.params).get('swap_ab')}), but "
                     f"run_grouped passes {names[tname]} as the kernel's {binding}: the program's {tname}(0, 0), the "
                     f"caller's {t.binding}[0][0], is read from {names[tname]}[0][0]", tname,
                     f"{tname}(0, 0) = the caller's {t.binding}[0][0]", f"{names[tname]}[0][0]", {"row": 0, "col": 0})
            break
        x = names[tname]
        if tname == "gD":
            st = p.stores[0] if p.stores else None
            if t.major != major or (st is not None and st.major != "K"):
                st_text = f"store {st.name} {st.major}-major" if st else "no store"
                found = (f"gD is {t.major}-contiguous ({st_text}), "
                         f"but run_grouped encodes {x}'s map N-major (inner extent N): acc(m = 1, n = 0) of m-tile 0 "
                         f"is stored at {x}[0][1], not {x}[1][0]", tname, f"{x}[1][0]", f"{x}[0][1]",
                         {"m": 1, "n": 0, "m_tile": 0})
                break
            continue
        ld = p.load_into("sA" if tname == "gA" else "sB")
        if t.major != major or ld.major != "K":
            # block 1 (of expert 0 for B): its first row mn0; its element (row 0, k 1) at k-tile 0 is asked
            # at map coordinate (inner mn0, outer 1), which the K-major map resolves as row 1, column mn0
            rows = "m" if tname == "gA" else "n"
            t1 = ld.tile_mn // 2 if ld.pair_offset else ld.tile_mn
            found = (f"{tname} is {t.major}-contiguous and load {ld.name} {ld.major}-major (box inner = the {rows} "
                     f"rows, outer = K), but run_grouped encodes {x}'s map K-major (inner extent K): element "
                     f"({rows} = {t1}, k = 1) of {rows}-block 1, k-tile 0 is fetched from {x}[1][{t1}], not "
                     f"{x}[{t1}][1]", tname, f"{x}[{t1}][1]", f"{x}[1][{t1}]", {rows: t1, "k": 1})
            break
    if found is None:
        return None
    msg, tname, want, got, coord = found
    return _viol("moe.group_tiles", f"{part}: {msg}",
                 _cex("moe.group_tiles", f"{part} run_grouped tensor map {tname} (moe/gemm.j2)", want, got,
                      element={"tensor": f"{part}.{tname}", "host_tensor": names[tname], **coord},
                      params={"layout": dict(p.params).get("layout"), "swap_ab": dict(p.params).get("swap_ab")},
                      provenance="run_grouped: make_map(A, K, rows), make_map(B, K, b_rows), make_map(D, N, rows)"),
                 hint="build the grouped GEMMs with layout 'tn' and no swap-AB (kernels/moe/program.py::gemm_configs)")


def _walk_cex(part: str, label: str, prob: Any, params: dict, engine: str = "enum") -> Violation:
    """``moe.group_tiles``: the grouped walk's problem ``prob`` (a decomposition ``Problem``) as a
    violation naming the unit, its band and its tile."""
    tile = prob.tile if isinstance(prob.tile, tuple) else (-1, -1)
    u = prob.units[0] if prob.units else -1
    cex = Counterexample("M3", "moe.group_tiles", engine, f"{part} scheduler (moe/work.j2 Scheduler::current)",
                         f"{part} scheduler", -1, -1, -1, {"tm": int(tile[0]), "tn": int(tile[1])}, {}, "", {},
                         "each unit its own (m-tile, n-block) of the tiles_m x tiles_n grid", prob.message,
                         f"band_m {prob.params.get('band_m')}, band_start_delta {prob.params.get('band_start_delta')}",
                         element={"unit": int(u), "m_tile": int(tile[0]), "n_block": int(tile[1])},
                         params={**params, **{k: v for k, v in prob.params.items()
                                              if isinstance(v, int) and not isinstance(v, bool)}})
    return _viol("moe.group_tiles", f"{part}, {label}: the grouped walk is not a bijection: {prob.message}", cex)


def walk_visits(layer: MoELayer, sim: dict[str, Any], tiles_n: int, step_delta: int) -> tuple[int, np.ndarray]:
    """``(grid, visits)`` of a grouped GEMM's printed persistent walk on the routing ``sim``
    (:func:`simulate_routing`): the launch grid ``min(padded m-tiles x tiles_n, SIM_CTAS)`` and how often each of
    the ``tiles_m x tiles_n`` units is taken when CTA ``c`` takes ``c, c + step, ...`` (``step = grid +
    step_delta``; none when the step does not advance)."""
    units = sim["tiles_m"] * tiles_n
    grid = min((sim["padded_rows"] // layer.routing.pad) * tiles_n, SIM_CTAS)
    step = grid + step_delta
    visits = np.zeros(units, dtype=np.int64)
    if step >= 1:
        for c in range(grid):
            visits[c:units:step] += 1
    return grid, visits


def row_bound_parts(layer: MoELayer) -> dict[str, bool]:
    """Per grouped GEMM: does it read the routing's ``tile_rows`` table (a ``row_bound`` A load or D store: its
    Scheduler::current reads ``w.rows = tile_rows[w.tm]``, templates/moe/work.j2)?"""
    return {part: layer.program(part).row_bounded for part in ("gate_up", "down")}


def _row_bound_rows_problem(layer: MoELayer, part: str) -> Violation | None:
    """``moe.group_tiles``: with a row_bound map, run_grouped (moe/gemm.j2) refuses ``rows % kTileM != 0``
    (kErrSize) and encodes ``rows / kTileAMn`` m-tiles: the printed ``padded_rows`` must be a multiple of
    kTileM for every ``T <= 2^tokens_bits`` (decided on :func:`workspace_tokens`: padded_rows is periodic-affine
    in T, so its residue mod kTileM is periodic with a period those T's cover)."""
    p = layer.program(part)
    tm_ = p.mma.tile_m   # the printed kTileM (gemm/traits.j2: kMmaM x kAtomsM x kRepsM)
    ts = workspace_tokens(layer)
    if ts.size > WORKSPACE_MAX_POINTS:
        ts = ts[:WORKSPACE_MAX_POINTS]
    rows = np.asarray(layer.workspace_quantities(ts)["padded_rows"], dtype=np.int64) + np.zeros_like(ts)
    bad = np.flatnonzero(rows % tm_)
    if not bad.size:
        return None
    t, r = int(ts[bad[0]]), int(rows[bad[0]])
    return _viol("moe.group_tiles", f"{part}: T = {t}: padded_rows = {r} is not a multiple of kTileM = {tm_}: the "
                 "row_bound run_grouped refuses the call (kErrSize) that the layer promises",
                 _cex("moe.group_tiles", f"{part} run_grouped (moe/gemm.j2): rows % kTileM", "0", str(r % tm_),
                      params={"T": t, "padded_rows": r, "kTileM": tm_, "round_rows": layer.workspace.round_rows},
                      provenance="workspace_layout: padded_rows rounded up to round_rows"),
                 hint="round padded_rows to a multiple of the tile (workspace node round_rows = pad)")


def row_bound_box_row(valid: Any, tile: int, delta: int = 0) -> Any:
    """The printed row coordinate, inside its m-tile, of a ``row_bound`` box's tile row 0 (``valid`` = the m-tile's
    ``tile_rows`` entry, ``tile`` = the map's middle extent, ``delta`` the node's ``row_shift_delta``): the A load's
    ``a_mn0 = kTileAMn - w.rows`` (gemm/mainloop.j2) and the D store's ``c_outer = kEpiTileM - rows + em * kEpiM``
    (gemm/epilogue.j2, subtile em's first row ``em * kEpiM``), both ``tile - valid + delta``. The one place the
    verifier states the printed shift.

    >>> row_bound_box_row(2, 64)   # 2 routed rows (the m-tile's last two): tile rows 0, 1 hold rows 62, 63, the rest
    62
    >>> row_bound_box_row(64, 64)  # a full m-tile: the box unshifted
    0
    """
    return tile - valid + delta


def _row_bound_problem(layer: MoELayer, part: str, sim: dict[str, Any], label: str,
                       params: dict) -> Violation | None:
    """``moe.group_tiles`` for a grouped GEMM with a ``row_bound`` A load or D store (M3: every tile of group e
    reads only rows of group e), on one simulated routing: the printed coordinates, every m-tile at once.

    The routed rows of m-tile ``tm`` of group ``e`` are the rows of ``[tm pad, (tm + 1) pad)`` the simulated row
    map sends a (token, slot) of expert e to (the routing node's ``group_padding`` decides where the padding
    rows lie; row-bounded tiles need them before the routed rows, so the routed rows end each m-tile); the kernels read ``w.rows = tile_rows[tm]`` (the
    printed table, :func:`simulate_routing`: ``valid``). A row_bound load (the 3-D map ``(K, kTileAMn, rows /
    kTileAMn)`` of moe/gemm.j2) puts tile row ``r`` at map row ``c = r + row_bound_box_row(valid, kTileAMn,
    delta)`` of m-tile tm, read iff ``0 <= c < kTileAMn`` (and tm inside the map's m-tiles), else filled (the k
    loop's oob_fill) without a read; a plain one reads row ``tm kTileAMn + r`` of the 2-D map. A row_bound store
    (the 3-D map ``(N, kEpiTileM, rows / kEpiTileM)``) writes accumulator row ``r`` (the tile row the plain store
    writes at ``m_base + r``: rule epilogue.coordinate / moe.swiglu) to row ``c' = r + row_bound_box_row(valid,
    kEpiTileM, delta)`` of m-tile tm iff ``0 <= c' < kEpiTileM``; a plain one writes ``tm kEpiTileM + r``.
    Accumulator row r is A tile row r (the MMA's rows). Required: a row_bound load reads exactly the m-tile's
    routed rows (no padding row is read); a row_bound store writes only routed rows; every routed row a store
    writes receives the accumulator row loaded from that same row (the load's and the store's shifts agree); every
    routed row is stored (the combine reads it); and every row_bound box starts at a non-negative row coordinate
    (a TMA store at a negative row coordinate faulted on the H200: illegal instruction, session 41; loads at
    negative rows ran but their fill was never checked, so neither is relied on). ``None`` when all hold. TMA
    semantics assumed (PTX ISA 9.7.9.25, cp.async.bulk.tensor): a box's out-of-bound elements (past the extent)
    are filled on load and not written on store."""
    p = layer.program(part)
    la, st, epi = p.load_into("sA"), p.stores[0], p.epilogue
    pad = layer.routing.pad
    cnt, tiles_m = sim["counts"], int(sim["tiles_m"])
    rows_printed = int(sim["padded_rows"])   # run_grouped's rows: w.padded_rows
    te = np.full(tiles_m, -1, dtype=np.int64)
    n_te = min(tiles_m, sim["tile_expert"].size)
    te[:n_te] = sim["tile_expert"][:n_te]
    live = np.flatnonzero(te >= 0)
    live = live[cnt[te[live]] > 0]   # empty or unowned m-tiles: moe.empty_groups / moe.offsets
    if not live.size:
        return None
    written = np.zeros(tiles_m, dtype=bool)
    valid = np.zeros(tiles_m, dtype=np.int64)
    n_tr = min(tiles_m, sim["tile_rows"].size)
    written[:n_tr] = sim["tile_rows_written"][:n_tr]
    valid[:n_tr] = sim["tile_rows"][:n_tr]
    miss = np.flatnonzero(~written[live])
    if miss.size:
        j = int(live[miss[0]])
        return _viol("moe.group_tiles", f"{part}, {label}: m-tile {j} of expert {int(te[j])}: route_scan never "
                     f"writes tile_rows[{j}], which the row_bound boxes read as w.rows (Scheduler::current)",
                     _cex("moe.group_tiles", f"{part} Scheduler::current (moe/work.j2): w.rows = tile_rows[w.tm]",
                          f"tile_rows[{j}] written by route_scan", "never written", params=params,
                          element={"m_tile": j, "expert": int(te[j])}))
    tm, e = live, te[live]
    v = valid[tm]
    # each row's expert (-1: padding), from the simulated row map; index `span` is the "no row" sentinel
    pr, ex = sim["permuted"], sim["ex"]
    has = pr >= 0
    span = max(rows_printed, tiles_m * pad, int(pr[has].max()) + 1 if has.any() else 0)
    owner = np.full(span + 1, -1, dtype=np.int64)
    owner[pr[has]] = ex[has]
    m0 = (tm * pad)[:, None]

    def routed(rows: np.ndarray) -> np.ndarray:
        """Which of ``rows`` (absolute, one line per m-tile) are routed rows of that m-tile's group in it."""
        inside = (rows >= m0) & (rows < m0 + pad) & (rows >= 0) & (rows < span)
        return owner[np.where(inside, rows, span)] == e[:, None]

    blk = m0 + np.arange(pad)[None, :]
    mine = routed(blk)
    true_v = mine.sum(axis=1)
    # the load: tile row r -> absolute row (-1: out of bounds, filled)
    a_mn = int(la.tile_mn)
    r_a = np.arange(a_mn)[None, :]
    if la.row_bound:
        c = r_a + row_bound_box_row(v[:, None], a_mn, la.row_shift_delta)
        inb = (c >= 0) & (c < a_mn) & (tm[:, None] < rows_printed // a_mn)
        arow = tm[:, None] * a_mn + c
    else:
        arow = tm[:, None] * a_mn + r_a
        inb = arow < rows_printed
    arow = np.where(inb, arow, -1)
    e_m = int(epi.tile_m)
    r_s = np.arange(e_m)[None, :]
    if st.row_bound:
        c2 = r_s + row_bound_box_row(v[:, None], e_m, st.row_shift_delta)
        sinb = (c2 >= 0) & (c2 < e_m) & (tm[:, None] < rows_printed // e_m)
    else:
        c2 = r_s + 0 * v[:, None]
        sinb = tm[:, None] * e_m + c2 < rows_printed
    srow = np.where(sinb, tm[:, None] * e_m + c2, -1)
    # accumulator row r holds A tile row r (-1: the fill; -2: no such A tile row)
    acc = np.full(srow.shape, -2, dtype=np.int64)
    n = min(a_mn, e_m)
    acc[:, :n] = arow[:, :n]
    tdelta, ldelta, sdelta = (f" {d:+d}" if d else "" for d in (layer.routing.tile_rows_delta, la.row_shift_delta,
                                                                  st.row_shift_delta))
    load_prov = (f"mainloop.j2 load_A: a_mn0 = kTileAMn - w.rows{ldelta} (kTileAMn = {a_mn}), map (K, {a_mn}, rows / "
                 f"{a_mn})" if la.row_bound else f"mainloop.j2 load_A: 2-D map, row tm * {a_mn} + r")
    store_prov = (f"epilogue.j2: c_outer = kEpiTileM - rows{sdelta} + em * kEpiM (kEpiTileM = {e_m}), map (N, {e_m}, "
                  f"rows / {e_m})" if st.row_bound else f"epilogue.j2: 2-D map, row tm * {e_m} + r")
    rb_prov = (f"tile_rows[tm] = i == 0 ? count_e - (t_e - 1) * pad : pad{tdelta} (route_scan, group_padding "
               f"{layer.routing.group_padding}); {load_prov}; {store_prov}")

    def rows_text(k: int) -> str:
        rr = blk[k][mine[k]]
        return f"[{int(rr[0])}, {int(rr[-1]) + 1})" if rr.size and int(rr[-1]) - int(rr[0]) + 1 == rr.size else \
            f"{[int(x) for x in rr[:8]]}"

    def cex(k: int, where: str, want: str, got: str, **el: Any) -> Counterexample:
        return _cex("moe.group_tiles", where, want, got, params={**params, "valid": int(v[k]),
                                                                 "true_valid": int(true_v[k]), "pad": pad},
                    element={"m_tile": int(tm[k]), "expert": int(e[k]), **el}, provenance=rb_prov)

    def head(k: int) -> str:
        return (f"{part}, {label}: m-tile {int(tm[k])} of expert {int(e[k])} (routed rows {rows_text(k)}, "
                f"tile_rows[{int(tm[k])}] = {int(v[k])}, {int(true_v[k])} routed)")

    def what(row: int) -> str:
        o = int(owner[row]) if 0 <= row < span else -1
        return "a padding row" if o < 0 else f"a row of group {o}"

    for node, tile, kind in ((la, a_mn, "load"), (st, e_m, "store")):
        if not node.row_bound:
            continue
        first = row_bound_box_row(v, tile, node.row_shift_delta)   # the first box's row (subtile em = 0)
        neg = np.flatnonzero(first < 0)
        if neg.size:
            k = int(neg[0])
            return _viol("moe.group_tiles", f"{head(k)}: the {kind} {node.name} places its first box at row "
                         f"{int(first[k])} of m-tile {int(tm[k])}, a negative TMA coordinate (a store there faulted "
                         "on the H200: illegal instruction; loads there are not relied on either)",
                         cex(k, f"{part} {kind} {node.name} (row_bound tile_rows)", "a box row coordinate >= 0",
                             f"row coordinate {int(first[k])}", box_row=int(first[k])),
                         hint="the routing must put each group's padding rows before its routed rows "
                              "(group_padding 'before') so that the boxes start at tile_m - valid >= 0")
    if la.row_bound:
        stray = inb & ~routed(arow)
        if stray.any():
            k, r = (int(x) for x in np.argwhere(stray)[0])
            row = int(arow[k, r])
            return _viol("moe.group_tiles", f"{head(k)}: A tile row {r} of load {la.name} reads row {row} (map row "
                         f"{int(c[k, r])} of m-tile {int(tm[k])}), {what(row)}, not one of the m-tile's routed rows",
                         cex(k, f"{part} load {la.name} (row_bound tile_rows)", f"a routed row {rows_text(k)} or out "
                             "of bounds (filled, not read)", f"row {row}", tile_row=r, row=row))
        short = np.flatnonzero((inb & routed(arow)).sum(axis=1) < true_v)
        if short.size:
            k = int(short[0])
            rows_read = set(int(x) for x in arow[k][inb[k]])
            row = next(int(x) for x in blk[k][mine[k]] if int(x) not in rows_read)
            # the tile row that reads it with w.rows = the routed rows, and what the printed one reads there
            r = row - int(tm[k]) * a_mn - int(row_bound_box_row(int(true_v[k]), a_mn))
            src = int(arow[k, r]) if 0 <= r < a_mn else -2
            held = (f"the out-of-bounds fill ({p.kloop.oob_fill})" if src == -1 else f"row {src}" if src >= 0
                    else "nothing")
            return _viol("moe.group_tiles", f"{head(k)}: routed row {row} is never loaded by {la.name}: its tile row "
                         f"{r} (map row {row - int(tm[k]) * a_mn} with w.rows = {int(true_v[k])}) reads {held}",
                         cex(k, f"{part} load {la.name} (row_bound tile_rows)", f"tile row {r} reads row {row}",
                             f"tile row {r} reads {held}", row=row, tile_row=r, row_read=src))
    got = sinb & routed(srow)
    if st.row_bound:
        stray = sinb & ~got
        if stray.any():
            k, r = (int(x) for x in np.argwhere(stray)[0])
            row = int(srow[k, r])
            return _viol("moe.group_tiles", f"{head(k)}: the store {st.name} writes accumulator row {r} to row {row} "
                         f"(map row {int(c2[k, r])} of m-tile {int(tm[k])}), {what(row)}, not one of the m-tile's "
                         "routed rows", cex(k, f"{part} store {st.name} (row_bound tile_rows)",
                                            f"a routed row {rows_text(k)} or out of bounds (not written)",
                                            f"row {row}", acc_row=r, row=row))
    wrong = got & (acc != srow)
    if wrong.any():
        k, r = (int(x) for x in np.argwhere(wrong)[0])
        row, src = int(srow[k, r]), int(acc[k, r])
        held = (f"the out-of-bounds fill ({p.kloop.oob_fill}: its A tile row is outside the map), no row's data"
                if src == -1 else "no A tile row" if src == -2 else f"row {src}")
        return _viol("moe.group_tiles", f"{head(k)}: routed row {row} receives accumulator row {r}, which holds "
                     f"{held}: the load's and the store's row shifts disagree", cex(
                         k, f"{part} store {st.name}", f"row {row}'s own product (accumulator row loaded from row "
                         f"{row})", f"accumulator row {r} = {held}", acc_row=r, row=row, row_read=src))
    short = np.flatnonzero(got.sum(axis=1) < true_v)
    if short.size:
        k = int(short[0])
        stored = set(int(x) for x in srow[k][got[k]])
        row = next(int(x) for x in blk[k][mine[k]] if int(x) not in stored)
        return _viol("moe.group_tiles", f"{head(k)}: routed row {row} is never stored by {st.name} (the combine "
                     "reads it)", cex(k, f"{part} store {st.name}", f"row {row} stored", "never stored", row=row))
    return None


def _check_group_tiles(layer: MoELayer, cases: list) -> tuple[list[Proof], list[Violation]]:
    from argus_cutlass.verify.decomposition import GroupedWalk, check_grouped_walk, grouped_tile_of_unit

    bad: list[Violation] = []
    proofs: list[Proof] = []
    seen: set[str] = set()
    points = 0
    for part in ("gate_up", "down"):
        enc = _grouped_operand_problem(layer, part)
        if enc is not None:
            # the simulation below reads rows through the printed maps: meaningless over other encodings
            return [], [enc]
    rb = row_bound_parts(layer)
    readers = [part for part, on in rb.items() if on]
    if readers and not layer.routing.tile_rows:
        # the row_bound boxes' shift comes from a table no kernel writes: whatever the workspace holds
        seen.add("moe.group_tiles")
        part = readers[0]
        pr = layer.program(part)
        nodes = [n.name for n in (pr.load_into("sA"), pr.stores[0]) if n.row_bound]
        bad.append(_viol("moe.group_tiles", f"{part}: {' and '.join(nodes)} (row_bound tile_rows) place their "
                         "boxes by w.rows = tile_rows[w.tm] (Scheduler::current), but the routing node has tile_rows "
                         "False: route_scan never writes that table, so every m-tile's rows are shifted by whatever "
                         "the workspace holds",
                         _cex("moe.group_tiles", f"{part} Scheduler::current (moe/work.j2): w.rows = tile_rows[w.tm]",
                              "tile_rows[0] written by route_scan (routing node tile_rows)", "never written",
                              element={"m_tile": 0, "nodes": nodes}, params={"tile_rows": 0},
                              provenance="layer.cu.j2 route_scan: tile_rows written only with routing tile_rows"),
                         hint="set the routing node's tile_rows with row_bound loads / stores "
                              "(MoEConfig.row_bounded)"))
    for part in readers:
        if "moe.group_tiles" not in seen:
            v = _row_bound_rows_problem(layer, part)
            if v is not None:
                seen.add("moe.group_tiles")
                bad.append(v)
    rb_points = 0
    for part in ("gate_up", "down"):
        p = layer.program(part)
        la, lb = p.load_into("sA"), p.load_into("sB")
        epi, sched = p.epilogue, p.schedule
        walk = GroupedWalk.of(sched)
        n_out = printed_extent(layer, part, "n")   # the N run_grouped is called with
        per_expert = 2 * layer.ffn if part == "gate_up" else layer.hidden
        tile_m, tile_n = la.tile_mn, lb.tile_mn
        tiles_n = -(-n_out // epi.tile_n)
        unit_ct = layer.index("tile_unit").ctype if any(i.name == "tile_unit" for i in layer.indices) else "int32_t"
        if walk.band_m * tiles_n > CTYPES.get(unit_ct, 2**31 - 1) and "moe.group_tiles" not in seen:
            seen.add("moe.group_tiles")
            bad.append(_viol("moe.group_tiles", f"{part}: a band spans band_m * tiles_n = {walk.band_m * tiles_n} "
                             f"units, past {unit_ct} (the walk's Unit)",
                             _cex("moe.group_tiles", f"{part} scheduler span", f"<= {CTYPES.get(unit_ct)}",
                                  str(walk.band_m * tiles_n), params={"band_m": walk.band_m, "tiles_n": tiles_n})))
        for label, ids in cases:
            sim = simulate_routing(layer, ids)
            off, cnt, te, tiles_m = sim["offsets"], sim["counts"], sim["tile_expert"], sim["tiles_m"]
            units = tiles_m * tiles_n
            grid, visits = walk_visits(layer, sim, tiles_n, sched.step_delta)
            step = grid + sched.step_delta
            params = {"T": int(ids.shape[0]), "tiles_m": tiles_m, "tiles_n": tiles_n, "grid": grid}
            walk_problem = check_grouped_walk(tiles_m, tiles_n, walk)
            if walk_problem is not None:
                if "moe.group_tiles" not in seen:
                    seen.add("moe.group_tiles")
                    bad.append(_walk_cex(part, label, walk_problem, params))
                continue
            if rb[part] and "moe.group_tiles" not in seen:
                # the row_bound boxes (their rows depend on the m-tile only: every unit of it reads / writes these)
                rb_points += tiles_m
                v = _row_bound_problem(layer, part, sim, label, params)
                if v is not None:
                    seen.add("moe.group_tiles")
                    bad.append(v)
            tms, tns, _ = grouped_tile_of_unit(np.arange(units), tiles_m, tiles_n, walk)
            if (visits != 1).any() and "moe.group_tiles" not in seen:
                u = int(np.flatnonzero(visits != 1)[0])
                seen.add("moe.group_tiles")
                bad.append(_viol("moe.group_tiles", f"{part}, {label}: unit {u} is taken {int(visits[u])} times "
                                 f"(grid {grid}, step {step})",
                                 _cex("moe.group_tiles", f"{part} scheduler", "1 visit", f"{int(visits[u])} visits",
                                      params=params)))
            for u in range(units):
                if "moe.group_tiles" in seen and "moe.empty_groups" in seen:
                    break
                tm, tn = int(tms[u]), int(tns[u])
                e = int(te[tm])
                points += 1
                if e < 0 or cnt[e] == 0:
                    if "moe.empty_groups" not in seen:
                        seen.add("moe.empty_groups")
                        bad.append(_viol("moe.empty_groups", f"{part}, {label}: unit {u} (m-tile {tm}) belongs to "
                                         f"{'no group' if e < 0 else f'empty group {e}'} but loads and stores a tile",
                                         _cex("moe.empty_groups", f"{part} scheduler", "no unit", f"unit {u}",
                                              params=params)))
                    continue
                a0 = (tm if la.block_mode == "m" else tn) * tile_m
                lo, hi = int(off[e]), int(off[e + 1])
                if (a0 < lo or a0 + tile_m > hi or la.expert_rows or la.expert_shift or la.pair_offset) \
                        and "moe.group_tiles" not in seen:
                    seen.add("moe.group_tiles")
                    if la.expert_rows or la.expert_shift or la.pair_offset:
                        half = a0 + tile_m // 2
                        msg = (f"{part}, {label}: A's load {la.name!r} has expert_rows {la.expert_rows}, expert_shift "
                               f"{la.expert_shift}, pair_offset {la.pair_offset} (all 0 for the permuted rows, one "
                               f"plain (m, k) tensor): m-tile {tm} of expert {e} reads rows past "
                               f"{half - 1} from row {half + la.pair_offset - tile_m // 2 if la.pair_offset else a0} "
                               f"on, outside group {e}'s padded rows [{lo}, {hi})")
                    else:
                        msg = (f"{part}, {label}: m-tile {tm} of expert {e} reads A rows [{a0}, {a0 + tile_m}) outside "
                               f"group {e}'s padded rows [{lo}, {hi})")
                    bad.append(_viol("moe.group_tiles", msg,
                                     _cex("moe.group_tiles", f"{part} load {la.name}", f"rows in [{lo}, {hi})",
                                          f"[{a0}, {a0 + tile_m})", params=params,
                                          element={"m_tile": tm, "expert": e})))
                    continue
                rows = _b_rows(lb, e, tn, tile_n)
                if part == "gate_up":
                    half = tile_n // 2
                    col = tn * epi.tile_n + np.arange(half)
                    want = np.concatenate([e * per_expert + col, e * per_expert + layer.ffn + col])
                    live = np.concatenate([col < n_out, col < n_out])
                else:
                    col = tn * epi.tile_n + np.arange(tile_n)
                    want = e * per_expert + col
                    live = col < n_out
                wrong = np.flatnonzero(live & (rows != want))
                if wrong.size and "moe.group_tiles" not in seen:
                    r = int(wrong[0])
                    seen.add("moe.group_tiles")
                    what = "gate" if part == "gate_up" and r < tile_n // 2 else ("up" if part == "gate_up" else "W2")
                    bad.append(_viol("moe.group_tiles", f"{part}, {label}: tile (m-tile {tm}, n-block {tn}) of expert "
                                     f"{e}: B tile row {r} ({what}) reads weight row {int(rows[r])}, expected "
                                     f"{int(want[r])} (expert {e}'s rows [{e * per_expert}, {(e + 1) * per_expert}))",
                                     _cex("moe.group_tiles", f"{part} load {lb.name}", f"row {int(want[r])}",
                                          f"row {int(rows[r])}", params=params,
                                          element={"m_tile": tm, "n_block": tn, "expert": e, "tile_row": r},
                                          provenance=f"expert_rows {lb.expert_rows}, expert_shift {lb.expert_shift}, "
                                                     f"pair_offset {lb.pair_offset}")))
            # empty groups own no m-tile at all
            for e in np.flatnonzero(cnt == 0):
                if (te[:tiles_m] == e).any() and "moe.empty_groups" not in seen:
                    seen.add("moe.empty_groups")
                    bad.append(_viol("moe.empty_groups", f"{part}, {label}: empty group {int(e)} owns an m-tile",
                                     _cex("moe.empty_groups", "route_scan", "no m-tile", "an m-tile", params=params)))
        # pipeline phase: producer and consumer walk the same units, each the whole k loop
        if p.pipeline.producer.carry_across_tiles != p.pipeline.consumer.carry_across_tiles and \
                "moe.empty_groups" not in seen:
            seen.add("moe.empty_groups")
            bad.append(_viol("moe.empty_groups", f"{part}: the producer and consumer carry the pipeline state "
                             "differently across units", None))
    if "moe.group_tiles" not in seen:
        walks = ", ".join(f"{part} {GroupedWalk.of(layer.program(part).schedule).describe()}"
                          for part in ("gate_up", "down"))
        rb_text = (f"; row_bound tile_rows ({', '.join(readers)}): on {rb_points} (m-tile, routing) points the "
                   "printed tile_rows shift loads exactly the m-tile's routed rows (padding rows out of bounds), "
                   "stores only routed rows, each from the accumulator row loaded from it, every routed row once; "
                   "padded_rows a multiple of kTileM for every T" if readers else "")
        proofs.append(Proof("moe.group_tiles", "M3", "enum", f"{points} (unit, routing) points: A rows in the tile's "
                            "padded group, B rows = expert e's gate/up/W2 rows of the output columns, units once, "
                            f"every (m-tile, n-block) once ({walks}){rb_text}", points=points + rb_points))
    if "moe.empty_groups" not in seen:
        proofs.append(Proof("moe.empty_groups", "M4", "enum", "no unit, load or store for an empty group; every unit "
                            "runs the full k loop in producer and consumer (pipeline.carry proves the phase)"))
    return proofs, bad


def _frag(i: np.ndarray, lane: np.ndarray, warp: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(row, col) in the 64 x N wgmma accumulator of register i (PTX ISA 9.7.15.5.1, CLayout_64xN)."""
    row = 16 * warp + lane // 4 + 8 * ((i % 4) // 2)
    col = 8 * (i // 4) + 2 * (lane % 4) + (i % 2)
    return row, col


def _check_swiglu(layer: MoELayer) -> tuple[list[Proof], list[Violation]]:
    """``moe.swiglu``: the gate+up epilogue (``gemm/epilogue.j2`` with ``act``) stores, for gate
    register ``i`` of every consumer thread, ``act_value(acc[i], acc[i + act_pair])`` at
    ``(row_w + (row + kEpiRowOffset) % 64, col)`` of the h tile, ``(row, col)`` being register
    i's accumulator coordinate (``col < N/2``). Required: the pair register holds (row, col + N/2)
    (the up column of the same output), the store lands on (row, col) itself (row identity, the
    column mapped into the half-width h tile), the h tile is covered once, and the epilogue
    stores the MMA's accumulator into the tensor the TMA store writes (the part of
    ``epilogue.coordinate`` that the swiglu form keeps)."""
    from argus_cutlass.verify.absint import consumer_thread

    p = layer.gate_up
    e, mma = p.epilogue, p.mma
    n = mma.op.n
    where = str(e.loc)
    dn_act = layer.down.epilogue.act
    if dn_act:
        return [], [_viol("moe.swiglu", f"down epilogue act {dn_act!r}: the down GEMM stores its accumulator (y's "
                          "terms); the activation belongs to the gate+up epilogue only",
                          _cex("moe.swiglu", "down epilogue epi_value", "acc(m, n)",
                               f"act_value(acc(m, n), acc(m, n + {layer.down.epilogue.act_pair}))"))]
    if e.act != "swiglu":
        return [], [_viol("moe.swiglu", f"gate+up epilogue act {e.act!r}: the layer needs 'swiglu' (silu(gate) * up, "
                          "gate the first half of the tile)",
                          _cex("moe.swiglu", "epilogue act_value", "silu(gate) * up", e.act or "no activation"))]
    if e.tile_n * 2 != n or p.load_into("sB").pair_offset == 0:
        return [], [_viol("moe.swiglu", f"output tile {e.tile_n} columns from a {n}-column accumulator without paired "
                          "halves", _cex("moe.swiglu", "epilogue", f"tile_n = {n // 2} (half of N = {n}), paired B "
                                         "halves", f"tile_n = {e.tile_n}, pair_offset "
                                         f"{p.load_into('sB').pair_offset}"))]
    dst = p.stores[0].dst if p.stores else e.dst
    wrong = []
    if e.acc != mma.acc:
        wrong.append((f"the epilogue stores register tensor {e.acc!r}, but the MMA accumulates into {mma.acc!r}",
                      mma.acc, e.acc))
    if e.dst != dst:
        wrong.append((f"the epilogue stores to {e.dst!r}, but the TMA store writes {dst!r}", dst, e.dst))
    if (e.tile_m, e.op_m, e.op_n) != (mma.tile_m, mma.op.m, n):
        wrong.append((f"the epilogue partitions a {e.tile_m}-row tile of {e.op_m}x{e.op_n} atoms, but the MMA "
                      f"accumulates {mma.tile_m} rows of {mma.op.m}x{n}", f"{mma.tile_m} rows, {mma.op.m}x{n}",
                      f"{e.tile_m} rows, {e.op_m}x{e.op_n}"))
    if wrong:
        return [], [_viol("moe.swiglu", w[0], _cex("moe.swiglu", "epilogue", w[1], w[2])) for w in wrong]
    t = np.arange(128)
    lane, warp = t % 32, t // 32
    regs = n // 2
    op_m = e.op_m
    reps = max(1, e.tile_m // (op_m * e.warpgroups))
    cover = np.zeros((e.tile_m, e.tile_n), dtype=np.int64)
    for i in range(regs // 2):
        rg, cg = _frag(np.full_like(t, i), lane, warp)
        j = i + e.act_pair
        if j >= regs or j < 0:
            return [], [_viol("moe.swiglu", f"register {i} pairs with register {j}, outside the {regs} accumulators",
                              _cex("moe.swiglu", "epilogue act_value", f"0 <= i + act_pair < {regs}", str(j),
                                   element={"register": i, "pair": j}))]
        ru, cu = _frag(np.full_like(t, j), lane, warp)
        badt = np.flatnonzero((ru != rg) | (cu != cg + n // 2))
        if badt.size:
            th = int(badt[0])
            return [], [_viol("moe.swiglu", f"thread {th}: gate register {i} holds acc({int(rg[th])}, {int(cg[th])}) "
                              f"but its pair register {j} holds acc({int(ru[th])}, {int(cu[th])}), expected "
                              f"acc({int(rg[th])}, {int(cg[th]) + n // 2}) (the up column of the same output)",
                              _cex("moe.swiglu", "epilogue act_value", f"({int(rg[th])}, {int(cg[th]) + n // 2})",
                                   f"({int(ru[th])}, {int(cu[th])})",
                                   element={"thread": th, "register": i, "pair": j}))]
        # the printed store: row_w + (row + kEpiRowOffset) % 64, column col (gemm/epilogue.j2)
        srow = (rg + e.row_offset) % op_m
        badt = np.flatnonzero((srow != rg) | (cg >= e.tile_n))
        if badt.size:
            th = int(badt[0])
            thread = consumer_thread(0, th)
            h = f"h({int(rg[th])}, {int(cg[th])})"
            got = f"h({int(srow[th])}, {int(cg[th])})"
            cex = Counterexample(
                "M5", "moe.swiglu", "enum", "moe.swiglu", "gate+up epilogue store (act_value)", -1, -1, -1,
                {"m": int(rg[th]), "n": int(cg[th])}, thread, f"accum[{i}]", {},
                f"silu(acc({int(rg[th])}, {int(cg[th])})) * acc({int(rg[th])}, {int(cg[th]) + n // 2}) stored at {h} "
                "(its own row; column in the h tile)", f"stored at {got} (row offset {e.row_offset})",
                f"CLayout_64x{n}: gate register {i} (pair {j}); store row (row + {e.row_offset}) % {op_m}",
                element={"tensor": "h", "m": int(srow[th]), "n": int(cg[th]), "row": int(rg[th]), "col": int(cg[th])},
                chain=(f"accum[{i}] of threadIdx.x={thread['threadIdx']}", f"{h} expected", f"{got} written"),
                params={"row_offset": e.row_offset, "N": n, "tile_n": e.tile_n})
            return [], [_viol("moe.swiglu", f"threadIdx.x={thread['threadIdx']} (consumer WG0, warp "
                              f"{thread['warp']}, lane {thread['lane']}) gate register accum[{i}] holds "
                              f"acc({int(rg[th])}, {int(cg[th])}) (up in accum[{j}]) but its silu(gate) * up is "
                              f"stored at {got}, not {h}: row {int(rg[th])}'s value lands on row {int(srow[th])} "
                              f"(row_offset {e.row_offset}; still a bijection of the h tile, VERIFIER.md pitfall 2)",
                              cex, where, "store each SwiGLU value at its accumulator's own (row, column)")]
        for w in range(e.warpgroups):
            for r in range(reps):
                cover_rows = op_m * (r * e.warpgroups + w) + srow
                np.add.at(cover, (cover_rows, cg), 1)
    if (cover != 1).any():
        r, c = (int(v) for v in np.argwhere(cover != 1)[0])
        return [], [_viol("moe.swiglu", f"h tile element ({r}, {c}) is stored {int(cover[r, c])} times",
                          _cex("moe.swiglu", "epilogue staging", "1 store", f"{int(cover[r, c])} stores",
                               element={"tensor": "h", "m": r, "n": c}))]
    pts = 128 * (regs // 2) * e.warpgroups * reps
    return [Proof("moe.swiglu", "M5", "enum", f"{e.warpgroups} warpgroup(s) x 128 threads x {regs // 2} gate "
                  f"registers: pair register +{e.act_pair} holds the up column of the same output; each SwiGLU "
                  f"value is stored at its own (row, column) of the {e.tile_m}x{e.tile_n} h tile, once",
                  points=pts)], []


def _check_combine(layer: MoELayer, cases: list) -> tuple[list[Proof], list[Violation]]:
    c, k = layer.combine, layer.topk
    if c.acc_dtype != "fp32":
        # a concrete sum: out rows 256 and 1 with weights 1: acc = 256, then 256 + 1 rounds back in 16 bits
        big = {"bf16": 256, "fp16": 2048}[c.acc_dtype]
        return [], [_viol("moe.combine", f"the combine accumulates in {c.acc_dtype}: CombineAcc(float(acc) + w * x) "
                          f"rounds after every term, so y[0, 0] = 1.0 * {big} + 1.0 * 1 gives {big} (fp32: {big + 1}); "
                          "the layer's contract is an fp32 sum of the k gated terms, rounded once",
                          Counterexample("M6", "moe.combine", "enum", "combine acc[q]", "combine", -1, -1, -1, {},
                                         {"cta": 0, "threadIdx": 0, "role": "combine", "warp": 0, "lane": 0},
                                         "acc[0]", {}, f"{big + 1} (fp32 accumulation, one rounding)",
                                         f"{big} ({c.acc_dtype} after term 1)",
                                         f"acc_dtype {c.acc_dtype}: a rounding per term (k = {k})",
                                         element={"tensor": "y", "token": 0, "col": 0,
                                                  "terms": f"1.0 * {big}, 1.0 * 1"},
                                         params={"k": k}),
                          hint="accumulate in fp32 (acc_dtype = 'fp32')")]
    for label, ids in cases:
        sim = simulate_routing(layer, ids)
        pr = sim["permuted"]
        source = {int(r): s for s, r in enumerate(pr) if r >= 0}
        t_ = ids.shape[0]
        for t in range(t_):
            terms = []
            for j in range(c.terms):
                s = t * k + j
                row = int(pr[s]) if c.row_map == "permuted_row" else (s if pr[s] >= 0 else -1)
                if row < 0:
                    continue
                wslot = (j + c.weight_slot_shift) % k if c.weighted else None
                terms.append((source.get(row), wslot, j))
            want = [t * k + j for j in range(k) if pr[t * k + j] >= 0]
            got = [x[0] for x in terms]
            msg = None
            if sorted(g for g in got if g is not None) != want or None in got:
                msg = (f"token {t} sums rows of (token, slot) {[(g // k, g % k) if g is not None else None for g in got]}"
                       f", expected its own {len(want)} slots {[(s // k, s % k) for s in want]}",
                       f"{len(want)} terms of token {t}", f"{len(got)} terms")
            else:
                wrong = [(src, ws, j) for src, ws, j in terms if ws != src % k]
                if wrong:
                    src, ws, j = wrong[0]
                    msg = (f"token {t}: slot {src % k}'s row is scaled by "
                           f"{'no weight' if ws is None else f'weights[{t}, {ws}]'}, expected weights[{t}, {src % k}]",
                           f"weights[{t}, {src % k}]", "none" if ws is None else f"weights[{t}, {ws}]")
            if msg:
                return [], [_viol("moe.combine", f"{label}: {msg[0]}",
                                  _cex("moe.combine", "combine", msg[1], msg[2], element={"token": t},
                                       params={"T": t_, "k": k, "terms": c.terms},
                                       provenance=f"row_map {c.row_map}, weighted {c.weighted}, weight shift "
                                                  f"{c.weight_slot_shift}"))]
    inv = [Proof("moe.inverse", "M1", "enum", "row read for slot (t, j) holds source (t, j) in every routing",
                 points=len(cases))]
    return inv + [Proof("moe.combine", "M6", "enum", f"every token adds its k gated rows once ({len(cases)} "
                        "routings)", points=len(cases))], []


def _check_dtype(layer: MoELayer) -> tuple[list[Proof], list[Violation]]:
    """``moe.dtype``: the routing gather and the combine print ``Element`` from the layer's dtype;
    the GEMMs read / write their own tensors' dtypes. They must agree, and h (gate+up's D) must be
    what down reads as A."""
    bad: list[Violation] = []
    want = layer.dtype
    for part in ("gate_up", "down"):
        p = layer.program(part)
        for tname in ("gA", "gB", "gD"):
            try:
                dt = p.tensor(tname).dtype
            except Exception:  # noqa: BLE001 - a program without that tensor
                dt = None
            if dt != want:
                bad.append(_viol("moe.dtype", f"the layer is {want} (x, xs, y, the gather and combine's Element) but "
                                 f"{part}'s {tname} is {dt}: the kernels read and write the same bytes as different "
                                 "types", _cex("moe.dtype", f"{part} tensor {tname}", want, str(dt),
                                               element={"tensor": f"{part}.{tname}"},
                                               provenance=f"layer dtype {want}; {part}.{tname}.dtype {dt}")))
    gd, da = layer.gate_up.tensor("gD").dtype, layer.down.tensor("gA").dtype
    if gd != da:
        bad.append(_viol("moe.dtype", f"gate+up writes h as {gd} but down reads it as {da}",
                         _cex("moe.dtype", "h (gate+up gD -> down gA)", gd, da, element={"tensor": "h"})))
    if bad:
        return [], bad
    return [Proof("moe.dtype", "M8", "enum", f"layer {want} == gA / gB / gD of gate+up and down; h {gd} == down A",
                  points=7)], []


#: every global-memory access of the layer's kernels, in launch order, ONE table (templates/moe/layer.cu.j2 run() and
#: the kernels' bodies, moe/gemm.j2 run_grouped and the grouped GEMMs' Scheduler::current): ``(kernel, buffer, mode,
#: when, what)``; ``buffer`` a workspace region (:data:`WORKSPACE_ELEMS`) or a caller argument (ids, x, weights, w13,
#: w2, y); ``mode`` ``"r"``, ``"w"`` or ``"rw"``; ``when`` the layer choice that prints the access: ``""`` always,
#: ``"handoff"`` (layer node handoff: the per-m-tile counters), ``"row_bound"`` (the tile_rows table: route_scan with
#: the routing node's tile_rows, a grouped GEMM with a row_bound load or store, :func:`row_bound_parts`),
#: ``"padding_before"`` (routing node group_padding "before": route_permute's row map reads counts), ``"combine_handoff"``
#: (layer node combine_handoff: the down -> combine counters out_ready). moe.pdl reads it
#: as :func:`pdl_chain` (kernel -> buffers read / written; the down GEMM's ``out`` is the xs buffer there), moe.workspace
#: as :func:`workspace_accessors` (region -> its accesses); tests/unit/test_moe_layer.py checks it against the printed
#: kernels' pointer parameters and run_grouped's arguments.
LAYER_ACCESSES: tuple[tuple[str, str, str, str, str], ...] = (
    ("route_count", "ids", "r", "", "reads ids[s], s < rows"),
    ("route_count", "block_counts", "w", "", "writes block_counts[chunk * E + e]"),
    ("route_scan", "block_counts", "rw", "", "scans block_counts[b * E + e] in place, b < chunks"),
    ("route_scan", "counts", "w", "", "writes counts[e]"),
    ("route_scan", "offsets", "w", "", "writes offsets[e], e <= E"),
    ("route_scan", "tile_expert", "w", "", "writes tile_expert[base_e + i]"),
    ("route_scan", "tiles_m", "w", "", "writes *tiles_m"),
    ("route_scan", "tile_ready", "w", "handoff", "zeroes tile_ready[base_e + i]"),
    ("route_scan", "out_ready", "w", "combine_handoff", "zeroes out_ready[base_e + i]"),
    ("route_scan", "tile_rows", "w", "row_bound", "writes tile_rows[base_e + i]"),
    ("route_scan", "gu_tickets", "w", "tickets_zero_gate_up", "zeroes gu_tickets[0] (dynamic walk)"),
    ("route_scan", "dn_tickets", "w", "tickets_zero_down", "zeroes dn_tickets[0] (dynamic walk)"),
    ("route_permute", "ids", "r", "", "reads ids[s], s < rows"),
    ("route_permute", "block_counts", "r", "", "reads block_counts[chunk * E + e]"),
    ("route_permute", "counts", "r", "padding_before", "reads counts[e] (routing group_padding 'before')"),
    ("route_permute", "offsets", "r", "", "reads offsets[e]"),
    ("route_permute", "x", "r", "", "reads x[t * H + col]"),
    ("route_permute", "permuted_row", "w", "", "writes permuted_row[s], s < rows"),
    ("route_permute", "xs", "w", "", "writes xs[pos * H + col]"),
    # routing node fused: a call with one chunk launches route_fused instead of the three kernels above (its CTA
    # y == 0 writes their tables; no block_counts: no later kernel reads them)
    ("route_fused", "ids", "r", "", "reads ids[s], s < rows <= kChunk"),
    ("route_fused", "x", "r", "", "reads x[t * H + col]"),
    ("route_fused", "counts", "w", "", "writes counts[e] (CTA y == 0)"),
    ("route_fused", "offsets", "w", "", "writes offsets[e], e <= E (CTA y == 0)"),
    ("route_fused", "tile_expert", "w", "", "writes tile_expert[base_e + i] (CTA y == 0)"),
    ("route_fused", "tiles_m", "w", "", "writes *tiles_m (CTA y == 0)"),
    ("route_fused", "tile_ready", "w", "handoff", "zeroes tile_ready[base_e + i] (CTA y == 0)"),
    ("route_fused", "out_ready", "w", "combine_handoff", "zeroes out_ready[base_e + i] (CTA y == 0)"),
    ("route_fused", "tile_rows", "w", "row_bound", "writes tile_rows[base_e + i] (CTA y == 0)"),
    ("route_fused", "gu_tickets", "w", "tickets_zero_gate_up", "zeroes gu_tickets[0] (CTA y == 0, dynamic walk)"),
    ("route_fused", "dn_tickets", "w", "tickets_zero_down", "zeroes dn_tickets[0] (CTA y == 0, dynamic walk)"),
    ("route_fused", "permuted_row", "w", "", "writes permuted_row[s], s < rows (CTA y == 0)"),
    ("route_fused", "xs", "w", "", "writes xs[pos * H + col]"),
    ("gate_up", "xs", "r", "", "reads A through its tensor map (padded_rows x K)"),
    ("gate_up", "w13", "r", "", "reads B through its tensor map"),
    ("gate_up", "tile_expert", "r", "", "reads tile_expert[tm], tm < tiles_m"),
    ("gate_up", "tiles_m", "r", "", "reads *tiles_m"),
    ("gate_up", "tile_ready", "w", "handoff", "adds to tile_ready[tm] (red.release.gpu)"),
    ("gate_up", "tile_rows", "r", "row_bound", "reads tile_rows[tm], tm < tiles_m"),
    ("gate_up", "h", "w", "", "writes D through its tensor map (padded_rows x N)"),
    ("gate_up", "gu_tickets", "rw", "tickets_gate_up", "takes tickets atomicAdd(gu_tickets, 1) (dynamic walk)"),
    ("down", "h", "r", "", "reads A through its tensor map (padded_rows x K)"),
    ("down", "w2", "r", "", "reads B through its tensor map"),
    ("down", "tile_expert", "r", "", "reads tile_expert[tm], tm < tiles_m"),
    ("down", "tiles_m", "r", "", "reads *tiles_m"),
    ("down", "tile_ready", "r", "handoff", "spins on tile_ready[tm] (ld.acquire.gpu)"),
    ("down", "out_ready", "w", "combine_handoff", "adds to out_ready[tm] (red.release.gpu)"),
    ("down", "tile_rows", "r", "row_bound", "reads tile_rows[tm], tm < tiles_m"),
    ("down", "out", "w", "", "writes D through its tensor map (padded_rows x N)"),
    ("down", "dn_tickets", "rw", "tickets_down", "takes tickets atomicAdd(dn_tickets, 1) (dynamic walk)"),
    ("combine", "out", "r", "", "reads out[row * H + col]"),
    ("combine", "permuted_row", "r", "", "reads permuted_row[t * k + j]"),
    ("combine", "weights", "r", "", "reads weights[t * k + j]"),
    ("combine", "y", "w", "", "writes y[t * H + col]"),
    ("combine", "out_ready", "r", "combine_handoff", "spins on out_ready[row / pad] (ld.acquire.gpu)"),
)
#: the workspace regions' element types, as printed in the kernels' parameters (the other buffers of
#: :data:`LAYER_ACCESSES` are the caller's arguments)
WORKSPACE_ELEMS = {"block_counts": "int32_t", "counts": "int32_t", "offsets": "RowIndex", "tile_expert": "int32_t",
                   "tiles_m": "int32_t", "tile_ready": "int32_t", "out_ready": "int32_t", "tile_rows": "int32_t",
                   "gu_tickets": "int32_t", "dn_tickets": "int32_t",
                   "permuted_row": "RowIndex",
                   "xs": "Element", "out": "Element", "h": "Element"}
#: buffers one name stands for in moe.pdl's chain: the down GEMM's ``out`` reuses the xs bytes (workspace alias)
PDL_BUFFER = {"out": "xs"}
#: the layer's kernels in launch order (route_fused: in place of the three routing kernels, routing node fused)
_KERNELS = tuple(dict.fromkeys(k for k, *_ in LAYER_ACCESSES))
#: the routing kernels of each path (:func:`routing_path`)
ROUTING_KERNELS = {"three": ("route_count", "route_scan", "route_permute"), "route_fused": ("route_fused",)}
#: the kernels of one call on each routing path, in launch order
PATH_KERNELS = {path: tuple(k for k in _KERNELS if k in kern or k not in ("route_count", "route_scan", "route_permute",
                                                                          "route_fused"))
                for path, kern in ROUTING_KERNELS.items()}


def _chain(keep: Any, path: str = "three") -> tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...]:
    """moe.pdl's view of the accesses ``keep(kernel, when)`` selects: per kernel of routing path ``path`` in launch
    order, (reads, writes)."""
    out = []
    for k in PATH_KERNELS[path]:
        acc = [(PDL_BUFFER.get(b, b), m) for kk, b, m, when, _w in LAYER_ACCESSES if kk == k and keep(k, when)]
        out.append((k, tuple(dict.fromkeys(b for b, m in acc if "r" in m)),
                    tuple(dict.fromkeys(b for b, m in acc if "w" in m))))
    return tuple(out)


def _by_when(when: str) -> dict[str, tuple[tuple[str, ...], tuple[str, ...]]]:
    """The accesses printed only with ``when``, per kernel (reads, writes), moe.pdl's names."""
    return {k: (r, w) for k, r, w in _chain(lambda _k, wh: wh == when) if r or w}


#: the base layer's chain (no handoff, no row-bounded tiles, the padding after each group): what every layer has
PDL_CHAIN = _chain(lambda _k, when: when == "")
#: the handoff's counters (layer node ``handoff``): route_scan zeroes them, gate+up adds, down reads
HANDOFF_ACCESSES = _by_when("handoff")
#: the routed-rows table of row-bounded tiles: route_scan writes it with the routing node's ``tile_rows``, a grouped
#: GEMM with a ``row_bound`` A load or D store reads it (Scheduler::current: ``w.rows = tile_rows[w.tm]``, beside
#: ``tile_expert[w.tm]``; :func:`row_bound_parts`)
ROW_BOUND_ACCESSES = _by_when("row_bound")
#: with the routing node's ``group_padding`` ``"before"`` route_permute also reads ``counts[e]`` (its row map
#: ``off_{e+1} - count_e + rank``, templates/moe/layer.cu.j2)
GROUP_PADDING_BEFORE_READS = {k: r for k, (r, _w) in _by_when("padding_before").items()}
#: with ``handoff`` and ``pdl`` the down kernel has no wait before its accesses (it waits last): every access
#: (and ``tile_rows`` when it reads it: :data:`ROW_BOUND_ACCESSES`)
HANDOFF_DOWN_PRE_WAIT = ("h", "w2", "tile_expert", "tiles_m", "tile_ready", "xs")
#: the gate+up -> down conflicts a sound handoff orders per m-tile (rule moe.handoff): h (gate+up writes, down
#: reads), xs (gate+up reads an m-tile's rows, down overwrites them with its output) and the counters
HANDOFF_ORDERED = ("h", "xs", "tile_ready")
#: with ``combine_handoff`` (and ``pdl``) the combine has no wait before its accesses (it waits last): every access
#: (out is the xs buffer in moe.pdl's chain)
COMBINE_HANDOFF_PRE_WAIT = ("xs", "permuted_row", "weights", "y", "out_ready")
#: the down -> combine conflicts a sound combine handoff orders per m-tile (rule moe.combine_handoff): out (the xs
#: bytes: down writes an m-tile's rows, the combine reads them) and the counters
COMBINE_HANDOFF_ORDERED = ("xs", "out_ready")
#: the kernel pairs whose conflicts a sound handoff edge orders per m-tile (:data:`HANDOFF_EDGES`)
_EDGE_ORDERED = {"handoff": HANDOFF_ORDERED, "combine_handoff": COMBINE_HANDOFF_ORDERED}


def _printed(layer: MoELayer, kernel: str, when: str) -> bool:
    """Whether ``layer`` prints ``kernel``'s accesses of :data:`LAYER_ACCESSES` condition ``when``."""
    if kernel == "route_fused" and not layer.routing.fused:
        return False
    if when == "":
        return True
    if when == "handoff":
        return bool(layer.handoff)
    if when == "combine_handoff":
        return bool(layer.combine_handoff)
    if when == "padding_before":
        return layer.routing.group_padding == "before"
    if when == "row_bound":
        return (bool(layer.routing.tile_rows) if kernel in ("route_scan", "route_fused")
                else bool(row_bound_parts(layer).get(kernel)))
    if when.startswith("tickets_zero_"):   # the routing zeroes a dynamic GEMM's counter (layer node tickets_zero)
        return when[len("tickets_zero_"):] in layer.dynamic_parts() and bool(layer.tickets_zero)
    if when.startswith("tickets_"):        # a grouped GEMM with the dynamic walk takes tickets from its counter
        return when[len("tickets_"):] in layer.dynamic_parts()
    raise ValueError(f"LAYER_ACCESSES condition {when!r}")


def row_bound_kernels(layer: MoELayer) -> tuple[str, ...]:
    """The kernels of ``layer`` that access the ``tile_rows`` table (:data:`ROW_BOUND_ACCESSES`): route_scan with
    the routing node's ``tile_rows``, each grouped GEMM with a row_bound load or store."""
    return tuple(k for k in ROW_BOUND_ACCESSES if _printed(layer, k, "row_bound"))


def pdl_chain(layer: MoELayer, path: str = "three") -> tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...]:
    """moe.pdl's chain of ``layer``: each kernel in launch order with the buffers it reads and writes, the accesses of
    :data:`LAYER_ACCESSES` the layer prints (:data:`PDL_CHAIN` plus, with ``handoff`` / ``combine_handoff``, their
    counters; with row-bounded tiles the tile_rows table; with the padding before each group route_permute's counts
    read). ``path``: the routing path (:func:`routing_path`; ``"route_fused"`` only for a layer whose routing node is
    fused: one routing kernel, route_fused, in place of the three)."""
    if path == "route_fused" and not layer.routing.fused:
        raise ValueError(f"layer {layer.name!r} has no fused routing path")
    return _chain(lambda k, when: _printed(layer, k, when), path)


def pdl_paths(layer: MoELayer) -> tuple[str, ...]:
    """The routing paths the printed host can take (:func:`routing_path`): the three kernels, and with the routing
    node's ``fused`` route_fused too."""
    return ("three", "route_fused") if layer.routing.fused else ("three",)


def handoff_sound(layer: MoELayer) -> bool:
    """The handoff's printed choices are the correct ones (complete stores, fences, zeroed counters, the exact
    target); the counts per m-tile are rule ``moe.handoff``'s enumeration."""
    return (layer.handoff and layer.handoff_signal == "complete" and layer.handoff_fence and layer.handoff_zero
            and layer.handoff_target_delta == 0 and (not layer.routing.fused or layer.routing.fused_zero))


def combine_handoff_sound(layer: MoELayer) -> bool:
    """The down -> combine handoff's printed choices are the correct ones (complete stores, the proxy fence, zeroed
    counters, the exact target, each term waiting on its own row's m-tile, coherent loads); the counts per m-tile
    are rule ``moe.combine_handoff``'s enumeration."""
    return (layer.combine_handoff and layer.combine_handoff_signal == "complete" and layer.combine_handoff_fence
            and layer.combine_handoff_zero and layer.combine_handoff_target_delta == 0
            and layer.combine_handoff_slot == "own" and layer.combine_handoff_load == "cg"
            and (not layer.routing.fused or layer.routing.fused_zero))


def _edge_sound(layer: MoELayer, edge: str) -> bool:
    return handoff_sound(layer) if edge == "handoff" else combine_handoff_sound(layer)


def pdl_early_trigger(layer: MoELayer) -> tuple[bool, ...]:
    """Which kernels of :func:`pdl_chain` execute ``griddepcontrol.launch_dependents`` before their wait (printed
    in gemm/kernel_body.j2 and moe/layer.cu.j2): the down GEMM with ``handoff`` and the combine with
    ``combine_handoff`` (with ``pdl``: each waits last); every other programmatic kernel triggers right after its
    wait."""
    early = {"down": bool(layer.pdl and layer.handoff), "combine": bool(layer.pdl and layer.combine_handoff)}
    return tuple(early.get(name, False) for name, _r, _w in pdl_chain(layer))


def pdl_launches(layer: MoELayer) -> tuple[bool, ...]:
    """Which kernels of :data:`PDL_CHAIN` the host launches programmatically: with ``layer.pdl`` every
    one after ``route_count`` (printed: ``launch_programmatic`` / run_grouped's attribute), else none."""
    return tuple(bool(layer.pdl) and i > 0 for i in range(len(PDL_CHAIN)))


#: global buffers each kernel touches before its ``griddepcontrol.wait`` (printed: the wait is the first
#: statement of route_scan / route_permute / combine and follows only the shared-memory barrier init and
#: the tensor-map prefetch in the grouped GEMMs -- except the down GEMM with the handoff and the combine with the
#: combine handoff, which wait last: :data:`HANDOFF_DOWN_PRE_WAIT`, :data:`COMBINE_HANDOFF_PRE_WAIT`;
#: tests/unit/test_moe_layer.py and test_moe_combine_handoff.py pin those places)
PDL_PRE_WAIT: dict[str, tuple[str, ...]] = {name: () for name, _r, _w in PDL_CHAIN}
#: what the grouped GEMMs read before their wait with ``weight_prefetch`` (``prefetch_first_weights``:
#: the m-tile count and the first unit's expert, then that expert's weight boxes into L2; its
#: Scheduler::current also reads ``tile_rows[w.tm]`` in a GEMM that reads that table, :func:`pdl_pre_wait`)
PDL_PREFETCH_READS = {"gate_up": ("tiles_m", "tile_expert", "w13"), "down": ("tiles_m", "tile_expert", "w2")}


def pdl_pre_wait(layer: MoELayer) -> dict[str, tuple[str, ...]]:
    """The printed pre-wait accesses of ``layer``'s kernels: :data:`PDL_PRE_WAIT`, plus
    :data:`PDL_PREFETCH_READS` when the layer prefetches weights (with ``tile_rows`` for a grouped GEMM that
    reads it: the prefetch's Scheduler::current reads it with tile_expert), every access of the down GEMM
    with the handoff (:data:`HANDOFF_DOWN_PRE_WAIT`, with ``tile_rows`` likewise and, with ``combine_handoff``, its
    adds to ``out_ready``) and every access of the combine with ``combine_handoff`` (:data:`COMBINE_HANDOFF_PRE_WAIT`)."""
    pre = dict(PDL_PRE_WAIT) if not layer.weight_prefetch else {**PDL_PRE_WAIT, **PDL_PREFETCH_READS}
    if layer.handoff and layer.pdl:
        pre["down"] = (HANDOFF_DOWN_PRE_WAIT + (("out_ready",) if layer.combine_handoff else ())
                       + (("dn_tickets",) if "down" in layer.dynamic_parts() else ()))
    if layer.combine_handoff and layer.pdl:
        pre["combine"] = COMBINE_HANDOFF_PRE_WAIT
    for part in set(row_bound_kernels(layer)) - {"route_scan"}:
        if pre.get(part):
            pre[part] = pre[part] + ("tile_rows",)
    return pre


def _check_pdl(layer: MoELayer, pre_wait: dict[str, tuple[str, ...]] | None = None,
               early: tuple[bool, ...] | None = None) -> tuple[list[Proof], list[Violation]]:
    """``moe.pdl`` (M10): over two consecutive calls of the layer (12 launches), every pair of accesses
    to one buffer where one writes (RAW, WAR, WAW) is ordered: the later kernel's access happens after
    the earlier kernel completed. A kernel launched in plain stream order starts after everything
    before it completed. A programmatic one (``pdl``) may start early: its accesses after its
    ``griddepcontrol.wait`` follow the previous kernel's completion (and, since a kernel completes only
    after all its CTAs passed their own wait, every earlier one's); its accesses before the wait follow
    the completion of the kernel two launches back only -- it cannot launch before every CTA of the
    previous kernel executed ``griddepcontrol.launch_dependents``, printed after that kernel's own
    wait (or, for the plain route_count, before that kernel could start at all). So a pre-wait access
    may conflict with nothing the previous kernel does. A kernel that executes ``launch_dependents`` before
    its wait (:func:`pdl_early_trigger`: the down GEMM with the handoff, the combine with the combine handoff)
    lets the next one launch while the kernel before it still runs, so the next kernel's pre-wait accesses may
    conflict with neither of them: in general they are ordered only after the kernels before the nearest earlier
    kernel that triggers after its wait (the combine after the down GEMM with the handoff: after route_permute).
    Conflicts a sound handoff edge orders per m-tile (gate+up -> down on h / xs / tile_ready, down -> combine on
    out / out_ready: rules moe.handoff and moe.combine_handoff) are not counted against the waiter's early
    accesses. ``pre_wait`` (default :func:`pdl_pre_wait`, the printed kernels) names the buffers a kernel touches
    before its wait; ``early`` (default :func:`pdl_early_trigger`) which kernels trigger first."""
    pre = pdl_pre_wait(layer) if pre_wait is None else pre_wait
    prog = pdl_launches(layer)
    chain = pdl_chain(layer)
    early_of = dict(zip([n for n, _r, _w in chain], pdl_early_trigger(layer) if early is None else early))
    # the pairs (signaller, waiter) a sound handoff edge orders per m-tile, with the buffers it orders
    ordered = {(e.signaller, e.waiter): set(_EDGE_ORDERED[e.name]) for e in HANDOFF_EDGES
               if _edge_sound(layer, e.name)}
    # routing node fused: each call takes the three routing kernels or route_fused (host dispatch on its T), so
    # two consecutive calls are any of the paths' pairs (a one-chunk call then a many-chunk one and vice versa)
    chains = {p: pdl_chain(layer, p) for p in pdl_paths(layer)}
    pairs = 0
    for p0, p1 in itertools.product(chains, repeat=2):
        # the first kernel of a call (route_count / route_fused) is launched in stream order, every later one
        # programmatically with pdl (printed: launch_programmatic / run_grouped's attribute)
        seq = [(c, i, name, set(r), set(w), bool(layer.pdl) and i > 0)
               for c, path in ((0, p0), (1, p1)) for i, (name, r, w) in enumerate(chains[path])]
        # unordered_from[b]: the first launch whose completion a pre-wait access of launch b may not follow (the
        # nearest earlier launch that triggers after its own wait; launches from it to b - 1 may still run)
        unordered_from = []
        for b in range(len(seq)):
            j = b - 1
            while j > 0 and early_of.get(seq[j][2], False):
                j -= 1
            unordered_from.append(max(j, 0))
        mix = f" (calls: {p0}, then {p1})" if len(chains) > 1 else ""
        for a in range(len(seq)):
            for b in range(a + 1, len(seq)):
                ca, ia, na, ra, wa, _pa = seq[a]
                cb, ib, nb, rb, wb, prog_b = seq[b]
                for buf in sorted((wa & (rb | wb)) | (ra & wb)):
                    pairs += 1
                    # a pre-wait access of a programmatic kernel is ordered after every kernel but the one before it;
                    # gate+up -> down on h / xs / tile_ready is ordered per m-tile by a sound handoff (moe.handoff),
                    # down -> combine on out (xs) / out_ready by a sound combine handoff (moe.combine_handoff)
                    if ca == cb and buf in ordered.get((na, nb), ()):
                        continue
                    if prog_b and buf in pre.get(nb, ()) and a >= unordered_from[b]:
                        kind = "writes" if buf in wb else "reads"
                        msg = (f"{nb} (call {cb}) {kind} {buf} before its griddepcontrol.wait, but it is launched "
                               f"programmatically and may run before {na} (call {ca}), which "
                               f"{'writes' if buf in wa else 'reads'} {buf}, completed{mix}")
                        return [], [_viol("moe.pdl", msg, Counterexample(
                            "M10", "moe.pdl", "enum", nb, f"{nb} before griddepcontrol.wait", -1, -1, -1, {}, {}, "",
                            {}, f"{nb}'s access to {buf} after {na} completed", f"{nb} touches {buf} before its wait",
                            "a programmatic kernel touches global data only after griddepcontrol.wait",
                            element={"buffer": buf}, chain=(f"{na} (call {ca})", f"{nb} (call {cb})")))]
    early = sorted({f"{k}: {', '.join(v)}" for k, v in pre.items() if v and prog[[n for n, _r, _w in chain].index(k)]})
    mode = ("programmatic dependent launch: route_count in stream order, the 5 later kernels wait "
            "(griddepcontrol.wait) before their first global access" if layer.pdl else "plain stream order")
    if early:
        what = (f"the grouped GEMMs' L2 prefetch of their first unit's first {layer.weight_prefetch} weight k-tiles: "
                if layer.weight_prefetch else "")
        kind = "accesses" if ordered and layer.pdl else "reads"
        mode += (f" except the {kind} before the wait ({what}{'; '.join(early)}), none of a buffer the kernel "
                 "before writes" + ("; down's accesses of h, xs and tile_ready follow gate+up's per m-tile "
                                    "(moe.handoff), its wait is its last statement"
                                    if ("gate_up", "down") in ordered and layer.pdl else "")
                 + ("; the combine's reads of out (xs) and out_ready follow down's per m-tile (moe.combine_handoff), "
                    "its wait is its last statement" if ("down", "combine") in ordered and layer.pdl else ""))
    if len(chains) > 1:
        mode += ("; routing node fused: a one-chunk call launches route_fused (stream order) in place of route_count / "
                 "route_scan / route_permute, so the two calls are each of the 4 mixes of the paths")
    bufs = {b for ch in chains.values() for _n, r, w in ch for b in (*r, *w)}
    return [Proof("moe.pdl", "M10", "enum", f"{mode}; {pairs} conflicting access pairs over two calls (RAW / WAR / "
                  f"WAW on {len(bufs)} buffers, out = xs) all ordered by "
                  "completion", points=pairs)], []


def _store_thread(layer: MoELayer, unit: int, grid: int = SIM_CTAS, part: str = "gate_up") -> dict[str, int]:
    """The thread of grouped GEMM ``part`` (gate+up by default) that stores a unit's output tile and signals it:
    thread 0 of the consumer warpgroup that runs the unit (ping-pong: every second unit of a CTA, starting with
    warpgroup 0; cooperative: warpgroup 0), CTA ``unit % grid``."""
    p = layer.program(part)
    pingpong = p.schedule.consumer_stride == 2
    return {"cta": unit % grid, "warpgroup": 1 + ((unit // grid) % 2 if pingpong else 0),
            "thread_in_warpgroup": 0, "role": "consumer (store thread)"}


def _combine_thread(layer: MoELayer, token: int, slot: int) -> dict[str, int]:
    """The combine thread that waits for slot ``slot``'s m-tile of token ``token`` (CTA t, thread
    ``slot % kCombineThreads``, templates/moe/layer.cu.j2)."""
    i = slot % layer.combine.threads
    return {"cta": token, "threadIdx": i, "role": "combine (waits for its slot's m-tile)", "warp": i // 32,
            "lane": i % 32}


def printed_extent(layer: MoELayer, part: str, axis: str) -> int:
    """The N (``axis="n"``) or K (``"k"``) grouped GEMM ``part`` is launched with: the layer size its program's
    param ``n_size`` / ``k_size`` names (what ``run_grouped``'s call prints), or the specified one
    (:data:`GROUPED_EXTENTS`) when the param names no layer size (rule ``moe.launch`` reports that)."""
    name = layer.program(part).param(f"{axis}_size")
    try:
        return layer.size(name)
    except (KeyError, TypeError):
        return layer.size(GROUPED_EXTENTS[part][axis == "k"])


def _check_handoff(layer: MoELayer, cases: list) -> tuple[list[Proof], list[Violation]]:
    """``moe.handoff`` (M11), the gate+up -> down handoff per m-tile (layer node ``handoff``). The down producer
    loads m-tile ``tm``'s h rows (its A) only after ``tile_ready[tm]`` reached ``kHandoffTarget``; it is sound
    when (a) each gate+up unit signals once, after its stores of h are complete and fenced for the async proxy,
    with a release the down producer's acquire reads (then fences, before its TMA loads), (b) the signals of
    m-tile ``tm`` number exactly ``kHandoffTarget`` (fewer: down may read h before the last unit stored it;
    more is the same under a smaller target; a larger target: down waits forever, or traps at its time-out),
    counted here over the printed gate+up walk (grid of up to 132 CTAs, step; its n-blocks from the N that
    run_grouped is printed with, :func:`printed_extent`) on every routing case, and (c) route_scan zeroes the
    counters of every m-tile each call (else a call's counts start at whatever the workspace held), each inside
    the workspace's max_tiles counters. The time-out and back-off of the spin are checked too (a time-out below
    max(10 s, 10x the bound of a correct wait) would trap a slow but correct call). The rule also checks what makes one m-tile's signals mean its h rows: gate+up stores rows ``[tm pad, (tm + 1)
    pad)`` (its epilogue's ``tile_m``) and down loads the same rows (its A tile's rows, the routing's ``pad``);
    both GEMMs take I from the one printed ``kFfn`` (gate+up's N, down's K). Down also overwrites xs (its output) rows of m-tile
    ``tm``, which only gate+up units of ``tm`` read (moe.group_tiles), all before their signal. No deadlock:
    gate+up never waits for down, and a programmatic down CTA launches only after every gate+up CTA executed
    ``launch_dependents`` (each has started, so each runs to its end), a plain one after gate+up completed.
    The checks are :func:`_check_edge`'s, shared with ``moe.combine_handoff``."""
    return _check_edge(layer, cases, handoff_edge("handoff"))


def _check_combine_handoff(layer: MoELayer, cases: list) -> tuple[list[Proof], list[Violation]]:
    """``moe.combine_handoff`` (M13), the down -> combine handoff per m-tile (layer node ``combine_handoff``), the
    checks of ``moe.handoff`` (:func:`_check_edge`) on the next edge: each down unit signals ``out_ready[tm]`` once,
    after its TMA stores of out are complete (``cp.async.bulk.wait_group 0``, not ``.read``) and ordered for the
    generic proxy (``fence.proxy.async.global``: the stores are async-proxy writes, the combine's loads generic,
    PTX ISA "Memory Consistency Model", proxies), with ``red.release.gpu``; the signals of every m-tile, counted over
    the printed down walk on every routing case, number exactly ``kCombineHandoffTarget`` (the down n-blocks of
    the N run_grouped is printed with); route_scan zeroes the counters each call, inside the workspace's
    max_tiles; down's m-tiles are the routing's ``pad`` rows (its epilogue's ``tile_m``: the combine waits on
    ``out_ready[row / kPad]``). The combine side: on every routing case every token's term j that reads a row of out
    (the printed row map) reads it after its CTA's ``__syncthreads()``, which follows the waits of threads
    ``j' % kCombineThreads`` on the m-tiles of the printed slots (``combine_handoff_slot``: each slot's own row, or
    slot 0's for every term); the read row's m-tile must be among them (counterexample: m-tile, token, slot,
    thread). The rows are read with ``__ldcg`` (``combine_handoff_load`` ``"cg"``; ``"nc"``, ``__ldg``, is refused:
    PTX ISA "ld" allows ``.nc`` only for data read-only for the kernel's lifetime, and down writes out while the
    combine runs). The time-out is at least max(10 s, 10x the bound of gate+up plus down). No deadlock: a
    programmatic combine CTA launches only after every down CTA executed ``griddepcontrol.launch_dependents`` (all
    resident, each runs to its end), and down waits only for gate+up (whose CTAs were all resident before down
    launched), never for the combine; the combine's ``griddepcontrol.wait`` is its last statement (rule moe.pdl)."""
    return _check_edge(layer, cases, handoff_edge("combine_handoff"))


def _check_edge(layer: MoELayer, cases: list, e: HandoffEdge) -> tuple[list[Proof], list[Violation]]:
    """Rule ``e.rule`` on handoff edge ``e`` (:data:`~argus_cutlass.dsl.moe_ir.HANDOFF_EDGES`): the printed choices
    (signal after complete stores, proxy fence, counters zeroed, one m-tile of ``pad`` rows on both sides, the
    time-out), the combine's waits and loads (edge ``combine_handoff``), the counters inside their workspace region,
    and the signals per m-tile over the signalling GEMM's printed walk on every routing case
    (:func:`_check_handoff`, :func:`_check_combine_handoff` state what each edge means)."""
    from argus_cutlass.verify.decomposition import GroupedWalk, check_grouped_walk, grouped_tile_of_unit

    rule, inv = e.rule, e.invariant
    if not getattr(layer, e.name):
        text = ("no handoff: the down GEMM reads h after gate+up completed (moe.pdl)" if e.name == "handoff" else
                "no combine handoff: the combine reads out after the down GEMM completed (moe.pdl)")
        return [Proof(rule, inv, "enum", text, points=0)], []
    combine = e.waiter == "combine"

    def knob(k: str) -> Any:
        return layer.edge_knob(e.name, k)

    def fail(msg: str, where: str, want: str, got: str, element: dict, thread: dict,
             params: dict | None = None) -> tuple[list[Proof], list[Violation]]:
        return [], [_viol(rule, msg, _cex(rule, where, want, got, element=element, thread=thread, params=params))]

    target = layer.handoff_target(e.name)
    p = layer.program(e.signaller)
    pad, sig_rows = layer.routing.pad, p.epilogue.tile_m
    wait_rows = pad if combine else layer.down.load_into("sA").tile_mn   # the rows one waited-for m-tile stands for
    reader = "the combine reads" if combine else "down loads"
    whom = "the combine" if combine else e.whom
    fn = f"{e.name}_signal"
    h0 = {"m_tile": 0, "tensor": e.tensor}
    waiter = _combine_thread(layer, 0, 0) if combine else {"cta": 0, "role": "down producer"}
    if combine and cases:   # the combine term that reads m-tile 0 in the first routing case names the waiter
        pr0 = simulate_routing(layer, cases[0][1])["permuted"]
        s0 = next((s for s, r in enumerate(pr0) if 0 <= r < pad), None)
        if s0 is not None:
            h0 = {**h0, "token": s0 // layer.topk, "slot": s0 % layer.topk}
            waiter = _combine_thread(layer, s0 // layer.topk, s0 % layer.topk)
    timeout, min_timeout = knob("timeout_ms"), layer.handoff_min_timeout_ms(e.name)
    # the printed choices: (wrong?, message, where, expected, actual, element, thread)
    choices = (
        (knob("signal") != "complete",
         f"{e.who} signals {e.counter}[tm] after cp.async.bulk.wait_group.read: the TMA stores have read shared "
         f"memory but their writes of {e.tensor} may not be performed, so {whom} can "
         f"{'read' if combine else 'load'} m-tile 0's rows before they land",
         f"{e.who} {fn} (moe/gemm.j2)", "cp.async.bulk.wait_group 0 (stores complete) before the release",
         "cp.async.bulk.wait_group.read 0", h0, _store_thread(layer, 0, part=e.signaller)),
        (not knob("fence"),
         ("no fence.proxy.async.global between down's TMA (async proxy) stores of out and its generic release of "
          "out_ready: the combine's generic loads of out, ordered after the acquire, are not ordered after the "
          "async-proxy writes (PTX ISA, memory consistency model: proxies)" if combine else
          "no fence.proxy.async.global between the TMA (async proxy) stores / loads of h and the generic release / "
          "acquire of tile_ready: the flag orders nothing for the async proxy (PTX ISA, memory consistency model: "
          "proxies)"),
         f"down {fn} (moe/gemm.j2)" if combine else "handoff_signal / handoff_wait (moe/gemm.j2)",
         "fence.proxy.async.global after the stores' completion, before the release" if combine else
         "fence.proxy.async.global after the stores' completion and after the acquire", "no proxy fence", h0,
         _store_thread(layer, 0, part=e.signaller)),
        (not knob("zero"),
         f"route_scan does not zero {e.counter}: a call's counters start at whatever the workspace holds (the "
         f"previous call's {target} per m-tile, or garbage), so {reader} m-tile 0's {e.tensor} before this call's "
         f"{e.who} stored it, or waits forever",
         "route_scan (layer.cu.j2)", f"{e.counter}[tm] = 0 for every m-tile, each call",
         "counters kept from the previous call", {"m_tile": 0, "call": 1}, _scan_thread(0)),
        (bool(layer.routing.fused and not layer.routing.fused_zero),
         f"route_fused does not zero {e.counter} (routing node fused_zero False): a one-chunk call (T*k <= "
         f"{layer.routing.chunk}) starts with the previous call's counters ({target} per m-tile, or garbage), so "
         f"{reader} m-tile 0's {e.tensor} before this call's {e.who} stored it, or waits forever",
         "route_fused (layer.cu.j2)", f"{e.counter}[tm] = 0 for every m-tile, each call, on both routing paths",
         "counters kept from the previous call on the fused path", {"m_tile": 0, "call": 1, "T": 1},
         {"cta": 0, "cta_y": 0, "threadIdx": 0, "role": "route_fused"}),
        (not (sig_rows == wait_rows == pad),
         (f"down signals m-tiles of {sig_rows} out rows (its epilogue's tile_m) but the combine waits on "
          f"out_ready[row / kPad] with kPad = {pad}: out_ready[tm] does not count the rows the combine reads"
          if combine else
          f"gate+up signals m-tiles of {sig_rows} h rows, down loads m-tiles of {wait_rows} rows and the groups are "
          f"padded to {pad}: tile_ready[tm] does not count the rows down reads"),
         "down epilogue tile_m / the combine's row / kPad" if combine else
         "gate+up epilogue tile_m / down A tile / routing pad", f"one m-tile of {pad} rows",
         f"{sig_rows} / {pad}" if combine else f"{sig_rows} / {wait_rows}", h0,
         _store_thread(layer, 0, part=e.signaller)),
        (0 < timeout < min_timeout,
         f"the {'combine' if combine else 'down producer'} traps after spinning {timeout} ms on an m-tile, below the "
         f"{min_timeout} ms a correct run needs: {HANDOFF_TIMEOUT_MARGIN}x its longest wait "
         f"(~{layer.handoff_wait_bound_ms(e.name)} ms: the whole "
         f"{'gate+up and down GEMMs' if combine else 'gate+up GEMM'} at T = 2^{layer.tokens_bits} at a tenth of the "
         f"tensor peak and a fifth of HBM), at least {MIN_HANDOFF_TIMEOUT_MS} ms for a GPU time-sliced with other "
         "work: a slow but correct call can fail with cudaErrorLaunchFailure",
         f"combine_wait k{e.const}TimeoutNs (moe/layer.cu.j2)" if combine else
         "handoff_wait kHandoffTimeoutNs (moe/gemm.j2)",
         f">= {min_timeout} ms ({HANDOFF_TIMEOUT_MARGIN} x the bound, at least "
         f"{MIN_HANDOFF_TIMEOUT_MS} ms), or 0 (no time-out)", f"{timeout} ms", h0, waiter),
    )
    if combine:
        choices += ((
            layer.combine_handoff_load != "cg",
            "the combine reads out through __ldg (ld.global.nc, the non-coherent read-only path) while the down GEMM "
            "may still write it: PTX ISA ld allows .nc only for data that stays read-only for the kernel's whole "
            "lifetime, so a line of out cached before down's stores landed can be served after the acquire",
            "combine's loads of out (moe/layer.cu.j2)", "__ldcg (ld.global.cg: L2, coherent at GPU scope)",
            "__ldg (ld.global.nc)", h0, waiter),)
    for wrong, msg, where, want, got, element, thread in choices:
        if wrong:
            return fail(msg, where, want, got, element, thread)
    walk = GroupedWalk.of(p.schedule)
    tiles_n = -(-printed_extent(layer, e.signaller, "n") // p.epilogue.tile_n)   # the printed walk's n-blocks
    k, threads, first = layer.topk, layer.combine.threads, layer.combine_handoff_slot == "first"
    points = reads = 0
    for label, ids in cases:
        sim = simulate_routing(layer, ids)
        tiles_m = sim["tiles_m"]
        tokens = int(ids.shape[0])
        # route_scan zeroes the counter at every index j it writes tile_expert[j]; the printed workspace gives the
        # counters their region's count (max_tiles in a correct layer; rule moe.workspace checks the node)
        written = [int(j) for j in np.flatnonzero(sim["tile_expert"] >= 0)] + [j for _e, j in sim["tile_oob"]]
        try:
            extent = int(layer.workspace.region(e.counter).elements(layer.workspace_quantities(tokens)))
        except KeyError:
            extent = sim["padded_rows"] // pad
        if written and max(written) >= extent:
            j = max(written)
            return fail(f"{label}: route_scan zeroes {e.counter}[{j}] but the workspace holds {extent} counters "
                        "(max_tiles): the write lands in the next buffer",
                        f"route_scan {e.counter}[base + i] = 0 (layer.cu.j2)", f"index < {extent}", str(j),
                        {"m_tile": j, "tensor": e.counter}, _scan_thread(0), {"T": tokens, "max_tiles": extent})
        pr = sim["permuted"]
        # the reader of each m-tile (for the counterexample): a routed row s of it, token s // k, slot s % k
        reader_of = {int(r) // pad: s for s, r in enumerate(pr) if r >= 0}
        if combine:
            # the printed combine: CTA t reads row[j] (the row map) after __syncthreads(), which follows the waits
            # of threads j' % kCombineThreads on m-tile row[j' or 0] / kPad (those with a row >= 0)
            for t in range(tokens):
                rows = [int(pr[t * k + j]) if layer.combine.row_map == "permuted_row" else
                        (t * k + j if pr[t * k + j] >= 0 else -1) for j in range(layer.combine.terms)]
                waited = {(rows[0] if first else r) // pad for r in rows if (rows[0] if first else r) >= 0}
                for j, r in enumerate(rows):
                    if r < 0:
                        continue
                    reads += 1
                    if r // pad not in waited:
                        w = sorted(waited)
                        return fail(
                            f"{label}: token {t}'s slot {j} reads out row {r} (m-tile {r // pad}) but its CTA's "
                            f"threads waited on {f'm-tiles {w}' if w else 'no m-tile'} "
                            f"(combine_handoff_slot {layer.combine_handoff_slot!r}): the combine may read the row "
                            f"before the down units of m-tile {r // pad} stored it",
                            "combine: the waits before __syncthreads() (moe/layer.cu.j2)",
                            f"a wait on out_ready[{r // pad}] (row {r} / kPad) before the read",
                            f"waits on {w}", {"m_tile": r // pad, "token": t, "slot": j, "row": r, "tensor": "out"},
                            _combine_thread(layer, t, j), {"T": tokens, "k": k, "pad": pad})
        units = tiles_m * tiles_n
        if units == 0 or check_grouped_walk(tiles_m, tiles_n, walk) is not None:
            continue   # no work, or a walk moe.group_tiles refuses
        grid, visits = walk_visits(layer, sim, tiles_n, p.schedule.step_delta)
        tms, _tns, _ = grouped_tile_of_unit(np.arange(units), tiles_m, tiles_n, walk)
        signals = np.bincount(tms, weights=visits, minlength=tiles_m).astype(np.int64)   # one signal per visit
        last = np.full(tiles_m, -1, dtype=np.int64)
        np.maximum.at(last, tms[visits > 0], np.flatnonzero(visits > 0))
        points += tiles_m
        bad_tm = np.flatnonzero(signals != target)
        if bad_tm.size:
            tm = int(bad_tm[0])
            got = int(signals[tm])
            element = {"m_tile": tm, "tensor": e.tensor}
            s = reader_of.get(tm)
            if combine and s is not None:
                element.update(token=s // k, slot=s % k)
            if got > target:
                msg = (f"{label}: m-tile {tm} gets {got} {e.who} signals but {whom} waits for {target}: "
                       f"{reader} its {e.tensor} rows after {target} units stored theirs, while unit "
                       f"{int(last[tm])} may still be storing")
                thread = _store_thread(layer, int(last[tm]), grid, part=e.signaller)
            else:
                msg = (f"{label}: m-tile {tm} gets {got} {e.who} signals but {whom} waits for {target}: the "
                       f"{'combine' if combine else 'down producer'} waits forever (deadlock; with a time-out "
                       "printed, it traps there)")
                thread = (_combine_thread(layer, s // k, s % k) if combine and s is not None else
                          {"cta": 0, "role": "combine" if combine else "down producer"})
            where = (f"k{e.const}Target (moe/layer.cu.j2) vs the down walk" if combine else
                     "kHandoffTarget (moe/gemm.j2) vs the gate+up walk")
            return fail(msg, where, f"{got} (the units of m-tile {tm})", str(target), element, thread,
                        {"T": tokens, "tiles_m": tiles_m, "tiles_n": tiles_n, "grid": grid})
    spin = (f"the spin's time-out {timeout} ms >= {min_timeout} ms (max({MIN_HANDOFF_TIMEOUT_MS} ms, "
            f"{HANDOFF_TIMEOUT_MARGIN}x the ~{layer.handoff_wait_bound_ms(e.name)} ms bound of a correct run's wait "
            "at the assumed slowest rates)" if timeout else "an unbounded spin")
    spin += f", back-off {knob('backoff_ns')} ns (the DSL keeps it <= 1 ms, PTX nanosleep); "
    if combine:
        return [Proof(rule, inv, "enum", f"every m-tile gets exactly k{e.const}Target = {target} down signals (one "
                      "per unit, after its out stores complete, fenced, red.release.gpu); every term the combine "
                      f"reads ({reads}) follows its CTA's ld.acquire.gpu wait on that row's m-tile (thread j % "
                      f"{threads} of slot j) and __syncthreads(), through __ldcg; counters zeroed by route_scan "
                      f"each call; {spin}{len(cases)} routings, {points} m-tiles", points=points + reads)], []
    return [Proof(rule, inv, "enum", f"every m-tile gets exactly kHandoffTarget = {target} gate+up signals "
                  "(one per unit, after its h stores complete, fenced, red.release.gpu) before down's producer "
                  f"(ld.acquire.gpu, fenced) loads its h rows; counters zeroed by route_scan each call; "
                  f"{spin}{len(cases)} routings, {points} m-tiles", points=points)], []


def _check_launch(layer: MoELayer) -> tuple[list[Proof], list[Violation]]:
    """``moe.launch``: the printed launches ``combine<<<T, threads>>>``, ``route_*<<<chunks, chunk>>>``
    are legal CTAs of whole warps (CUDA: at most 1024 threads), and route_scan's one CTA of ``scan_threads``
    threads holds an expert per thread (:func:`_check_scan_threads`)."""
    bad: list[Violation] = []
    for what, v, kernel in (("combine.threads", layer.combine.threads, "combine<<<T, kCombineThreads>>>"),
                            ("routing.chunk", layer.routing.chunk, "route_count / route_permute<<<chunks, kChunk>>>")):
        if not (isinstance(v, int) and 32 <= v <= MAX_CTA_THREADS and v % 32 == 0):
            why = ("CUDA refuses the launch (invalid configuration)" if not (isinstance(v, int) and 0 < v <= 1024)
                   else "a partial warp")
            bad.append(_viol("moe.launch", f"{what} = {v}: {kernel} needs a positive multiple of 32 threads, at most "
                             f"{MAX_CTA_THREADS} ({why})",
                             Counterexample("M9", "moe.launch", "arith", kernel, what, -1, -1, -1, {},
                                            {"cta": 0}, "", {}, f"blockDim.x in 32, 64, ..., {MAX_CTA_THREADS}",
                                            f"blockDim.x = {v}", why, params={what: v})))
    if not 1 <= layer.routing.slices <= MAX_GRID_Y:
        v = layer.routing.slices
        bad.append(_viol("moe.launch", f"routing.slices = {v}: route_permute<<<(chunks, slices), kChunk>>> needs a "
                         f"grid y extent in [1, {MAX_GRID_Y}] (CUDA's gridDim.y limit)",
                         Counterexample("M9", "moe.launch", "arith", "route_permute<<<(chunks, kSlices), kChunk>>>",
                                        "routing.slices", -1, -1, -1, {}, {"cta": 0}, "", {},
                                        f"gridDim.y in 1..{MAX_GRID_Y}", f"gridDim.y = {v}", "invalid configuration",
                                        params={"routing.slices": v})))
    tb = layer.tokens_bits
    if not (isinstance(tb, int) and not isinstance(tb, bool) and MAX_TOKENS_BITS <= tb <= 31):
        why = (f"the host entry refuses T > 2^{tb} (kErrTokens), token counts the family promises up to "
               f"2^{MAX_TOKENS_BITS}" if isinstance(tb, int) and tb < MAX_TOKENS_BITS else
               "T is a 32-bit int: proofs past 2^31 describe no call")
        bad.append(_viol("moe.launch", f"tokens_bits = {tb!r}: the layer's proofs and its printed T check must cover "
                         f"T up to 2^{MAX_TOKENS_BITS} and no more than a 32-bit int holds ({why})",
                         Counterexample("M9", "moe.launch", "arith", "host entry: if (T < 1 || int64_t(T) > (int64_t(1) << kTokensBits))",
                                        "tokens_bits", -1, -1, -1, {}, {}, "", {},
                                        f"kTokensBits in [{MAX_TOKENS_BITS}, 31]", f"kTokensBits = {tb!r}", why,
                                        params={"tokens_bits": tb if isinstance(tb, int) else -1,
                                                "T": 1 << MAX_TOKENS_BITS})))
    if layer.experts < 1:
        e = layer.experts
        bad.append(_viol("moe.launch", f"E = {e} experts: a layer needs at least one expert",
                         Counterexample("M9", "moe.launch", "arith", "route_scan<<<1, kScanThreads>>>", "route_scan",
                                        -1, -1, -1, {}, {"cta": 0}, "", {}, "E >= 1", f"E = {e}", "",
                                        params={"E": e})))
    # E > 1024 (MAX_EXPERTS): refused by _check_scan_threads (E <= scan_threads <= 1024), once
    bad += _check_scan_threads(layer)
    bad += _check_weight_experts(layer)
    from argus_cutlass.verify.smt import bound_bits

    for part, want in GROUPED_EXTENTS.items():
        prog = layer.program(part)
        got = (prog.param("n_size"), prog.param("k_size"))
        if got != want:
            bad.append(_viol("moe.launch", f"{part}: run_grouped is called with (N, K) = {got} (program params n_size, "
                             f"k_size) but the {part} GEMM is ({want[0]}, {want[1]}) = "
                             f"({layer.size(want[0])}, {layer.size(want[1])}): "
                             + ("it writes h's I columns from the 2I paired rows of W13 over H" if part == "gate_up"
                                else "it writes out's H columns over h's I"),
                             Counterexample("M9", "moe.launch", "arith", f"{part}::run_grouped(..., N, K, ...)",
                                            "n_size / k_size", -1, -1, -1, {}, {"cta": 0}, "", {},
                                            f"(N, K) = ({want[0]}, {want[1]})", f"(N, K) = {got}",
                                            "the GEMM's tensor maps, walk and k loop cover other extents",
                                            element={"tensor": "h" if part == "gate_up" else "out"})))
    for part, k_name, k in (("gate_up", "H", layer.hidden), ("down", "I", layer.ffn)):
        bits = bound_bits(layer.program(part))
        if k >> bits:   # run_grouped returns kErrKRange for K >= 2^bound_bits: every call of the layer refused
            bad.append(_viol("moe.launch", f"{part}: K = {k_name} = {k} is outside its k loop's proof range "
                             f"[1, 2^{bits}) (KLoop.bound_bits = {bits}); run_grouped refuses every call with kErrKRange",
                             Counterexample("M9", "moe.launch", "arith", f"{part}::run_grouped", "loop.bound_bits", -1,
                                            -1, -1, {}, {"cta": 0}, "", {}, f"{k_name} < 2^{bits}",
                                            f"{k_name} = {k}", "the layer can never run",
                                            params={k_name: k, "bound_bits": bits})))
    if bad:
        return [], bad
    return [Proof("moe.launch", "M9", "arith", f"combine {layer.combine.threads} and routing {layer.routing.chunk} "
                  f"threads per CTA (whole warps, <= {MAX_CTA_THREADS}); E = {layer.experts} <= {MAX_EXPERTS} and <= "
                  f"route_scan's {layer.routing.scan_threads} threads (<= {MAX_CTA_THREADS}, one per expert); "
                  f"H = {layer.hidden} and I = {layer.ffn} inside their k loops' proof ranges"
                  + (f"; route_fused<<<(1, {layer.routing.slices}), {layer.routing.chunk}>>> for chunks <= "
                     f"{layer.routing.fused_max_chunks}: grid y as route_permute's, E = {layer.experts} <= its "
                     f"{layer.routing.chunk} threads (one expert per thread)" if layer.routing.fused else ""),
                  points=5 + int(layer.routing.fused))], []


def _check_weight_experts(layer: MoELayer) -> list[Violation]:
    """The layer's ``E`` (``kExperts``: the routing keeps ids in ``[0, E)``, the scan makes E groups) is the expert
    count of both grouped GEMMs' weights (their B load's ``experts``: W13 ``(E, 2I, H)`` and W2 ``(E, H, I)``, whose
    tensor maps are printed with ``experts x expert_rows`` rows). A larger routing range sends ids past the weights
    (the maps' extent zero-fills them, or the caller's buffer ends first); a smaller one skips ids the weights
    hold: the token loses that slot's term."""
    bad: list[Violation] = []
    e_ = layer.experts
    for part in ("gate_up", "down"):
        try:
            lb = layer.program(part).load_into("sB")
        except (KeyError, ValueError):   # a program without a B load: the GEMM rules name it
            continue
        w = lb.experts
        if w == e_:
            continue
        wname = "W13" if part == "gate_up" else "W2"
        if e_ > w:
            e = w   # the first id the routing keeps that the weights do not hold
            what = (f"id {e} is routed (E = {e_}) to expert {e}, whose {wname} rows [{e * lb.expert_rows}, "
                    f"{(e + 1) * lb.expert_rows}) are past the {part} B tensor map ({w} experts x {lb.expert_rows} rows)")
        else:
            e = e_  # the first id the weights hold that the routing skips
            what = (f"id {e} names one of {wname}'s {w} experts but the routing skips ids >= E = {e_}: the token "
                    "loses that slot's term")
        bad.append(_viol("moe.launch", f"{part}: the layer's E = {e_} experts but its weights' B load "
                         f"{lb.name!r} holds experts = {w}: {what}",
                         _cex("moe.launch", f"route_expert / {part}::run_grouped(..., b_rows)",
                              f"kExperts == {part}'s kExpertsB = {w}", f"kExperts = {e_}, kExpertsB = {w}",
                              element={"tensor": "topk_ids", "token": 0, "slot": 0, "id": e},
                              params={"E": e_, "B experts": w}, provenance=what,
                              thread=_route_thread(layer, 0, "route_count"))))
    return bad


def _check_scan_threads(layer: MoELayer) -> list[Violation]:
    """route_scan's one CTA (routing node ``scan_threads``, printed as its launch, ``__launch_bounds__``, shared
    ``tiles[]`` and the scan loop's bound): at least one thread, at most CUDA's 1024 threads per CTA, and at least one
    thread per expert (thread e owns expert e). A partial last warp is legal (``__syncthreads`` waits for every
    thread of the CTA), and the Hillis-Steele loop over ``kScanThreads`` scans any thread count."""
    st, e_ = layer.routing.scan_threads, layer.experts
    kernel = "route_scan<<<1, kScanThreads>>>"
    if not 1 <= st <= MAX_CTA_THREADS:
        return [_viol("moe.launch", f"routing.scan_threads = {st}: {kernel} needs 1 to {MAX_CTA_THREADS} threads "
                      "(CUDA's threads per CTA; CUDA refuses the launch: invalid configuration)",
                      Counterexample("M9", "moe.launch", "arith", kernel, "routing.scan_threads", -1, -1, -1, {},
                                     {"cta": 0}, "", {}, f"blockDim.x in [1, {MAX_CTA_THREADS}]",
                                     f"blockDim.x = {st}", "CUDA: at most 1024 threads per block",
                                     params={"routing.scan_threads": st}))]
    if st < e_:
        return [_viol("moe.launch", f"routing.scan_threads = {st} < E = {e_}: route_scan gives expert e to thread "
                      f"e, so experts {st}..{e_ - 1} get no count, offset or m-tile (their rows land in other groups' "
                      "tiles)", Counterexample("M9", "moe.launch", "arith", kernel, "route_scan", -1, -1, -1, {},
                                               {"cta": 0, "threadIdx": st, "role": "route_scan", "warp": st // 32,
                                                "lane": st % 32}, "", {}, f"kScanThreads >= E = {e_}",
                                               f"kScanThreads = {st}: expert {st} has no thread", "",
                                               element={"expert": st}, params={"E": e_, "scan_threads": st}))]
    return []


def _padded_rows_max(layer: MoELayer, t: int) -> int:
    """The padded permuted rows the printed workspace_layout gives T = ``t`` tokens (the workspace node's formula,
    ``T*k + min(E, T*k) (pad-1)`` rounded up to pad in a correct layer; rule moe.workspace proves every routing
    fits): the bound the index proofs use."""
    return int(layer.workspace.padded_rows(t * layer.topk, layer.experts))


def index_bounds(layer: MoELayer) -> dict[str, int]:
    """Each size name of :class:`~argus_cutlass.dsl.moe_ir.IndexSite` at ``T = 2^tokens_bits``:
    ``rows`` the padded permuted rows (``T*k + min(E, T*k) (pad-1)``, rounded to pad), ``tiles``
    the m-tiles the tile_expert buffer holds, ``chunks`` the routing CTAs, ``N_blocks`` the larger
    GEMM's n-blocks, ``walk`` what the grouped scheduler's unit passes ``units`` by (``first`` and
    an advance of ``consumer_stride`` steps of at most ``units + step_delta`` each)."""
    t = 2 ** layer.tokens_bits
    e_, k, h, i = layer.experts, layer.topk, layer.hidden, layer.ffn
    pad, chunk = layer.routing.pad, layer.routing.chunk
    rows = _padded_rows_max(layer, t)
    n_blocks = max(-(-i // max(1, layer.gate_up.epilogue.tile_n)), -(-h // max(1, layer.down.epilogue.tile_n)))
    tiles = rows // pad + e_
    stride = max(p.schedule.consumer_stride for p in (layer.gate_up, layer.down))
    delta = max(abs(p.schedule.step_delta) for p in (layer.gate_up, layer.down))
    walk = (stride + 1) * (tiles * n_blocks + delta) + 1
    return {"T": t, "k": k, "E": e_, "H": h, "I": i, "2I": 2 * i, "rows": rows, "tiles": tiles,
            "chunks": -(-(t * k) // chunk), "chunk": chunk, "N_blocks": n_blocks, "walk": walk}


#: a program point and thread that computes each index (for the counterexample)
_INDEX_POINT = {
    "routed_row": ("combine", "s = t * kTopk + j"), "permuted_row": ("route_permute", "pos"),
    "x_offset": ("combine", "y + t * kHidden"), "xs_offset": ("route_permute", "xs + prow * kHidden"),
    "block_count": ("route_count", "block_counts[chunk * kExperts + e]"),
    "w13_row": ("gate+up producer", "b_mn0 / W13 rows"), "w2_row": ("down producer", "b_mn0 / W2 rows"),
    "tile_unit": ("grouped scheduler", "u"),
}


def _index_thread(name: str, var_value: int, layer: MoELayer) -> dict[str, int]:
    """The CTA / thread computing index ``name`` with its variable at ``var_value``."""
    chunk = layer.routing.chunk
    if name in ("routed_row", "x_offset"):       # combine: CTA t, thread 0 (each thread computes it)
        tok = var_value if name == "x_offset" else var_value // max(1, layer.topk)
        return {"cta": tok, "threadIdx": 0, "role": "combine", "warp": 0, "lane": 0}
    if name in ("permuted_row", "xs_offset"):    # route_permute: the thread whose row lands there
        return {"cta": var_value // chunk, "threadIdx": var_value % chunk, "role": "route_permute",
                "warp": (var_value % chunk) // 32, "lane": var_value % 32}
    if name == "block_count":
        return {"cta": var_value, "threadIdx": 0, "role": "route_count", "warp": 0, "lane": 0}
    return {"cta": 0, "threadIdx": 0, "role": "producer", "warp": 0, "lane": 0}


def _check_index_width(layer: MoELayer) -> tuple[list[Proof], list[Violation]]:
    """``moe.index_width``: every index of :data:`INDEX_SITES` is a node, its factors are the site's
    product (the renderer prints ``ctype(variable) * constants`` from them), its C type is the one
    the hardware fixes (TMA coordinates: ``int32_t``) and signed where a ``-1`` sentinel must survive,
    and ``(variable max) * constants + addend`` fits it for ``T <= 2^tokens_bits``."""
    b = index_bounds(layer)
    bad, ok = [], []
    have = {ix.name: ix for ix in layer.indices}
    params_all = {"T_max": b["T"], "E": b["E"], "k": b["k"], "H": b["H"], "I": b["I"]}
    for name in INDEX_SITES:
        if name not in have:
            bad.append(_viol("moe.index_width", f"the kernels print index {name!r} ({INDEX_SITES[name].points}) but "
                             "the layer has no node for it", _cex("moe.index_width", name, "an IndexWidth node",
                                                                  "none", params=params_all)))
    for ix in layer.indices:
        site = INDEX_SITES.get(ix.name)
        point, text = _INDEX_POINT.get(ix.name, ("?", ix.name))
        if site is None:
            bad.append(_viol("moe.index_width", f"index {ix.name!r} is not printed by the kernels (known: "
                             f"{sorted(INDEX_SITES)})", _cex("moe.index_width", ix.name, "a printed index", "none")))
            continue
        if tuple(ix.factors) != site.factors:
            bad.append(_viol("moe.index_width", f"index {ix.name} declares factors {ix.factors}, but the kernel's "
                             f"{text} at {point} is the product {' * '.join(site.factors)}: the printed expression "
                             f"(from the node) would compute {ix.ctype}({' * '.join(ix.factors)})",
                             _cex("moe.index_width", f"{point}: {text}", " * ".join(site.factors),
                                  " * ".join(ix.factors), element={"index": ix.name, site.factors[0]: 1},
                                  params=params_all, thread=_index_thread(ix.name, 1, layer))))
            continue
        if site.fixed_ctype and ix.ctype != site.fixed_ctype:
            bad.append(_viol("moe.index_width", f"index {ix.name} in {ix.ctype}: it is a TMA coordinate / extent, "
                             f"which PTX cp.async.bulk.tensor takes as .s32 ({site.fixed_ctype})",
                             _cex("moe.index_width", f"{point}: {text}", site.fixed_ctype, ix.ctype,
                                  element={"index": ix.name})))
            continue
        if site.signed and ix.ctype not in SIGNED_CTYPES:
            bad.append(_viol("moe.index_width", f"index {ix.name} in {ix.ctype}: a skipped slot stores row -1, "
                             f"which {ix.ctype} turns into {CTYPES[ix.ctype]}, so the combine's `row < 0` test "
                             f"fails and it reads row {CTYPES[ix.ctype]} of out",
                             _cex("moe.index_width", "combine row[j] < 0", "row -1 (skipped)",
                                  f"row {CTYPES[ix.ctype]}", element={"index": ix.name, "token": 1, "slot": 0},
                                  params=params_all, thread={"cta": 1, "threadIdx": 0, "role": "combine", "warp": 0,
                                                             "lane": 0})))
            continue
        var = b[site.factors[0]] - (1 if site.var == "last" else 0)
        const = 1
        for f in site.factors[1:]:
            const *= b[f]
        add = sum(b[a] - 1 for a in site.addend)
        v = var * const + add
        expr = f"{ix.ctype}({site.factors[0]}{' - 1' if site.var == 'last' else ''})" + \
            "".join(f" * {f}" for f in site.factors[1:]) + "".join(f" + ({a} - 1)" for a in site.addend)
        if v > CTYPES[ix.ctype]:
            first = (CTYPES[ix.ctype] - add) // const + 1   # the smallest variable value that wraps
            bad.append(_viol("moe.index_width", f"index {ix.name} = {expr} reaches {v} at T = 2^{layer.tokens_bits}, "
                             f"past {ix.ctype}'s {CTYPES[ix.ctype]}: {text} at {point} wraps once its variable (a "
                             f"{site.factors[0]} index) reaches {first}",
                             Counterexample("M7", "moe.index_width", "arith", f"{point}: {text}", ix.name, -1, -1, -1,
                                            {}, _index_thread(ix.name, first, layer), "", {},
                                            f"<= {CTYPES[ix.ctype]} ({ix.ctype})", f"{first * const + add} at "
                                            f"{site.factors[0]} index {first} (max {v})", f"{site.points}; {expr}",
                                            element={"index": ix.name, site.factors[0]: first},
                                            params={**{f: b[f] for f in site.factors + site.addend},
                                                    "tokens_bits": layer.tokens_bits}),
                             hint="compute it in int64_t"))
        else:
            ok.append(f"{ix.name} = {expr} <= {v} ({ix.ctype})")
    # quantities the kernels keep in a plain int whatever the index nodes say: the route_scan's per-expert
    # count and block_counts (int32_t), the grouped GEMMs' M (int) and their A / D row coordinates (TMA
    # .s32 coordinates, PTX ISA 9.7.9.25): all bounded by the padded row count
    int_max = CTYPES["int32_t"]
    if b["rows"] > int_max:
        t_first = next(t for t in (2 ** j for j in range(layer.tokens_bits + 1))
                       if _padded_rows_max(layer, t) > int_max)
        bad.append(_viol("moe.index_width", f"the padded rows reach {b['rows']} at T = 2^{layer.tokens_bits}, past "
                         f"int32's {int_max}: route_scan's per-expert count and block_counts, the grouped GEMMs' M "
                         "and their A / D TMA row coordinates (.s32) are 32-bit in every layer",
                         Counterexample("M7", "moe.index_width", "arith", "route_scan / grouped GEMM M",
                                        "padded_rows", -1, -1, -1, {}, {"cta": 0, "threadIdx": 0, "role": "route_scan",
                                                                        "warp": 0, "lane": 0}, "", {},
                                        f"<= {int_max} (int32)", f"{b['rows']} padded rows",
                                        "T*k + min(E, T*k) (pad - 1), rounded up to pad",
                                        element={"index": "padded_rows", "T": t_first},
                                        params={"T_max": b["T"], "k": b["k"], "E": b["E"],
                                                "tokens_bits": layer.tokens_bits}),
                         hint="lower tokens_bits (the host refuses T >= 2^tokens_bits)"))
    else:
        ok.append(f"padded rows <= {b['rows']} (int32: scan counts, GEMM M, A/D TMA rows)")
    if bad:
        return [], bad
    return [Proof("moe.index_width", "M7", "arith", f"T <= 2^{layer.tokens_bits}: " + "; ".join(ok),
                  points=len(layer.indices))], []


def _check_offsets_smt(layer: MoELayer, timeout_ms: int) -> tuple[list[Proof], list[Violation], list]:
    """z3: for all counts c_e in [0, 2^24] (E' = min(E, 8) groups), the printed scan gives off_0 = 0,
    off_{e+1} - off_e = pad * ceil(c_e / pad) >= c_e, off_e % pad = 0 (so groups are disjoint,
    tile-aligned and monotone)."""
    import z3

    r = layer.routing
    e_ = min(layer.experts, 8)
    c = [z3.Int(f"c{e}") for e in range(e_)]
    s = z3.Solver()
    s.set("timeout", int(timeout_ms))
    tiles = [(ce + r.pad - 1) / r.pad for ce in c]
    incl, acc = [], z3.IntVal(0)
    for t in tiles:
        acc = acc + t
        incl.append(acc)
    base = [incl[e] - tiles[e] if r.scan == "exclusive" else incl[e] for e in range(e_)]
    off = [b * r.pad for b in base] + [incl[-1] * r.pad]
    for ce in c:
        s.add(ce >= 0, ce <= 2**24)
    good = [off[0] == 0] + [off[e + 1] - off[e] == tiles[e] * r.pad for e in range(e_)] + \
           [off[e + 1] - off[e] >= c[e] for e in range(e_)]
    s.add(z3.Not(z3.And(*good)))
    res = s.check()
    if res == z3.unsat:
        return [Proof("moe.offsets", "M2", "smt", f"for all counts in [0, 2^24] ({e_} groups): off_0 = 0, "
                      f"off_(e+1) - off_e = {r.pad} ceil(c_e / {r.pad}) >= c_e")], [], []
    if res == z3.sat:
        m = s.model()
        vals = {f"c{e}": m.eval(c[e]).as_long() for e in range(e_)}
        offs = [m.eval(o, model_completion=True).as_long() for o in off]
        return [], [_viol("moe.offsets", f"scan {r.scan!r}: counts {vals} give offsets {offs}",
                          Counterexample("M2", "moe.offsets", "smt", "route_scan", "route_scan", -1, -1, -1, {}, {}, "",
                                         {}, "off_0 = 0, padded steps", f"offsets {offs}", "", params=vals))], []
    return [], [], [Unknown("moe.offsets", "M2", "padded offsets for symbolic counts", str(s.reason_unknown()),
                            int(timeout_ms))]


def _check_walk_smt(layer: MoELayer, timeout_ms: int) -> tuple[list[Proof], list[Violation], list]:
    """z3 (``moe.group_tiles``): each banded grouped walk is a bijection of ``[0, tiles_m * tiles_n)``
    onto ``[0, tiles_m) x [0, tiles_n)`` for **every** ``tiles_m`` the buffers allow (``[0, tiles]`` of
    :func:`index_bounds`, T = 2^tokens_bits) at the GEMM's own ``tiles_n``, on the printed walk's
    integer terms (every band field of the node). One query per band height ``k`` in ``1..band_m``
    (so ``local / k`` and ``local % k`` divide by a constant: linear) plus one for ``rows < 1``:
    no unit sees ``rows < 1``, and a unit whose band holds ``k`` m-tiles lands inside the grid and
    inside its own band's m-tiles ``[b band_m, (b+1) band_m)``. Then two units with one tile share
    the band (the tile names it), so ``rows`` and ``first`` too, and Euclidean division by ``rows`` is
    one-to-one, so their ``local`` and the units agree; one-to-one between sets of equal size
    ``tiles_m * tiles_n`` is onto. The unbanded walk (``band_m`` 0) divides by the symbolic
    ``tiles_m`` (nonlinear): its all-sizes proof is the arithmetic one of ``scheduler.bijection``."""
    import z3

    from argus_cutlass.verify.decomposition import GroupedWalk, check_grouped_walk
    tmax = index_bounds(layer)["tiles"]
    proofs: list[Proof] = []
    bad: list[Violation] = []
    unknown: list = []
    for part in ("gate_up", "down"):
        p = layer.program(part)
        walk = GroupedWalk.of(p.schedule)
        if not walk.band_m:
            continue
        bm = walk.band_m
        n_out = printed_extent(layer, part, "n")
        tiles_n = -(-n_out // max(1, p.epilogue.tile_n))
        t_, u = z3.Int("tiles_m"), z3.Int("u")
        span = bm * tiles_n
        band = u / span
        local = u - band * span
        first = band * bm + walk.band_start_delta
        rows = z3.IntVal(bm) if walk.band_full_rows else z3.If(t_ - first < bm, t_ - first, bm)
        domain = [t_ >= 0, t_ <= tmax, u >= 0, u < t_ * tiles_n]
        found = None
        queries = 0
        for k in range(bm + 1):
            s = z3.Solver()
            s.set("timeout", int(timeout_ms))
            if k == 0:
                s.add(*domain, rows < 1)
            else:
                q, r = local / k, local % k
                tm, tn = (first + q, r) if walk.band_swap else (first + r, q)
                s.add(*domain, rows == k, z3.Not(z3.And(tm >= 0, tm < t_, tn >= 0, tn < tiles_n, tm >= band * bm,
                                                        tm < band * bm + bm)))
            res = s.check()
            queries += 1
            if res == z3.unsat:
                continue
            if res == z3.sat:
                m = s.model()
                found = (m.eval(t_, model_completion=True).as_long(), m.eval(u, model_completion=True).as_long(), k)
            else:
                unknown.append(Unknown("moe.group_tiles", "M3", f"{part} banded walk, band height {k}",
                                       str(s.reason_unknown()), int(timeout_ms)))
            break
        if found is not None:
            tm_count, unit, k = found
            prob = check_grouped_walk(tm_count, tiles_n, walk)
            params = {"tiles_m": tm_count, "tiles_n": tiles_n, "tiles_max": tmax}
            if prob is not None:
                bad.append(_walk_cex(part, f"tiles_m = {tm_count} (z3, unit {unit}, band height {k})", prob, params,
                                     "smt"))
            else:
                # the model's unit leaves its band yet the grid is covered once: a walk this proof does not cover
                unknown.append(Unknown("moe.group_tiles", "M3", f"{part} banded walk: unit {unit} at tiles_m = "
                                       f"{tm_count} leaves its band", "outside the band argument", int(timeout_ms)))
        elif not unknown:
            proofs.append(Proof("moe.group_tiles", "M3", "smt", f"{part}: {walk.describe()} x {tiles_n} n-blocks is "
                                f"a bijection onto [0, tiles_m) x [0, {tiles_n}) for every tiles_m in [0, {tmax}] "
                                f"(T <= 2^{layer.tokens_bits}): {queries} queries, one per band height",
                                points=queries))
    return proofs, bad, unknown


# ------------------------------------------------------------------------------------------ workspace

#: every workspace region the kernels access (:data:`LAYER_ACCESSES`'s regions): its element type (as printed in the
#: kernels' parameters) and the accesses ``(kernel, what)`` in launch order, every condition included; rule
#: ``moe.workspace`` requires the layer's regions to be exactly those some kernel of the layer accesses
#: (:func:`workspace_accessors`: ``tile_ready`` only with the handoff, ``out_ready`` only with the combine handoff,
#: ``tile_rows`` only with row-bounded tiles).
WORKSPACE_ACCESSES: dict[str, tuple[str, tuple[tuple[str, str], ...]]] = {
    region: (elem, tuple((k, what) for k, b, _m, _when, what in LAYER_ACCESSES if b == region))
    for region, elem in WORKSPACE_ELEMS.items()}


def workspace_accessors(layer: MoELayer, region: str) -> tuple[tuple[str, str], ...]:
    """The accesses ``(kernel, what)`` of ``region`` that ``layer``'s kernels print (:data:`LAYER_ACCESSES` under the
    layer's choices); empty: no kernel of the layer touches the region."""
    return tuple((k, what) for k, b, _m, when, what in LAYER_ACCESSES if b == region and _printed(layer, k, when))


#: the largest alignment a region's accesses need (bytes): the tensor maps' global addresses
#: (cuTensorMapEncodeTiled: 16-byte aligned) and the 16-byte vectors of the gather and the combine
WORKSPACE_MIN_ALIGN = 16
#: the host's workspace arithmetic types (int64_t offsets and bytes; the grids and run_grouped's rows as int)
INT64_MAX = 2**63 - 1
INT32_MAX = 2**31 - 1


def _tiles_need(layer: MoELayer, rows: Any) -> Any:
    """The most m-tiles any routing of ``rows`` routed rows needs (``tiles_m`` of the printed scan): with
    ``g = min(rows, E)`` non-empty groups, ``g + (rows - g) // pad`` (one row in each of g groups, the rest in
    one group; a non-empty group of c rows takes ``1 + (c - 1) // pad`` tiles, so no routing takes more)."""
    pad = layer.routing.pad
    g = np.minimum(rows, layer.experts)
    return g + (rows - g) // pad


def _worst_routing(layer: MoELayer, tokens: int) -> np.ndarray:
    """ids (T, k) of a routing reaching :func:`_tiles_need`: routed rows 0..g-1 to experts 0..g-1, the rest to
    expert 0."""
    n = tokens * layer.topk
    flat = np.zeros(n, dtype=np.int64)
    g = min(n, layer.experts)
    flat[:g] = np.arange(g)
    return flat.reshape(tokens, layer.topk)


def workspace_needs(layer: MoELayer, tokens: Any) -> dict[str, tuple[Any, str, str]]:
    """Per region of :data:`WORKSPACE_ACCESSES`: ``(elements, kernel, access)``, the most elements any kernel
    touches at ``tokens`` T (an int or an int64 array) over every routing, and the access reaching the last one:
    the routing tables' extents; the m-tile tables at :func:`_tiles_need`; xs, out and h at the printed tensor
    maps' extent (``padded_rows`` rows of the printed N / K: a map over bytes outside its region would let a TMA
    box leave it), which also bounds the gather's rows (``moe.workspace`` proves padded_rows >= the worst
    routing's rows)."""
    q = layer.workspace_quantities(tokens)
    e_, tiles = layer.experts, _tiles_need(layer, q["rows"])
    gu_n, gu_k = printed_extent(layer, "gate_up", "n"), printed_extent(layer, "gate_up", "k")
    dn_n, dn_k = printed_extent(layer, "down", "n"), printed_extent(layer, "down", "k")
    h_ext, h_kernel = (gu_n, "gate_up") if gu_n >= dn_k else (dn_k, "down")
    return {
        "block_counts": (q["chunks"] * e_, "route_count", "block_counts[(chunks - 1) * E + E - 1] of its last CTA"),
        "counts": (e_ + 0 * q["rows"], "route_scan", "counts[E - 1]"),
        "offsets": (e_ + 1 + 0 * q["rows"], "route_scan", "offsets[E]"),
        "tile_expert": (tiles, "route_scan", "tile_expert[tiles_m - 1] of the routing with the most m-tiles"),
        "tiles_m": (1 + 0 * q["rows"], "route_scan", "*tiles_m"),
        "tile_ready": (tiles, "route_scan", "tile_ready[tiles_m - 1] = 0 of the routing with the most m-tiles"),
        "out_ready": (tiles, "route_scan", "out_ready[tiles_m - 1] = 0 of the routing with the most m-tiles"),
        "tile_rows": (tiles, "route_scan", "tile_rows[tiles_m - 1] of the routing with the most m-tiles"),
        "gu_tickets": (1 + 0 * q["rows"], "gate_up", "atomicAdd(gu_tickets, 1): gu_tickets[0]"),
        "dn_tickets": (1 + 0 * q["rows"], "down", "atomicAdd(dn_tickets, 1): dn_tickets[0]"),
        "permuted_row": (q["rows"], "route_permute", "permuted_row[rows - 1]"),
        "xs": (q["padded_rows"] * gu_k, "gate_up", f"its A tensor map: padded_rows x {gu_k} (K)"),
        "out": (q["padded_rows"] * dn_n, "down", f"its D tensor map: padded_rows x {dn_n} (N)"),
        "h": (q["padded_rows"] * h_ext, h_kernel, f"its {'D' if h_kernel == 'gate_up' else 'A'} tensor map: "
              f"padded_rows x {h_ext}"),
    }


def _ws_cex(where: str, want: str, got: str, *, element: dict, tokens: int, thread: dict | None = None,
            params: dict | None = None, provenance: str = "") -> Counterexample:
    return _cex("moe.workspace", where, want, got, element=element, thread=thread,
                params={"T": int(tokens), **(params or {})}, provenance=provenance)


def _ws_thread(layer: MoELayer, kernel: str, tokens: int, region: str) -> dict[str, int]:
    """The thread performing the last access :func:`workspace_needs` names."""
    q = layer.workspace_quantities(int(tokens))
    if kernel == "route_count":
        return {"cta": int(q["chunks"]) - 1, "threadIdx": (layer.experts - 1) % layer.routing.chunk,
                "role": "route_count"}
    if kernel == "route_scan":   # the m-tile tables' last entry: the last of the min(rows, E) one-row groups
        return _scan_thread(min(int(q["rows"]), layer.experts) - 1 if region in ("tile_expert", "tile_ready",
                                                                                 "out_ready", "tile_rows")
                            else layer.experts - 1)
    if kernel == "route_permute":
        return _route_thread(layer, int(q["rows"]) - 1)
    return {"cta": 0, "role": f"{kernel} TMA (thread 0 of the producer / store warp)"}


def workspace_tokens(layer: MoELayer) -> np.ndarray:
    """The token counts on which :func:`_check_workspace` decides every ``T`` in ``[1, 2^tokens_bits]``.

    From ``T0 = ceil(E / k)`` on (``min(rows, E) = E``) every quantity of the printed layout and of
    :func:`workspace_needs` is ``a T + p(T)`` with ``p`` periodic of period ``P = lcm(chunk, pad, round_rows *
    tile_rows)`` (floors of affine terms by those divisors; each region count is affine in them), so a difference
    ``D(T)`` of two of them is ``alpha T + p(T)``: its minimum over ``[T0, Tmax]`` lies in ``[T0, T0 + P)`` when
    ``alpha >= 0`` and in ``(Tmax - P, Tmax]`` otherwise. So the T's are ``[1, T0 + P]`` and
    ``[Tmax - P, Tmax]`` (all of ``[1, Tmax]`` when those overlap)."""
    w, r = layer.workspace, layer.routing
    tmax = 1 << layer.tokens_bits
    period = math.lcm(r.chunk, r.pad, w.round_rows * w.tile_rows)
    t0 = -(-layer.experts // layer.topk)
    head = min(tmax, t0 + period)
    if head >= tmax - period:
        return np.arange(1, tmax + 1, dtype=np.int64)
    return np.concatenate([np.arange(1, head + 1, dtype=np.int64),
                           np.arange(tmax - period, tmax + 1, dtype=np.int64)])


#: the most token counts :func:`_check_workspace` enumerates (beyond it: Unknown)
WORKSPACE_MAX_POINTS = 1 << 23


def _check_workspace(layer: MoELayer, cases: list) -> tuple[list[Proof], list[Violation], list]:
    """``moe.workspace`` (M12): the printed ``workspace_layout(T)`` (the layer's :class:`~argus_cutlass.dsl.
    moe_ir.Workspace` node) holds every access of every kernel, for every ``T <= 2^tokens_bits``.

    * Its regions are exactly those of :data:`WORKSPACE_ACCESSES` some kernel of the layer accesses
      (:func:`workspace_accessors`: ``tile_ready`` iff the handoff, ``out_ready`` iff the combine handoff,
      ``tile_rows`` iff route_scan writes it or a
      grouped GEMM reads it), each of the element type the kernels take; ``align`` is a multiple of
      :data:`WORKSPACE_MIN_ALIGN` (the base check prints it, so every region starts aligned).
    * An aliased region (``out`` reuses ``xs``) fits inside its target, and every kernel accessing the target
      runs before every kernel accessing the alias (launch order; completion: ``moe.pdl``); with the handoff the
      gate+up -> down pair on xs is ordered per m-tile by ``moe.handoff``.
    * For every T in ``[1, 2^tokens_bits]`` (exactly, on :func:`workspace_tokens`): ``padded_rows`` holds the
      rows of the routing with the most m-tiles, ``max_tiles`` its m-tiles, and each region's printed count at
      least :func:`workspace_needs`; the own-bytes regions follow each other without overlap, aligned.
    * On every routing case the verifier simulates (the printed routing node's semantics): every index
      route_scan writes in tile_expert / tile_ready / out_ready / tile_rows, route_permute writes in permuted_row and
      xs, and the
      gather's rows (``offsets[E] <= padded_rows``) lie inside the printed capacities.
    """
    w = layer.workspace
    names = [r.name for r in w.regions]
    want = [n for n in WORKSPACE_ACCESSES if workspace_accessors(layer, n)]
    for n in want:
        if n not in names:
            elem, acc = WORKSPACE_ACCESSES[n][0], workspace_accessors(layer, n)
            return [], [_viol("moe.workspace", f"workspace region {n!r} is missing: {acc[0][0]} {acc[0][1]} in memory "
                              "the layout never gives it (it would overlap whatever sits at that offset)",
                              _ws_cex("workspace_layout (layer.cu.j2)", f"a region {n} of {elem}",
                                      f"regions {names}", element={"region": n}, tokens=1))], []
    for r in w.regions:
        if r.name not in want:
            return [], [_viol("moe.workspace", f"workspace region {r.name!r} is accessed by no kernel of this layer "
                              f"(regions: {want})", _ws_cex("workspace_layout (layer.cu.j2)", f"regions {want}",
                                                            f"extra region {r.name}", element={"region": r.name},
                                                            tokens=1))], []
        elem = WORKSPACE_ACCESSES[r.name][0]
        if r.elem != elem:
            k, acc = workspace_accessors(layer, r.name)[0]
            return [], [_viol("moe.workspace", f"workspace region {r.name!r} is laid out as {r.elem} "
                              f"({layer.elem_bytes(r.elem)} bytes) but {k} {acc} as {elem} "
                              f"({layer.elem_bytes(elem)} bytes)",
                              _ws_cex(f"workspace_layout / run(): {r.name}", elem, r.elem,
                                      element={"region": r.name}, tokens=1, thread={"role": k}))], []
    if w.align % WORKSPACE_MIN_ALIGN:
        # the first (T, region) whose offset is off 16 bytes (else: a base the host accepts, align bytes past 16)
        t_bad, where = 1, {"region": "workspace base", "byte_offset": w.align}
        ts_a = np.arange(1, 4097, dtype=np.int64)
        lay_a = layer.workspace_layout(ts_a)
        for r in w.regions:
            off = lay_a[r.name] + np.zeros_like(ts_a)
            hit = np.flatnonzero(off % WORKSPACE_MIN_ALIGN)
            if hit.size:
                t_bad, where = int(ts_a[hit[0]]), {"region": r.name, "byte_offset": int(off[hit[0]])}
                break
        return [], [_viol("moe.workspace", f"workspace align {w.align}: regions start at multiples of {w.align} bytes "
                          f"from a base the host checks against {w.align}, but the tensor maps' global addresses and "
                          f"the 16-byte vectors need {WORKSPACE_MIN_ALIGN}-byte alignment (T = {t_bad}: "
                          f"{where['region']} at byte {where['byte_offset']})",
                          _ws_cex("align_up / the base check (layer.cu.j2)", f"a multiple of {WORKSPACE_MIN_ALIGN}",
                                  str(w.align), element=where, tokens=t_bad,
                                  provenance="cuTensorMapEncodeTiled: globalAddress 16-byte aligned"))], []
    # aliases: the target's last kernel before the alias's first (per m-tile with a sound handoff)
    for r in w.regions:
        if not r.alias:
            continue
        ka = [_KERNELS.index(k) for k, _ in WORKSPACE_ACCESSES[r.name][1]]
        kb = [_KERNELS.index(k) for k, _ in WORKSPACE_ACCESSES[r.alias][1]]
        if max(kb) < min(ka):
            continue
        k1, k2 = _KERNELS[max(kb)], _KERNELS[min(ka)]
        acc1 = dict(WORKSPACE_ACCESSES[r.alias][1])[k1]
        acc2 = dict(WORKSPACE_ACCESSES[r.name][1]).get(k2, "")
        when = (f"{k1} {acc1} ({r.alias}) and {acc2} ({r.name}) in the same kernel" if k1 == k2 else
                f"{k1} {acc1} ({r.alias}) after {k2} {acc2} ({r.name})")
        return [], [_viol("moe.workspace", f"workspace region {r.name!r} reuses the bytes of {r.alias!r}, but {when}: "
                          f"both are live at once, so writes of {r.name} overwrite {r.alias} data still to be read",
                          _ws_cex(f"workspace_layout: w.{r.name} = w.{r.alias}",
                                  f"every access to {r.alias} before the first to {r.name}",
                                  f"{k1} accesses {r.alias} at or after {k2} accesses {r.name}",
                                  element={"region": r.alias, "alias": r.name, "index": 0, "byte_offset": 0},
                                  tokens=1, thread={"role": f"{k1} / {k2}"}))], []
    ts = workspace_tokens(layer)
    one_chunk_t = min(layer.routing.chunk * layer.routing.fused_max_chunks // layer.topk, 1 << layer.tokens_bits)
    if layer.routing.fused and not np.isin(np.arange(1, one_chunk_t + 1), ts).all():
        # the T's route_fused serves, each enumerated (the head of workspace_tokens holds them: its period is at
        # least the chunk)
        ts = np.union1d(ts, np.arange(1, one_chunk_t + 1, dtype=np.int64))
    if ts.size > WORKSPACE_MAX_POINTS:
        return [], [], [Unknown("moe.workspace", "M12", f"workspace capacities for T <= 2^{layer.tokens_bits}",
                                f"{ts.size} token counts to enumerate (period of the layout too long)", 0)]
    # the host's arithmetic types, on the same T's (they decide the extremes too: each quantity is affine plus
    # periodic in T), computed with Python ints (exact; the int64 enumeration below would wrap silently)
    exact = layer.workspace_layout(ts.astype(object))
    ends = [exact["bytes"]] + [exact[r.name] + r.elements(exact) * layer.elem_bytes(r.elem) for r in w.regions]
    for end in ends:
        col = [int(v) for v in end + np.zeros(ts.size, dtype=object)]
        i = max(range(len(col)), key=lambda j: abs(col[j]))
        v = col[i]
        if abs(v) > INT64_MAX - w.align:
            return [], [_viol("moe.workspace", f"T = {int(ts[i])}: the workspace layout reaches byte {v}, past int64 "
                              f"({INT64_MAX}): the host's byte offsets (int64_t) overflow and regions land on each "
                              "other", _ws_cex("workspace_layout (layer.cu.j2): int64_t offsets",
                                               f"|offset| <= {INT64_MAX - w.align}", str(v),
                                               element={"region": "bytes"}, tokens=int(ts[i])))], []
    for qname in ("chunks", "padded_rows", "max_tiles"):
        col = [int(v) for v in exact[qname] + np.zeros(ts.size, dtype=object)]
        i = max(range(len(col)), key=col.__getitem__)
        if col[i] > INT32_MAX:
            return [], [_viol("moe.workspace", f"T = {int(ts[i])}: {qname} = {col[i]} does not fit the int the "
                              "host passes it as (route_* grid, run_grouped's rows / max_tiles)",
                              _ws_cex(f"run(): int(w.{qname})", f"<= {INT32_MAX}", str(col[i]),
                                      element={"region": qname}, tokens=int(ts[i])))], []
    lay = layer.workspace_layout(ts)
    q = {k: lay[k] for k in ("rows", "chunks", "padded_rows", "max_tiles", "E", "k", "H", "I")}
    tiles = _tiles_need(layer, q["rows"])
    pad = layer.routing.pad

    def first_bad(ok: np.ndarray) -> int | None:
        bad = np.flatnonzero(~ok)
        return None if bad.size == 0 else int(bad[0])

    i = first_bad(q["padded_rows"] >= tiles * pad)
    if i is not None:
        t, need = int(ts[i]), int(tiles[i] * pad)
        ids = _worst_routing(layer, min(t, 4096))
        return [], [_viol("moe.workspace", f"T = {t}: printed padded_rows = {int(q['padded_rows'][i])} but a routing "
                          f"of {t * layer.topk} rows into {min(t * layer.topk, layer.experts)} groups (one row each, "
                          f"the rest in expert 0) takes {int(tiles[i])} m-tiles = {need} rows: the gather writes "
                          "xs rows past the buffers' rows and the tensor maps do not reach them",
                          _ws_cex("workspace_layout: w.padded_rows (workspace node group_rows / round_rows)",
                                  f">= {need} rows", f"{int(q['padded_rows'][i])}",
                                  element={"region": "xs", "row": need - 1, "index": (need - 1) * layer.hidden},
                                  tokens=t, thread=_route_thread(layer, t * layer.topk - 1),
                                  params={"group_rows": w.group_rows, "round_rows": w.round_rows,
                                          "ids_head": [int(x) for x in ids.reshape(-1)[:8]]}))], []
    i = first_bad(q["max_tiles"] >= tiles)
    if i is not None:
        t = int(ts[i])
        return [], [_viol("moe.workspace", f"T = {t}: printed max_tiles = {int(q['max_tiles'][i])} but a routing "
                          f"takes {int(tiles[i])} m-tiles: the grouped GEMMs' grid bound and the m-tile counters "
                          "cover fewer m-tiles than route_scan writes",
                          _ws_cex("workspace_layout: w.max_tiles (workspace node tile_rows)", f">= {int(tiles[i])}",
                                  str(int(q["max_tiles"][i])), element={"region": "tile_expert",
                                                                        "index": int(tiles[i]) - 1},
                                  tokens=t, thread=_scan_thread(min(t * layer.topk, layer.experts) - 1),
                                  params={"tile_rows": w.tile_rows}))], []
    needs = workspace_needs(layer, ts)
    bad: list[Violation] = []
    for r in w.regions:
        cap = r.elements(q) + np.zeros_like(ts)   # an array even for a constant count
        need, kernel, what = needs[r.name]
        i = first_bad(cap >= need)
        if i is None and r.alias:   # the alias's bytes inside its target's
            tcap = (w.region(r.alias).elements(q) + np.zeros_like(ts)) * layer.elem_bytes(w.region(r.alias).elem)
            i = first_bad(cap * layer.elem_bytes(r.elem) <= tcap)
            if i is not None:
                t = int(ts[i])
                bad.append(_viol("moe.workspace", f"T = {t}: region {r.name!r} ({int(cap[i])} {r.elem}) reuses "
                                 f"{r.alias!r} but is larger than its {int(tcap[i])} bytes: it runs into the next "
                                 "region", _ws_cex(f"workspace_layout: w.{r.name} = w.{r.alias}",
                                                   f"<= {int(tcap[i])} bytes",
                                                   f"{int(cap[i]) * layer.elem_bytes(r.elem)} bytes",
                                                   element={"region": r.name, "index": int(cap[i]) - 1}, tokens=t)))
            continue
        if i is not None:
            t = int(ts[i])
            idx = int(need[i]) - 1
            element = {"region": r.name, "index": idx}
            if r.name in ("tile_expert", "tile_ready", "out_ready", "tile_rows"):
                element["routing"] = (f"routed rows 0..{min(t * layer.topk, layer.experts) - 1} to experts 0.., "
                                      "the rest to expert 0")
            bad.append(_viol("moe.workspace", f"T = {t}: {kernel} {what} reaches {r.name}[{idx}] but the printed "
                             f"{r.name} holds {int(cap[i])} elements ({r.count_cpp()}): the access lands in the next "
                             "region", _ws_cex(f"workspace_layout: {r.name} = {r.count_cpp()}",
                                               f">= {idx + 1} elements", f"{int(cap[i])} elements", element=element,
                                               tokens=t, thread=_ws_thread(layer, kernel, t, r.name),
                                               params={k: int(lay[k][i]) for k in ("rows", "chunks",
                                                                                      "padded_rows", "max_tiles")})))
    if bad:
        return [], bad, []
    o_prev_end = np.zeros_like(ts)
    for r in w.regions:   # own-bytes regions in order, aligned, none before the previous one's end
        if r.alias:
            continue
        off = lay[r.name] + np.zeros_like(ts)
        i = first_bad((off >= o_prev_end) & (off % w.align == 0))
        if i is not None:
            t = int(ts[i])
            return [], [_viol("moe.workspace", f"T = {t}: region {r.name!r} starts at byte {int(off[i])}, before the "
                              f"previous region's end {int(o_prev_end[i])} or off the {w.align}-byte alignment",
                              _ws_cex(f"workspace_layout: w.{r.name}", f">= {int(o_prev_end[i])}, a multiple of "
                                      f"{w.align}", str(int(off[i])), element={"region": r.name,
                                                                               "byte_offset": int(off[i])},
                                      tokens=t))], []
        o_prev_end = off + r.elements(q) * layer.elem_bytes(r.elem)
    # the simulated routings: the printed routing node's writes inside the printed capacities
    points = fused_points = 0
    for label, ids in cases:
        sim = simulate_routing(layer, ids)
        t = int(ids.shape[0])
        qt = layer.workspace_quantities(t)
        caps = {r.name: int(r.elements(qt)) for r in w.regions}
        written = [(int(j), int(sim["tile_expert"][j])) for j in np.flatnonzero(sim["tile_expert"] >= 0)]
        written += [(int(j), int(e)) for e, j in sim["tile_oob"]]
        sk, pk = sim["scan_kernel"], sim["kernel"]   # route_scan / route_permute, or route_fused (one chunk)
        fused_points += sk == "route_fused"
        checks = [("tile_expert", j, sk, f"tile_expert[{j}] = {e}", _scan_thread(e)) for j, e in written]
        for edge in HANDOFF_EDGES:   # each handoff's counters: zeroed where tile_expert is written
            if getattr(layer, edge.name):
                checks += [(edge.counter, j, sk, f"{edge.counter}[{j}] = 0", _scan_thread(e))
                           for j, e in written]
        if layer.routing.tile_rows:
            checks += [("tile_rows", j, sk, f"tile_rows[{j}] (m-tile {j} of expert {e})", _scan_thread(e))
                       for j, e in written]
        pr = sim["permuted"]
        if (pr >= 0).any():
            s = int(np.argmax(pr))
            row = int(pr[s])
            checks.append(("xs", (row + 1) * layer.hidden - 1, pk,
                           f"the gather's xs[{row} * H + {layer.hidden - 1}] (routed row {s})",
                           _route_thread(layer, s, pk)))
        last = min(sim["n"], layer.routing.chunk) if pk == "route_fused" else sim["n"]
        checks.append(("permuted_row", last - 1, pk, f"permuted_row[{last - 1}]", _route_thread(layer, last - 1, pk)))
        for region, idx, kernel, what, thread in checks:
            points += 1
            if idx >= caps[region] or idx < 0:
                return [], [_viol("moe.workspace", f"{label}: {kernel} writes {what} but the printed {region} holds "
                                  f"{caps[region]} elements at T = {t}", _ws_cex(
                                      f"{kernel} (layer.cu.j2) / workspace_layout {region}", f"index < {caps[region]}",
                                      str(idx), element={"region": region, "index": idx}, tokens=t, thread=thread))], []
        used = int(sim["offsets"][-1])
        if used > int(qt["padded_rows"]):
            return [], [_viol("moe.workspace", f"{label}: the routing uses {used} permuted rows (offsets[E]) but the "
                              f"printed padded_rows is {int(qt['padded_rows'])} at T = {t}",
                              _ws_cex("route_scan offsets[E] / workspace_layout padded_rows",
                                      f"<= {int(qt['padded_rows'])}", str(used),
                                      element={"region": "xs", "row": used - 1},
                                      tokens=t, thread=_scan_thread(layer.experts - 1)))], []
    aliases = ", ".join(f"{r.name} reuses {r.alias} after its last access" for r in w.regions if r.alias) or "no alias"
    return [Proof("moe.workspace", "M12", "enum",
                  f"{len(w.regions)} regions "
                  f"({', '.join(r.name + ('=' + r.alias if r.alias else '') for r in w.regions)}) "
                  f"of the kernels' element types, {w.align}-byte aligned (kernels need {WORKSPACE_MIN_ALIGN}), "
                  "disjoint; every kernel's accesses inside the printed counts and padded_rows / max_tiles above the "
                  f"worst routing for every T <= 2^{layer.tokens_bits} ({ts.size} T's decide it: periodic-affine "
                  f"layout); {aliases}; {len(cases)} simulated routings, {points} writes"
                  + (f"; route_fused (one chunk: T <= {one_chunk_t}, every one of them among the {ts.size} T's) writes "
                     "the tables and rows route_scan / route_permute write at the same T (its accesses in "
                     f"LAYER_ACCESSES, no block_counts), inside the same regions: {fused_points} simulated one-chunk "
                     "routings" if layer.routing.fused else ""),
                  points=int(ts.size) + points)], [], []


# ---------------------------------------------------------------------------------------- driver


def verify_moe(layer: MoELayer, *, smt: bool = True, smt_timeout_ms: int | None = None) -> VerificationReport:
    """Check every rule on ``layer`` (both grouped GEMMs through the GEMM verifier, the MoE rules on
    the routing / scheduler / combine / index nodes); never raises for a bad layer.

    Raises:
        argus_cutlass.errors.ToolchainError: ``smt`` is asked for and z3 is not installed.
    """
    from argus_cutlass.verify import verify_gemm

    t0 = time.perf_counter()
    run = Run()
    notes: list[str] = []
    obligations: list[Obligation] = []
    try:
        name = layer.kernel_name()
    except Exception:  # noqa: BLE001
        name = str(getattr(layer, "name", "moe"))
    for part in ("gate_up", "down"):
        rep = verify_gemm(layer.program(part), smt=smt, smt_timeout_ms=smt_timeout_ms)
        replaced = _REPLACED_BY_SWIGLU if part == "gate_up" else ()
        obligations += [o for o in rep.obligations if o.rule not in replaced]
        run.proofs += [dataclass_prefix(x, part) for x in rep.proofs if x.rule not in replaced]
        run.violations += [dataclass_prefix(x, part) for x in rep.violations if x.rule not in replaced]
        run.unknowns += list(rep.unknowns)
        run.skipped += [dataclass_prefix(x, part) for x in rep.skipped if x.rule not in replaced]
        # an obligation this part left without any outcome stays visible: the merged report keys outcomes by rule,
        # so the other part's proof of the same rule would otherwise count for it
        run.unknowns += [Unknown(o.rule, o.invariant, f"[{part}] {o.description}",
                                 "undecided: no proof, violation or skipped record (a verifier defect)", 0)
                         for o in rep.undecided if o.rule not in replaced]
        notes += [f"{part}: {n}" for n in rep.notes]
    cases = routing_cases(layer)
    for rule, (inv, text) in MOE_RULES.items():
        obligations.append(Obligation(rule, inv, text))
    run.add("enum", "moe.bijection", _check_routing, layer, cases)
    run.add("enum", "moe.gather", _check_gather, layer, cases)
    run.add("enum", "moe.group_tiles", _check_group_tiles, layer, cases)
    run.add("enum", "moe.swiglu", _check_swiglu, layer)
    run.add("enum", "moe.combine", _check_combine, layer, cases)
    run.add("arith", "moe.index_width", _check_index_width, layer)
    run.add("enum", "moe.dtype", _check_dtype, layer)
    run.add("arith", "moe.launch", _check_launch, layer)
    run.add("enum", "moe.pdl", _check_pdl, layer)
    run.add("enum", "moe.handoff", _check_handoff, layer, cases)
    run.add("enum", "moe.combine_handoff", _check_combine_handoff, layer, cases)
    run.add("enum", "moe.workspace", _check_workspace, layer, cases)
    run.add("enum", "moe.dynamic_walk", _check_dynamic_walk, layer, cases)
    if smt:
        from argus_cutlass.settings import settings

        timeout = settings().smt_timeout_ms if smt_timeout_ms is None else int(smt_timeout_ms)
        run.add("smt", "moe.offsets", _check_offsets_smt, layer, timeout)
        run.add("smt", "moe.group_tiles", _check_walk_smt, layer, timeout)
    else:
        notes.append("SMT tier off: moe.offsets checked on the enumerated routings only; the banded walks on the "
                     "enumerated routings and scheduler.bijection's enumeration and all-sizes argument")
        run.skip("moe.offsets", "the printed scan's group offsets (off_0 = 0, padded, tile-aligned, monotone) for "
                 "all counts in [0, 2^24] (SMT; the enumeration covers the enumerated routings)", invariant="M2")
        from argus_cutlass.verify.decomposition import GroupedWalk

        for part in ("gate_up", "down"):
            try:
                banded = bool(GroupedWalk.of(layer.program(part).schedule).band_m)
            except Exception:  # noqa: BLE001 - a malformed layer: the enumeration's violation says why
                banded = False
            if banded:
                run.skip("moe.group_tiles", f"{part}: the banded grouped walk is a bijection for every tiles_m the "
                         "buffers allow (SMT; the enumeration covers the enumerated routings)", invariant="M3")
    return _report(name, obligations, run, notes, t0)


def dataclass_prefix(x: Any, part: str) -> Any:
    """``x`` (a Proof, Violation or Skipped record of a GEMM rule) with the MoE part named in its text."""
    import dataclasses

    if isinstance(x, Skipped):
        return dataclasses.replace(x, check=f"[{part}] {x.check}")
    if isinstance(x, Proof):
        return dataclasses.replace(x, summary=f"[{part}] {x.summary}")
    if isinstance(x, Violation):
        return dataclasses.replace(x, message=f"[{part}] {x.message}")
    return x


# ------------------------------------------------------------------------------------------ dynamic walk

#: the CTA-local unit counts (before the end marker) the ring protocol of rule moe.dynamic_walk is explored for: up to
#: this many more than the ring's stages (every slot reused at least twice)
DYN_RING_EXTRA = 2
#: data-pipeline k-tiles per unit and stages of the abstract data pipeline the ring protocol is explored with
DYN_K_TILES = (1, 2, 3)
DYN_DATA_STAGES = 2


def dynamic_tickets(units: int, grid: int, step: int, end_test: str) -> tuple[list[int], int] | str:
    """The tickets the printed producers take as units, and the counter's value after the kernel, for ``units``
    units on ``grid`` CTAs: every CTA's elected producer thread takes ``t = atomicAdd(counter, step)`` until its
    first ticket failing the end test (``t >= units``, or ``t > units`` for end_test ``">"``); whatever the order of
    the CTAs' atomics, the values handed out are ``0, step, 2 step, ...`` (each once), so the units taken are those of
    them passing the test and every CTA's last (failing) ticket is one of the values after them. A string: the walk
    never ends."""
    if step < 1:
        return f"atomicAdd(counter, {step}) never advances the counter: the CTAs never leave their walk"
    passes = (lambda t: t < units) if end_test == ">=" else (lambda t: t <= units)
    taken = []
    t = 0
    while passes(t):
        taken.append(t)
        t += step
    return taken, t + step * (grid - 1) + step   # one failing ticket per CTA: the counter past the last


def explore_unit_ring(slots: int, units: int, pingpong: bool, publish: str, k_tiles: int,
                      data_stages: int = DYN_DATA_STAGES) -> tuple[int, tuple[str, str, tuple[str, ...]] | None]:
    """Every interleaving of the printed dynamic walk's producer and its two consumer warpgroups in one CTA that takes
    ``units`` units (then the end marker), with the mbarrier semantics of PTX ISA 9.7.13.15 (a wait on parity P passes
    once the barrier's completed phases have parity != P; the unit ring's full barrier completes on the producer's one
    arrival, its empty barrier on every consumer's; the data pipeline's full barrier on the producer's fill, its empty
    barrier on the owning warpgroups' releases). Producer: per published index i, wait the slot's empty barrier, write
    the slot and arrive on its full barrier (``publish`` ``"before"``; ``"after"``: arrive, then write), then (a unit)
    fill ``k_tiles`` data stages. Each consumer warpgroup (one thread stands for its 128: each thread reads the slot
    before its own arrival, and the empty barrier counts all of them): per index i wait the slot's full barrier, read
    it, arrive on its empty barrier; stop on the end marker; compute its units (cooperative: every unit, ping-pong:
    i = w mod 2) by waiting and releasing their ``k_tiles`` data stages, skipping the others'. Returns ``(states,
    None)`` when every read returns the index published for it and nothing deadlocks, else ``(states, (kind, detail,
    trace))``."""
    from collections import deque

    n_pub = units + 1
    wgs = 2
    owners = [(0, 1) if not pingpong else (i % 2,) for i in range(units)]
    # producer program: per index i: ("wait", i), then the two publish steps, then k_tiles fills (a unit)
    prod: list[tuple[str, int]] = []
    for i in range(n_pub):
        prod.append(("wait_empty", i))
        prod += [("write", i), ("arrive", i)] if publish == "before" else [("arrive", i), ("write", i)]
        if i < units:
            prod += [("fill", i * k_tiles + k) for k in range(k_tiles)]
    cons: list[list[tuple[str, int]]] = []
    for w in range(wgs):
        prog: list[tuple[str, int]] = []
        for i in range(n_pub):
            prog += [("wait_full", i), ("read", i), ("arrive_empty", i)]
            if i < units and w in owners[i]:
                for k in range(k_tiles):
                    prog += [("dwait", i * k_tiles + k), ("drelease", i * k_tiles + k)]
        cons.append(prog)
    fills_per_stage_readers = {}
    for i in range(units):
        for k in range(k_tiles):
            fills_per_stage_readers[i * k_tiles + k] = len(owners[i])
    # state: (pc_p, pc_c0, pc_c1, ring_full[slots] (phases), ring_empty_arr[slots], ring_empty_ph[slots],
    #         slot[slots] (published index or -2), data_full[S] phases, data_empty_arr[S], data_empty_ph[S],
    #         read0, read1 (last value read by each consumer, per its last read))
    S = data_stages
    init = (0, 0, 0) + (0,) * slots + (0,) * slots + (0,) * slots + (-2,) * slots + (0,) * S + (0,) * S + (0,) * S
    o_rf, o_rea, o_rep, o_slot = 3, 3 + slots, 3 + 2 * slots, 3 + 3 * slots
    o_df, o_dea, o_dep = 3 + 4 * slots, 3 + 4 * slots + S, 3 + 4 * slots + 2 * S
    parent: dict[tuple, Any] = {init: None}
    queue = deque([init])

    def trace(st: tuple) -> tuple[str, ...]:
        out = []
        while parent[st] is not None:
            st, step = parent[st]
            out.append(step)
        return tuple(reversed(out))

    def passes(phases: int, parity: int) -> bool:
        return (phases & 1) != parity

    while queue:
        st = queue.popleft()
        moves = []
        pc = st[0]
        if pc < len(prod):
            kind, i = prod[pc]
            f = list(st)
            if kind == "wait_empty":
                s_ = i % slots
                if passes(st[o_rep + s_], 1 - ((i // slots) & 1)):
                    f[0] += 1
                    moves.append((tuple(f), f"P: wait unit_empty[{s_}] for index {i}"))
            elif kind == "write":
                f[o_slot + i % slots] = i
                f[0] += 1
                moves.append((tuple(f), f"P: unit_slot[{i % slots}] = {'end' if i == units else i}"))
            elif kind == "arrive":
                f[o_rf + i % slots] += 1
                f[0] += 1
                moves.append((tuple(f), f"P: arrive unit_full[{i % slots}] (index {i})"))
            else:   # fill data fill number i (stage i % S): wait its empty (parity), then the fill completes it
                s_ = i % S
                if passes(st[o_dep + s_], 1 - ((i // S) & 1)):
                    f[o_df + s_] += 1
                    f[0] += 1
                    moves.append((tuple(f), f"P: fill data stage {s_} (fill {i})"))
        for w in range(wgs):
            pcw = st[1 + w]
            if pcw >= len(cons[w]):
                continue
            kind, i = cons[w][pcw]
            f = list(st)
            if kind == "wait_full":
                if passes(st[o_rf + i % slots], (i // slots) & 1):
                    f[1 + w] += 1
                    moves.append((tuple(f), f"C{w}: wait unit_full[{i % slots}] for index {i}"))
            elif kind == "read":
                got = st[o_slot + i % slots]
                if got != i:
                    what = "never written" if got == -2 else f"index {got}'s {'end marker' if got == units else 'unit'}"
                    return len(parent), ("stale", f"consumer warpgroup {w} reads unit_slot[{i % slots}] for the CTA's "
                                         f"unit {i} and finds {what}", trace(st) + (f"C{w}: read unit_slot[{i % slots}]",))
                f[1 + w] += 1
                moves.append((tuple(f), f"C{w}: read unit_slot[{i % slots}] = {'end' if i == units else i}"))
            elif kind == "arrive_empty":
                s_ = i % slots
                a = st[o_rea + s_] + 1
                if a == wgs:
                    f[o_rea + s_], f[o_rep + s_] = 0, st[o_rep + s_] + 1
                else:
                    f[o_rea + s_] = a
                f[1 + w] += 1
                moves.append((tuple(f), f"C{w}: arrive unit_empty[{s_}]"))
            elif kind == "dwait":
                s_ = i % S
                if passes(st[o_df + s_], (i // S) & 1):
                    f[1 + w] += 1
                    moves.append((tuple(f), f"C{w}: wait data stage {s_} (fill {i})"))
            else:   # drelease
                s_ = i % S
                a = st[o_dea + s_] + 1
                if a == fills_per_stage_readers[i]:
                    f[o_dea + s_], f[o_dep + s_] = 0, st[o_dep + s_] + 1
                else:
                    f[o_dea + s_] = a
                f[1 + w] += 1
                moves.append((tuple(f), f"C{w}: release data stage {s_} (fill {i})"))
        if not moves and (pc < len(prod) or any(st[1 + w] < len(cons[w]) for w in range(wgs))):
            at = [f"producer at {prod[pc] if pc < len(prod) else 'end'}"] + [
                f"consumer {w} at {cons[w][st[1 + w]] if st[1 + w] < len(cons[w]) else 'end'}" for w in range(wgs)]
            return len(parent), ("deadlock", "every role waits forever (" + ", ".join(at) + ")", trace(st))
        for nxt, step in moves:
            if nxt not in parent:
                parent[nxt] = (st, step)
                queue.append(nxt)
    return len(parent), None


def _dyn_viol(part: str, message: str, where: str, want: str, got: str, hint: str, *, params: dict | None = None,
              element: dict | None = None, thread: dict | None = None, trace: tuple[str, ...] = ()) -> Violation:
    cex = _cex("moe.dynamic_walk", where, want, got, element=element, thread=thread, params=params)
    if trace:
        import dataclasses

        cex = dataclasses.replace(cex, trace=tuple(trace[-24:]))
    return _viol("moe.dynamic_walk", f"{part}: {message}", cex, where, hint)


def _check_dynamic_walk(layer: MoELayer, cases: list) -> tuple[list[Proof], list[Violation]]:
    """``moe.dynamic_walk`` (M14), per grouped GEMM with the dynamic walk (schedule node ``slot_bytes`` >= 0):

    * tickets: :func:`dynamic_tickets` -- the tickets taken as units are exactly ``0 .. units - 1``, each once, for
      every unit count of the routing cases and 0..12 and every grid 1..units + 2 (whatever the order of the CTAs'
      atomics: the values handed out are 0, 1, 2, ... each once), so the walk's units are the static walk's (the
      m-tile / n-block map ``scheduler.bijection`` / ``moe.group_tiles`` prove; every m-tile's handoff signals, rules
      ``moe.handoff`` / ``moe.combine_handoff``, unchanged);
    * the counter is zeroed every call (layer node ``tickets_zero``; route_scan and route_fused print it) -- else a
      second call starts past the first's tickets; its zeroing is ordered before the first ticket by ``moe.pdl``
      (LAYER_ACCESSES: route_scan / route_fused write it, the GEMM reads and writes it, before its wait when it waits
      last);
    * the consumers compute the unit the slot holds (``unit_source`` ``"slot"``), never one recomputed from their own
      static walk;
    * the unit ring: :func:`explore_unit_ring` over every interleaving for ring stages as printed, 0..stages + 2 units,
      ping-pong or cooperative as printed, 1..3 k-tiles per unit: every consumer read returns the index published for
      it (the end marker included), nothing deadlocks;
    * the ring lies after the pipeline's mbarriers, 8-byte aligned, inside ``kSmemBytes`` (``smem.capacity`` counts
      it: :func:`argus_cutlass.plan.resources.smem_total_bytes`);
    * no static-walk field rides along: a schedule ``lookahead`` (the dynamic producer branch prints instead of it)
      or a layer ``weight_prefetch`` (it would warm the static first unit ``blockIdx.x``, not the first ticket);
    * the int32 tickets do not wrap at ``T = 2^tokens_bits``: every ticket handed out, at most ``units - 1 + grid x
      step`` (the host's grid at most the units' bound), fits int32 -- the counter, ``t`` and ``int(sched.units)``
      are int32 whatever index ``tile_unit``'s C type (an int64 tile_unit widens the static walk only).
    """
    from argus_cutlass.plan.resources import SMEM_LIMIT_BYTES, barrier_region, slot_ring_region, smem_total_bytes

    parts = layer.dynamic_parts()
    if not parts:
        return [Proof("moe.dynamic_walk", "M14", "enum", "no grouped GEMM walks dynamically (both static walks: "
                      "scheduler.bijection / moe.group_tiles)", points=0)], []
    bad: list[Violation] = []
    summary = []
    points = 0
    for part in parts:
        prog = layer.program(part)
        sch = prog.schedule
        where = f"{part} schedule node (moe/work.j2, gemm/mainloop.j2 producer, gemm/kernel_body.j2 consumers)"
        lo, hi = slot_ring_region(prog)
        b_end = barrier_region(prog)[1]
        if lo < b_end or lo % 8 or sch.slot_stages < 1 or smem_total_bytes(prog) > SMEM_LIMIT_BYTES:
            bad.append(_dyn_viol(part, f"the unit ring [{lo}, {hi}) must start 8-byte aligned at or after the pipeline's "
                                 f"mbarriers' end {b_end} and fit {SMEM_LIMIT_BYTES} bytes with the rest "
                                 f"(kSmemBytes = {smem_total_bytes(prog)})", where, f">= {b_end}, 8-aligned",
                                 f"{lo}", "place the ring after the mbarriers (slot_bytes = barrier_bytes + 16 x stages)",
                                 element={"smem_byte": lo}))
            continue
        # the producer's dynamic branch prints before (and instead of) the static walk's read-ahead and the weight
        # prefetch of the static first unit (gemm/mainloop.j2): a lookahead would print nothing, a prefetch would warm
        # L2 for unit blockIdx.x, which this CTA's first ticket need not be (MoEConfig refuses both with the walk)
        if sch.lookahead or layer.weight_prefetch:
            field_, value = ("lookahead", sch.lookahead) if sch.lookahead else ("weight_prefetch", layer.weight_prefetch)
            bad.append(_dyn_viol(part, f"{field_} = {value} with the dynamic walk: "
                                 + ("the producer takes its next unit by ticket, so the static read-ahead prints "
                                    "nothing (a verified field that never reaches the .cu)" if sch.lookahead else
                                    "the prefetch before the wait warms the static walk's first unit (blockIdx.x), not "
                                    "the CTA's first ticket, which is known only after the atomicAdd"),
                                 where, f"{field_} = 0", str(value), f"set {field_} 0 with the dynamic walk",
                                 params={field_: value}))
            continue
        step = 1 + sch.step_delta
        # the printed tickets are int32 (int* counter, `int t = atomicAdd(...)`, `t >= int(sched.units)`) whatever the
        # index tile_unit's C type: at T = 2^tokens_bits the walk's units and every ticket handed out (at most
        # units - 1 + grid x step, the host's grid <= max_tiles x tiles_n <= the units' bound) must fit int32
        tiles_n_max = -(-printed_extent(layer, part, "n") // prog.epilogue.tile_n)
        units_max = index_bounds(layer)["tiles"] * tiles_n_max
        ticket_max = units_max - 1 + units_max * max(step, 1)
        if ticket_max > INT32_MAX:
            bad.append(_dyn_viol(part, f"at T = 2^{layer.tokens_bits} the walk has up to {units_max} units and the "
                                 f"tickets reach {ticket_max}, past int32 ({INT32_MAX}): the int ticket counter and "
                                 "`t >= int(sched.units)` wrap (index tile_unit's C type does not widen them), so a "
                                 "wrapped ticket is taken as a unit or the walk ends before its first unit",
                                 where, f"units - 1 + grid x step <= {INT32_MAX}", str(ticket_max),
                                 "the dynamic walk's tickets are int32: keep its units below 2^30 (the static walk "
                                 "with tile_unit int64_t for larger layers)",
                                 params={"T": 1 << layer.tokens_bits, "units": units_max, "step": step},
                                 element={"region": f"{'gu' if part == 'gate_up' else 'dn'}_tickets", "index": 0}))
            continue
        unit_counts = sorted({int(simulate_routing(layer, ids)["tiles_m"]) * -(-printed_extent(layer, part, "n")
                                                                          // prog.epilogue.tile_n)
                              for _l, ids in cases[:8]} | set(range(1, 13)))
        for units in unit_counts:
            for grid in range(1, min(units, 16) + 3):
                points += 1
                got = dynamic_tickets(units, grid, step, sch.end_test)
                if isinstance(got, str):
                    bad.append(_dyn_viol(part, got, where, "a finite walk", got, "take tickets with atomicAdd(counter, 1)",
                                         params={"units": units, "grid": grid, "step_delta": sch.step_delta}))
                    break
                taken, _end = got
                if taken != list(range(units)):
                    extra = sorted(set(taken) - set(range(units)))
                    missing = sorted(set(range(units)) - set(taken))
                    what = (f"ticket {extra[0]} passes the end test t {sch.end_test} units as a unit ({units} units): "
                            f"Scheduler::take({extra[0]}) is no unit of the walk (current() finds u >= units: tile "
                            f"(0, 0) again, its output stored and its handoff signalled twice)" if extra else
                            f"unit {missing[0]} is never taken (tickets step {step})")
                    bad.append(_dyn_viol(part, f"{units} units on {grid} CTAs: {what}", where,
                                         f"the tickets 0..{units - 1}, each once", f"tickets {taken[:8]}",
                                         "end the walk on the first ticket t >= units; atomicAdd(counter, 1)",
                                         params={"units": units, "grid": grid, "end_test": sch.end_test,
                                                 "step_delta": sch.step_delta},
                                         element={"ticket": (extra or missing)[0]},
                                         thread={"cta": grid - 1, "threadIdx": 0, "role": "producer (elected)"}))
                    break
            if bad and bad[-1].rule == "moe.dynamic_walk" and part in bad[-1].message:
                break
        if bad:
            continue
        if not layer.tickets_zero:
            _l, ids = cases[0]
            units = int(simulate_routing(layer, ids)["tiles_m"]) * -(-printed_extent(layer, part, "n")
                                                                      // prog.epilogue.tile_n)
            grid = max(1, min(units, SIM_CTAS))
            _taken, end = dynamic_tickets(units, grid, step, sch.end_test)
            bad.append(_dyn_viol(part, f"the ticket counter {'gu' if part == 'gate_up' else 'dn'}_tickets is never "
                                 f"zeroed (layer node tickets_zero False): after a call of {units} units on {grid} CTAs "
                                 f"it holds {end}, so the next call's first ticket is {end} >= its {units} units and "
                                 "no unit of it is computed (its output keeps the previous call's)",
                                 "route_scan / route_fused (layer.cu.j2)", "counter = 0 at every call's first ticket",
                                 f"counter = {end} at call 2",
                                 "zero the counter where route_scan writes *tiles_m (layer node tickets_zero)",
                                 params={"call": 2, "units": units, "grid": grid},
                                 element={"region": f"{'gu' if part == 'gate_up' else 'dn'}_tickets", "index": 0},
                                 thread={"cta": 0, "threadIdx": 0, "role": f"{part} producer, call 2"}))
            continue
        pingpong = prog.schedule.consumer_stride == 2
        if sch.unit_source != "slot":
            # grid 2, 3 units: CTA 0 takes ticket 0 and is slow; CTA 1 takes 1 and 2 (then 3, the end)
            static = [1, 1 + 2] if not pingpong else [1]
            bad.append(_dyn_viol(part, "the consumers compute their units from their own static walk (blockIdx.x + j "
                                 "gridDim.x, schedule node unit_source 'static'), not from the slot: with 3 units on 2 "
                                 "CTAs and the atomics in the order CTA 0: 0, CTA 1: 1, CTA 1: 2, CTA 1's producer loads "
                                 f"units 1, 2 while its consumers compute units {static} (ticket 2's k-tiles multiplied "
                                 "and stored as another tile, unit 2 never stored)",
                                 "gemm/kernel_body.j2 consumer loop", "Work w = sched.take(p, t) of the slot's t",
                                 "Work w = sched.current(p) (static)", "take the slot's unit: sched.take(p, t)",
                                 params={"units": 3, "grid": 2, "atomics": "CTA0:0, CTA1:1, CTA1:2"},
                                 thread={"cta": 1, "threadIdx": 128, "role": "consumer warpgroup 0"}))
            continue
        states = 0
        for units in range(sch.slot_stages + DYN_RING_EXTRA + 1):
            for kt in DYN_K_TILES:
                n, badr = explore_unit_ring(sch.slot_stages, units, pingpong, sch.slot_publish, kt)
                states += n
                if badr is not None:
                    kind, detail, tr = badr
                    bad.append(_dyn_viol(part, f"unit ring ({sch.slot_stages} slots, {units} units then the end marker, "
                                         f"{kt} k-tiles each, {'ping-pong' if pingpong else 'cooperative'}): {kind}: "
                                         f"{detail}", "the unit ring (gemm/mainloop.j2 producer, gemm/kernel_body.j2 "
                                         "consumers)", "every read finds the unit published for it; no deadlock",
                                         detail, "write the slot before the arrive on its full barrier (its release "
                                         "orders the write before the consumers' acquiring wait)",
                                         params={"units": units, "k_tiles": kt, "slot_publish": sch.slot_publish},
                                         thread={"cta": 0, "threadIdx": 0, "role": "producer / consumers"}, trace=tr))
                    break
            if bad and part in bad[-1].message:
                break
        if bad and part in bad[-1].message:
            continue
        points += states
        summary.append(f"{part}: tickets 0..units-1 each once for {len(unit_counts)} unit counts (routing cases and "
                       f"0..12) x grids 1..units+2 (the values atomicAdd hands out are 0, 1, 2, ... in any order: all "
                       f"sizes); counter zeroed every call by {'route_scan / route_fused' if layer.routing.fused else 'route_scan'} "
                       f"(moe.pdl orders it before the first ticket); consumers take the slot's unit; unit ring of "
                       f"{sch.slot_stages} slots at smem [{lo}, {hi}): {states} states over 0..{sch.slot_stages + DYN_RING_EXTRA} "
                       f"units x {len(DYN_K_TILES)} k-tile counts ({'ping-pong' if pingpong else 'cooperative'}), every "
                       "read finds its own publication, no deadlock")
    if bad:
        return [], bad[:1]
    return [Proof("moe.dynamic_walk", "M14", "enum", "; ".join(summary), points=points)], []
