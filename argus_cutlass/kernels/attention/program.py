"""The SM90 FlashAttention forward as one DSL program: :func:`build_program` (config, problem) -> Program.

Every quantity of the kernel is a node field here: the verifier proves the program
(:func:`argus_cutlass.verify.attention.verify_attention`) and ``templates/attention/`` prints it
(:func:`argus_cutlass.render.attention.render_attention`). The kernel, as FlashAttention-3 builds
it (``hopper/flash_fwd_kernel_sm90.h``, ``mainloop_fwd_sm90_tma_gmma_ws.hpp``):

* warpgroup 0 is the producer (``setmaxnreg.dec``): one thread issues the TMA loads of Q (once per
  tile, pipeline ``q``), then K and V of every kv block, the last block first (pipelines ``k`` and
  ``v``, ``stages`` deep);
* ``tile_m / 64`` consumer warpgroups (``setmaxnreg.inc``), 64 query rows each: ``S = Q K^T``
  (SS-mode wgmma, K-major Q and K), the score mask, the online softmax with exp2 and the scale
  folded in (row max / sum across each quad), ``P = convert(S)`` in registers, ``O += P V``
  (RS-mode wgmma, V read MN-major); the softmax of block j overlaps the QK^T of block j - 1 (in
  walk order) and, with ``pingpong``, the warpgroups take turns issuing their GEMMs through named
  barriers;
* the epilogue divides O by the row sum and writes O (input dtype) and the LSE (fp32) by row, O either
  straight from the accumulator layout (``epilogue="direct"``: 4-byte stores) or after a 4x4 transpose
  of packed pairs inside each quad (``"quad16"``: ``__shfl_xor_sync``, 16-byte stores), the store map
  being fields of the row output node that rule ``output.row`` enumerates;
* a persistent scheduler walks the tiles ``(m_block, head, batch)`` (m_block fastest), longest
  first for causal kernels.

Shapes by mode: gQ ``(Lq, D)``, gK ``(Lk, D)``, gV ``(D, Lk)`` (V as the B operand of ``O += P V``:
N = d, K = key; d is contiguous, so it is MN-major), gO ``(Lq, D)``, gLSE ``(H, Lq)``; sQ
``(tile_m, D, q_stages)``, sK ``(tile_n, D, stages)``, sV ``(D, tile_n, stages)``; per consumer warpgroup
s_acc / p_frag ``(64, tile_n)`` and o_acc ``(64, D)``.
"""

from __future__ import annotations

from typing import Any

from argus_cutlass.dsl.atoms import GmmaOp, TmaCopy, select_smem_atom
from argus_cutlass.dsl.builder import ProgramBuilder
from argus_cutlass.dsl.ir import DTYPE_BYTES, PipelineSide, Program, Tag
from argus_cutlass.errors import ConfigError
from argus_cutlass.kernels.attention.config import HEAD_DIMS, AttentionConfig
# the proofs over the symbolic lengths hold for lengths < 2**LENGTH_BOUND_BITS (the problem's rule
# problem.length_range and the entry's code 7 use the same bound)
from argus_cutlass.kernels.attention.problem import LENGTH_BOUND_BITS

__all__ = ["FIRST_BARRIER_ID", "LENGTH_BOUND_BITS", "build_program", "program_label", "role_registers"]

#: first named-barrier id (0 is __syncthreads; CUTLASS reserves 1-7)
FIRST_BARRIER_ID = 8


def role_registers(consumer_warpgroups: int) -> tuple[int, int]:
    """(producer, consumer) registers per thread after ``setmaxnreg``, within the CTA's allocation at
    launch: ``128 * (producer + warpgroups * consumer) <= threads * cap`` (cap = 65536 / threads in
    units of 8: 168 for 384 threads, 128 for 512); ``setmaxnreg.inc`` only draws on what ``.dec``
    released in the same CTA. FA3 (``flash_fwd_kernel_sm90.h``) gives the consumers 240 (2 MMA
    warpgroups) or 160 (3) and its producer 24 / 32: 128 x (24 + 2 x 240) = 384 x 168 exactly. (32 + 2 x
    240 exceeds it by 1024 and hung on the H200.)"""
    return {1: (24, 240), 2: (24, 240), 3: (32, 160)}.get(consumer_warpgroups, (24, 240))


