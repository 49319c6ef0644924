"""The mutation suite: planted kernel mistakes, on the verifier side and, where the mutant
kernel can express them, on a GPU.

Every :class:`Mutant` names one mistake of an SM90 warp-specialized GEMM (mainloop,
epilogue staging or tile scheduler) and gives

* ``knobs``: the overrides of :data:`BASELINE_KNOBS` that plant it in the hand-written kernel
  ``templates/mutant_sm90.cu.j2`` (built and run by :mod:`argus_cutlass.runtime.mutants`,
  **without** the verifier), or ``None`` when the kernel has no such knob;
* ``verifier``: a function ``GemmConfig -> (GemmProgram, DslProgram)`` that plants the
  corresponding mistake in the verifier's model through the same DSL mutation APIs the
  verifier tests use (``gemm_dsl_program(..., mma_atoms=...)`` and the DSL's ``replace_*``
  methods), plus the ``rule`` and ``invariant`` it must be
  rejected with; ``None`` where the verifier does not model the mistake yet (said in
  ``verifier_note``; such a mutant is never reported as rejected).

The GPU kernel and the verifier's model are analogous, not identical: the model is the
production configuration :data:`BASELINE_CONFIG` (64 x 64 x 64 tile, 4 stages, ping-pong,
two consumer warpgroups = 2 empty-barrier arrivals), the mutant kernel has one consumer
warpgroup whose 4 warps each release a stage (4 arrivals). Counts are therefore stated
relative to the baseline ("one arrival short"), and each entry says what it expects on
hardware (``expect_gpu``: ``wrong``, ``hang``, ``wrong or hang`` or ``maybe benign``).

Hardware rules behind the classes: PTX ISA 9.7.13.15 (mbarrier phases, parity waits,
expect-tx / complete-tx), 9.7.9.25 (cp.async.bulk.tensor boxes and swizzle modes),
9.7.15.5.1 (wgmma shared-memory matrix layouts and descriptors), 9.7.15.4 (accumulator
fragment layout); CuTe ``cute/atom/mma_traits_sm90_gmma.hpp`` (``GMMA::Layout_*_Atom``).

>>> len(CATALOGUE) >= 24 and len({m.cls for m in CATALOGUE.values()}) >= 10
True
>>> CATALOGUE["consumer_phase_1"].rule, CATALOGUE["epi_row_offset_warp"].rule
('pipeline.parity', 'epilogue.coordinate')
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from argus_cutlass.dsl.atoms import GmmaSmemAtom
from argus_cutlass.dsl.ir import DslProgram
from argus_cutlass.kernels.gemm.config import GemmConfig
from argus_cutlass.programs.gemm import GemmProgram, build_gemm_program
from argus_cutlass.programs.gemm_dsl import gemm_dsl_program
from argus_cutlass.verify.catalogue import invariant_of

#: the verifier-side baseline: a 64 x 64 x 64, 4-stage ping-pong configuration
BASELINE_CONFIG = GemmConfig(tile_m=64, tile_n=64, tile_k=64, cluster_m=1, cluster_n=1, stages=4,
                             schedule="pingpong", epi_m=64, epi_n=32)

#: consumer warps of the mutant kernel; each arrives once on a stage's empty barrier
GPU_CONSUMER_ARRIVERS = 4
#: bytes of one TMA box of the mutant kernel (64 x 64 bf16)
GPU_BOX_BYTES = 64 * 64 * 2

#: template variables of the unmutated kernel (``templates/mutant_sm90.cu.j2``)
BASELINE_KNOBS: dict[str, Any] = {
    "tile_m": 64,
    "tile_n": 64,
    "tile_k": 64,            # k columns the consumer reads per stage
    "box_k": 64,             # k columns one TMA box loads per stage
    "stages": 4,
    "tma_swizzle_a": "SW128",  # atom of the layout the TMA descriptor is built from
    "mma_swizzle_a": "SW128",  # atom of the layout the GMMA descriptors are built from
    "tma_swizzle_b": "SW128",
    "mma_swizzle_b": "SW128",
    "mma_major_b": "K",      # major flag of GMMA's B operand (the data is K-major)
    "consumer_wrap": 4,      # consumer stage index modulo
    "consumer_start_phase": 0,
    "producer_start_phase": 1,
    "tx_bytes_delta": 0,     # added to the expect_tx byte count
    "empty_arrivals": GPU_CONSUMER_ARRIVERS,  # empty-barrier init count
    "carry_across_tiles": True,           # consumer pipeline state persists over tiles
    "producer_carry_across_tiles": True,  # producer pipeline state persists over tiles
    "k_tiles_delta": 0,      # added to ceil_div(K, tile_k)
    "epi_row_offset": 0,     # epilogue row shift (mod tile_m)
    "residue_mask": True,    # epilogue masks m >= M, n >= N
    "release_before_retire": False,  # consumer releases the stage before warpgroup_wait<0>
    "warp3_stage_skew": 0,   # stage offset the consumer's last warp adds when picking descriptors
    "tile_stride": "gridDim.x",  # persistent scheduler step (a C++ expression)
}

_SWIZZLE_NAMES = {"SW128": 128, "SW64": 64, "SW32": 32, "INTER": 16}


def knobs_of(overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """:data:`BASELINE_KNOBS` with ``overrides`` applied.

    Raises:
        KeyError: an override names no knob.
        ValueError: a swizzle knob is not one of SW128/SW64/SW32/INTER.
    """
    out = dict(BASELINE_KNOBS)
    for k, v in (overrides or {}).items():
        if k not in out:
            raise KeyError(f"no mutant-kernel knob {k!r}; have {sorted(out)}")
        if "swizzle" in k and v not in _SWIZZLE_NAMES:
            raise ValueError(f"knob {k}={v!r}: expected one of {sorted(_SWIZZLE_NAMES)}")
        out[k] = v
    return out


Builder = Callable[[GemmConfig], tuple[GemmProgram, DslProgram]]


@dataclass(frozen=True)
class Mutant:
    """One planted mistake.

    Attributes:
        id: stable identifier (a C identifier fragment).
        cls: mistake class (``swizzle_mismatch``, ``stage_modulo``...).
        description: what is wrong, in one sentence.
        knobs: overrides of :data:`BASELINE_KNOBS` for the GPU kernel; ``None`` when the
            kernel cannot express the mistake (``gpu_note`` says why).
        expect_gpu: expected hardware behaviour (``wrong``, ``hang``, ``wrong or hang``,
            ``maybe benign``), with the reason in ``gpu_note``.
        verifier: builds the mutated (program, DSL program) from a baseline config;
            ``None`` when the verifier does not model the mistake (``verifier_note``).
        rule: the verifier rule that must reject it; :attr:`invariant` is the catalogue invariant
            that lists the rule (``invariants/gemm.toml``).
    """

    id: str
    cls: str
    description: str
    knobs: Mapping[str, Any] | None
    expect_gpu: str
    verifier: Builder | None
    rule: str | None
    gpu_note: str = ""
    verifier_note: str = ""
    extra_rules: tuple[str, ...] = field(default_factory=tuple)

    @property
    def invariant(self) -> str | None:
        """The catalogue invariant whose rules include :attr:`rule` (None when not modelled)."""
        return invariant_of(self.rule) if self.rule else None

    def build_verifier_program(self, cfg: GemmConfig = BASELINE_CONFIG) -> tuple[GemmProgram, DslProgram]:
        """The mutated (program, DSL program) for the verifier.

        Raises:
            ValueError: the verifier does not model this mutant.
        """
        if self.verifier is None:
            raise ValueError(f"mutant {self.id!r} is not modelled by the verifier: {self.verifier_note}")
        return self.verifier(cfg)


# ---- verifier-side builders ------------------------------------------------------------

def _base(cfg: GemmConfig) -> tuple[GemmProgram, DslProgram]:
    program = build_gemm_program(cfg)
    return program, gemm_dsl_program(program)


def _mma_atom(operand: str, major: str, swizzle_bytes: int) -> Builder:
    """The GMMA side reads ``operand`` through ``atom`` while TMA writes the buffer's atom."""

    def build(cfg: GemmConfig) -> tuple[GemmProgram, DslProgram]:
        program = build_gemm_program(cfg)
        bits = getattr(program, operand.lower()).smem_atom.elem_bits
        return program, gemm_dsl_program(program, mma_atoms={operand: GmmaSmemAtom(major, swizzle_bytes, bits)})

    return build


