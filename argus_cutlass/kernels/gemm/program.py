"""The SM90 GEMM as one DSL program: :func:`build_program` (config, problem) -> :class:`Program`.

Every quantity of the kernel is a node field here: the verifier proves the program, the resource
rules and the cost model measure it, and ``templates/gemm/`` prints it (there is no second
model). The kernel (sources per node in :mod:`argus_cutlass.dsl.ir`):

* one producer warpgroup (warp 0 issues TMA loads of A and B into ``stages`` smem stages,
  ``setmaxnreg.dec`` to 40 registers) and two consumer warpgroups (``setmaxnreg.inc`` to 232):
  *cooperative* (both split every tile along M) or *ping-pong* (they alternate tiles and take
  turns at the mainloop and the epilogue through named barriers);
* SS-mode ``wgmma`` 64 x tile_n x 16 over descriptors of the swizzled stages; the mbarrier pipeline
  (full barrier: 1 arrival + the stage's TMA bytes; empty barrier: one arrival per consumer
  warpgroup of every CTA whose smem the stage's multicast loads write);
* the epilogue: ``alpha * acc + beta * C`` (C read from gmem at each accumulator's coordinate when
  beta != 0), stmatrix (16-bit D) or st.shared (fp32 D) into a staging buffer, one TMA store per
  ``epi_m x epi_n`` subtile;
* a persistent tile scheduler walking CUTLASS's swizzled cluster-major order over a 1-D cluster launch;
* for the any-alignment path, one :class:`~argus_cutlass.dsl.ir.StageCopy` per staged caller operand
  (A / B copied into an aligned, zero-padded buffer before the GEMM; D written by the GEMM into one
  and copied back into the caller's M x N after it): :func:`stage_copies`.

Shapes are the *kernel's* (M, N, K): under swap-AB the kernel computes ``D^T = B A^T`` (its A is
the caller's B, its D the caller's D read column-major).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

from argus_cutlass.dsl.atoms import GmmaOp, GmmaSmemAtom, TmaCopy, select_smem_atom
from argus_cutlass.dsl.builder import ProgramBuilder
from argus_cutlass.dsl.ir import DTYPE_BYTES, MAX_CLUSTER_K, MAX_MULTICAST_CLUSTER, PipelineSide, Program, Tag
from argus_cutlass.errors import ConfigError, DslError
from argus_cutlass.kernels.gemm.config import GemmConfig

__all__ = ["K_BOUND_BITS", "PRODUCER_REGS", "CONSUMER_REGS", "build_program", "check_buildable", "program_label",
           "stage_copies"]

#: registers per thread after ``setmaxnreg`` (CUTLASS's sm90 warp-specialized kernels:
#: LoadRegisterRequirement 40, MmaRegisterRequirement 232; 128 x 40 + 256 x 232 <= 65536)
PRODUCER_REGS = 40
CONSUMER_REGS = 232
#: the symbolic-K proofs hold for K < 2**K_BOUND_BITS unless the problem needs more
K_BOUND_BITS = 24
#: the widest k-loop proof range the IR allows (``KLoop.bound_bits`` <= 30; problem.k_range: K < 2^30)
MAX_K_BOUND_BITS = 30
#: first named-barrier id the kernel uses (0 is __syncthreads; CUTLASS reserves 1-7, its stream-K
#: fixup uses 4 and 5)
FIRST_BARRIER_ID = 8
#: the staging buffer's stage count (CUTLASS's TMA epilogue keeps 2 stores in flight)
STAGES_D = 2

_SCHEDULE = {"cooperative": "coop", "pingpong": "pp"}
_RASTER = {"along_m": "m", "along_n": "n"}


def program_label(cfg: GemmConfig) -> str:
    """The readable part of the kernel name: every config field, in cutlass_library style.

    >>> program_label(GemmConfig())
    'gemm_sm90_bf16_bf16_tn_128x256x64_c2x1_s4_coop_e128x32_rn1'
    """
    c = cfg
    sched = {"streamk": "_streamk", "splitk": f"_splitk{c.splits}", "clusterk": f"_clusterk{c.splits}"}.get(
        c.scheduler, "")
    sched += "_nd" if c.reduction == "nondeterministic" else ""
    return (f"gemm_sm90_{c.dtype}_{c.out_dtype}_{c.layout}_{c.tile_m}x{c.tile_n}x{c.tile_k}_"
            f"c{c.cluster_m}x{c.cluster_n}_s{c.stages}_{_SCHEDULE[c.schedule]}_e{c.epi_m}x{c.epi_n}_"
            f"r{_RASTER[c.raster]}{c.swizzle}{sched}{'_swapab' if c.swap_ab else ''}"
            f"{f'_as{c.acc_sets}' if c.acc_sets != 1 else ''}"
            f"{f'_mf{c.mma_in_flight}' if c.mma_in_flight != 1 else ''}{'_pdl' if c.pdl else ''}")


def _align(x: int, a: int) -> int:
    return (x + a - 1) // a * a


def _period(swizzle_bytes: int) -> int:
    """Bytes of one swizzle period: the base alignment a swizzled buffer needs (PTX ISA 9.7.15.5.1)."""
    return max(128, 8 * swizzle_bytes)


def _operand_box(major: str, tile_mn: int, tile_k: int, contiguous: int, multicast: int) -> tuple[int, int]:
    """The TMA box (inner, outer) of one operand: the inner extent is one swizzle row of the
    atom; with multicast the stage's boxes must split evenly among the ``multicast`` CTAs, so a
    K-major box covers ``tile_mn / multicast`` rows, and an MN-major box covers ``tile_k /
    multicast`` k columns when the MN boxes alone do not split."""
    if major == "K":
        return (min(contiguous, tile_k), tile_mn // multicast)
    inner = min(contiguous, tile_mn)
    outer = tile_k if (tile_mn // inner) % multicast == 0 else tile_k // multicast
    return (inner, outer)


def _field_error(rule: str, cfg: GemmConfig, names: tuple[str, ...], text: str,
                 hint: str | None = None) -> ConfigError:
    """A :class:`ConfigError` naming ``cfg``'s fields ``names`` (the one at fault first) and their values."""
    return ConfigError.of_fields(rule, "GemmConfig", {n: getattr(cfg, n) for n in names}, text, hint)


