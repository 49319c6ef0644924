"""The MoE layer as DSL programs: :func:`build_layer` (config, problem) -> :class:`MoELayer`.

The two grouped GEMMs are the GEMM family's programs (:func:`argus_cutlass.kernels.gemm.program.
build_program`: the same TMA load, pipeline, wgmma, k-loop, epilogue staging and TMA-store nodes,
printed by the same ``templates/gemm`` partials), edited into the grouped form:

* the tile scheduler is ``grouped``: unit ``u`` is m-tile ``u % tiles_m`` and n-block ``u // tiles_m``
  (``tiles_m`` and each m-tile's expert read from device memory, written by the routing kernel;
  no host synchronisation), or, with the config's ``gu_band_m`` / ``dn_band_m`` >= 1 (the schedule
  node's ``band_m``), the banded walk: bands of ``band_m`` m-tiles, each walked m-fastest then n
  (:class:`~argus_cutlass.kernels.moe.config.MoEConfig` states the map);
* B's block origin is ``expert * expert_rows + n-block`` (``expert_rows`` = 2I for W13, H for W2);
* gate+up reads W13's gate rows and up rows in paired halves (``pair_offset`` = I): a 256-column
  tile holds 128 gate and the matching 128 up columns, so thread registers ``i`` and ``i +
  tile_n/4`` hold gate and up of the same (row, column) and the epilogue stores ``silu(gate) * up``
  (``act = "swiglu"``) into a 128-column tile of h.

The routing and combine kernels are :class:`~argus_cutlass.dsl.moe_ir.Routing` and
:class:`~argus_cutlass.dsl.moe_ir.Combine` nodes; index products are
:class:`~argus_cutlass.dsl.moe_ir.IndexWidth` nodes; the device workspace is a
:class:`~argus_cutlass.dsl.moe_ir.Workspace` node (:func:`workspace_node`).
"""

from __future__ import annotations

import dataclasses
import re

from argus_cutlass.dsl.ir import Program, SourceLoc, caller_loc
from argus_cutlass.dsl.moe_ir import (GROUPED_EXTENTS, HANDOFF_EDGES, INDEX_SITES, MAX_TOKENS_BITS, Combine,
                                      IndexWidth, MoELayer, Region, Routing, Workspace)
from argus_cutlass.errors import ConfigError
from argus_cutlass.kernels.gemm.config import GemmConfig
from argus_cutlass.kernels.gemm.program import build_program as build_gemm_program
from argus_cutlass.kernels.moe.config import MoEConfig
from argus_cutlass.kernels.moe.problem import MoEProblem

__all__ = ["GATHER_VEC", "TOKENS_BITS", "WORKSPACE_ALIGN", "build_layer", "gather_slicing", "gemm_configs",
           "grouped_program", "layer_label", "workspace_node"]

#: the index proofs hold for T <= 2^TOKENS_BITS (issue 11: T up to 2^20)
TOKENS_BITS = MAX_TOKENS_BITS


