"""A worked DSL example: the first half of a FlashAttention-3 forward tile, as a verified program.

:func:`attention_tile_program` states one CTA's work on a ``tile_q``-row block of queries the way
a kernel author writes it in the DSL: Q, K and V tiles TMA-loaded on three named pipelines, the
SS-mode MMA ``S = Q K^T``, the row max and row sum of S across each quad, the conversion
``P = convert(S)`` into the A-operand registers of the RS-mode MMA ``O += P V``, two consumer
warpgroups taking turns at their MMAs (FA3's warp-scheduler barriers), warp-specialized roles with
``setmaxnreg``, tag assertions (``==``, ``<``, ``in_range``) and consistency relations between
nodes.

**What this is, and is not.** It is a *program model*: the three attention-class checks prove
its named barriers, its turn order, its RS operand, its fragment conversion and its row
reductions, and every relation between its nodes holds. It is **not a rendered kernel**: there
is no attention template yet (issue 10), the softmax rescale, the causal mask and the output
epilogue are not nodes yet, and the GEMM tag engine's TMA model (the loop advances k) does not
express a kv loop that advances the key mode, so the pipelines' tag flow is not proved here.

Build it and run the checks (shapes: head_dim D = 128, 128 query rows, 128 keys per kv block):

>>> from argus_cutlass.dsl.examples import attention_tile_program
>>> from argus_cutlass.verify.barriers import check_named_barriers, check_turn_orders
>>> from argus_cutlass.verify.fragments import check_fragments
>>> p = attention_tile_program()
>>> p.family, [x.name for x in p.pipelines], [f"{m.name}:{m.op.mode}" for m in p.mmas]
('attention', ['q', 'k', 'v'], ['qk:SS', 'pv:RS'])
>>> for check in (check_named_barriers, check_turn_orders, check_fragments):
...     proofs, violations = check(p)
...     print(check.__name__, [x.rule for x in proofs], len(violations))
check_named_barriers ['barrier.named'] 0
check_turn_orders ['turn.order'] 0
check_fragments ['mma.rs_operand', 'fragment.convert', 'reduction.rows', 'reduction.rows'] 0
>>> [str(r) for r in p.relations if r.relation == "==" and p.resolve(r.lhs) != p.resolve(r.rhs)]
[]

A planted mistake: the row max shuffles with lane masks (1, 4) instead of (1, 2). Lane 4 holds
the next row, so the "max of row 0" mixes rows 0 and 1; ``reduction.rows`` catches it with the
lanes and rows:

>>> bad = p.replace_node("reduction", "max_s_acc", xor_lanes=(1, 4))
>>> _, violations = check_fragments(bad)
>>> print(violations[0].message)
reduction 'max_s_acc' (max over s_acc): lane 0 of warp 0 mixes rows [0, 1]
>>> print(violations[0].counterexample.actual)
mixes rows [0, 1]: lanes [0, 1, 4, 5] combined (shfl.xor [1, 4]); lanes 4q..4q+3 hold row q

Another: the conversion takes the accumulator pairs of P's first two A registers swapped; the
A slot (row 0, key 0) would be fed S(row 8, key 0):

>>> bad = p.replace_node("convert", "convert_p_frag", pairing=(1, 0) + tuple(range(2, 32)))
>>> _, violations = check_fragments(bad)
>>> print(violations[0].counterexample.expected, "|", violations[0].counterexample.actual)
P(row=0, key=0) (= s_acc[0]) | s_acc[2] = S(row=8, key=0)
"""

from __future__ import annotations

from argus_cutlass.dsl.atoms import GmmaOp, TmaCopy, select_smem_atom
from argus_cutlass.dsl.builder import ProgramBuilder
from argus_cutlass.dsl.ir import DTYPE_BYTES, PipelineSide, Program, Tag
from argus_cutlass.errors import ConfigError

__all__ = ["attention_tile_program"]

#: registers per thread after setmaxnreg (FA3 hopper/ with two MMA warpgroups: 24 for the
#: producer, 240 for the consumers; 128 x 24 + 256 x 240 <= 65536)
PRODUCER_REGS = 24
CONSUMER_REGS = 240
#: first named-barrier id (CUTLASS reserves 1..7)
FIRST_BARRIER_ID = 8


def _align(x: int, a: int) -> int:
    return (x + a - 1) // a * a