@contextmanager
def _built_from(cfg: GemmConfig, *names: str) -> Iterator[None]:
    """Re-raise a :class:`DslError` of the nodes built inside as a ConfigError ``config.node`` naming the fields
    ``names`` they are built from (none of them singled out: which one is at fault is the DSL rule's to say) and
    the DSL's rule and text without its ``file:line`` (a line of this file tells a user nothing): a refusal
    :func:`check_buildable` does not state yet still names the configuration's fields."""
    try:
        yield
    except DslError as exc:
        fields = {n: getattr(cfg, n) for n in names}
        text = re.sub(r"^\S+\.py:\d+: ", "", exc.message)
        raise ConfigError("config.node", f"GemmConfig ({', '.join(f'{k}={v!r}' for k, v in fields.items())}): the "
                          f"DSL refuses a node these fields build: [{exc.rule}] {text}", exc.hint, fields=fields,
                          model="GemmConfig", text=text) from None


def _operand_atom(cfg: GemmConfig, operand: str) -> GmmaSmemAtom:
    """The GMMA shared-memory atom of the kernel's ``A``, ``B`` or ``D`` (epilogue staging) tile.

    Raises:
        ConfigError: ``smem.atom`` naming the field that is the tile's contiguous extent when it is not a
            multiple of 16 bytes (CuTe's narrowest atom, ``GMMA::Layout_*_INTER_Atom``, is 16 bytes wide;
            PTX ISA 9.7.15.5.1: a core matrix row is 16 bytes).
    """
    c = cfg
    a_k, b_k = c.kernel_k_majors
    if operand == "D":
        major, bits, mn, k = "MN" if c.swap_ab else "K", DTYPE_BYTES[c.out_dtype] * 8, c.epi_m, c.epi_n
        names, dtype = ("epi_m", "epi_n"), c.out_dtype
        what = ("the epilogue's staging tile (epi_m x epi_n) is M-major under swap-AB (D^T written column-major)"
                if c.swap_ab else "the epilogue's staging tile (epi_m x epi_n) is N-major (D row-major)")
    else:
        k_major = a_k if operand == "A" else b_k
        major, bits, dtype = "K" if k_major else "MN", DTYPE_BYTES[c.dtype] * 8, c.dtype
        mn, k = (c.tile_m if operand == "A" else c.tile_n), c.tile_k
        names = ("tile_m" if operand == "A" else "tile_n", "tile_k")
        what = (f"the kernel's {operand} tile is {'K' if k_major else {'A': 'M', 'B': 'N'}[operand]}-major in "
                "shared memory" + (f" (swap-AB: the problem's {'B' if operand == 'A' else 'A'})" if c.swap_ab else ""))
    try:
        return select_smem_atom(major, bits, mn, k)
    except ValueError:
        field = names[1] if major == "K" else names[0]
        extent = getattr(c, field)
        context = ("layout" if operand != "D" else "out_dtype",) + (("swap_ab",) if c.swap_ab else ())
        raise _field_error("smem.atom", c, (field, *context),
                           f"{what}, so {field} is its contiguous extent: {extent} {dtype} elements = "
                           f"{extent * bits // 8} bytes, not a multiple of 16, which no GMMA shared-memory layout "
                           "atom tiles (CuTe GMMA::Layout_{K,MN}_{INTER,SW32,SW64,SW128}_Atom, 16 to 128 bytes "
                           "wide; PTX ISA 9.7.15.5.1)",
                           f"make {field} a multiple of {128 // bits} {dtype} elements (16 bytes)") from None