def layer_label(cfg: MoEConfig, problem: MoEProblem) -> str:
    """The readable part of the kernel name.

    >>> layer_label(MoEConfig(), MoEProblem(16, 8, 2, 4096, 14336))
    'moe_sm90_bf16_e8k2_h4096_i14336_m128_gu256_dn128_k64_s4x5'
    >>> layer_label(MoEConfig(gu_band_m=16, dn_band_m=8), MoEProblem(16, 8, 2, 4096, 14336))
    'moe_sm90_bf16_e8k2_h4096_i14336_m128_gu256_dn128_k64_s4x5_b16x8'
    >>> layer_label(MoEConfig(gather_slices=16), MoEProblem(16, 8, 2, 4096, 14336))
    'moe_sm90_bf16_e8k2_h4096_i14336_m128_gu256_dn128_k64_s4x5_g16'
    >>> layer_label(MoEConfig(gather_slices=16, gather_unroll=4), MoEProblem(16, 8, 2, 4096, 14336))
    'moe_sm90_bf16_e8k2_h4096_i14336_m128_gu256_dn128_k64_s4x5_g16u4'
    >>> layer_label(MoEConfig(gu_band_m=1, dn_band_m=1, gather_unroll=4), MoEProblem(16, 8, 2, 4096, 14336))
    'moe_sm90_bf16_e8k2_h4096_i14336_m128_gu256_dn128_k64_s4x5_b1x1_u4'
    >>> layer_label(MoEConfig(work_lookahead=1), MoEProblem(16, 8, 2, 4096, 14336))
    'moe_sm90_bf16_e8k2_h4096_i14336_m128_gu256_dn128_k64_s4x5_la'

    The band suffix ``_b<gu>x<dn>`` is left out for the unbanded walk (0, 0), and the gather-slice
    suffix ``_g<slices>`` for 1 slice (``u<unroll>`` after it for a gather unrolled past 1, ``_u<unroll>``
    with one slice; ``_la`` for the grouped GEMMs' work lookahead, ``_pdl`` for programmatic dependent
    launch, ``w<k-tiles>`` after it for the weights prefetched before the wait, ``_ef`` for weights loaded
    evict-first, ``_ho`` for the gate+up -> down handoff, ``_rb`` for row-bounded tiles, ``_ch`` for the down ->
    combine handoff, ``_fr`` for the fused routing of single-chunk calls, ``_dw`` for the dynamic walk), so earlier layers keep their names (the fingerprint in the
    kernel name changes with every field either way).

    >>> layer_label(MoEConfig(pdl=True, handoff=True, combine_handoff=True), MoEProblem(16, 8, 2, 4096, 14336))
    'moe_sm90_bf16_e8k2_h4096_i14336_m128_gu256_dn128_k64_s4x5_pdl_ho_ch'
    >>> layer_label(MoEConfig(pdl=True, dynamic_walk=True), MoEProblem(16, 8, 2, 4096, 14336))
    'moe_sm90_bf16_e8k2_h4096_i14336_m128_gu256_dn128_k64_s4x5_pdl_dw'
    """
    c, p = cfg, problem
    band = f"_b{c.gu_band_m}x{c.dn_band_m}" if (c.gu_band_m or c.dn_band_m) else ""
    gather = f"_g{c.gather_slices}" if c.gather_slices != 1 else ""
    gather += (f"u{c.gather_unroll}" if gather else f"_u{c.gather_unroll}") if c.gather_unroll != 1 else ""
    gather += "_la" if c.work_lookahead else ""
    gather += ("_pdl" + (f"w{c.weight_prefetch}" if c.weight_prefetch else "")) if c.pdl else ""
    gather += "_ef" if c.weights_evict_first else ""
    gather += "_ho" if c.handoff else ""
    gather += "_rb" if c.row_bounded else ""
    gather += "_ch" if c.combine_handoff else ""
    gather += "_fr" if c.fused_routing else ""
    gather += "_dw" if c.dynamic_walk else ""
    return (f"moe_sm90_{c.dtype}_e{p.experts}k{p.topk}_h{p.hidden}_i{p.ffn}_m{c.tile_m}_gu{c.gu_tile_n}_"
            f"dn{c.dn_tile_n}_k{c.tile_k}_s{c.gu_stages}x{c.dn_stages}{band}{gather}")


#: the workspace regions' alignment in bytes: our choice (cudaMalloc's alignment, whole 32-byte L2 sectors); the
#: kernels need 16 (tensor-map global addresses, 16-byte vectors), which rule moe.workspace requires
WORKSPACE_ALIGN = 256


