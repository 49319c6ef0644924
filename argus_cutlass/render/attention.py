"""Print a verified attention :class:`~argus_cutlass.dsl.ir.Program` as CuTe C++ (``templates/attention/``).

The template context is the program's nodes, found by following the program's own references
(the MMAs' reads, the reads' buffers, the loads into them, their pipelines, the mask / softmax /
output nodes' tensors), plus the hardware encodings of their fields (GMMA descriptor plans,
tensor-map enums) and, per TMA load, the coordinate expressions its fields define. A program the
template cannot print as stated raises ``ConfigError("render.program")``; nothing here reads a
configuration.
"""

from __future__ import annotations

from typing import Any

from argus_cutlass import __version__
from argus_cutlass.dsl.atoms import CPP_TYPE
from argus_cutlass.dsl.ir import Program
from argus_cutlass.errors import ConfigError
from argus_cutlass.render.env import render_template
from argus_cutlass.render.gemm import L2_PROMOTION, OOB_FILL, TMA_SWIZZLE, relation_lines

ATTENTION_TEMPLATE = "attention/kernel.cu.j2"

#: host entry pointer argument of each binding, and the index of its (batch, row, head) strides
BINDINGS = {"q": 0, "k": 3, "v": 6, "o": 9}
#: the sequence a gmem row mode runs along -> the tile's offset of that sequence in packed tensors
_ROW_OFFSET = {"Lq": "x.q_offset", "Lk": "x.k_offset"}
#: gmem mode name -> the tag field that mode carries
_MODE_FIELD = {"Lq": "q", "Lk": "key", "D": "d", "H": "h"}


def _named(nodes: Any, name: str, what: str) -> Any:
    hit = [n for n in nodes if n.name == name]
    if len(hit) != 1:
        raise KeyError(f"{what} {name!r} ({len(hit)} such nodes)")
    return hit[0]


def _load_coords(p: Program, load: Any, tile_m: int, tile_n: int) -> dict:
    """The TMA coordinates of ``load`` as C++ expressions of the template's tile ``x`` and kv block
    ``n``: its gmem row mode (the mode that is not the head dim), the block that picks the rows
    (``block_mode``: the tile's query block), the loop's advance along them (``advance``, shifted
    by ``block_shift``), the head (``head``) and the pointer / strides it binds (``binding``).

    Raises:
        KeyError: a field combination the template has no coordinate for.
    """
    g = p.tensor(load.src)
    if g.space != "gmem" or g.major != "D" or "D" not in g.shape:
        raise KeyError(f"load {load.name!r} reads {g.name!r} ({g.space}, modes {g.shape}, major {g.major!r}): the "
                       "attention template loads gmem tensors whose head dim D is contiguous")
    if (load.major == "K") != (g.shape[1] == g.major):
        raise KeyError(f"load {load.name!r} is {load.major}-major but {g.name!r}'s contiguous mode {g.major!r} is its "
                       f"{'k' if g.shape[1] == g.major else 'mn'} mode {g.shape}")
    row_mode = next(m for m in g.shape if m != "D")
    if row_mode not in _ROW_OFFSET:
        raise KeyError(f"load {load.name!r}: row mode {row_mode!r} is not a query or key sequence (Lq / Lk)")
    if g.binding not in BINDINGS or g.binding == "o":
        raise KeyError(f"load {load.name!r}: {g.name!r} is bound to {g.binding!r}, not an input q / k / v")
    # the contiguous gmem mode (d) is the load's k mode when K-major, its mn mode when MN-major
    d_mode = "k" if load.major == "K" else "mn"
    row_ext = load.tile_mn if d_mode == "k" else load.tile_k
    d_ext = load.tile_k if d_mode == "k" else load.tile_mn
    terms = [_ROW_OFFSET[row_mode]]
    if load.block_mode == "m":
        terms.append(f"x.m_block * {row_ext}")
    elif load.block_mode == "n":
        raise KeyError(f"load {load.name!r}: block_mode 'n' (an output column block) has no meaning in attention")
    if load.advance == "none":
        if load.block_shift != 0:
            raise KeyError(f"load {load.name!r}: block_shift {load.block_shift} on a load outside the kv loop")
        in_loop = False
    elif load.advance == d_mode:
        raise KeyError(f"load {load.name!r}: advance {load.advance!r} moves along the head dim")
    else:
        shift = f" + {load.block_shift}" if load.block_shift > 0 else (f" - {-load.block_shift}"
                                                                        if load.block_shift < 0 else "")
        terms.append(f"(n{shift}) * {row_ext}")
        in_loop = True
    if load.head not in ("q", "kv"):
        raise KeyError(f"load {load.name!r}: head {load.head!r}: an attention load addresses the query or kv head")
    return {
        "row": " + ".join(terms), "in_loop": in_loop, "row_ext": row_ext, "d_ext": d_ext,
        "head": "x.head" if load.head == "q" else "kv_head", "ptr": g.binding, "stride": BINDINGS[g.binding],
        "rows": "rows_q" if row_mode == "Lq" else "rows_k", "heads": "heads" if load.head == "q" else "kv_heads",
    }