def attention_tile_program(*, head_dim: int = 128, tile_q: int = 128, tile_kv: int = 128, stages: int = 2,
                           dtype: str = "bf16") -> Program:
    """One CTA's FlashAttention forward tile up to ``O += P V``, as a DSL program.

    Args:
        head_dim: D, the head dimension (the K of ``S = Q K^T`` and the N of ``O += P V``; a
            multiple of 16 in [16, 256]).
        tile_q: query rows per CTA (two consumer warpgroups of 64 rows each: 128).
        tile_kv: keys per kv block (the N of ``S = Q K^T`` and the K of ``O += P V``; a
            multiple of 16 in [16, 256]).
        stages: smem stages of the K and V pipelines.
        dtype: ``bf16`` or ``fp16`` (Q, K, V and P); S and O accumulate in fp32.

    Shapes by mode: gQ (Lq, D), gK (Lk, D), gV (D, Lk) (V as the B operand (N = d, K = key),
    row-major V so d is contiguous: MN-major); sQ (tile_q, D, 1), sK (tile_kv, D, stages), sV
    (D, tile_kv, stages); s_acc / p_frag (64, tile_kv) and o_acc (64, D) per consumer warpgroup.

    Raises:
        argus_cutlass.errors.ConfigError: ``attention.tile`` (``tile_q`` is not 128, a dtype that
            is not 16-bit).
        argus_cutlass.errors.DslError: a node is malformed.
        ValueError: no GMMA smem atom tiles a dimension (not a multiple of 16 bytes).
    """
    atoms_m = 2  # two consumer warpgroups, 64 query rows each
    if tile_q != 64 * atoms_m or dtype not in ("bf16", "fp16"):
        raise ConfigError("attention.tile", f"tile_q={tile_q}, dtype={dtype!r}: the example splits 128 query rows "
                          "between two 64-row consumer warpgroups and multiplies 16-bit values")
    bits = DTYPE_BYTES[dtype] * 8
    nbytes = bits // 8
    b = ProgramBuilder(f"attn_fwd_sm90_{dtype}_d{head_dim}_q{tile_q}_kv{tile_kv}_s{stages}", family="attention")
    stage_tag = Tag("stage", ("iter",))

    # ---- gmem: Q, K, V with their tags (the values each element carries)
    g_q = b.tensor("gQ", "gmem", ("Lq", "D"), dtype, tag=Tag("Q", ("q", "d")), major="D", binding="Q")
    g_k = b.tensor("gK", "gmem", ("Lk", "D"), dtype, tag=Tag("K", ("key", "d")), major="D", binding="K")
    g_v = b.tensor("gV", "gmem", ("D", "Lk"), dtype, tag=Tag("V", ("d", "key")), major="D", binding="V")

    # ---- smem: Q once, K and V in `stages` stages, each buffer 1024-byte aligned (SW128 period)
    atom_q = select_smem_atom("K", bits, tile_q, head_dim)
    atom_k = select_smem_atom("K", bits, tile_kv, head_dim)
    atom_v = select_smem_atom("MN", bits, head_dim, tile_kv)
    offset, bases = 0, {}
    for name, size in (("sQ", tile_q * head_dim), ("sK", tile_kv * head_dim * stages),
                       ("sV", head_dim * tile_kv * stages)):
        offset = _align(offset, 1024)
        bases[name] = offset
        offset += size * nbytes
    s_q = b.tensor("sQ", "smem", (tile_q, head_dim, 1), dtype, base_bytes=bases["sQ"], align_bytes=1024)
    s_k = b.tensor("sK", "smem", (tile_kv, head_dim, stages), dtype, base_bytes=bases["sK"], align_bytes=1024)
    s_v = b.tensor("sV", "smem", (head_dim, tile_kv, stages), dtype, base_bytes=bases["sV"], align_bytes=1024)

    # ---- TMA loads, one named pipeline each (the producer warp issues them)
    def box(atom, tile_mn: int, tile_k: int) -> tuple[int, int]:
        inner = min(atom.contiguous_elems, tile_k if atom.major == "K" else tile_mn)
        return (inner, tile_mn if atom.major == "K" else tile_k)

    loads = {}
    for g, s, atom, mn, k, pipe, mode in ((g_q, s_q, atom_q, tile_q, head_dim, "q", "m"),
                                          (g_k, s_k, atom_k, tile_kv, head_dim, "k", "n"),
                                          (g_v, s_v, atom_v, head_dim, tile_kv, "v", "n")):
        copy = TmaCopy("load", box(atom, mn, k), bits, atom.swizzle_bytes)
        loads[pipe] = b.tma_load(g, s, copy, major=atom.major, tile_mn=mn, tile_k=k, stage_tag=stage_tag,
                                 pipeline=pipe, block_mode=mode)
    barrier_bytes = _align(offset, 8)
    for i, (pipe, n_stages, size) in enumerate((("q", 1, tile_q * head_dim), ("k", stages, tile_kv * head_dim),
                                                ("v", stages, head_dim * tile_kv))):
        b.pipeline(pipe, (loads[pipe],), stages=n_stages, tx_bytes=size * nbytes, producer_arrivals=1,
                   consumer_arrivals=atoms_m, consumer_arrivers=atoms_m, producer=PipelineSide(1, n_stages),
                   consumer=PipelineSide(0, n_stages), barrier_bytes=barrier_bytes + 16 * i * max(stages, 1))

    # ---- roles and launch: producer warpgroup 0, consumer warpgroups 1 and 2
    b.role("producer", "producer", warpgroups=(0,), issue_warps=(0,), regs=PRODUCER_REGS)
    b.role("consumer", "consumer", warpgroups=(1, 2), issue_warps=(0, 1, 2, 3), regs=CONSUMER_REGS)
    b.launch(threads=128 * (1 + atoms_m))

    # ---- S = Q K^T (SS), row max and row sum of S across each quad
    op_qk = GmmaOp(64, tile_kv, 16, dtype, "K", "K")
    read_q = b.mma_read("A", s_q, b.smem_view(atom_q, s_q.shape), op_qk, tile_mn=tile_q, tile_k=head_dim,
                        warpgroups=atoms_m, mma="qk")
    read_k = b.mma_read("B", s_k, b.smem_view(atom_k, s_k.shape), op_qk, tile_mn=tile_kv, tile_k=head_dim,
                        warpgroups=1, mma="qk")
    s_acc = b.tensor("s_acc", "rmem", (64, tile_kv), "fp32", tag=Tag("S", ("q", "key")))
    b.mma("qk", op_qk, read_q, read_k, s_acc, atoms_m=atoms_m, reps_m=1)
    b.reduction(s_acc, "max", xor_lanes=(1, 2))
    b.reduction(s_acc, "sum", xor_lanes=(1, 2))

    # ---- P = convert(S) into A registers; O += P V (RS: A from registers, K-major)
    p_frag = b.tensor("p_frag", "rmem", (64, tile_kv), dtype)
    b.fragment_convert(s_acc, p_frag, dtype)
    op_pv = GmmaOp(64, head_dim, 16, dtype, "K", atom_v.major, mode="RS")
    read_p = b.mma_read("A", p_frag, None, op_pv, tile_mn=tile_q, tile_k=tile_kv, warpgroups=atoms_m, mma="pv")
    read_v = b.mma_read("B", s_v, b.smem_view(atom_v, s_v.shape), op_pv, tile_mn=head_dim, tile_k=tile_kv,
                        warpgroups=1, mma="pv")
    o_acc = b.tensor("o_acc", "rmem", (64, head_dim), "fp32", tag=Tag("O", ("q", "d")))
    b.mma("pv", op_pv, read_p, read_v, o_acc, atoms_m=atoms_m, reps_m=1)
    b.k_loop(tile_k=tile_kv, block_k=op_pv.k, k_blocks=tile_kv // op_pv.k, name="kv")

    # ---- the two consumer warpgroups take turns issuing their MMAs (FA3 warp-scheduler barriers)
    names = ("sched.0", "sched.1")
    for g, name in enumerate(names):
        b.named_barrier(name, id=FIRST_BARRIER_ID + g, threads=2 * 128)
    b.turn_order("mma_turns", groups=2, points=("gemm",), barriers=(names,))

    # ---- tag assertions at the MMA slots
    b.assert_tags("qk.gemm", ("A", "d"), "==", ("B", "d"), invariant="G1", rule="mma.k_agreement")
    b.assert_tags("qk.gemm", ("A", "q"), "==", ("slot", "m"), invariant="G1", rule="mma.operand_identity")
    b.assert_tags("qk.gemm", ("B", "key"), "==", ("slot", "n"), invariant="G1", rule="mma.operand_identity")
    b.assert_tags("qk.gemm", ("A", "d"), "in_range", ("const", f"0,{head_dim}"), invariant="FA6", rule="tag.range")
    b.assert_tags("pv.gemm", ("A", "key"), "==", ("B", "key"), invariant="FA3", rule="mma.k_agreement")
    b.assert_tags("pv.gemm", ("A", "q"), "==", ("slot", "m"), invariant="FA3", rule="mma.operand_identity")
    b.assert_tags("pv.gemm", ("slot", "k"), "<", ("const", str(tile_kv)), invariant="FA6", rule="tag.range")

    # ---- consistency between nodes
    rel = b.relate
    for pipe, buf, mode in (("q", "sQ", 2), ("k", "sK", 2), ("v", "sV", 2)):
        rel(f"pipeline[{pipe}].stages", "==", f"tensor[{buf}].shape[{mode}]", invariant="G6", rule="pipeline.buffers")
    rel("loop[kv].block_k", "==", "mma[pv].op.k", invariant="G3", rule="loop.step")
    rel("loop[kv].tile_k", "==", "tensor[sK].shape[0]", invariant="G3", rule="loop.step")
    rel("loop[kv].tile_k", "==", "tensor[sV].shape[1]", invariant="G3", rule="loop.step")
    rel("mma[qk].op.n", "==", "loop[kv].tile_k", invariant="FA3", rule="fragment.convert")
    rel("mma[qk].atoms_m", "==", "mma[pv].atoms_m", invariant="FA3", rule="fragment.convert")
    rel("convert[convert_p_frag].dtype", "==", "mma[pv].op.dtype", invariant="FA3", rule="fragment.convert")
    rel("mma[pv].op.n", "==", "tensor[sV].shape[0]", invariant="G1", rule="mma.tile")
    for x, y in (("sQ", "sK"), ("sQ", "sV"), ("sK", "sV")):
        rel(f"tensor[{x}]", "disjoint", f"tensor[{y}]", invariant="R8", rule="smem.disjoint")
    return b.build()