def _tma_atom(operand: str, swizzle_bytes: int) -> Builder:
    """The TMA (and the buffer) use a ``swizzle_bytes`` atom; GMMA reads the baseline atom."""

    def build(cfg: GemmConfig) -> tuple[GemmProgram, DslProgram]:
        program = build_gemm_program(cfg)
        op = getattr(program, operand.lower())
        atom = GmmaSmemAtom(op.major, swizzle_bytes, op.smem_atom.elem_bits)
        inner = min(atom.contiguous_elems, op.tile_k if op.major == "K" else op.tile_mn)
        tma = dataclasses.replace(op.tma, box=(inner, op.tma.box[1]), swizzle_bytes=swizzle_bytes)
        boxes = (op.tile_k if op.major == "K" else op.tile_mn) // inner
        new_op = dataclasses.replace(op, smem_atom=atom, tma=tma, boxes_per_stage=boxes)
        mutated = dataclasses.replace(program, **{operand.lower(): new_op})
        return mutated, gemm_dsl_program(mutated, mma_atoms={operand: op.smem_atom})

    return build


def _pipeline(producer: dict[str, Any] | None = None, consumer: dict[str, Any] | None = None,
              **changes: Callable[[DslProgram], Any]) -> Builder:
    """``replace_pipeline``; each keyword value is a function of the baseline DSL program."""

    def build(cfg: GemmConfig) -> tuple[GemmProgram, DslProgram]:
        program, dsl = _base(cfg)
        pipe = dsl.pipeline
        if pipe is None:
            raise ValueError("the baseline DSL program has no pipeline")
        prod = {k: (v(pipe) if callable(v) else v) for k, v in (producer or {}).items()}
        cons = {k: (v(pipe) if callable(v) else v) for k, v in (consumer or {}).items()}
        return program, dsl.replace_pipeline(producer=prod or None, consumer=cons or None,
                                             **{k: f(dsl) for k, f in changes.items()})

    return build