def check_buildable(cfg: GemmConfig) -> None:
    """Refuse a configuration no program can be built from, naming the field, its value and the rule.

    Only what the DSL construction itself refuses is checked here (every other rule, e.g. the wgmma N of
    ``tile_n``, shared-memory capacity or the epilogue tiling, is the verifier's, which reports every
    violation at once): the GMMA smem atom of each tile's contiguous extent (``smem.atom``), the cluster's
    CTA count, the k-blocks of a k-tile and their accumulator sets, each CTA's share of a multicast box, and
    the fields of the work decomposition. :func:`build_program` runs it first.

    Raises:
        ConfigError: ``smem.atom`` (a contiguous extent not a multiple of 16 bytes: ``tile_k`` of a
            K-major operand, ``tile_m`` / ``tile_n`` of an MN-major one, ``epi_n``, or ``epi_m`` under
            swap-AB); ``config.cluster_m`` / ``config.cluster_n`` (more than 16 CTAs: a TMA ctaMask has 16
            bits, PTX ISA 9.7.9.25; ``clusterk`` needs 1 x 1); ``config.tile_k`` (below 16, the wgmma K of
            16-bit inputs, PTX ISA 9.7.15.5); ``config.acc_sets`` (not a divisor of ``tile_k / 16``);
            ``config.tile_m`` / ``config.tile_n`` (fewer rows than the CTAs a multicast splits them among);
            ``config.splits``, ``config.schedule``, ``config.reduction`` (a field the scheduler does not take).
    """
    c = cfg
    atom_a, atom_b = _operand_atom(c, "A"), _operand_atom(c, "B")
    _operand_atom(c, "D")
    ctas = c.cluster_m * c.cluster_n
    if ctas > MAX_MULTICAST_CLUSTER:
        names = ("cluster_m", "cluster_n") if c.cluster_m >= c.cluster_n else ("cluster_n", "cluster_m")
        raise _field_error(f"config.{names[0]}", c, names,
                           f"a {c.cluster_m}x{c.cluster_n} cluster has {ctas} CTAs, more than the "
                           f"{MAX_MULTICAST_CLUSTER} the 16-bit ctaMask of its TMA loads can name (PTX ISA 9.7.9.25)")
    if c.tile_k < 16:
        raise _field_error("config.tile_k", c, ("tile_k",),
                           "a k-tile is tile_k / 16 wgmma k-blocks (wgmma K is 16 for 16-bit inputs, PTX ISA "
                           "9.7.15.5): tile_k must be at least 16")
    k_blocks = c.tile_k // 16
    if k_blocks % c.acc_sets:
        raise _field_error("config.acc_sets", c, ("acc_sets", "tile_k"),
                           f"k-block b of a k-tile accumulates into set b % acc_sets, so acc_sets must divide the "
                           f"k-tile's tile_k // 16 = {k_blocks} k-blocks (else a set's index varies across k-tiles: "
                           "dynamically indexed registers)")
    for operand, atom, tile, mc, cl in (("A", atom_a, "tile_m", c.cluster_n, "cluster_n"),
                                        ("B", atom_b, "tile_n", c.cluster_m, "cluster_m")):
        box = _operand_box(atom.major, getattr(c, tile), c.tile_k, atom.contiguous_elems, mc)
        if box[1] < 1:
            names = (tile, cl) if atom.major == "K" else ("tile_k", cl, tile)
            raise _field_error(f"config.{names[0]}", c, names,
                               f"the {mc} CTAs along the cluster's {'N' if operand == 'A' else 'M'} mode share the "
                               f"{operand} tile through a TMA multicast, each loading {names[0]} / {cl} = 0 "
                               f"{'rows' if atom.major == 'K' else 'k columns'} of it: {names[0]} must be at least "
                               f"{cl}")
    if c.splits > 1 and c.scheduler not in ("splitk", "clusterk"):
        raise _field_error("config.splits", c, ("splits", "scheduler"),
                           "splits is the k split of scheduler 'splitk' or 'clusterk' (1 for the others)")
    if c.scheduler == "clusterk":
        if not 2 <= c.splits <= MAX_CLUSTER_K:
            raise _field_error("config.splits", c, ("splits", "scheduler"),
                               f"clusterk splits the k loop over a cluster of splits CTAs: 2..{MAX_CLUSTER_K} (the "
                               "portable cluster size, CUDA C++ Programming Guide, Thread Block Clusters)")
        if (c.cluster_m, c.cluster_n) != (1, 1):
            names = ("cluster_m", "cluster_n") if c.cluster_m > 1 else ("cluster_n", "cluster_m")
            names += ("scheduler",)
            raise _field_error(f"config.{names[0]}", c, names,
                               "clusterk's cluster is its k split (splits CTAs sharing one output tile): no "
                               "multicast cluster beside it, cluster_m = cluster_n = 1")
        if c.schedule != "cooperative":
            raise _field_error("config.schedule", c, ("schedule", "scheduler"),
                               "clusterk's reduction runs in the cooperative kernel (both consumer warpgroups on "
                               "one tile)")
    if c.reduction != "deterministic" and c.scheduler not in ("streamk", "splitk"):
        raise _field_error("config.reduction", c, ("reduction", "scheduler"),
                           "only stream-K and split-K reduce partial tiles (CUTLASS ReductionMode): every other "
                           "scheduler takes reduction 'deterministic'")


