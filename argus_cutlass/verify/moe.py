"""Verifier of the MoE family (:class:`~argus_cutlass.dsl.moe_ir.MoELayer`): ``verify_moe``.

The two grouped GEMMs are checked by the GEMM verifier (:func:`argus_cutlass.verify.verify_gemm`:
TMA images, operand tags, descriptors, pipeline protocol and parity, k coverage, the epilogue's
staging and stores) on the very programs the templates print; for the gate+up program the plain
epilogue rules (``epilogue.coordinate``, ``output.bijection``) are replaced by ``moe.swiglu``, which
states the paired-register SwiGLU store. The routing data are data, so the kernels that build them
are checked by running the printed semantics (every field of the routing, scheduler and combine
nodes) on a bounded family of routings, exhaustive for 2 tokens and generated for the issue's cases
(uniform, skewed, zero experts, all to one, group sizes 128 / 130 / 65, ids -1 and E), plus a z3
proof of the padded offsets for symbolic counts. Each failure carries a concrete counterexample.

================== ===========================================================================
rule               invariant (``invariants/moe.toml``)
================== ===========================================================================
moe.bijection      (token, slot) -> permuted row is one-to-one, inside its group
moe.inverse        the combine's row map (un-permute) is the inverse of the gather
moe.offsets        offsets start at 0, are monotone, tile-aligned, grow by the padded count; the
                   valid rows sum to T*k; tile_expert names the owner of every m-tile (enum + z3)
moe.invalid_ids    an id outside [0, E) gets no row and adds nothing
moe.group_tiles    a tile of group e reads only padded group e's rows and expert e's weight rows
                   (gate / up rows of its own output columns); every (m-tile, n-block) once
moe.empty_groups   an empty group has no tile, TMA load or store; every unit runs the same k loop
                   in producer and consumer (no phase skew)
moe.swiglu         register i (gate) and i + act_pair (up) hold the same (row, column); the h tile
                   is covered once, at the right place
moe.combine        y[t] adds exactly k gated terms, slot j's row and slot j's weight
moe.index_width    every printed index product fits its C type for T <= 2^tokens_bits
================== ===========================================================================
"""

from __future__ import annotations

import itertools
import time
from typing import Any

import numpy as np

from argus_cutlass.dsl.moe_ir import CTYPES, MoELayer
from argus_cutlass.verify.report import Counterexample, Obligation, Proof, VerificationReport, Violation
from argus_cutlass.verify.run import Run
from argus_cutlass.verify.run import report as _report

__all__ = ["MOE_RULES", "routing_cases", "simulate_routing", "verify_moe"]

#: rule -> (invariant id, description)
MOE_RULES = {
    "moe.bijection": ("M1", "(token, slot) -> permuted row is a bijection onto the rows of its group"),
    "moe.inverse": ("M1", "the combine's row map is the inverse of the gather (un-permute o permute = id)"),
    "moe.offsets": ("M2", "offsets: 0, monotone, tile-aligned, padded counts; valid rows sum to T*k; tile owners"),
    "moe.invalid_ids": ("M2", "ids outside [0, E) get no row and add nothing"),
    "moe.group_tiles": ("M3", "a tile of group e reads only group-e rows and expert-e weights; units cover once"),
    "moe.empty_groups": ("M4", "empty groups do no work and skew no pipeline phase"),
    "moe.swiglu": ("M5", "gate and up of one (row, column) meet in one thread; the h tile is stored once"),
    "moe.combine": ("M6", "the combine adds exactly k gated terms per token"),
    "moe.index_width": ("M7", "index products fit their C types for T <= 2^tokens_bits"),
}
#: GEMM rules the gate+up program's fused activation replaces (they model a plain store)
_REPLACED_BY_SWIGLU = ("epilogue.coordinate", "output.bijection")
#: resident CTAs assumed by the scheduler simulation (the H200's 132 SMs, one CTA each)
SIM_CTAS = 132


def _cex(rule: str, where: str, expected: str, actual: str, *, element: dict | None = None,
         params: dict | None = None, provenance: str = "") -> Counterexample:
    return Counterexample(MOE_RULES[rule][0], rule, "enum", rule, where, -1, -1, -1, {}, {}, "", {}, expected,
                          actual, provenance, element=element or {}, params=params or {})