def _edit(node: str, config: dict[str, Any] | None = None, **changes: Any) -> Builder:
    """Plant a mistake with ``dsl.replace_<node>(**changes)`` (``node``: ``kloop``, ``epilogue``,
    ``staging``, ``schedule``, or ``load:sA`` / ``load:sB``), in the baseline config changed by
    ``config`` first (e.g. ``{"swap_ab": True}``). A callable change value is a function of the
    baseline DSL program (e.g. its staging stage count)."""

    def build(cfg: GemmConfig) -> tuple[GemmProgram, DslProgram]:
        program, dsl = _base(cfg.replace(**config) if config else cfg)
        values = {k: (v(dsl) if callable(v) else v) for k, v in changes.items()}
        if node.startswith("load:"):
            return program, dsl.replace_load(node.removeprefix("load:"), **values)
        return program, getattr(dsl, f"replace_{node}")(**values)

    return build


def _box_half_k(cfg: GemmConfig) -> tuple[GemmProgram, DslProgram]:
    """Both TMA boxes span half the consumer's k extent (inner 32 of 64 k-columns).

    The verifier's TMA load always covers its stage (``tile / box`` boxes, box ``b`` at
    ``b * box`` elements), so the half box is modelled as two boxes per stage: the bytes
    still match expect_tx, but the stage image no longer matches the SW128 layout GMMA reads.
    """
    program, dsl = _base(cfg)
    out = dsl
    for dst in ("sA", "sB"):
        ld = dsl.load_into(dst)
        out = out.replace_load(dst, copy=dataclasses.replace(ld.copy, box=(ld.copy.box[0] // 2, ld.copy.box[1])))
    return program, out


def _box_bytes(dsl: DslProgram) -> int:
    return dsl.load_into("sA").copy.box_bytes


def _read_skew(skew: tuple[int, int, int, int]) -> Builder:
    """Both MMA reads select their stage with a per-warp offset ``skew``."""

    def build(cfg: GemmConfig) -> tuple[GemmProgram, DslProgram]:
        program, dsl = _base(cfg)
        return program, dsl.replace_read("A", warp_stage_skew=skew).replace_read("B", warp_stage_skew=skew)

    return build


def _store_swizzle(swizzle_bytes: int) -> Builder:
    """The epilogue's TMA store descriptor uses another swizzle than the staging buffer."""

    def build(cfg: GemmConfig) -> tuple[GemmProgram, DslProgram]:
        program, dsl = _base(cfg)
        st = dsl.stores[0]
        return program, dsl.replace_store(st.src, copy=dataclasses.replace(st.copy, swizzle_bytes=swizzle_bytes))

    return build


#: the 2x2-cluster variant of the baseline (A and B both multicast to 2 CTAs)
_C2X2 = {"cluster_m": 2, "cluster_n": 2}

_NO_CLUSTER = ("no mutant-kernel knob: that kernel runs without clusters. The same slices and masks are replayed "
               "by the multicast probe (tests/gpu/test_multicast_gpu.py::test_mutant_multicast_matches_the_model)")

#: where the epilogue-staging mutants run on silicon (the mutant kernel stores registers to gmem)
_STSM_PROBE = ("no mutant-kernel knob: that kernel's epilogue stores registers straight to gmem. The same "
               "stores are replayed by the stmatrix probe (tests/gpu/test_stmatrix_gpu.py::"
               "test_mutant_program_probe), where the GPU's smem image equals the model's misplaced one")


_SW = {128: "SW128", 64: "SW64", 32: "SW32", 16: "INTER"}


def _swizzle_mutant(operand: str, side: str, sw: int) -> Mutant:
    """A/B swizzle mismatch: the ``side`` ("tma" or "mma") uses ``sw`` instead of SW128."""
    other = "GMMA descriptors" if side == "tma" else "TMA descriptor"
    knob = f"{side}_swizzle_{operand.lower()}"
    return Mutant(
        id=f"swizzle_{operand.lower()}_{side}_{_SW[sw].lower()}",
        cls="swizzle_mismatch",
        description=(f"{operand}: the {'TMA' if side == 'tma' else 'GMMA'} side builds its smem layout "
                     f"from the K-major {_SW[sw]} atom while the {other} use SW128"),
        knobs={knob: _SW[sw]},
        expect_gpu="wrong",
        gpu_note="the WGMMA reads k-columns from other smem bytes than the TMA wrote: A.k != B.k",
        verifier=_mma_atom(operand, "K", sw) if side == "mma" else _tma_atom(operand, sw),
        rule="mma.k_agreement",
    )


def _catalogue() -> dict[str, Mutant]:
    S = BASELINE_KNOBS["stages"]
    ms: list[Mutant] = [
        _swizzle_mutant("A", "mma", 64),
        _swizzle_mutant("A", "mma", 32),
        _swizzle_mutant("A", "mma", 16),
        _swizzle_mutant("A", "tma", 64),
        _swizzle_mutant("B", "mma", 64),
        _swizzle_mutant("B", "tma", 32),
        Mutant(
            id="major_b_mn", cls="major_flag",
            description="GMMA reads B as MN-major (Layout_MN_SW128_Atom, Major::MN) but B is K-major in smem",
            knobs={"mma_major_b": "MN"}, expect_gpu="wrong",
            gpu_note="the B descriptor walks n where the data has k: a transposed 64x64 block of B",
            verifier=_mma_atom("B", "MN", 128), rule="mma.k_agreement",
        ),
        Mutant(
            id="consumer_wrap_s_minus_1", cls="stage_modulo",
            description=f"the consumer's stage index wraps at S-1 = {S - 1} instead of S = {S}",
            knobs={"consumer_wrap": S - 1}, expect_gpu="wrong or hang",
            gpu_note="from iteration S-1 on the consumer waits on / reads the wrong stage",
            verifier=_pipeline(consumer={"wrap": lambda p: p.stages - 1}),
            rule="pipeline.stage",
        ),
        Mutant(
            id="consumer_wrap_s_minus_2", cls="stage_modulo",
            description=f"the consumer's stage index wraps at S-2 = {S - 2}",
            knobs={"consumer_wrap": S - 2}, expect_gpu="wrong or hang",
            gpu_note="two stages are never read; their empty barriers are never released",
            verifier=_pipeline(consumer={"wrap": lambda p: p.stages - 2}),
            rule="pipeline.stage",
        ),
        Mutant(
            id="consumer_phase_1", cls="phase_start",
            description="the consumer's pipeline state starts at phase 1 (CUTLASS: 0)",
            knobs={"consumer_start_phase": 1}, expect_gpu="wrong or hang",
            gpu_note="the first full-barrier wait passes on the fresh barrier: stage 0 is read before TMA fills it",
            verifier=_pipeline(consumer={"start_phase": 1}),
            rule="pipeline.parity", extra_rules=("pipeline.protocol",),
        ),
        Mutant(
            id="producer_phase_0", cls="phase_start",
            description="the producer's pipeline state starts at phase 0 (CUTLASS: 1)",
            knobs={"producer_start_phase": 0}, expect_gpu="hang",
            gpu_note="the producer's first empty-barrier wait needs a release no consumer will make",
            verifier=_pipeline(producer={"start_phase": 0}),
            rule="pipeline.protocol", extra_rules=("pipeline.parity",),
        ),
        Mutant(
            id="empty_arrivals_short", cls="arrival_count",
            description="the empty barrier is initialised with one arrival fewer than a release makes",
            knobs={"empty_arrivals": GPU_CONSUMER_ARRIVERS - 1}, expect_gpu="wrong or hang",
            gpu_note=("a release completes the phase after 3 of 4 warps; the 4th arrival leaks into "
                      "the next phase, so the producer drifts ahead and overwrites stages still being read "
                      "(a race: visible only if the producer actually gets ahead)"),
            verifier=_pipeline(consumer_arrivals=lambda d: d.pipeline.consumer_arrivers - 1),
            rule="pipeline.arrivals",
        ),
        Mutant(
            id="empty_arrivals_extra", cls="arrival_count",
            description="the empty barrier is initialised with one arrival more than a release makes",
            knobs={"empty_arrivals": GPU_CONSUMER_ARRIVERS + 1}, expect_gpu="hang",
            gpu_note="no empty phase ever completes: the producer blocks at its second pass over the stages",
            verifier=_pipeline(consumer_arrivals=lambda d: d.pipeline.consumer_arrivers + 1),
            rule="pipeline.arrivals",
        ),
        Mutant(
            id="tx_bytes_short_box", cls="tx_bytes",
            description="expect_tx announces one TMA box (8 KiB) less than a stage's loads deliver",
            knobs={"tx_bytes_delta": -GPU_BOX_BYTES}, expect_gpu="wrong or hang",
            gpu_note="the full barrier completes when A lands, before B: the consumer reads a partial stage",
            verifier=_pipeline(tx_bytes=lambda d: d.pipeline.tx_bytes - _box_bytes(d)),
            rule="pipeline.tx_bytes", extra_rules=("pipeline.protocol",),
        ),
        Mutant(
            id="tx_bytes_extra_box", cls="tx_bytes",
            description="expect_tx announces one TMA box (8 KiB) more than a stage's loads deliver",
            knobs={"tx_bytes_delta": GPU_BOX_BYTES}, expect_gpu="hang",
            gpu_note="the transaction count never reaches zero: the first full-barrier wait never returns",
            verifier=_pipeline(tx_bytes=lambda d: d.pipeline.tx_bytes + _box_bytes(d)),
            rule="pipeline.tx_bytes", extra_rules=("pipeline.protocol",),
        ),
        Mutant(
            id="tx_bytes_short_16", cls="tx_bytes",
            description="expect_tx announces 16 bytes less than a stage's loads deliver",
            knobs={"tx_bytes_delta": -16}, expect_gpu="maybe benign",
            gpu_note=("the barrier may complete a few bytes early and the shortfall drifts by 16 bytes per "
                      "fill; whether a read ever sees missing bytes is timing-dependent"),
            verifier=_pipeline(tx_bytes=lambda d: d.pipeline.tx_bytes - 16),
            rule="pipeline.tx_bytes",
        ),
        Mutant(
            id="epi_row_offset_warp", cls="epilogue_map",
            description="the epilogue's thread -> row map is shifted by one warp's 16 rows (mod 64)",
            knobs={"epi_row_offset": 16}, expect_gpu="wrong",
            gpu_note="still a bijection onto the tile (VERIFIER.md pitfall 2), but rows land 16 off",
            verifier=_edit("epilogue", row_offset=16), rule="epilogue.coordinate",
        ),
        Mutant(
            id="epi_row_offset_two_warps", cls="epilogue_map",
            description="the epilogue's thread -> row map is shifted by two warps' 32 rows (mod 64)",
            knobs={"epi_row_offset": 32}, expect_gpu="wrong",
            gpu_note="the two halves of every output tile are swapped",
            verifier=_edit("epilogue", row_offset=32), rule="epilogue.coordinate",
        ),
        Mutant(
            id="epi_store_swizzle", cls="epilogue_store",
            description="the TMA store of the epilogue is built with SW32 over the SW64 staging buffer",
            knobs=None, expect_gpu="wrong",
            gpu_note="the hand-written mutant kernel stores registers directly; the TMA-store epilogue is CUTLASS's",
            verifier=_store_swizzle(32), rule="epilogue.tma_store",
        ),
        Mutant(
            id="residue_mask_dropped", cls="residue_mask",
            description="the epilogue stores without the m < M, n < N mask",
            knobs={"residue_mask": False}, expect_gpu="wrong",
            gpu_note=("with N % 64 != 0 the n >= N columns wrap into the next row (zeros over results); "
                      "with M % 64 != 0 rows m >= M are written past D (counted in a NaN guard region)"),
            verifier=_edit("epilogue", residue_mask=False), rule="residue.store",
        ),
        Mutant(
            id="release_before_retire", cls="release_order",
            description="the consumer releases a stage before the wgmma batch that reads it has retired",
            knobs={"release_before_retire": True}, expect_gpu="maybe benign",
            gpu_note=("a race: the producer may refill the stage (S iterations ahead) while the wgmma still "
                      "reads it; with 4 stages the TMA rarely overtakes, so results may well be right"),
            verifier=_pipeline(release_lag=lambda pipe: 0), rule="pipeline.release",
        ),
        Mutant(
            id="warp_stage_skew", cls="warpgroup_uniformity",
            description="the consumer warpgroup's last warp passes wgmma the descriptors of the next stage",
            knobs={"warp3_stage_skew": 1}, expect_gpu="maybe benign",
            gpu_note=("non-uniform wgmma descriptors are undefined behaviour (PTX ISA 9.7.15.5); the hardware "
                      "may take one warp's descriptor (then the result is right) or mix them"),
            verifier=_read_skew((0, 0, 0, 1)), rule="warpgroup.uniform",
        ),
        Mutant(
            id="tma_box_half_k", cls="tma_box",
            description="the TMA boxes load 64 k-columns per stage while the consumer reads 128",
            knobs={"tile_k": 128, "box_k": 64}, expect_gpu="wrong",
            gpu_note=("expect_tx matches the boxes, so nothing hangs; k-columns 64..127 of every stage are "
                      "never written and the k-tile step skips them in gmem"),
            verifier=_box_half_k, rule="mma.k_agreement",
            verifier_note=("modelled differently: the verifier's TMA load always covers its stage, so "
                           "a box of half the consumer's k extent becomes two boxes per stage whose "
                           "image disagrees with the SW128 layout GMMA reads (G1). The kernel's "
                           "realisation, one box per stage with half the stage never written (G5 "
                           "tma.image), cannot be stated in the DSL yet"),
        ),
        Mutant(
            id="tile_stride_plus_1", cls="scheduler",
            description="the persistent scheduler steps by gridDim.x + 1: tile residue gridDim.x is never visited",
            knobs={"tile_stride": "gridDim.x + 1"}, expect_gpu="wrong",
            gpu_note="whole output tiles keep their NaN poison (#unwritten > 0)",
            verifier=_edit("schedule", step_delta=1), rule="scheduler.bijection",
        ),
        Mutant(
            id="tile_stride_minus_1", cls="scheduler",
            description="the persistent scheduler steps by gridDim.x - 1: tiles are computed by two CTAs",
            knobs={"tile_stride": "gridDim.x - 1"}, expect_gpu="maybe benign",
            gpu_note=("every tile is still covered and duplicate CTAs store identical values, so the "
                      "output is most likely correct: this is wasted work, not a wrong result"),
            verifier=_edit("schedule", step_delta=-1), rule="scheduler.bijection",
            verifier_note=("rejected: two CTAs own the same tile, a write-write race on D even when the "
                           "values happen to agree"),
        ),
        Mutant(
            id="stsm_row_lanes_skewed", cls="epilogue_r2s",
            description=("the epilogue's stmatrix takes matrix i's row addresses from lanes 8(i+1)..8(i+1)+7: "
                         "each 8x8 accumulator block is staged at its neighbour's rows"),
            knobs=None, expect_gpu="wrong", gpu_note=_STSM_PROBE,
            verifier=_edit("staging", row_lane_skew=1), rule="epilogue.stmatrix",
        ),
        Mutant(
            id="stsm_register_order", cls="epilogue_r2s",
            description="the epilogue passes stmatrix its accumulator pairs in the order (1, 0, 3, 2)",
            knobs=None, expect_gpu="wrong", gpu_note=_STSM_PROBE,
            verifier=_edit("staging", matrix_order=(1, 0, 3, 2)), rule="epilogue.stmatrix",
        ),
        Mutant(
            id="stsm_missing_trans", cls="epilogue_r2s",
            description=("swap-AB (column-major D) staged with the non-transposing stmatrix (STSM_N instead of "
                         "STSM_T)"),
            knobs=None, expect_gpu="wrong",
            gpu_note=("no GPU realisation: the row addresses are not 16-byte aligned, which PTX leaves "
                      "undefined (CuTe refuses to build this copy)"),
            verifier=_edit("staging", {"swap_ab": True}, trans=False), rule="epilogue.stmatrix",
        ),
        Mutant(
            id="store_wait_all_stages", cls="store_pipeline",
            description=("the epilogue lets as many TMA stores stay in flight as it has staging stages before "
                         "rewriting one (wait_group.read S instead of S - 1)"),
            knobs=None, expect_gpu="maybe benign",
            gpu_note=("no GPU realisation: a race between the TMA store reading a stage and the next "
                      "subtile's stmatrix overwriting it"),
            verifier=_edit("staging", store_wait=lambda d: d.tensor(d.staging.dst).shape[2]),
            rule="epilogue.stage_reuse",
        ),
        Mutant(
            id="walk_swizzle_off_by_one", cls="scheduler",
            description=("the tile walk uses log2(swizzle) + 1 where CUTLASS's get_work_idx_m_and_n uses "
                         "log2(swizzle): the swizzled panels no longer tile the grid"),
            knobs=None, expect_gpu="wrong",
            gpu_note="no GPU realisation: the mutant kernel walks tiles without swizzle",
            verifier=_edit("schedule", walk_mutation="swizzle_off_by_one"), rule="scheduler.bijection",
        ),
        Mutant(
            id="splitk_drops_remainder", cls="scheduler",
            description="split-K gives every split k_tiles // splits k-tiles: the k_tiles % splits remainder is dropped",
            knobs=None, expect_gpu="wrong",
            gpu_note="no GPU realisation: the mutant kernel has no split-K",
            verifier=_edit("schedule", {"scheduler": "splitk", "splits": 3},
                           division_mutation=(("drop_remainder", True),)),
            rule="scheduler.bijection",
        ),
        Mutant(
            id="streamk_unit_overlap", cls="scheduler",
            description="a stream-K unit's k range runs one k-tile into its neighbour's: that k-tile is summed twice",
            knobs=None, expect_gpu="wrong",
            gpu_note="no GPU realisation: the mutant kernel has no stream-K",
            verifier=_edit("schedule", {"scheduler": "streamk"}, division_mutation=(("overlap", 1),)),
            rule="scheduler.bijection",
        ),
        Mutant(
            id="mcast_mask_wrong_axis", cls="multicast_mask",
            description=("A's multicast mask names the CTAs of the issuing CTA's cluster column instead of its row: "
                         "A rows reach CTAs computing another m-block"),
            knobs=None, expect_gpu="wrong", gpu_note=_NO_CLUSTER,
            verifier=_edit("load:sA", _C2X2, mask_axis="m"), rule="tma.multicast",
        ),
        Mutant(
            id="mcast_slice_wrong_axis", cls="multicast_mask",
            description="each CTA picks its A slice by its cluster m index instead of its n index",
            knobs=None, expect_gpu="hang", gpu_note=_NO_CLUSTER + "; half of every A stage never arrives",
            verifier=_edit("load:sA", _C2X2, slice_axis="m"), rule="tma.multicast",
        ),
        Mutant(
            id="mcast_mask_without_self", cls="multicast_mask",
            description="B's multicast mask leaves out the issuing CTA",
            knobs=None, expect_gpu="hang", gpu_note=_NO_CLUSTER + "; the issuer's own slice never lands",
            verifier=_edit("load:sB", _C2X2, mask_self=False), rule="tma.multicast",
        ),
        Mutant(
            id="mcast_mask_row_major_rank", cls="multicast_mask",
            description=("A's mask bits are computed as m * cluster_n + n, but %cluster_ctarank is "
                         "m + n * cluster_m"),
            knobs=None, expect_gpu="wrong or hang", gpu_note=_NO_CLUSTER,
            verifier=_edit("load:sA", _C2X2, rank_order="row"), rule="tma.multicast",
        ),
        Mutant(
            id="k_tiles_minus_1", cls="k_loop",
            description="the k loop runs ceil_div(K, tile_k) - 1 k-tiles: the last k-tile is dropped",
            knobs={"k_tiles_delta": -1}, expect_gpu="wrong",
            gpu_note="k in [64 * (k_tiles - 1), K) is never summed",
            verifier=_edit("kloop", rounding="floor"), rule="k.coverage",
            verifier_note=("the verifier's k loop has no offset; it is modelled as floor(K / tile_k) "
                           "k-tiles, which equals the kernel's ceil - 1 whenever K % tile_k != 0 "
                           "(the mutant shape has K = 328)"),
        ),
        Mutant(
            id="k_blocks_missing", cls="k_loop",
            description="the consumer issues 3 of the 4 GMMA k-blocks of each k-tile",
            knobs=None, expect_gpu="wrong",
            gpu_note="no GPU realisation: the kernel always issues tile_k / 16 k-blocks",
            verifier=_edit("kloop", k_blocks=3), rule="k.coverage",
        ),
        Mutant(
            id="no_zero_fill", cls="k_loop",
            description="TMA out-of-bounds elements past K are not zero-filled",
            knobs=None, expect_gpu="wrong",
            gpu_note="no GPU realisation: TMA tile mode always zero-fills out-of-bounds box elements",
            verifier=_edit("kloop", oob_fill="none"), rule="k.coverage",
        ),
        Mutant(
            id="reset_per_tile_consumer", cls="pipeline_reset",
            description="the consumer re-creates its pipeline state per output tile; the producer carries it",
            knobs={"carry_across_tiles": False}, expect_gpu="wrong or hang",
            gpu_note=("with 6 k-tiles and 4 stages, tile 1's consumer starts at stage 0 while the producer's "
                      "next fill goes to stage 2"),
            verifier=_pipeline(consumer={"carry_across_tiles": False}),
            rule="pipeline.carry", extra_rules=("pipeline.protocol",),
        ),
        Mutant(
            id="reset_per_tile_both", cls="pipeline_reset",
            description="both sides re-create their pipeline state per output tile",
            knobs={"carry_across_tiles": False, "producer_carry_across_tiles": False},
            expect_gpu="wrong or hang",
            gpu_note=("consistent with each other, but the barriers' phases are not reset: with 6 k-tiles "
                      "(not a multiple of 2S = 8) parity waits pass on stale phases (VERIFIER.md pitfall 3)"),
            verifier=_pipeline(producer={"carry_across_tiles": False}, consumer={"carry_across_tiles": False}),
            rule="pipeline.carry",
        ),
    ]
    out: dict[str, Mutant] = {}
    for m in ms:
        if m.id in out:
            raise ValueError(f"duplicate mutant id {m.id!r}")
        if m.knobs is not None:
            knobs_of(m.knobs)  # unknown knob names fail at import, not at render time
        out[m.id] = m
    return out


#: every mutant, by id, in a fixed order
CATALOGUE: dict[str, Mutant] = _catalogue()


def verify_mutant(mutant: Mutant | str, cfg: GemmConfig = BASELINE_CONFIG, *, smt: bool = True) -> Any:
    """Run :func:`argus_cutlass.verify.verify_gemm` on the mutant's verifier-side program.

    Returns the :class:`~argus_cutlass.verify.report.VerificationReport` (never raises for a
    rejected program).

    Raises:
        ValueError: the mutant is not modelled by the verifier.
    """
    from argus_cutlass.verify import verify_gemm

    m = CATALOGUE[mutant] if isinstance(mutant, str) else mutant
    program, dsl = m.build_verifier_program(cfg)
    return verify_gemm(program, dsl, smt=smt)


__all__ = [
    "BASELINE_CONFIG",
    "BASELINE_KNOBS",
    "CATALOGUE",
    "GPU_BOX_BYTES",
    "GPU_CONSUMER_ARRIVERS",
    "Mutant",
    "knobs_of",
    "verify_mutant",
]