def workspace_node(pad: int, handoff: bool, loc: SourceLoc, tile_rows: bool = False,
                   out_ready: bool = False, tickets: bool = False) -> Workspace:
    """The layer's workspace (:class:`~argus_cutlass.dsl.moe_ir.Workspace`), in order: the per-CTA histograms
    ``block_counts`` (chunks x E int32), ``counts`` (E), ``offsets`` (E + 1 RowIndex), ``tile_expert`` (max_tiles
    + E int32: the kernels use the first tiles_m <= max_tiles, the E more are slack kept from the first layout),
    ``tiles_m`` (1), with ``handoff`` ``tile_ready`` (max_tiles int32 counters), with ``out_ready`` (the down ->
    combine handoff, ``MoELayer.combine_handoff``) ``out_ready`` (max_tiles int32 counters), with ``tickets`` (the
    dynamic walk, :attr:`MoEConfig.dynamic_walk`) ``gu_tickets`` and ``dn_tickets`` (one int32 ticket counter per grouped
    GEMM, two regions so that the kernels touch disjoint buffers, rule moe.pdl), with ``tile_rows`` (the routing
    node's) ``tile_rows`` (max_tiles + E int32, as tile_expert: each m-tile's routed rows), ``permuted_row`` (rows RowIndex),
    ``xs`` (padded_rows x H Element), ``out`` (reusing xs: dead once gate+up has read it) and ``h`` (padded_rows x
    I); ``padded_rows`` rounds each group up to whole ``pad``-row m-tiles; every region starts
    :data:`WORKSPACE_ALIGN`-byte aligned.

    >>> [r.name for r in workspace_node(128, False, SourceLoc("x", 1, 0)).regions]
    ['block_counts', 'counts', 'offsets', 'tile_expert', 'tiles_m', 'permuted_row', 'xs', 'out', 'h']
    >>> w = build_layer(MoEConfig(), MoEProblem(16, 8, 2, 256, 512)).workspace_layout(300)   # MoELayer's printed layout
    >>> w["padded_rows"], w["max_tiles"], w["xs"], w["out"], w["h"], w["bytes"]
    (1664, 13, 3840, 3840, 855808, 2559744)
    """
    regions = [Region("block_counts", "int32_t", (("chunks", "E"),)), Region("counts", "int32_t", (("E",),)),
               Region("offsets", "RowIndex", (("E",), (1,))),
               Region("tile_expert", "int32_t", (("max_tiles",), ("E",))), Region("tiles_m", "int32_t", ((1,),))]
    if handoff:
        regions.append(Region("tile_ready", "int32_t", (("max_tiles",),)))
    if out_ready:
        regions.append(Region("out_ready", "int32_t", (("max_tiles",),)))
    if tickets:
        regions += [Region("gu_tickets", "int32_t", ((1,),)), Region("dn_tickets", "int32_t", ((1,),))]
    if tile_rows:
        regions.append(Region("tile_rows", "int32_t", (("max_tiles",), ("E",))))
    regions += [Region("permuted_row", "RowIndex", (("rows",),)), Region("xs", "Element", (("padded_rows", "H"),)),
                Region("out", "Element", (("padded_rows", "H"),), alias="xs"),
                Region("h", "Element", (("padded_rows", "I"),))]
    return Workspace(tuple(regions), align=WORKSPACE_ALIGN, group_rows=pad - 1, round_rows=pad, tile_rows=pad, loc=loc)


#: elements of one 16-byte vector of the gather (bf16 / fp16)
GATHER_VEC = 8