def attention_context(program: Program, verified: tuple[str, ...] = ()) -> dict:
    """The template variables of ``program`` (exposed for golden tests).

    Raises:
        ConfigError: ``render.program`` when the program lacks a node the attention template prints or
            states something the template cannot print (see the messages).
    """
    from argus_cutlass.layout.algebra import LayoutError
    from argus_cutlass.layout.gmma_desc import DescriptorError, descriptor_plan

    p = program
    try:
        if p.family != "attention":
            raise KeyError(f"family {p.family!r}: this is the attention template")
        mma_qk, mma_pv = _named(p.mmas, "qk", "MMA"), _named(p.mmas, "pv", "MMA")
        rd_q, rd_k = _named(p.reads, mma_qk.a, "MMA read"), _named(p.reads, mma_qk.b, "MMA read")
        rd_p, rd_v = _named(p.reads, mma_pv.a, "MMA read"), _named(p.reads, mma_pv.b, "MMA read")
        for r, op, m in ((rd_q, "A", mma_qk), (rd_k, "B", mma_qk), (rd_p, "A", mma_pv), (rd_v, "B", mma_pv)):
            if r.operand != op or r.mma != m.name:
                raise KeyError(f"MMA {m.name!r} reads {r.name!r} (operand {r.operand}, of {r.mma!r}) as its {op}")
            if r.op != m.op:
                raise KeyError(f"read {r.name!r} states op {r.op.cpp()} but MMA {m.name!r} issues {m.op.cpp()}: the "
                               "kernel forms a read's descriptors for its MMA's instruction")
            if r.warp_stage_skew != (0, 0, 0, 0):
                raise KeyError(f"read {r.name!r}: the attention template passes every warp the same stage "
                               f"(warp_stage_skew {r.warp_stage_skew})")
        if mma_qk.op.mode != "SS" or mma_pv.op.mode != "RS" or rd_p.view is not None:
            raise KeyError(f"S = Q K^T is printed as SS-mode and O += P V as RS-mode wgmma (got {mma_qk.op.mode} / "
                           f"{mma_pv.op.mode})")
        if mma_qk.reps_m != 1 or mma_pv.reps_m != 1:
            raise KeyError("one 64-row wgmma atom per consumer warpgroup (reps_m 1)")
        conv = [c for c in p.converts if c.dst == rd_p.src]
        if len(conv) != 1 or conv[0].src != mma_qk.acc:
            raise KeyError(f"P ({rd_p.src!r}) must be converted from S ({mma_qk.acc!r}) by one conversion")
        conv = conv[0]
        mask, smax, out = p.mask, p.softmax, p.output
        if mask is None or smax is None or out is None:
            raise KeyError("the program has no mask / softmax / row output node")
        if mask.acc != mma_qk.acc or smax.src != mma_qk.acc or smax.acc != mma_pv.acc or out.acc != mma_pv.acc:
            raise KeyError(f"mask over {mask.acc!r}, softmax {smax.src!r} -> {smax.acc!r}, output of {out.acc!r}: "
                           f"expected S = {mma_qk.acc!r} and O = {mma_pv.acc!r}")
        red_max, red_sum = _named(p.reductions, smax.max, "reduction"), _named(p.reductions, smax.sum, "reduction")
        for red, op in ((red_max, "max"), (red_sum, "sum")):
            if red.src != smax.src or red.op != op:
                raise KeyError(f"softmax {op}: reduction {red.name!r} is a {red.op} over {red.src!r}")
        lq, lk, lv = p.load_into(rd_q.src), p.load_into(rd_k.src), p.load_into(rd_v.src)
        pipes = {}
        for key, ld in (("q", lq), ("k", lk), ("v", lv)):
            pipe = _named(p.pipelines, ld.pipeline, "pipeline")
            if tuple(pipe.loads) != (ld.name,) or tuple(pipe.buffers) != (ld.dst,):
                raise KeyError(f"pipeline {pipe.name!r} (loads {pipe.loads}, buffers {pipe.buffers}) is not load "
                               f"{ld.name!r}'s alone")
            if (pipe.mma_in_flight, pipe.release_lag) != (0, 0):
                raise KeyError(f"pipeline {pipe.name!r}: the attention consumer releases a stage once the wgmma that "
                               f"read it retired (mma_in_flight 0, release_lag 0), not ({pipe.mma_in_flight}, "
                               f"{pipe.release_lag})")
            if not (pipe.producer.carry_across_tiles and pipe.consumer.carry_across_tiles):
                raise KeyError(f"pipeline {pipe.name!r}: the attention kernel carries its pipeline states across "
                               "tiles")
            pipes[key] = pipe
        if len({id(x) for x in pipes.values()}) != 3:
            raise KeyError("Q, K and V complete on three distinct pipelines")
        for ld in (lq, lk, lv):
            if ld.copy.multicast != 1 or ld.copy.kind != "load" or ld.cluster != (1, 1):
                raise KeyError(f"load {ld.name!r}: the attention kernel launches 1-CTA clusters (no multicast)")
        ctx_loads = {key: _load_coords(p, ld, mma_qk.tile_m, mma_qk.op.n) for key, ld in (("q", lq), ("k", lk),
                                                                                         ("v", lv))}
        if ctx_loads["q"]["in_loop"] or not ctx_loads["k"]["in_loop"] or not ctx_loads["v"]["in_loop"]:
            raise KeyError("Q is loaded once per tile and K, V once per kv block")
        for t in p.tensors:
            if t.space == "gmem" and (t.tag is None or tuple(_MODE_FIELD.get(m, "?") for m in t.shape) != t.tag.fields):
                raise KeyError(f"{t.name!r}: modes {t.shape} do not carry its tag's fields "
                               f"{t.tag.fields if t.tag else None} in order")
        g_o, g_lse = p.tensor(out.dst), p.tensor(out.lse)
        if g_o.space != "gmem" or g_o.major != "D" or g_o.binding != "o":
            raise KeyError(f"the output {g_o.name!r} is bound to {g_o.binding!r} with major {g_o.major!r}: expected "
                           "the caller's o, D contiguous")
        if g_lse.space != "gmem" or g_lse.binding != "lse" or g_lse.dtype != "fp32" or g_lse.major != "Lq":
            raise KeyError(f"the LSE {g_lse.name!r} must be the caller's fp32 lse, one row after the other")
        if out.head != "q":
            raise KeyError(f"row output head {out.head!r}: the output is addressed by the query head")
        if out.store_mode not in ("direct", "quad16"):
            raise KeyError(f"row output store mode {out.store_mode!r}: the template prints 'direct' and 'quad16'")
        if out.store_mode == "direct" and out.shuffle:
            raise KeyError(f"row output shuffle {out.shuffle} on the direct store: each thread stores its own pairs")
        loop = _named(p.loops, "kv", "loop")
        if (loop.acc_sets, loop.acc_zeroed, loop.acc_summed) != (1, 1, ()):
            raise KeyError(f"loop {loop.name!r}: accumulator sets (acc_sets {loop.acc_sets}, acc_zeroed "
                           f"{loop.acc_zeroed}, acc_summed {loop.acc_summed}) belong to the GEMM mainloop; the "
                           "attention template accumulates O in one set")
        producer, consumer = p.role("producer"), p.role("consumer")
        order = p.orders[0] if p.orders else None
        if len(p.orders) > 1 or (order is not None and order.points != ("gemm",)):
            raise KeyError("one turn order, at the point 'gemm'")
        wgs = mma_qk.atoms_m
        wg_bars = [p.barrier(f"wg.{g}") for g in range(wgs)]
        sched, launch = p.schedule, p.launch
        if sched.decomposition not in ("persistent", "dynamic") or sched.raster != "along_m" or sched.swizzle != 1:
            raise KeyError(f"schedule {sched.decomposition}/{sched.raster}/swizzle {sched.swizzle}: the attention "
                           "walk is persistent (static or dynamic) over (m_block, head, batch), m_block fastest")
        dynamic = sched.decomposition == "dynamic"
        # the dynamic scheduler's per-warpgroup syncs between the unit-slot read and the stage's release
        # (TileSchedule.slot_sync, rule scheduler.slot_release); none printed when the node has none
        slot_bars = [p.barrier(f"{sched.slot_sync}.{g}") for g in range(wgs)] if dynamic and sched.slot_sync else []
        if dynamic and (sched.slot_bytes % 4 or sched.slot_bytes < 0):
            raise KeyError(f"unit slots at smem byte {sched.slot_bytes}: int32 slots need 4-byte alignment")
        if (sched.cluster_m, sched.cluster_n, sched.splits, sched.consumer_stride) != (1, 1, 1, 1):
            raise KeyError("the attention scheduler has no cluster, split or consumer stride")
        if (launch.cluster_m, launch.cluster_n) != (1, 1):
            raise KeyError("the attention kernel launches 1-CTA clusters")
        if launch.pdl:
            raise KeyError("launch node pdl: the attention template launches plainly (programmatic launch is the "
                           "GEMM's and the MoE layer's)")
        pairing = list(conv.pairing) if conv.pairing else list(range(mma_qk.op.n // 4))
        if len(pairing) != mma_qk.op.n // 4:
            raise KeyError(f"conversion pairing has {len(pairing)} entries for {mma_qk.op.n // 4} P registers")
        tensors = {t: p.tensor(n) for t, n in (("q", lq.src), ("k", lk.src), ("v", lv.src), ("o", out.dst),
                                               ("sQ", lq.dst), ("sK", lk.dst), ("sV", lv.dst), ("s_acc", mma_qk.acc),
                                               ("o_acc", mma_pv.acc), ("p_frag", rd_p.src))}
        for t in ("sQ", "sK", "sV"):
            if tensors[t].space != "smem" or len(tensors[t].shape) != 3:
                raise KeyError(f"{tensors[t].name!r} is not an smem (mn, k, stage) buffer")
        for t in ("s_acc", "o_acc", "p_frag"):
            if tensors[t].space != "rmem":
                raise KeyError(f"{tensors[t].name!r} is not a register tensor")
        smem_end = max(x.barrier_bytes + 16 * x.stages for x in pipes.values())
        smem_end = max([smem_end] + [t.base_bytes + t.size_bytes for t in p.tensors if t.space == "smem"])
        if dynamic:
            smem_end = max(smem_end, sched.slot_bytes + 4 * pipes["q"].stages)
        ctx = {
            "name": p.kernel_name(), "version": __version__, "verified": list(verified), "p": p,
            "fingerprint": p.fingerprint()[:16], "cpp": CPP_TYPE, **tensors,
            "D": mma_pv.op.n, "tile_m": mma_qk.tile_m, "tile_n": mma_qk.op.n, "varlen": bool(p.param("varlen")),
            "prefetch_q": bool(p.param("prefetch_next_q", False)),
            "consumer_wgs": wgs, "mma_qk": mma_qk, "mma_pv": mma_pv, "rd_q": rd_q, "rd_k": rd_k, "rd_p": rd_p,
            "rd_v": rd_v, "conv": conv, "conv_pairing": pairing, "red_max": red_max, "red_sum": red_sum,
            "smax": smax, "mask": mask, "out": out, "g_lse": g_lse, "lq": lq, "lk": lk, "lv": lv,
            "coords": ctx_loads, "pq": pipes["q"], "pk": pipes["k"], "pv": pipes["v"], "kv_loop": loop,
            "producer": producer, "consumer": consumer, "order": order, "wg_bars": wg_bars, "slot_bars": slot_bars,
            "sched": sched, "launch": launch, "smem_end": smem_end, "dynamic": dynamic,
            "turn_bars": [p.barrier(b) for b in order.barriers[0]] if order is not None else [],
        }
    except (KeyError, IndexError, AttributeError, TypeError, StopIteration) as exc:
        raise ConfigError("render.program", f"the attention template cannot print program {p.name!r}: {exc}") from None
    try:
        ctx["enc"] = {
            "desc_q": descriptor_plan(rd_q, mma_qk.atoms_m, 1),
            "desc_k": descriptor_plan(rd_k),
            "desc_v": descriptor_plan(rd_v),
            "tma_swizzle": TMA_SWIZZLE, "oob_fill": OOB_FILL, "l2": L2_PROMOTION,
        }
        for ld in (lq, lk, lv):
            if ld.copy.swizzle_bytes not in TMA_SWIZZLE or ld.copy.l2_promotion not in L2_PROMOTION:
                raise ValueError(f"TMA copy swizzle {ld.copy.swizzle_bytes} / L2 promotion {ld.copy.l2_promotion} has "
                                 "no tensor-map encoding")
            if len(ld.copy.box) != 2:
                raise ValueError(f"load {ld.name!r}: box {ld.copy.box} is not (inner, outer)")
    except (DescriptorError, LayoutError, KeyError, ValueError, AttributeError, TypeError) as exc:
        raise ConfigError("render.program", f"no hardware encoding for a node of {p.name!r}: {exc}") from None
    ctx["relations"] = relation_lines(p)
    return ctx


def render_attention(program: Program, verified: tuple[str, ...] = ()) -> str:
    """The self-contained ``.cu`` source of ``program``; ``verified`` lists the proved invariants
    (written into the file's header).

    Raises:
        ConfigError: ``render.program`` when the template cannot print the program (see
            :func:`attention_context`); never another exception for a program it is given.
    """
    return render_template(ATTENTION_TEMPLATE, attention_context(program, verified), "attention", program.name)