def _viol(rule: str, message: str, cex: Counterexample | None, where: str = "", hint: str | None = None) -> Violation:
    return Violation(rule, MOE_RULES[rule][0], message, hint, where, cex)


# ---------------------------------------------------------------------------------- routing cases


def routing_cases(layer: MoELayer) -> list[tuple[str, np.ndarray]]:
    """The routings the data-flow rules run on: ``(label, ids (T, k))``. Exhaustive over 2 tokens
    with ids from {0, 1, E-1}; generated: uniform / skewed / zero experts / all to one at T = 5 and
    T = 300 (crosses a routing CTA), group sizes 128, 130, 65 (+ filler), and ids -1 and E."""
    from argus_cutlass.kernels.moe.routing import make_routing

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
    return out


def simulate_routing(layer: MoELayer, ids: np.ndarray) -> dict[str, Any]:
    """The routing kernels of ``layer`` (``templates/moe/layer.cu.j2``: route_count, route_scan,
    route_permute) run in numpy on ``ids`` (T, k): every field of the routing node is honoured."""
    r = layer.routing
    e_, k = layer.experts, layer.topk
    flat = np.asarray(ids, dtype=np.int64).reshape(-1)
    n = flat.size
    if r.invalid == "skip":
        ex = np.where((flat >= 0) & (flat < e_), flat, -1)
    else:
        ex = np.clip(flat, 0, e_ - 1)
    chunks = -(-n // r.chunk)
    bc = np.zeros((chunks, e_), dtype=np.int64)
    for b in range(chunks):
        seg = ex[b * r.chunk:(b + 1) * r.chunk]
        seg = seg[seg >= 0]
        bc[b] = np.bincount(seg, minlength=e_)
    counts = bc.sum(axis=0)
    bc_excl = np.cumsum(bc, axis=0) - bc
    tiles = -(-counts // r.pad)
    incl = np.cumsum(tiles)
    base = incl - tiles if r.scan == "exclusive" else incl
    offsets = np.zeros(e_ + 1, dtype=np.int64)
    offsets[:e_] = base * r.pad
    offsets[e_] = incl[-1] * r.pad
    tiles_m = int(incl[-1])
    groups = min(e_, n)
    padded_rows = -(-(n + groups * (r.pad - 1)) // r.pad) * r.pad
    cap = padded_rows // r.pad + e_
    tile_expert = np.full(cap, -1, dtype=np.int64)
    oob = []
    for e in range(e_):
        for i in range(int(tiles[e])):
            j = int(base[e]) + i
            if 0 <= j < cap:
                tile_expert[j] = e
            else:
                oob.append((e, j))
    permuted = np.full(n, -1, dtype=np.int64)
    for s in range(n):
        e = int(ex[s])
        if e < 0:
            continue
        b = s // r.chunk
        rank = int(np.count_nonzero(ex[b * r.chunk:s] == e))
        permuted[s] = offsets[e] + bc_excl[b, e] + rank + r.rank_base
    return {"ex": ex, "counts": counts, "offsets": offsets, "tiles_m": tiles_m, "tile_expert": tile_expert,
            "tile_oob": oob, "permuted": permuted, "padded_rows": padded_rows, "n": n}


# ------------------------------------------------------------------------------------------ rules


def _check_routing(layer: MoELayer, cases: list) -> tuple[list[Proof], list[Violation]]:
    proofs, bad = [], []
    seen: set[str] = set()
    e_, k = layer.experts, layer.topk
    for label, ids in cases:
        sim = simulate_routing(layer, ids)
        pr, ex, off, cnt = sim["permuted"], sim["ex"], sim["offsets"], sim["counts"]
        params = {"T": int(ids.shape[0]), "k": k, "E": e_}
        valid = ex >= 0
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
                                  element={"token": s // k, "slot": s % k, "id": int(raw[s])}, params=params)))
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
                    lo, hi = off[ex[valid]], off[ex[valid]] + cnt[ex[valid]]
                    out_g = np.flatnonzero((rows < lo) | (rows >= hi))
                    if out_g.size:
                        s = int(np.flatnonzero(valid)[out_g[0]])
                        e = int(ex[s])
                        msg = (f"(token {s // k}, slot {s % k}) routes to expert {e} but lands on row {int(pr[s])}, "
                               f"outside group {e}'s rows [{int(off[e])}, {int(off[e] + cnt[e])})", s,
                               f"a row in [off_{e}, off_{e} + count_{e})")
            if msg:
                seen.add("moe.bijection")
                text, s, want = msg
                bad.append(_viol("moe.bijection", f"{label}: {text}",
                                 _cex("moe.bijection", "route_permute", want, f"row {int(pr[s])}",
                                      element={"token": s // k, "slot": s % k, "expert": int(ex[s])}, params=params,
                                      provenance=f"offsets[{int(ex[s])}]={int(off[ex[s]])}, rank_base "
                                                 f"{layer.routing.rank_base}")))
        # offsets
        if "moe.offsets" not in seen:
            pad = layer.routing.pad
            msg = None
            want_sizes = -(-cnt // pad) * pad
            if off[0] != 0:
                msg = (f"off_0 = {int(off[0])}, expected 0", "off_0 = 0", f"off_0 = {int(off[0])}")
            elif (np.diff(off) != want_sizes).any():
                e = int(np.flatnonzero(np.diff(off) != want_sizes)[0])
                msg = (f"off_{e + 1} - off_{e} = {int(off[e + 1] - off[e])}, but group {e} has {int(cnt[e])} rows "
                       f"(padded {int(want_sizes[e])})", f"{int(want_sizes[e])}", f"{int(off[e + 1] - off[e])}")
            elif int(cnt.sum()) != int(valid.sum()):
                msg = (f"counts sum to {int(cnt.sum())}, expected T*k = {int(valid.sum())} valid rows",
                       str(int(valid.sum())), str(int(cnt.sum())))
            elif sim["tile_oob"]:
                e, j = sim["tile_oob"][0]
                msg = (f"tile_expert[{j}] = {e} is written outside the {sim['tiles_m']} m-tiles", "< tiles_m", str(j))
            else:
                te = sim["tile_expert"][: sim["tiles_m"]]
                owner = np.searchsorted(off[1:], np.arange(sim["tiles_m"]) * pad, side="right")
                wrong = np.flatnonzero(te != owner)
                if wrong.size:
                    i = int(wrong[0])
                    msg = (f"m-tile {i} (rows [{i * pad}, {(i + 1) * pad})) is owned by group {int(owner[i])} but "
                           f"tile_expert[{i}] = {int(te[i])}", str(int(owner[i])), str(int(te[i])))
            if msg:
                seen.add("moe.offsets")
                bad.append(_viol("moe.offsets", f"{label}: {msg[0]}",
                                 _cex("moe.offsets", "route_scan", msg[1], msg[2], params=params,
                                      element={"counts": [int(c) for c in cnt[:8]]},
                                      provenance=f"scan {layer.routing.scan}, pad {pad}")))
    for rule, text in (("moe.bijection", "bijection onto group rows"), ("moe.offsets", "offsets and tile owners"),
                       ("moe.invalid_ids", "ids outside [0, E) skipped")):
        if rule not in seen:
            proofs.append(Proof(rule, MOE_RULES[rule][0], "enum", f"{text}: {len(cases)} routings (exhaustive T=2, "
                                "generated T=5/7/162/300)", points=len(cases)))
    return proofs, bad


def _b_rows(load: Any, expert: int, tn: int, tile_n: int) -> np.ndarray:
    """gB rows the tile's B stage holds, row r of the tile first (the template's load_B and b_mn0)."""
    half = tile_n // 2
    blk = tn * (half if load.pair_offset else tile_n)
    origin = (expert + load.expert_shift) * load.expert_rows + blk
    r = np.arange(tile_n)
    if load.pair_offset:
        return origin + np.where(r < half, r, r - half + load.pair_offset)
    return origin + r


def _check_group_tiles(layer: MoELayer, cases: list) -> tuple[list[Proof], list[Violation]]:
    bad: list[Violation] = []
    proofs: list[Proof] = []
    seen: set[str] = set()
    points = 0
    for part in ("gate_up", "down"):
        p = layer.program(part)
        la, lb = p.load_into("sA"), p.load_into("sB")
        epi, sched = p.epilogue, p.schedule
        n_out = layer.ffn if part == "gate_up" else layer.hidden
        per_expert = 2 * layer.ffn if part == "gate_up" else layer.hidden
        tile_m, tile_n = la.tile_mn, lb.tile_mn
        tiles_n = -(-n_out // epi.tile_n)
        for label, ids in cases:
            sim = simulate_routing(layer, ids)
            off, cnt, te, tiles_m = sim["offsets"], sim["counts"], sim["tile_expert"], sim["tiles_m"]
            units = tiles_m * tiles_n
            max_units = (sim["padded_rows"] // layer.routing.pad) * tiles_n
            grid = min(max_units, SIM_CTAS)
            step = grid + sched.step_delta
            visits = np.zeros(units, dtype=np.int64)
            if step >= 1:
                for c in range(grid):
                    for u in range(c, units, step):
                        visits[u] += 1
            params = {"T": int(ids.shape[0]), "tiles_m": tiles_m, "tiles_n": tiles_n, "grid": grid}
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
                tm, tn = (u % tiles_m, u // tiles_m) if sched.raster == "along_m" else (u // tiles_n, u % tiles_n)
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
                if (a0 < lo or a0 + tile_m > hi or la.expert_rows) and "moe.group_tiles" not in seen:
                    seen.add("moe.group_tiles")
                    bad.append(_viol("moe.group_tiles", f"{part}, {label}: m-tile {tm} of expert {e} reads A rows "
                                     f"[{a0}, {a0 + tile_m}) outside group {e}'s padded rows [{lo}, {hi})",
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
        proofs.append(Proof("moe.group_tiles", "M3", "enum", f"{points} (unit, routing) points: A rows in the tile's "
                            "padded group, B rows = expert e's gate/up/W2 rows of the output columns, units once",
                            points=points))
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
    p = layer.gate_up
    e, mma = p.epilogue, p.mma
    n = mma.op.n
    bad: list[Violation] = []
    if e.act != "swiglu":
        return [], [_viol("moe.swiglu", f"gate+up epilogue act {e.act!r}: the layer needs 'swiglu' (silu(gate) * up, "
                          "gate the first half of the tile)",
                          _cex("moe.swiglu", "epilogue act_value", "silu(gate) * up", e.act or "no activation"))]
    if e.tile_n * 2 != n or p.load_into("sB").pair_offset == 0:
        return [], [_viol("moe.swiglu", f"output tile {e.tile_n} columns from a {n}-column accumulator without paired "
                          "halves", None)]
    t = np.arange(128)
    lane, warp = t % 32, t // 32
    regs = n // 2
    for i in range(regs // 2):
        rg, cg = _frag(np.full_like(t, i), lane, warp)
        j = i + e.act_pair
        if j >= regs:
            return [], [_viol("moe.swiglu", f"register {i} pairs with register {j}, past the {regs} accumulators",
                              _cex("moe.swiglu", "epilogue act_value", f"< {regs}", str(j)))]
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
    # the stored (row, col) of gate register i is its own accumulator coordinate (row_offset 0), once
    cover = np.zeros((64, n // 2), dtype=np.int64)
    for i in range(regs // 2):
        rg, cg = _frag(np.full_like(t, i), lane, warp)
        np.add.at(cover, ((rg + e.row_offset) % 64, cg), 1)
    if (cover != 1).any():
        r, c = (int(v) for v in np.argwhere(cover != 1)[0])
        bad.append(_viol("moe.swiglu", f"h tile element ({r}, {c}) of one warpgroup's 64 rows is stored "
                         f"{int(cover[r, c])} times (row_offset {e.row_offset})",
                         _cex("moe.swiglu", "epilogue staging", "1 store", f"{int(cover[r, c])} stores",
                              element={"row": r, "col": c})))
        return [], bad
    return [Proof("moe.swiglu", "M5", "enum", f"128 threads x {regs // 2} gate registers: pair register "
                  f"+{e.act_pair} holds the up column of the same output; h tile stored once", points=128 * regs)], []


def _check_combine(layer: MoELayer, cases: list) -> tuple[list[Proof], list[Violation]]:
    c, k = layer.combine, layer.topk
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


def index_bounds(layer: MoELayer) -> dict[str, int]:
    """Largest value of each size name at ``T = 2^tokens_bits`` (see :class:`IndexWidth`)."""
    t = 2 ** layer.tokens_bits
    e_, k, h, i = layer.experts, layer.topk, layer.hidden, layer.ffn
    pad, chunk = layer.routing.pad, layer.routing.chunk
    rows = -(-(t * k + min(e_, t * k) * (pad - 1)) // pad) * pad
    n_blocks = max(-(-i // layer.gate_up.epilogue.tile_n), -(-h // layer.down.epilogue.tile_n))
    return {"T": t, "k": k, "E": e_, "H": h, "I": i, "2I": 2 * i, "rows": rows, "tiles": rows // pad + e_,
            "chunks": -(-(t * k) // chunk), "N_blocks": n_blocks}


def _check_index_width(layer: MoELayer) -> tuple[list[Proof], list[Violation]]:
    b = index_bounds(layer)
    bad, ok = [], []
    for ix in layer.indices:
        v = 1
        for f in ix.factors:
            if f not in b:
                bad.append(_viol("moe.index_width", f"index {ix.name}: unknown size {f!r}", None))
                break
            v *= b[f]
        else:
            if v > CTYPES[ix.ctype]:
                bad.append(_viol("moe.index_width", f"index {ix.name} = {' * '.join(ix.factors)} reaches {v} at "
                                 f"T = 2^{layer.tokens_bits}, past {ix.ctype}'s {CTYPES[ix.ctype]}",
                                 _cex("moe.index_width", ix.name, f"<= {CTYPES[ix.ctype]} ({ix.ctype})", str(v),
                                      params={f: b[f] for f in ix.factors}),
                                 hint="compute it in int64_t"))
            else:
                ok.append(f"{ix.name} <= {v} ({ix.ctype})")
    if bad:
        return [], bad
    return [Proof("moe.index_width", "M7", "arith", f"T <= 2^{layer.tokens_bits}: " + "; ".join(ok),
                  points=len(layer.indices))], []


def _check_offsets_smt(layer: MoELayer, timeout_ms: int) -> tuple[list[Proof], list[Violation], list]:
    """z3: for all counts c_e in [0, 2^24] (E' = min(E, 8) groups), the printed scan gives off_0 = 0,
    off_{e+1} - off_e = pad * ceil(c_e / pad) >= c_e, off_e % pad = 0 (so groups are disjoint,
    tile-aligned and monotone)."""
    import z3

    from argus_cutlass.verify.report import Unknown

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
        notes += [f"{part}: {n}" for n in rep.notes]
    cases = routing_cases(layer)
    for rule, (inv, text) in MOE_RULES.items():
        obligations.append(Obligation(rule, inv, text))
    run.add("enum", "moe.bijection", _check_routing, layer, cases)
    run.add("enum", "moe.group_tiles", _check_group_tiles, layer, cases)
    run.add("enum", "moe.swiglu", _check_swiglu, layer)
    run.add("enum", "moe.combine", _check_combine, layer, cases)
    run.add("arith", "moe.index_width", _check_index_width, layer)
    if smt:
        from argus_cutlass.settings import settings

        timeout = settings().smt_timeout_ms if smt_timeout_ms is None else int(smt_timeout_ms)
        run.add("smt", "moe.offsets", _check_offsets_smt, layer, timeout)
    else:
        notes.append("SMT tier off: moe.offsets checked on the enumerated routings only")
    return _report(name, obligations, run, notes, t0)


def dataclass_prefix(x: Any, part: str) -> Any:
    """``x`` (a Proof or Violation of a GEMM rule) with the MoE part named in its text."""
    import dataclasses

    if isinstance(x, Proof):
        return dataclasses.replace(x, summary=f"[{part}] {x.summary}")
    if isinstance(x, Violation):
        return dataclasses.replace(x, message=f"[{part}] {x.message}")
    return x