def program_label(cfg: AttentionConfig) -> str:
    """The readable part of the kernel name.

    >>> program_label(AttentionConfig(head_dim=128, causal=True))
    'attn_fwd_sm90_bf16_d128_causal_128x128_s2_pp_lf_dyn'
    """
    c = cfg
    mask = "causal" if c.causal else "full"
    return (f"attn_fwd_sm90_{c.dtype}_d{c.head_dim}_{mask}{'_varlen' if c.varlen else ''}_{c.tile_m}x{c.tile_n}_"
            f"s{c.stages}{f'_q{c.q_stages}' if c.q_stages != 1 else ''}{'_pf' if c.prefetch_q else ''}{'_pp' if c.pingpong else ''}{'_lf' if c.walk_longest_first else ''}"
            f"{'_dyn' if c.dynamic_scheduler else ''}{'' if c.epilogue == 'direct' else '_' + c.epilogue}")


def _align(x: int, a: int) -> int:
    return (x + a - 1) // a * a


def _period(swizzle_bytes: int) -> int:
    """Bytes of one swizzle period: the base alignment a swizzled buffer needs (PTX ISA 9.7.15.5.1)."""
    return max(128, 8 * swizzle_bytes)


def build_program(cfg: AttentionConfig, problem: Any = None) -> Program:
    """The attention forward of ``cfg`` as a DSL program.

    Args:
        cfg: the kernel configuration.
        problem: an :class:`~argus_cutlass.kernels.attention.problem.AttentionProblem` or None; the
            program's proofs over the lengths are stated for lengths < 2**``LENGTH_BOUND_BITS``,
            and the problem must agree with the configuration's head dim, dtype, mask and length mode.

    Raises:
        argus_cutlass.errors.ConfigError: ``attention.head_dim`` (not one of 64, 96, 128, 192, 256),
            ``attention.tile`` (``tile_m`` not a multiple of 64, or more consumer warpgroups than the named
            barriers 8..15 hold: at most 4 with ``pingpong``, 8 without, PTX ISA 9.7.13.1; ``tile_n`` not a
            multiple of 16 up to 256), each naming the field and its value; ``attention.problem`` (the
            problem disagrees with the configuration).
        argus_cutlass.errors.DslError: a node is malformed.
    """
    c = cfg
    D = c.head_dim
    if D not in HEAD_DIMS:
        raise ConfigError.of_fields("attention.head_dim", "AttentionConfig", {"head_dim": D},
                                    f"the attention kernels are built for head dims {list(HEAD_DIMS)}",
                                    "pad the head dim to the next supported one")
    if c.tile_m % 64:
        raise ConfigError.of_fields("attention.tile", "AttentionConfig", {"tile_m": c.tile_m},
                                    "tile_m is 64 query rows per consumer warpgroup (the wgmma M, PTX ISA 9.7.15.5): "
                                    "a multiple of 64")
    if c.tile_n % 16 or c.tile_n > 256:
        raise ConfigError.of_fields("attention.tile", "AttentionConfig", {"tile_n": c.tile_n},
                                    "tile_n is the keys of a kv block: a multiple of 16 (the K of the RS-mode wgmma "
                                    "O += P V) up to 256 (the wgmma N of S = Q K^T; PTX ISA 9.7.15.5)")
    if problem is not None:
        want = (problem.head_dim, problem.dtype, problem.causal, problem.varlen)
        have = (D, c.dtype, c.causal, c.varlen)
        if want != have:
            raise ConfigError("attention.problem", f"the problem (head_dim, dtype, causal, varlen) = {want} but the "
                              f"configuration builds {have}")
    wgs = c.consumer_warpgroups
    bits = DTYPE_BYTES[c.dtype] * 8
    nbytes = bits // 8
    b = ProgramBuilder(program_label(c), family="attention")
    stage_tag = Tag("stage", ("iter",))

    # ---- gmem: the caller's tensors and the values they carry
    g_q = b.tensor("gQ", "gmem", ("Lq", "D"), c.dtype, tag=Tag("Q", ("q", "d")), major="D", binding="q")
    g_k = b.tensor("gK", "gmem", ("Lk", "D"), c.dtype, tag=Tag("K", ("key", "d")), major="D", binding="k")
    g_v = b.tensor("gV", "gmem", ("D", "Lk"), c.dtype, tag=Tag("V", ("d", "key")), major="D", binding="v")
    g_o = b.tensor("gO", "gmem", ("Lq", "D"), c.dtype, tag=Tag("O", ("q", "d")), major="D", binding="o")
    g_lse = b.tensor("gLSE", "gmem", ("H", "Lq"), "fp32", tag=Tag("LSE", ("h", "q")), major="Lq", binding="lse")

    # ---- smem: Q once, K and V in `stages` stages, each buffer at its swizzle period; barriers after
    atom_q = select_smem_atom("K", bits, c.tile_m, D)
    atom_k = select_smem_atom("K", bits, c.tile_n, D)
    atom_v = select_smem_atom("MN", bits, D, c.tile_n)
    offset, bases = 0, {}
    for name, atom, size in (("sQ", atom_q, c.tile_m * D * c.q_stages), ("sK", atom_k, c.tile_n * D * c.stages),
                             ("sV", atom_v, D * c.tile_n * c.stages)):
        offset = _align(offset, _period(atom.swizzle_bytes))
        bases[name] = offset
        offset += size * nbytes
    s_q = b.tensor("sQ", "smem", (c.tile_m, D, c.q_stages), c.dtype, base_bytes=bases["sQ"],
                   align_bytes=_period(atom_q.swizzle_bytes))
    s_k = b.tensor("sK", "smem", (c.tile_n, D, c.stages), c.dtype, base_bytes=bases["sK"],
                   align_bytes=_period(atom_k.swizzle_bytes))
    s_v = b.tensor("sV", "smem", (D, c.tile_n, c.stages), c.dtype, base_bytes=bases["sV"],
                   align_bytes=_period(atom_v.swizzle_bytes))

    # ---- TMA loads (boxes: one swizzle row of d by the tile's rows); Q follows the tile's query
    # block, K the kv loop along its rows (mn), V the kv loop along its k mode (keys)
    def box(atom: Any, tile_mn: int, tile_k: int) -> tuple[int, int]:
        if atom.major == "K":
            return (min(atom.contiguous_elems, tile_k), tile_mn)
        return (min(atom.contiguous_elems, tile_mn), tile_k)

    loads = {}
    for g, s, atom, mn, k, pipe, block, advance, head in (
            (g_q, s_q, atom_q, c.tile_m, D, "q", "m", "none", "q"),
            (g_k, s_k, atom_k, c.tile_n, D, "k", "none", "mn", "kv"),
            (g_v, s_v, atom_v, D, c.tile_n, "v", "none", "k", "kv")):
        copy = TmaCopy("load", box(atom, mn, k), bits, atom.swizzle_bytes)
        loads[pipe] = b.tma_load(g, s, copy, major=atom.major, tile_mn=mn, tile_k=k, stage_tag=stage_tag,
                                 pipeline=pipe, block_mode=block, advance=advance, head=head)
    barrier_base = _align(offset, 8)
    bar_offset = barrier_base
    for pipe, n_stages, size in (("q", c.q_stages, c.tile_m * D), ("k", c.stages, c.tile_n * D),
                                 ("v", c.stages, D * c.tile_n)):
        # the stage is released after the wgmma that read it retired (release_lag 0, none in flight)
        b.pipeline(pipe, (loads[pipe],), stages=n_stages, tx_bytes=size * nbytes, producer_arrivals=1,
                   consumer_arrivals=wgs, consumer_arrivers=wgs, producer=PipelineSide(1, n_stages),
                   consumer=PipelineSide(0, n_stages), mma_in_flight=0, release_lag=0,
                   barrier_bytes=bar_offset)
        bar_offset += 16 * n_stages  # a full and an empty mbarrier per stage

    # ---- roles and launch: producer warpgroup 0, consumer warpgroups 1..wgs
    producer_regs, consumer_regs = role_registers(wgs)
    b.role("producer", "producer", warpgroups=(0,), issue_warps=(0,), regs=producer_regs)
    b.role("consumer", "consumer", warpgroups=tuple(range(1, 1 + wgs)), issue_warps=(0, 1, 2, 3),
           regs=consumer_regs)
    b.launch(threads=128 * (1 + wgs))

    # ---- S = Q K^T (SS, K-major both); mask; row max / sum across each quad
    op_qk = GmmaOp(64, c.tile_n, 16, c.dtype, "K", "K")
    read_q = b.mma_read("A", s_q, b.smem_view(atom_q, s_q.shape), op_qk, tile_mn=c.tile_m, tile_k=D,
                        warpgroups=wgs, mma="qk")
    read_k = b.mma_read("B", s_k, b.smem_view(atom_k, s_k.shape), op_qk, tile_mn=c.tile_n, tile_k=D,
                        warpgroups=1, mma="qk")
    s_acc = b.tensor("s_acc", "rmem", (64, c.tile_n), "fp32", tag=Tag("S", ("q", "key")))
    b.mma("qk", op_qk, read_q, read_k, s_acc, atoms_m=wgs, reps_m=1)
    b.mask(s_acc, causal=c.causal, bottom_right=True, key_bound=True)
    red_max = b.reduction(s_acc, "max", xor_lanes=(1, 2))
    red_sum = b.reduction(s_acc, "sum", xor_lanes=(1, 2))

    # ---- P = convert(S) into A registers; O += P V (RS: A from registers, V MN-major)
    p_frag = b.tensor("p_frag", "rmem", (64, c.tile_n), c.dtype)
    b.fragment_convert(s_acc, p_frag, c.dtype, pairing=tuple(range(c.tile_n // 4)))  # identity repack
    op_pv = GmmaOp(64, D, 16, c.dtype, "K", atom_v.major, mode="RS")
    read_p = b.mma_read("A", p_frag, None, op_pv, tile_mn=c.tile_m, tile_k=c.tile_n, warpgroups=wgs, mma="pv")
    read_v = b.mma_read("B", s_v, b.smem_view(atom_v, s_v.shape), op_pv, tile_mn=D, tile_k=c.tile_n,
                        warpgroups=1, mma="pv")
    o_acc = b.tensor("o_acc", "rmem", (64, D), "fp32", tag=Tag("O", ("q", "d")))
    b.mma("pv", op_pv, read_p, read_v, o_acc, atoms_m=wgs, reps_m=1)
    b.online_softmax(s_acc, o_acc, max=red_max, sum=red_sum, rescale=True, fold_log2e=True)
    b.k_loop(tile_k=c.tile_n, block_k=op_pv.k, k_blocks=c.tile_n // op_pv.k, name="kv",
             bound_bits=LENGTH_BOUND_BITS)
    if c.epilogue == "quad16":
        # the quad's 4x4 transpose of packed pairs (butterfly on lane bits 1 then 0); lane c of a quad
        # stores column block 4 g + c: columns [32 g + 8 c, 32 g + 8 c + 8) of its row, 16 bytes
        b.row_output(o_acc, g_o, g_lse, normalize=True, row_mask=True, store_mode="quad16", shuffle=(2, 1),
                     group_cols=32, lane_cols=8)
    else:
        # each thread stores its pair (2 j, 2 j + 1) of column block j at 8 j + 2 (lane % 4)
        b.row_output(o_acc, g_o, g_lse, normalize=True, row_mask=True)

    # ---- the consumer warpgroups take turns issuing their GEMMs (FA3's warp-scheduler barriers);
    # one more barrier per warpgroup for its own syncs (zeroing V rows past seqused_k)
    next_id = FIRST_BARRIER_ID
    turns = c.pingpong and wgs > 1
    need = wgs * (2 if turns else 1)
    if FIRST_BARRIER_ID + need > 16:
        raise ConfigError.of_fields(
            "attention.tile", "AttentionConfig", {"tile_m": c.tile_m, "pingpong": c.pingpong},
            f"tile_m / 64 = {wgs} consumer warpgroups need {need} named barriers "
            f"({'a turn barrier and ' if turns else ''}a barrier of their own each), but ids {FIRST_BARRIER_ID}..15 "
            f"leave {16 - FIRST_BARRIER_ID} (a CTA has 16 named barriers, PTX ISA 9.7.13.1; 0 is __syncthreads, "
            "CUTLASS reserves 1-7)")
    if turns:
        names = tuple(f"turn.{g}" for g in range(wgs))
        for name in names:
            b.named_barrier(name, id=next_id, threads=2 * 128)
            next_id += 1
        b.turn_order("mma_turns", groups=wgs, points=("gemm",), barriers=(names,))
    for g in range(wgs):
        b.named_barrier(f"wg.{g}", id=next_id, threads=128)
        next_id += 1
    # the dynamic scheduler's unit slots (one int32 per Q stage) follow the mbarriers
    slot_bytes = _align(bar_offset, 16) if c.dynamic_scheduler else -1
    # each consumer warpgroup syncs on its own barrier ("wg.<g>") after reading a unit slot, before the stage's
    # one-thread release lets the producer write the next unit there (rule scheduler.slot_release)
    b.tile_schedule(raster="along_m", swizzle=1, decomposition="dynamic" if c.dynamic_scheduler else "persistent",
                    longest_first=c.walk_longest_first, slot_bytes=slot_bytes,
                    slot_sync="wg" if c.dynamic_scheduler else "")

    # ---- tag assertions at the MMA slots
    b.assert_tags_of("attention")   # QK: d agrees, rows q, columns key; PV: key agrees, rows q, columns d

    # ---- consistency between nodes (the family's catalogue, dsl.ir.FAMILY_RELATIONS, which the verifier
    # requires): pipelines vs buffers (G6), the kv loop vs the PV MMA and the K / V tiles (G3), the P fragment
    # conversion (FA3), MMA tiles vs buffers (G1), mask -> softmax -> output accumulators (FA4, FA5), disjoint smem
    b.relate_family("attention")
    b.param("varlen", c.varlen)
    b.param("causal", c.causal)  # the specification the mask node is proved against (FA5)
    if c.prefetch_q:  # an L2 prefetch of the next tile's Q through the Q load's tensor map (rule tma.prefetch)
        b.param("prefetch_next_q", True)
    return b.build()