def gather_slicing(slices: int, hidden: int) -> dict[str, int]:
    """The routing node's slicing fields for ``slices`` CTAs per chunk: none for 1 (today's
    whole-row gather), else ``slice_cols = slice_stride = S``, ``S = ceil(ceil(H / vec) / slices) *
    vec`` (whole 16-byte vectors; the last slice ends at H).

    >>> gather_slicing(1, 2048), gather_slicing(8, 2048), gather_slicing(3, 520)
    ({}, {'slices': 8, 'slice_cols': 256, 'slice_stride': 256}, {'slices': 3, 'slice_cols': 176, 'slice_stride': 176})
    """
    if slices == 1:
        return {}
    vecs = -(-hidden // GATHER_VEC)
    s = -(-vecs // slices) * GATHER_VEC
    return {"slices": slices, "slice_cols": s, "slice_stride": s}


def gemm_configs(cfg: MoEConfig) -> tuple[GemmConfig, GemmConfig]:
    """The GEMM configurations the two grouped GEMMs start from (``tn``, no cluster, M-raster)."""
    common = dict(dtype=cfg.dtype, out_dtype=cfg.dtype, layout="tn", tile_m=cfg.tile_m, tile_k=cfg.tile_k,
                  cluster_m=1, cluster_n=1, schedule=cfg.schedule, epi_m=cfg.tile_m if cfg.tile_m == 128 else 64,
                  epi_n=cfg.epi_n, raster="along_m", swizzle=1, scheduler="persistent")
    return (GemmConfig(tile_n=cfg.gu_tile_n, stages=cfg.gu_stages, **common),
            GemmConfig(tile_n=cfg.dn_tile_n, stages=cfg.dn_stages, **common))


#: stages of the dynamic walk's unit ring (schedule node slot_stages): the producer publishes a unit at most this many
#: units ahead of the slowest consumer warpgroup's read (its k-tiles are bounded by the data pipeline anyway)
SLOT_STAGES = 4


def _grouped(program: Program, label: str, expert_rows: int, pair_offset: int, band_m: int,
             loc: SourceLoc, lookahead: int = 0, weight_hint: str = "evict_normal",
             extents: tuple[str, str] = ("I", "H"), row_bound: str = "", experts: int = 1,
             dynamic: bool = False) -> Program:
    """``program`` (a GEMM) edited into a grouped GEMM of family ``moe`` (walk: bands of ``band_m``
    m-tiles, 0 for none; ``lookahead`` the schedule node's: the roles read their next unit's work
    ahead; ``weight_hint`` the weights' (B) load node ``cache_hint``; ``extents`` the layer sizes, keys of
    :data:`~argus_cutlass.dsl.moe_ir.FACTOR_CPP`, the host passes as the GEMM's N and K: params ``n_size`` /
    ``k_size``, printed in ``run_grouped``'s call and checked by rule ``moe.launch``; ``row_bound`` the A load's
    and the D store's: ``"tile_rows"`` for row-bounded tiles, :attr:`MoEConfig.row_bounded`; ``experts`` the
    weights' (B) expert count E, its tensor map's rows ``experts * expert_rows``: rule ``moe.launch``; ``dynamic``
    the dynamic (atomic-ticket) walk: the unit ring of :data:`SLOT_STAGES` stages placed right after the pipeline's
    mbarriers, schedule node ``slot_bytes`` / ``slot_stages``)."""
    p = dataclasses.replace(program, family="moe", name=label)
    # the grouped epilogue writes out = acc: alpha 1, beta 0 (printed from these params), C never read
    p = p.replace_node("source", path="none").replace_node("params", alpha=1.0, beta=0.0, n_size=extents[0],
                                                           k_size=extents[1])
    lb = p.load_into("sB")
    changes: dict = {"expert_rows": expert_rows, "experts": experts, "cache_hint": weight_hint}
    if pair_offset:
        half = lb.tile_mn // 2
        changes.update(pair_offset=pair_offset, copy=dataclasses.replace(lb.copy, box=(lb.copy.box[0], half)))
    p = p.replace_node("load", lb.name, **changes)
    p = p.replace_node("schedule", decomposition="grouped", band_m=band_m, lookahead=lookahead)
    if dynamic:
        pipe = p.pipeline
        p = p.replace_node("schedule", slot_bytes=pipe.barrier_bytes + 16 * pipe.stages, slot_stages=SLOT_STAGES)
    if row_bound:
        p = p.replace_node("load", p.load_into("sA").name, row_bound=row_bound)
        for st in p.stores:
            p = p.replace_node("store", st.name, row_bound=row_bound)
    if pair_offset:
        e = p.epilogue
        p = p.replace_node("epilogue", tile_n=e.tile_n // 2, act="swiglu", act_pair=e.op_n // 4)
    return p


def grouped_program(cfg: MoEConfig, problem: MoEProblem, part: str, gemm_cfg: GemmConfig | None = None,
                    loc: SourceLoc | None = None) -> Program:
    """The grouped GEMM ``part`` (``gate_up`` / ``down``) of :func:`build_layer`, built from
    ``gemm_cfg`` (default: :func:`gemm_configs`'s; the mutant suite passes another, e.g. a layout
    other than ``tn``, which the verifier must refuse: ``run_grouped`` prints K-major maps).

    >>> c, p = MoEConfig(), MoEProblem(16, 8, 2, 256, 512)
    >>> grouped_program(c, p, "down").load_into("sB").expert_rows
    256
    """
    c, p = cfg, problem
    i = ("gate_up", "down").index(part)
    gcfg = gemm_cfg if gemm_cfg is not None else gemm_configs(c)[i]
    label = layer_label(c, p) + ("_gu", "_dn")[i]
    hint = "evict_first" if c.weights_evict_first else "evict_normal"
    try:
        program = build_gemm_program(gcfg, None)
    except ConfigError as exc:
        raise (exc if gemm_cfg is not None else _moe_field_error(exc, part)) from None
    rb = "tile_rows" if c.row_bounded else ""
    if part == "gate_up":
        return _grouped(program, label, 2 * p.ffn, p.ffn, c.gu_band_m, loc or caller_loc(), c.work_lookahead, hint,
                        GROUPED_EXTENTS["gate_up"], rb, p.experts, c.dynamic_walk)
    return _grouped(program, label, p.hidden, 0, c.dn_band_m, loc or caller_loc(), c.work_lookahead, hint,
                    GROUPED_EXTENTS["down"], rb, p.experts, c.dynamic_walk)


def _moe_field_error(exc: ConfigError, part: str) -> ConfigError:
    """``exc``, a GEMM configuration error of the ``part`` grouped GEMM that :func:`gemm_configs` derives, told
    in :class:`MoEConfig`'s fields (``tile_n`` -> ``gu_tile_n`` / ``dn_tile_n``, ``stages`` -> ``gu_stages`` /
    ``dn_stages``; ``tile_m``, ``tile_k``, ``epi_n`` and ``dtype`` keep their names); unchanged when it names a
    field the MoE configuration does not have."""
    pre = "gu" if part == "gate_up" else "dn"
    names = {"tile_n": f"{pre}_tile_n", "stages": f"{pre}_stages"}
    fields = {names.get(k, k): v for k, v in exc.fields.items() if k not in ("layout", "out_dtype", "swap_ab")}
    if not fields or not all(k in MoEConfig.model_fields for k in fields):
        return exc
    text = re.sub(r"\b(tile_n|stages)\b", lambda m: names[m.group(1)], exc.text)
    rule = f"config.{next(iter(fields))}" if exc.rule.startswith("config.") else exc.rule
    return ConfigError.of_fields(rule, "MoEConfig", fields, f"{text} (the {part} grouped GEMM)", exc.hint)


def build_layer(cfg: MoEConfig, problem: MoEProblem) -> MoELayer:
    """The programs of one MoE layer (no checking beyond well-formedness: see
    :func:`argus_cutlass.verify.moe.verify_moe`).

    Raises:
        ProblemError: the problem breaks a rule of :meth:`MoEProblem.validate`.
        ConfigError: ``moe.config``: the config does not fit the problem (dtype disagrees,
            ``gu_tile_n`` not a multiple of 32, ``epi_n`` does not divide an output tile); a grouped
            GEMM's refusal (``smem.atom``, ``config.tile_k``, ...:
            :func:`~argus_cutlass.kernels.gemm.program.check_buildable`), each naming the MoEConfig fields
            and their values.
    """
    problem.validate()
    c, p = cfg, problem
    if c.dtype != p.dtype:
        raise ConfigError.of_fields("moe.config", "MoEConfig", {"dtype": c.dtype},
                                    f"the configuration's dtype must be the problem's ({p.dtype})")
    if c.gu_tile_n % 32:
        raise ConfigError.of_fields("moe.config", "MoEConfig", {"gu_tile_n": c.gu_tile_n},
                                    "gate+up's tile pairs gu_tile_n / 2 gate columns with the same up columns of one "
                                    "expert: gu_tile_n must be a multiple of 32")
    for tile, out in (("gu_tile_n", c.gu_tile_n // 2), ("dn_tile_n", c.dn_tile_n)):
        if out % c.epi_n:
            what = f"gate+up's output tile (gu_tile_n / 2 = {out}" if tile == "gu_tile_n" else f"the down tile ({out}"
            raise ConfigError.of_fields("moe.config", "MoEConfig", {"epi_n": c.epi_n, tile: getattr(c, tile)},
                                        f"the epilogue stores {what} columns) in subtiles of epi_n columns: epi_n "
                                        "must divide it")
    loc = caller_loc()
    label = layer_label(c, p)
    gate_up = grouped_program(c, p, "gate_up", loc=loc)
    down = grouped_program(c, p, "down", loc=loc)
    routing = Routing(chunk=c.route_chunk, pad=c.tile_m, scan="exclusive", rank="stable", rank_base=0,
                      invalid="skip", loc=loc, tile_rows=c.row_bounded, fused=c.fused_routing,
                      group_padding="before" if c.row_bounded else "after", **gather_slicing(c.gather_slices, p.hidden),
                      **({"unroll": c.gather_unroll} if c.gather_unroll != 1 else {}))
    combine = Combine(terms=p.topk, row_map="permuted_row", weighted=True, weight_slot_shift=0, acc_dtype="fp32",
                      threads=c.combine_threads, loc=loc)
    ctypes = {"routed_row": "int32_t", "permuted_row": "int32_t", "x_offset": "int64_t", "xs_offset": "int64_t",
              "block_count": "int32_t", "w13_row": "int32_t", "w2_row": "int32_t", "tile_unit": "int32_t"}
    ix = [(name, site.factors, ctypes[name]) for name, site in INDEX_SITES.items()]
    indices = tuple(IndexWidth(n, f, t, loc) for n, f, t in ix)
    layer = MoELayer(label, p.experts, p.topk, p.hidden, p.ffn, p.dtype, TOKENS_BITS, routing, gate_up, down,
                     combine, indices, workspace_node(c.tile_m, c.handoff, loc, c.row_bounded, c.combine_handoff,
                                                    c.dynamic_walk),
                     pdl=c.pdl, weight_prefetch=c.weight_prefetch, handoff=c.handoff, combine_handoff=c.combine_handoff)
    # each handoff's spin traps instead of hanging after the shortest time-out its rule accepts
    return dataclasses.replace(layer, **{f"{e.name}_timeout_ms": layer.handoff_min_timeout_ms(e.name)
                                         for e in HANDOFF_EDGES if getattr(layer, e.name)})