def stage_copies(layout: str) -> dict[str, tuple[str, str]]:
    """``operand -> (rows, cols)``: the caller's storage of A, B and D by size name (``cols`` is
    the contiguous mode), as the BLAS layout letters state it.

    >>> stage_copies("nt")
    {'A': ('K', 'M'), 'B': ('K', 'N'), 'D': ('M', 'N')}
    """
    return {"A": ("M", "K") if layout[0] == "t" else ("K", "M"),
            "B": ("N", "K") if layout[1] == "n" else ("K", "N"),
            "D": ("M", "N")}


def build_program(cfg: GemmConfig, problem: object | None = None, *,
                  staged: tuple[str, ...] | None = None) -> Program:
    """The DSL program of ``cfg`` (no checking beyond well-formedness: see ``verify_gemm``).

    Args:
        cfg: the kernel configuration (kernel modes: ``tile_*`` etc. are the kernel's, see
            :class:`~argus_cutlass.kernels.gemm.config.GemmConfig`).
        problem: the problem it will run (a :class:`~argus_cutlass.kernels.gemm.problem.GemmProblem`
            or anything with ``k``); the symbolic-K proofs are stated for ``K < 2**bits`` with
            ``bits`` = 24 or the bits the problem's K needs, whichever is larger. A problem the direct
            TMA path refuses (:meth:`~argus_cutlass.kernels.gemm.problem.GemmProblem.staging`) gets
            the staging of the operands it names.
        staged: the caller operands to stage (``A``, ``B``, ``D``), overriding the problem's plan.

    Raises:
        ConfigError: ``cfg`` has fields no program can be built from (:func:`check_buildable`: ``smem.atom``
            for a contiguous extent that is not a multiple of 16 bytes, ``config.<field>`` for the others),
            naming the field, its value and the rule; ``config.node`` for any other node the DSL refuses,
            naming the fields the node is built from and the DSL's rule.
        argus_cutlass.errors.DslError: a node that no configuration field sets is malformed (a staged
            operand's copy, the relations).
    """
    return _program(cfg, problem, staged, relations=True)


def sizing_program(cfg: GemmConfig) -> Program:
    """``cfg``'s program without its relations (the verifier's obligations between nodes): the same nodes,
    tensors and shared-memory layout as :func:`build_program`'s, for sizing only (``fit_stages`` reads its
    ``kSmemBytes``), at a third of the cost. Never verify or render it: its relations are missing."""
    return _program(cfg, None, None, relations=False)


def _program(cfg: GemmConfig, problem: object | None, staged: tuple[str, ...] | None, *, relations: bool) -> Program:
    c = cfg
    bits = DTYPE_BYTES[c.dtype] * 8
    out_bits = DTYPE_BYTES[c.out_dtype] * 8
    a_k, b_k = c.kernel_k_majors
    coop = c.schedule == "cooperative"
    atoms_m = 2 if coop else 1
    reps_m = max(1, c.tile_m // (64 * atoms_m))
    stages = c.stages
    k_bits = K_BOUND_BITS
    k = getattr(problem, "k", None)
    if isinstance(k, int) and k >= 1:
        # one bit of headroom where the IR allows it; K < 2^30 (problem.k_range) always fits in 30
        k_bits = max(k_bits, min(int(k).bit_length() + 1, MAX_K_BOUND_BITS))
    check_buildable(c)
    atom_a, atom_b, atom_d = _operand_atom(c, "A"), _operand_atom(c, "B"), _operand_atom(c, "D")
    d_major = "M" if c.swap_ab else "N"

    if staged is None:
        plan = getattr(problem, "staging", None)
        staged = tuple(x.name for x in plan()) if callable(plan) else ()
    staged = tuple(x for x in ("A", "B", "D") if x in staged)
    b = ProgramBuilder(program_label(c) + (f"_stg{''.join(staged)}" if staged else ""), family="gemm")
    b.param("swap_ab", c.swap_ab)
    b.param("layout", c.layout)
    stage_tag = Tag("stage", ("iter",))

    # ---- gmem tensors (kernel modes; bindings to the host entry's arguments) ------------------
    g_a = b.tensor("gA", "gmem", ("M", "K"), c.dtype, tag=Tag("A", ("m", "k")), major="K" if a_k else "M",
                   binding="B" if c.swap_ab else "A")
    g_b = b.tensor("gB", "gmem", ("N", "K"), c.dtype, tag=Tag("B", ("n", "k")), major="K" if b_k else "N",
                   binding="A" if c.swap_ab else "B")
    g_c = b.tensor("gC", "gmem", ("M", "N"), c.out_dtype, tag=Tag("C", ("m", "n")), major=d_major, binding="C")
    g_d = b.tensor("gD", "gmem", ("M", "N"), c.out_dtype, tag=Tag("D", ("m", "n")), major=d_major, binding="D")

    # ---- shared memory: mainloop stages, epilogue staging, then the mbarriers -----------------
    epi_tiles = (c.tile_m // c.epi_m) * (c.tile_n // c.epi_n) if c.epi_m and c.epi_n else 1
    stages_d = max(1, min(STAGES_D, epi_tiles))
    offset = 0
    placed: dict[str, tuple[int, int]] = {}
    regions = [
        ("sA", c.tile_m * c.tile_k * stages * bits // 8, _period(atom_a.swizzle_bytes)),
        ("sB", c.tile_n * c.tile_k * stages * bits // 8, _period(atom_b.swizzle_bytes)),
        ("sD", c.epi_m * c.epi_n * stages_d * out_bits // 8, _period(atom_d.swizzle_bytes)),
    ]
    if c.scheduler == "clusterk":   # the ranks' partial sums (schedule node reduce_buffer): the tile in fp32
        regions.append(("sR", c.tile_m * c.tile_n * 4, 16))
    for name, nbytes, align in regions:
        offset = _align(offset, align)
        placed[name] = (offset, align)
        offset += nbytes
    barrier_bytes = _align(offset, 8)
    with _built_from(c, "tile_m", "tile_n", "tile_k", "stages", "epi_m", "epi_n"):
        s_a = b.tensor("sA", "smem", (c.tile_m, c.tile_k, stages), c.dtype, base_bytes=placed["sA"][0],
                       align_bytes=placed["sA"][1])
        s_b = b.tensor("sB", "smem", (c.tile_n, c.tile_k, stages), c.dtype, base_bytes=placed["sB"][0],
                       align_bytes=placed["sB"][1])
        s_d = b.tensor("sD", "smem", (c.epi_m, c.epi_n, stages_d), c.out_dtype, base_bytes=placed["sD"][0],
                       align_bytes=placed["sD"][1])
        if c.scheduler == "clusterk":
            b.tensor("sR", "smem", (c.tile_m, c.tile_n), "fp32", base_bytes=placed["sR"][0],
                     align_bytes=placed["sR"][1])
        acc = b.tensor("accum", "rmem", (64 * reps_m, c.tile_n), "fp32", tag=Tag("acc", ("m", "n")))

    # ---- TMA loads (A multicast along the cluster's N mode, B along M) -----------------------
    cluster = (c.cluster_m, c.cluster_n)
    mc_a, mc_b = c.cluster_n, c.cluster_m
    box_a = _operand_box(atom_a.major, c.tile_m, c.tile_k, atom_a.contiguous_elems, mc_a)
    box_b = _operand_box(atom_b.major, c.tile_n, c.tile_k, atom_b.contiguous_elems, mc_b)
    tma_a = TmaCopy("load_multicast" if mc_a > 1 else "load", box_a, bits, atom_a.swizzle_bytes, mc_a)
    tma_b = TmaCopy("load_multicast" if mc_b > 1 else "load", box_b, bits, atom_b.swizzle_bytes, mc_b)
    # the CTA at cluster rank r: the persistent walk places it by raster; stream-K / split-K launch
    # CUTLASS's 2-D cluster, x (M) fastest
    rank_order = "col" if c.raster == "along_n" or c.scheduler != "persistent" else "row"
    with _built_from(c, "tile_m", "tile_n", "tile_k", "cluster_m", "cluster_n", "layout"):
        load_a = b.tma_load(g_a, s_a, tma_a, major=atom_a.major, tile_mn=c.tile_m, tile_k=c.tile_k,
                            stage_tag=stage_tag, block_mode="m", cluster=cluster, share_axis="n" if mc_a > 1 else "",
                            rank_order=rank_order if mc_a > 1 else "col")
        load_b = b.tma_load(g_b, s_b, tma_b, major=atom_b.major, tile_mn=c.tile_n, tile_k=c.tile_k,
                            stage_tag=stage_tag, block_mode="n", cluster=cluster, share_axis="m" if mc_b > 1 else "",
                            rank_order=rank_order if mc_b > 1 else "col")

    # ---- pipeline: full = 1 producer arrival + tx bytes; empty = readers x consumer WGs ------
    readers = c.cluster_m + c.cluster_n - 1
    consumers_per_stage = atoms_m
    tx = (c.tile_m + c.tile_n) * c.tile_k * bits // 8
    with _built_from(c, "stages", "mma_in_flight", "cluster_m", "cluster_n"):
        b.pipeline("mainloop", (load_a, load_b), stages=stages, tx_bytes=tx, producer_arrivals=1,
                   consumer_arrivals=consumers_per_stage * readers, consumer_arrivers=consumers_per_stage * readers,
                   producer=PipelineSide(1, stages), consumer=PipelineSide(0, stages),
                   mma_in_flight=c.mma_in_flight, release_lag=c.mma_in_flight, barrier_bytes=barrier_bytes)

    # ---- roles, launch ------------------------------------------------------------------------
    b.role("producer", "producer", warpgroups=(0,), issue_warps=(0,), regs=PRODUCER_REGS)
    b.role("consumer", "consumer", warpgroups=(1, 2), issue_warps=(0, 1, 2, 3), regs=CONSUMER_REGS)
    with _built_from(c, "pdl"):
        b.launch(threads=384, cluster_m=c.cluster_m, cluster_n=c.cluster_n, pdl=c.pdl)

    # ---- MMA ----------------------------------------------------------------------------------
    with _built_from(c, "tile_n", "tile_m", "tile_k", "acc_sets", "schedule"):
        op = GmmaOp(64, c.tile_n, 16, c.dtype, atom_a.major, atom_b.major)
        read_a = b.mma_read("A", s_a, b.smem_view(atom_a, s_a.shape), op, tile_mn=c.tile_m, tile_k=c.tile_k,
                            warpgroups=atoms_m)
        read_b = b.mma_read("B", s_b, b.smem_view(atom_b, s_b.shape), op, tile_mn=c.tile_n, tile_k=c.tile_k,
                            warpgroups=1)
        b.mma("mainloop", op, read_a, read_b, acc, atoms_m=atoms_m, reps_m=reps_m)
        b.k_loop(tile_k=c.tile_k, block_k=op.k, k_blocks=c.tile_k // op.k, bound_bits=k_bits,
                 acc_sets=c.acc_sets)

    # ---- epilogue -----------------------------------------------------------------------------
    b.named_barrier("epilogue", id=FIRST_BARRIER_ID, threads=128 * atoms_m)
    if not coop:
        b.named_barrier("epilogue.1", id=FIRST_BARRIER_ID + 1, threads=128)
        names = (("order.mainloop.0", "order.mainloop.1"), ("order.epilogue.0", "order.epilogue.1"))
        for i, row in enumerate(names):
            for j, name in enumerate(row):
                b.named_barrier(name, id=FIRST_BARRIER_ID + 2 + 2 * i + j, threads=256)
        b.turn_order("pingpong", groups=2, points=("mainloop", "epilogue"), barriers=names)
    with _built_from(c, "epi_m", "epi_n", "tile_m", "tile_n", "out_dtype", "swap_ab"):
        b.epilogue_store(tile_m=c.tile_m, tile_n=c.tile_n, op=op, warpgroups=atoms_m, epi_m=c.epi_m,
                         epi_n=c.epi_n, d_major=d_major)
        b.epilogue_source(g_c, path="gmem")
        if out_bits == 16:
            b.smem_stage("accum", s_d, op="stmatrix", num=4 if c.epi_n % 16 == 0 else 2, trans=c.swap_ab,
                         view=b.smem_view(atom_d, s_d.shape), store_wait=stages_d - 1)
        else:
            b.smem_stage("accum", s_d, op="st.shared", num=1, view=b.smem_view(atom_d, s_d.shape),
                         store_wait=stages_d - 1)
        inner = min(atom_d.contiguous_elems, c.epi_m if c.swap_ab else c.epi_n)
        box_d = (inner, c.epi_n) if c.swap_ab else (inner, c.epi_m)
        b.tma_store(s_d, g_d, TmaCopy("store", box_d, out_bits, atom_d.swizzle_bytes), major=atom_d.major,
                    tile_mn=c.epi_m, tile_k=c.epi_n)
    with _built_from(c, "scheduler", "splits", "reduction", "schedule", "cluster_m", "cluster_n", "raster",
                     "swizzle"):
        b.tile_schedule(raster=c.raster, swizzle=c.swizzle, decomposition=c.scheduler, cluster_m=c.cluster_m,
                        cluster_n=c.cluster_n, splits=c.splits, consumer_stride=1 if coop else 2,
                        reduction=c.reduction, reduce_buffer="sR" if c.scheduler == "clusterk" else "")

    # ---- aligned staging of the caller's operands (the any-alignment path) ----------------------
    storage = stage_copies(c.layout)
    for name in staged:
        dtype = c.out_dtype if name == "D" else c.dtype
        rows, cols = storage[name]
        b.stage_copy(name, "out" if name == "D" else "in", dtype, rows=rows, cols=cols,
                     align=16 // DTYPE_BYTES[dtype])

    # ---- invariants: tag assertions at the MMA slot ---------------------------------------------
    b.assert_tags_of("gemm")   # A.k == B.k, A.m == slot.m, B.n == slot.n at the MMA
    if relations:
        _relations(b)
    return b.build()


def _relations(b: ProgramBuilder) -> None:
    """Consistency between nodes, stated as relations the verifier checks (and the template
    prints as ``static_assert``s): the GEMM family's catalogue (:data:`argus_cutlass.dsl.ir.FAMILY_RELATIONS`:
    pipeline vs buffers and wrap (G6), k loop vs TMA step and MMA K (G3), MMA dtype / majors / tile vs the
    buffers (G1), cluster consistency (G5), epilogue vs accumulator partition (G2), disjoint smem (R8)),
    which the verifier requires in full."""
    b.relate_family("gemm")


def path_record(problem: object, program: Program) -> dict:
    """Which path a GEMM runs and why, for the run record and the CLI: ``direct`` (the TMA GEMM on
    the caller's operands) or ``staged`` (the program's StageCopy nodes), with each staged operand's
    reasons (:meth:`~argus_cutlass.kernels.gemm.problem.GemmProblem.staging`) and the workspace the
    entry allocates for this problem (bytes).

    >>> from argus_cutlass.kernels.gemm.problem import GemmProblem
    >>> p = GemmProblem(300, 4096, 4096, layout="nt")
    >>> path_record(p, build_program(GemmConfig(layout="nt"), p))["text"]
    'staged: A (lda=300: 600 bytes, not a multiple of 16); workspace 2490368 bytes per call'
    """
    staged = [c.operand for c in program.stage_copies]
    plan = getattr(problem, "staging", None)
    why = {s.name: s for s in plan()} if callable(plan) else {}
    if not staged:
        return {"kind": "direct", "staged": [], "workspace_bytes": 0, "text": "direct: TMA on the caller's operands"}
    items = []
    for name in staged:
        s = why.get(name)
        items.append({"operand": name, "reasons": list(s.reasons) if s else ["staged by the kernel"],
                      "staged_ld": s.staged_ld if s else None, "bytes": s.staged_bytes if s else None})
    workspace = staging_workspace(program, problem) if hasattr(problem, "m") else None
    text = "staged: " + "; ".join(f"{i['operand']} ({'; '.join(i['reasons'])})" for i in items)
    if workspace:
        text += f"; workspace {workspace} bytes per call"
    return {"kind": "staged", "staged": items, "workspace_bytes": workspace, "text": text}


def staging_workspace(program: Program, problem: object) -> int:
    """Bytes of the workspace the entry of ``program`` allocates for ``problem`` (its M, N, K), as the
    host code computes it: buffer ``i`` at ``round_up(end of buffer i-1, base_align)``, ``rows x
    round_up(cols, align)`` elements each; 0 without StageCopy nodes."""
    sizes = {"M": problem.m, "N": problem.n, "K": problem.k}  # type: ignore[attr-defined]
    end = 0
    for c in program.stage_copies:
        off = _align(end, c.base_align)
        end = off + sizes[c.rows] * c.staged_ld(sizes[c.cols]) * c.elem_bytes
    return end
