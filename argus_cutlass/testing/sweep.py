"""False-alarm sweep of the GEMM verifier (issue 9, Deliver 5): random configurations across the
whole search space, each rejection tied to a named rule with its source, or sent to the GPU.

Steps (CPU, then optionally the H200):

1. :func:`sample_configs`: a seeded random sample of distinct :class:`GemmConfig`\\ s over every
   fragment of :class:`~argus_cutlass.kernels.gemm.space.GemmSpace` (tile_m/n/k, cluster, stages
   2..12, schedule, raster, swizzle, epi_n, decomposition incl. stream-K / split-K, swap_ab) plus
   ``dtype`` x ``out_dtype`` x ``layout``; ``epi_m`` follows the space's derivation. Nothing is
   filtered by feasibility: the space's one cross-fragment constraint (stream-K / split-K need the
   cooperative schedule, :func:`~argus_cutlass.kernels.gemm.space.admissible`) is part of the
   space's definition.
2. :func:`sweep_config`: ``build_program(cfg)`` (a ``ConfigError`` / ``DslError`` is a build-time
   refusal), ``verify_gemm(program)`` -> ``accepted`` / ``rejected`` / ``unknown``; every rejected
   program is also printed (``render_gemm``) to record what the kernel would ask of the hardware.
3. :func:`classify_violation`: each violation is matched against :data:`RULE_SOURCES`, a table of
   named rules, each with its source and what the hardware, CUTLASS or the printed kernel does:

   ``hardware``       a limit of the H100/H200 or its toolchain (CUDA Programming Guide, PTX ISA,
                      driver API); the entry's ``check`` recomputes the number from the program, so
                      a rejection inside a *model margin* (e.g. the verifier's register overhead)
                      is not credited to the hardware;
   ``static_assert``  the printed kernel stops the compile (``templates/gemm/...``, text quoted);
   ``cutlass``        CUTLASS refuses the same configuration at compile time (header and text
                      quoted), but our printed kernel does not: such configurations go to the GPU.

   :func:`compile_representatives` compiles one representative per (rule, reason) pair with nvcc
   (bounded: ``max_compiles``) and records whether it builds, the ``static_assert`` that stopped
   it, and ptxas' resource report.
4. A rejected configuration whose violations are all ``cutlass`` or unclassified is **required**
   on the GPU; :func:`run_gpu` builds it without the verifier, runs it in a child process with a
   timeout on random inputs with D poisoned with NaN against an fp32 reference
   (:mod:`argus_cutlass.testing.gpu`) and classifies it ``wrong`` / ``hung`` / ``crashed`` /
   ``benign`` / ``compile_fail``. ``benign`` for a rejected configuration is a **false alarm**
   unless :data:`DOCUMENTED_BENIGN` names a race or undefined behaviour that explains it.
   One representative per hardware reason that builds is run too (``confirm``: it shows the rule
   on silicon, it is not needed for the verdict), after baselines from :data:`SILICON_CORRECT`.

Nothing here runs at import; nvcc and the GPU are touched only by the functions that say so.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from argus_cutlass.kernels.gemm.config import GemmConfig
from argus_cutlass.kernels.gemm.space import GemmSpace

__all__ = [
    "DOCUMENTED_BENIGN",
    "DTYPES",
    "ISOLATING_PROBES",
    "LAYOUTS",
    "N_SWEEP",
    "OUT_DTYPES",
    "RULE_SOURCES",
    "SEED",
    "SILICON_CORRECT",
    "CompileRecord",
    "RuleSource",
    "SweepRecord",
    "classify_violation",
    "compile_representatives",
    "gpu_plan",
    "markdown",
    "pick_representatives",
    "run_gpu",
    "run_sweep",
    "sample_configs",
    "summary",
    "sweep_config",
    "write_outputs",
]

#: seed of the sweep's sampler (``random.Random``)
SEED = 9
#: configurations in the sweep (issue 9: at least 300)
N_SWEEP = 300
DTYPES = ("bf16", "fp16")
OUT_DTYPES = ("bf16", "fp16", "fp32")
LAYOUTS = ("tn", "nt", "nn", "tt")
#: bytes of dynamic shared memory one block may opt into on compute capability 9.0
SMEM_OPT_IN_BYTES = 232448
#: bytes a GMMA descriptor's 14-bit start-address field (address >> 4) can name
DESCRIPTOR_WINDOW_BYTES = 1 << 18
#: 32-bit registers one thread can hold on compute capability 9.0
MAX_REGISTERS_PER_THREAD = 255

#: configurations that ran with 0 numeric errors on the H200 in the lead's runs of issue 9
#: (``tests/gpu``, ``bench/mutants_gpu.py`` baselines): a rejection of any of them is a false
#: alarm. Used by ``tests/unit/test_false_alarms.py`` and as the GPU run's baselines.
_SWAP_PP12 = dict(tile_m=64, cluster_m=1, cluster_n=1, stages=12, schedule="pingpong", epi_m=64, swap_ab=True)
SILICON_CORRECT: dict[str, GemmConfig] = {
    "c1x1": GemmConfig(cluster_m=1),
    "default_c2x1": GemmConfig(),
    "nt_c1x1": GemmConfig(layout="nt", cluster_m=1),
    "nn_c1x1": GemmConfig(layout="nn", cluster_m=1),
    "tt_c1x1": GemmConfig(layout="tt", cluster_m=1),
    "nt_c2x1": GemmConfig(layout="nt", cluster_m=2),
    "tt_c1x2": GemmConfig(layout="tt", cluster_m=1, cluster_n=2),
    "fp16": GemmConfig(dtype="fp16", out_dtype="fp16"),
    "fp32_out": GemmConfig(out_dtype="fp32"),
    "pp_64x128": GemmConfig(tile_m=64, tile_n=128, schedule="pingpong", epi_m=64),
    "pp_128x128": GemmConfig(tile_m=128, tile_n=128, schedule="pingpong", epi_m=64),
    "swap_pp_64x16_s12": GemmConfig(tile_n=16, epi_n=16, **_SWAP_PP12),
    "swap_pp_64x32_s12": GemmConfig(tile_n=32, epi_n=32, **_SWAP_PP12),
    "swap_pp_64x16_s12_fp32": GemmConfig(tile_n=16, epi_n=16, out_dtype="fp32", **_SWAP_PP12),
    "swap_pp_64x32_s12_fp32": GemmConfig(tile_n=32, epi_n=32, out_dtype="fp32", **_SWAP_PP12),
    "tk128_s3_n128": GemmConfig(tile_k=128, stages=3, tile_n=128),
    "epi_n16": GemmConfig(epi_n=16),
    "epi_n64": GemmConfig(epi_n=64),
    "tile_n192": GemmConfig(tile_n=192),
    "256x128_nt": GemmConfig(tile_m=256, tile_n=128, layout="nt"),
    "256x128_nt_fp32": GemmConfig(tile_m=256, tile_n=128, layout="nt", out_dtype="fp32"),
    "streamk_c1x1": GemmConfig(cluster_m=1, scheduler="streamk"),
    "streamk_c2x1": GemmConfig(scheduler="streamk"),
    "streamk_tt_c1x2": GemmConfig(layout="tt", cluster_m=1, cluster_n=2, scheduler="streamk"),
    "streamk_nt_m_sw2": GemmConfig(layout="nt", raster="along_m", swizzle=2, scheduler="streamk"),
    "streamk_256x128": GemmConfig(tile_m=256, tile_n=128, scheduler="streamk"),
    "splitk2_c2x1": GemmConfig(scheduler="splitk", splits=2),
    "splitk4_c2x1": GemmConfig(scheduler="splitk", splits=4),
    "splitk2_fp32": GemmConfig(scheduler="splitk", splits=2, out_dtype="fp32"),
    "splitk4_fp32": GemmConfig(scheduler="splitk", splits=4, out_dtype="fp32"),
}

#: (rule, reason) -> the documented race / undefined behaviour that makes a benign silicon run of a
#: rejected configuration expected. Empty: no benign rejection is excused.
DOCUMENTED_BENIGN: dict[tuple[str, str], str] = {}


# ------------------------------------------------------------------------------------- sampling


def sample_configs(n: int = N_SWEEP, seed: int = SEED) -> list[GemmConfig]:
    """``n`` distinct configurations drawn with ``random.Random(seed)``: per draw a dtype, an
    output dtype and a layout (uniform), then one point of that ``GemmSpace`` (each fragment
    uniform, :meth:`GemmSpace.sample`). The sample for ``n`` is a prefix of the sample for any
    larger ``n`` (same seed).

    >>> a, b = sample_configs(5), sample_configs(40)
    >>> a == b[:5], len(set(b))
    (True, 40)
    """
    rng = random.Random(seed)
    spaces: dict[tuple[str, str, str], GemmSpace] = {}
    out: list[GemmConfig] = []
    seen: set[GemmConfig] = set()
    while len(out) < n:
        key = (rng.choice(DTYPES), rng.choice(OUT_DTYPES), rng.choice(LAYOUTS))
        space = spaces.setdefault(key, GemmSpace(*key))
        cfg = space.sample(rng)
        if cfg not in seen:
            seen.add(cfg)
            out.append(cfg)
    return out


# ------------------------------------------------------------------------------ rule sources


@dataclass(frozen=True)
class RuleSource:
    """One named rule a verifier violation can be tied to.

    Attributes:
        rule: the verifier's rule name (or a build-time refusal's rule).
        reason: short id of the violation's cause under that rule.
        kind: ``hardware``, ``static_assert`` (the printed kernel stops the compile) or
            ``cutlass`` (CUTLASS refuses it; our kernel does not: the GPU must show it).
        limit: the rule in words, with its number.
        source: where it is written (document and section, or file:line and the quoted text).
        effect: what the hardware / driver / compiler / CUTLASS does when it is broken.
        pattern: regex that the violation's message matches for this reason.
        check: ``program -> (holds, numbers)``: recomputes the limit from the program; ``holds``
            False means the verifier rejected inside a model margin, not at the named limit.
        needle: for ``static_assert`` / ``cutlass`` entries, the text that the template /
            header holds (tested against the files).
    """

    rule: str
    reason: str
    kind: str
    limit: str
    source: str
    effect: str
    pattern: str = ""
    check: Callable[[Any], tuple[bool, str]] | None = None
    needle: str = ""

    def row(self) -> dict[str, str]:
        return {"rule": self.rule, "reason": self.reason, "kind": self.kind, "limit": self.limit,
                "source": self.source, "effect": self.effect}


def _smem_over(program: Any) -> tuple[bool, str]:
    from argus_cutlass.plan.resources import smem_total_bytes

    total = smem_total_bytes(program)
    over = total > SMEM_OPT_IN_BYTES
    return over, f"kSmemBytes {total} {'>' if over else '<='} {SMEM_OPT_IN_BYTES}"


def _window_over(program: Any) -> tuple[bool, str]:
    ends = {r.src: 0 for r in program.reads}
    for t in program.tensors:
        if t.name in ends:
            ends[t.name] = t.base_bytes + t.size_bytes
    end = max(ends.values(), default=0)
    over = end > DESCRIPTOR_WINDOW_BYTES
    return over, f"MMA operand buffers end at byte {end} {'>' if over else '<='} {DESCRIPTOR_WINDOW_BYTES}"


def _acc_over(program: Any) -> tuple[bool, str]:
    from argus_cutlass.plan.resources import accumulator_registers

    acc = accumulator_registers(program)
    over = acc > MAX_REGISTERS_PER_THREAD
    return over, f"{acc} fp32 accumulator registers per thread {'>' if over else '<='} {MAX_REGISTERS_PER_THREAD}"


def _coop_rows(program: Any) -> tuple[bool, str]:
    mma = program.mma
    rows = program.read("A").tile_mn
    per_wg = rows // max(1, mma.atoms_m)
    return per_wg % 64 != 0, f"tile_m {rows} / {mma.atoms_m} warpgroups = {per_wg} rows per warpgroup (wgmma: 64)"


_CUTLASS_EPI = "cutlass/epilogue/collective/sm90_epilogue_tma_warpspecialized.hpp"
_CUTLASS_COOP = "cutlass/gemm/kernel/sm90_gemm_tma_warpspecialized_cooperative.hpp"
_CUTLASS_MMA = "cutlass/gemm/collective/sm90_mma_tma_gmma_ss_warpspecialized.hpp"
_CUTLASS_PP = "cutlass/gemm/kernel/sm90_gemm_tma_warpspecialized_pingpong.hpp"
_CUDA_SPECS = ("CUDA C++ Programming Guide, 'Technical Specifications per Compute Capability' "
               "(compute capability 9.0)")

#: every named rule a rejection can be tied to; the first entry whose rule and pattern match (and
#: whose check holds) classifies a violation
RULE_SOURCES: tuple[RuleSource, ...] = (
    # ---- shared memory
    RuleSource("smem.capacity", "over_opt_in", "hardware",
               "at most 227 KiB = 232448 bytes of dynamic shared memory per block (opt-in)",
               f"{_CUDA_SPECS}: maximum shared memory per thread block 227 KB",
               "the printed host code calls cudaFuncSetAttribute(gemm_kernel, "
               "cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes); the driver refuses a value above the "
               "opt-in limit (cudaErrorInvalidValue), the entry returns kErrAttribute (7) and launches nothing",
               r"> 232448 bytes", _smem_over),
    RuleSource("smem.alignment", "swizzle_period", "static_assert",
               "swizzled smem buffers start at a multiple of their swizzle period (8 x swizzle bytes)",
               "templates/gemm/traits.j2 (PTX ISA 9.7.15.5.1: descriptor base offset 0; 9.7.9.25: TMA smem "
               "address alignment)", "the printed kernel's static_assert stops the compile",
               r"is not a multiple of the \d+-byte period", needle="R8 smem.alignment: every swizzled buffer"),
    RuleSource("gmma.descriptor", "start_field_14bit", "hardware",
               "a wgmma descriptor names shared memory through a 14-bit field holding address >> 4 "
               "(a 256 KiB window)",
               "PTX ISA 9.7.15.5.1.1 'Matrix Descriptor Format': bits 13-0 = matrix start address, encoded "
               "(addr & 0x3FFFF) >> 4",
               "an operand buffer placed past byte 262144 cannot be named: the field wraps and wgmma reads another "
               "buffer (and no such allocation exists on sm_90: see smem.capacity)",
               r"overflows its 14 bits", _window_over),
    RuleSource("gmma.descriptor", "start_wrapped", "hardware",
               "a wgmma descriptor names shared memory through a 14-bit field holding address >> 4 "
               "(a 256 KiB window)",
               "PTX ISA 9.7.15.5.1.1 'Matrix Descriptor Format': bits 13-0 = matrix start address, encoded "
               "(addr & 0x3FFFF) >> 4",
               "an operand buffer placed past byte 262144 cannot be named: the masked start address points at "
               "byte (addr mod 2^18), inside another buffer",
               r"reads byte \d+ for slot .* but the view places it at", _window_over),
    # ---- registers
    RuleSource("registers", "acc_over_255", "hardware",
               "at most 255 32-bit registers per thread; a wgmma accumulator fragment lives in registers "
               "(N/2 fp32 per 64-row atom, all live across the k loop)",
               f"{_CUDA_SPECS}: maximum number of 32-bit registers per thread 255; PTX ISA 9.7.15.4 (wgmma D "
               f"fragment); {_CUTLASS_COOP}: MmaRegisterRequirement 232",
               "the accumulators cannot stay in registers: ptxas serializes every wgmma (C7511 'insufficient "
               "register resources for the wgmma pipeline') and spills them to local memory; the kernel still "
               "builds and runs, so this is a resource rule (the GPU probe says whether it stays correct)",
               r"fp32 accumulator registers per consumer thread", _acc_over),
    RuleSource("roles.registers", "setmaxnreg", "hardware",
               "setmaxnreg counts are multiples of 8 in [24, 256]; .dec never raises, .inc never lowers; "
               "warpgroups x 128 x count <= 65536",
               f"PTX ISA 9.7.17.1 (setmaxnreg); {_CUDA_SPECS}: 64K 32-bit registers per SM",
               "ptxas rejects an out-of-range immediate; a count past the SM's file cannot be granted",
               r"setmaxnreg|registers > 65536|warpgroups|issue_warps"),
    # ---- TMA
    RuleSource("tma.box_extent", "box_dim_256", "hardware", "every TMA box dimension is in [1, 256] elements",
               "CUDA Driver API, cuTensorMapEncodeTiled: boxDim[i] must be non-zero and <= 256",
               "cuTensorMapEncodeTiled returns CUDA_ERROR_INVALID_VALUE; the entry returns kErrTensorMap (6)",
               r"elements > 256|< 1"),
    RuleSource("tma.box_inner_bytes", "inner_16B_swizzle_span", "hardware",
               "the inner box extent x element size is a multiple of 16 bytes and at most the swizzle span",
               "CUDA Driver API, cuTensorMapEncodeTiled: boxDim[0] * elementSize must be a multiple of 16 bytes "
               "and <= the swizzle size (32/64/128 B) when interleave is NONE",
               "cuTensorMapEncodeTiled returns CUDA_ERROR_INVALID_VALUE; the entry returns kErrTensorMap (6)",
               r"multiple of 16|swizzle span"),
    RuleSource("tma.map", "encodable", "hardware",
               "a tensor map's swizzle, L2 promotion and data type are enum values; a TMA store does not multicast",
               "CUDA Driver API, cuTensorMapEncodeTiled (CUtensorMapSwizzle, CUtensorMapL2promotion); PTX ISA "
               "9.7.9.25 (cp.async.bulk.tensor)", "the map cannot be encoded or the instruction does not exist",
               r"."),
    # ---- GMMA
    RuleSource("gmma.n", "n_multiple_of_8", "hardware", "wgmma N is a multiple of 8 in [8, 256]",
               "PTX ISA 9.7.15.5 (wgmma.mma_async .m64nNk16: N = 8..256 in steps of 8)",
               "no such instruction shape: ptxas rejects it", r"is not a multiple of 8 in \[8, 256\]"),
    RuleSource("gmma.m_tile", "coop_rows_per_warpgroup", "hardware",
               "each consumer warpgroup's wgmma computes 64 rows; the cooperative schedule splits tile_m between "
               "2 warpgroups, so tile_m must be a multiple of 128",
               f"PTX ISA 9.7.15.5 (wgmma shapes .m64nNk16: M = 64 per warpgroup); {_CUTLASS_COOP}: "
               "static_assert(size<0>(TileShape{}) >= 128, \"Cooperative kernel requires Tile Size to be greater "
               "than or equal to 128 along the M-dimension.\")",
               "no wgmma shape computes fewer than 64 rows; CUTLASS's cooperative kernel refuses the tile at "
               "compile time", r"is not a multiple of 64 x 2 \(cooperative", _coop_rows,
               needle="Cooperative kernel requires Tile Size to be greater than or equal to 128 along the "
                      "M-dimension."),
    RuleSource("gmma.m_tile", "gmma_shape", "hardware",
               "wgmma is 64 x N x 16 for 16-bit inputs with an fp32 accumulator; tile_k is a multiple of 16",
               "PTX ISA 9.7.15.5 (wgmma.mma_async shapes)", "no such instruction shape: ptxas rejects it",
               r"GMMA|wgmma|accumulator"),
    # ---- epilogue
    RuleSource("epilogue.tile", "epi_m_partition", "static_assert",
               "an epilogue subtile holds one 64-row repetition of every warpgroup (epi_m == 64 x warpgroups)",
               "templates/gemm/epilogue.j2: static_assert(kEpiM == kEpiOpM * kEpiWarpgroups, \"one subtile "
               "row-block per repetition (rule epilogue.tile)\")",
               "the printed kernel's static_assert stops the compile",
               r"epi_m \d+ != ", needle="one subtile row-block per repetition (rule epilogue.tile)"),
    RuleSource("epilogue.tile", "epi_m_divides_tile_m", "cutlass", "the epilogue subtile's M divides the CTA tile's M",
               f"{_CUTLASS_EPI}: static_assert(size<0>(CtaTileMNK{{}}) % size<0>(shape(EpilogueTile{{}})) == 0, "
               "\"EPI_TILE_M must divide CTA_M\")",
               "CUTLASS refuses it at compile time; our epilogue.j2 walks kEpiTileM / kEpiM subtiles (integer "
               "division), so rows past the last whole subtile (all rows when epi_m > tile_m) are never stored",
               r"epi_m \d+ does not divide tile_m", needle="EPI_TILE_M must divide CTA_M"),
    RuleSource("epilogue.tile", "epi_n_divides_tile_n", "cutlass", "the epilogue subtile's N divides the CTA tile's N",
               f"{_CUTLASS_EPI}: static_assert(size<1>(CtaTileMNK{{}}) % size<1>(shape(EpilogueTile{{}})) == 0, "
               "\"EPI_TILE_N must divide CTA_N\")",
               "CUTLASS refuses it at compile time; our epilogue.j2 walks kEpiTileN / kEpiN subtiles (integer "
               "division), so columns past the last whole subtile (all columns when epi_n > tile_n) are never "
               "stored", r"epi_n \d+ does not divide tile_n", needle="EPI_TILE_N must divide CTA_N"),
    RuleSource("epilogue.tile", "epi_n_n8", "hardware",
               "an epilogue subtile covers whole 8-column accumulator blocks (epi_n % 8 == 0)",
               "PTX ISA 9.7.15.4 (wgmma D fragment in n8 blocks), 9.7.9.x stmatrix (.x2: 8 columns, .x4: 16)",
               "an n8 block would straddle two subtiles: no stmatrix shape stores it", r"is not a multiple of 8"),
    RuleSource("epilogue.stmatrix", "subtile_divides_tile", "cutlass",
               "the epilogue subtile divides the CTA tile (the staging check's precondition)",
               f"{_CUTLASS_EPI}: \"EPI_TILE_M must divide CTA_M\", \"EPI_TILE_N must divide CTA_N\"",
               "as epilogue.tile: CUTLASS refuses it; our kernel leaves the remainder unstored",
               r"the epilogue subtile \d+x\d+ does not divide the \d+x\d+ tile", needle="EPI_TILE_N must divide CTA_N"),
    # ---- cluster, pipeline, scheduler
    RuleSource("cluster", "portable_8", "hardware", "a thread-block cluster has at most 8 CTAs (portable size)",
               "CUDA C++ Programming Guide, 'Thread Block Clusters' (portable cluster size 8; larger needs "
               "cudaFuncAttributeNonPortableClusterSizeAllowed); PTX ISA 9.7.9.25 (ctaMask: 16 bits)",
               "cudaLaunchKernelEx refuses the cluster dimension", r"CTAs > 8"),
    RuleSource("cluster", "boxes_split", "static_assert",
               "each multicast load's boxes split evenly among the CTAs that share it",
               "templates/gemm/traits.j2: static_assert(kBoxes{A,B} % kMulticast{A,B} == 0, \"each multicast CTA "
               "issues a whole number of boxes\")", "the printed kernel's static_assert stops the compile",
               r"do not split evenly", needle="each multicast CTA issues a whole number of boxes"),
    RuleSource("stages", "at_least_2", "cutlass", "the mainloop pipeline has at least 2 stages",
               f"{_CUTLASS_MMA}: static_assert(DispatchPolicy::Stages >= 2, \"Specialization requires Stages set "
               "to value 2 or more.\")", "CUTLASS refuses it at compile time", r"< 2",
               needle="Specialization requires Stages set to value 2 or more."),
    RuleSource("tile_scheduler", "pingpong_streamk", "cutlass", "stream-K (and split-K) need the cooperative kernel",
               f"{_CUTLASS_PP}: static_assert(!cute::is_same_v<TileScheduler_, StreamKScheduler>, \"Ping-pong kernel "
               "does not currently support stream-K scheduler.\")", "CUTLASS refuses it at compile time",
               r"needs the cooperative schedule",
               needle="Ping-pong kernel does not currently support stream-K scheduler."),
    # ---- the program's own consistency relations: printed as static_asserts
    *(RuleSource(rule, "relation", "static_assert", "the program's consistency relation between two nodes",
                 "templates/gemm/traits.j2: one static_assert per relation node, message "
                 "\"{{ r.invariant }} {{ r.rule }}: {{ r.text }}...\"",
                 "the printed kernel's static_assert stops the compile", r" fails: ",
                 needle='"{{ r.invariant }} {{ r.rule }}: {{ r.text }}')
      for rule in ("pipeline.buffers", "pipeline.wrap", "loop.step", "mma.dtype", "mma.major", "mma.tile",
                   "cluster.consistency", "epilogue.partition", "smem.disjoint")),
    # ---- build-time refusal (build_program)
    RuleSource("smem.atom", "no_gmma_atom", "hardware",
               "a GMMA / TMA smem tile's contiguous extent is a multiple of 16 bytes",
               "PTX ISA 9.7.15.5.1 (canonical GMMA layouts: 16-byte core-matrix rows); cuTensorMapEncodeTiled "
               "(16-byte inner box)", "no descriptor or tensor map can address the tile", r"."),
)

#: template files that hold the static_asserts quoted by ``static_assert`` entries
STATIC_ASSERT_TEMPLATES = ("templates/gemm/traits.j2", "templates/gemm/epilogue.j2")


def classify_violation(program: Any, rule: str, message: str) -> tuple[RuleSource | None, str, str]:
    """The :data:`RULE_SOURCES` entry a violation is tied to.

    Returns:
        ``(entry, reason, numbers)``: ``entry`` is None when no entry matches or when the matching
        entry's ``check`` does not hold (then ``reason`` says ``margin:<reason>``); ``numbers`` is
        the check's text (empty without a check). An unmatched violation's reason is its message
        with digits replaced by ``#`` (first 80 characters).
    """
    for src in RULE_SOURCES:
        if src.rule != rule or not re.search(src.pattern, message):
            continue
        if src.check is None or program is None:
            return src, src.reason, ""
        try:
            holds, numbers = src.check(program)
        except Exception as exc:  # noqa: BLE001 - a check that cannot run credits nothing
            return None, f"margin:{src.reason}", f"check failed: {type(exc).__name__}: {exc}"
        if holds:
            return src, src.reason, numbers
        return None, f"margin:{src.reason}", numbers
    return None, re.sub(r"\d+", "#", message)[:80], ""


# ------------------------------------------------------------------------------------ one config


@dataclass
class SweepRecord:
    """One sampled configuration's result.

    Attributes:
        id: ``c###`` (sample order).
        fields: the GemmConfig's fields.
        kernel: the program's kernel name (label + hash of every node); empty on a build refusal.
        outcome: ``accepted`` (no violation, every obligation decided), ``unknown`` (no violation,
            some obligation undecided), ``rejected``, or ``refused`` (build_program raised).
        violations: per violation: rule, reason, kind (``hardware`` / ``static_assert`` / ``cutlass``
            / ``unclassified``), the check's numbers and the message (first 300 characters).
        verdict: for a rejected / refused config: ``hardware``, ``static_assert`` (a compiled
            representative stopped at a static_assert naming the rule), ``cutlass`` or
            ``unclassified``; empty otherwise.
        gpu: ``required`` (verdict cutlass / unclassified: the H200 must show it), ``confirm`` (a
            hardware reason's representative) or empty.
        printed: the printed kernel's facts (``kSmemBytes``, source sha256) or the render error.
    """

    id: str
    fields: dict[str, Any]
    kernel: str = ""
    outcome: str = ""
    rules: list[str] = field(default_factory=list)
    violations: list[dict[str, Any]] = field(default_factory=list)
    unknowns: list[str] = field(default_factory=list)
    verdict: str = ""
    gpu: str = ""
    printed: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def config(self) -> GemmConfig:
        return GemmConfig(**self.fields)

    def pairs(self) -> list[tuple[str, str]]:
        return list(dict.fromkeys((v["rule"], v["reason"]) for v in self.violations))


def _verify(program: Any, smt: bool) -> Any:
    from argus_cutlass.verify import verify_gemm

    return verify_gemm(program, smt=smt)


def _printed(program: Any) -> dict[str, Any]:
    """What the printed kernel asks for: ``kSmemBytes`` evaluated from its constants, and the
    sha256 of the source (the GPU run re-renders and compares)."""
    from argus_cutlass.render.gemm import render_gemm

    try:
        src = render_gemm(program)
    except Exception as exc:  # noqa: BLE001 - an unprintable program is a fact to record
        return {"render_error": f"{type(exc).__name__}: {exc}"}
    out: dict[str, Any] = {"sha256": hashlib.sha256(src.encode()).hexdigest()}
    bar = re.search(r"constexpr int kSmemBarriers = (\d+);", src)
    tot = re.search(r"constexpr int kSmemBytes = kSmemBarriers \+ 2 \* (\d+) \* 8 \+ 1024;", src)
    if bar and tot:
        out["kSmemBytes"] = int(bar.group(1)) + 2 * int(tot.group(1)) * 8 + 1024
    return out


def sweep_config(cfg: GemmConfig, ident: str, *, smt: bool = True, render: bool = True) -> SweepRecord:
    """Build, verify, classify and (when rejected and ``render``) print one configuration."""
    from argus_cutlass.errors import ArgusError
    from argus_cutlass.kernels.gemm.program import build_program

    rec = SweepRecord(ident, cfg.model_dump())
    t0 = time.perf_counter()
    try:
        program = build_program(cfg)
    except ArgusError as exc:
        src, reason, numbers = classify_violation(None, exc.rule, exc.message)
        rec.outcome = "refused"
        rec.rules = [exc.rule]
        rec.violations = [{"rule": exc.rule, "reason": reason, "kind": src.kind if src else "unclassified",
                           "numbers": numbers, "message": exc.message[:300]}]
        rec.verdict = src.kind if src else "unclassified"
        rec.seconds = time.perf_counter() - t0
        return rec
    rec.kernel = program.kernel_name()
    report = _verify(program, smt)
    from argus_cutlass.errors import undecided_text, unknown_text

    rec.unknowns = [unknown_text(u) for u in report.unknowns] + [undecided_text(o) for o in report.undecided]
    if report.violations:
        rec.outcome = "rejected"
        for v in report.violations:
            src, reason, numbers = classify_violation(program, v.rule, v.message)
            rec.violations.append({"rule": v.rule, "reason": reason, "kind": src.kind if src else "unclassified",
                                   "numbers": numbers, "message": v.message[:300]})
        rec.rules = sorted({v.rule for v in report.violations})
        kinds = {v["kind"] for v in rec.violations}
        rec.verdict = next((k for k in ("hardware", "static_assert", "cutlass") if k in kinds), "unclassified")
        if render:
            rec.printed = _printed(program)
    else:
        rec.outcome = "unknown" if not report.complete else "accepted"
    rec.seconds = time.perf_counter() - t0
    return rec


# ------------------------------------------------------------------------------------- compiles


@dataclass
class CompileRecord:
    """nvcc on one representative: built or not, the static_asserts that stopped it, ptxas's
    C75xx performance messages, registers and spill bytes, wall seconds."""

    id: str
    pairs: list[list[str]]
    kernel: str
    built: bool = False
    seconds: float = 0.0
    static_asserts: list[str] = field(default_factory=list)
    ptxas_messages: list[str] = field(default_factory=list)
    registers: int | None = None
    spill_bytes: int | None = None
    error: str = ""


Pair = tuple[str, str]


def pick_representatives(records: Sequence[SweepRecord], max_compiles: int = 10) -> list[tuple[SweepRecord, list[Pair]]]:
    """One representative per (rule, reason) pair of the rejected configurations: for each pair
    (most frequent first) the configuration with the fewest pairs that has it (ties: sample order);
    a representative covers every pair it has. At most ``max_compiles`` representatives."""
    rejected = [r for r in records if r.outcome == "rejected"]
    freq = Counter(p for r in rejected for p in r.pairs())
    chosen: list[tuple[SweepRecord, list[tuple[str, str]]]] = []
    covered: set[tuple[str, str]] = set()
    for pair, _ in sorted(freq.items(), key=lambda kv: (-kv[1], kv[0])):
        if pair in covered or len(chosen) >= max_compiles:
            continue
        rep = min((r for r in rejected if pair in r.pairs()), key=lambda r: (len(r.pairs()), r.id))
        new = [p for p in rep.pairs() if p not in covered]
        covered.update(new)
        chosen.append((rep, new))
    return chosen


def _nvcc(rec: SweepRecord, pairs: list[tuple[str, str]], work: Path, timeout_s: float) -> CompileRecord:
    from argus_cutlass.build.nvcc import nvcc_command, parse_ptxas_resources, relevant_lines
    from argus_cutlass.build.toolchain import find_toolchain
    from argus_cutlass.kernels.gemm.program import build_program
    from argus_cutlass.render.gemm import render_gemm
    from argus_cutlass.testing.gpu import static_assert_messages

    out = CompileRecord(rec.id, [list(p) for p in pairs], rec.kernel)
    try:
        src = render_gemm(build_program(rec.config))
    except Exception as exc:  # noqa: BLE001
        out.error = f"render: {type(exc).__name__}: {exc}"
        return out
    cu, so = work / f"{rec.id}.cu", work / f"{rec.id}.so"
    cu.write_text(src)
    cmd = [*nvcc_command(find_toolchain(), "shared"), "-o", str(so), str(cu)]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        out.seconds, out.error = time.perf_counter() - t0, f"nvcc ran longer than {timeout_s:g} s"
        return out
    out.seconds = time.perf_counter() - t0
    log = (proc.stdout or "") + (proc.stderr or "")
    (work / f"{rec.id}.log").write_text(log)
    out.static_asserts = static_assert_messages(log)
    c75 = re.finditer(r"\(C75\d\d\)[^\n]*?(?= in the function|$)", log, re.M)
    out.ptxas_messages = sorted({m.group(0)[:200] for m in c75})
    funcs = parse_ptxas_resources(log)
    out.registers = max((f.registers for f in funcs), default=None)
    out.spill_bytes = max((f.spill_store_bytes + f.spill_load_bytes for f in funcs), default=None)
    out.built = proc.returncode == 0 and so.is_file()
    if not out.built:
        out.error = relevant_lines(log)[-1500:]
    return out


def compile_representatives(records: Sequence[SweepRecord], work: str | Path, *, max_compiles: int = 10,
                            workers: int = 2, timeout_s: float = 900.0,
                            log: Callable[[str], None] = print) -> list[CompileRecord]:
    """nvcc (the project's flags, a shared library with ptxas -v) on :func:`pick_representatives`,
    ``workers`` at a time; then every rejected record whose pair's representative stopped at a
    ``static_assert`` naming the pair's rule gets that verdict (unless a hardware rule already
    holds). Mutates ``records``."""
    work = Path(work)
    work.mkdir(parents=True, exist_ok=True)
    reps = pick_representatives(records, max_compiles)
    log(f"compiling {len(reps)} representative(s) with {workers} nvcc process(es)")
    with ThreadPoolExecutor(max_workers=max(1, workers)) as ex:
        results = list(ex.map(lambda rp: _nvcc(rp[0], rp[1], work, timeout_s), reps))
    stopped: dict[tuple[str, str], str] = {}
    for c in results:
        log(f"  {c.id} {'built' if c.built else 'FAILED'} in {c.seconds:.0f} s; pairs {c.pairs}; "
            f"static_asserts {c.static_asserts}; ptxas {c.ptxas_messages}; spills {c.spill_bytes}")
        for rule, reason in c.pairs:
            hit = [m for m in c.static_asserts if rule in m]
            if hit:
                stopped[(rule, reason)] = hit[0]
    for r in records:
        if r.outcome != "rejected" or r.verdict == "hardware":
            continue
        for v in r.violations:
            msg = stopped.get((v["rule"], v["reason"]))
            if msg:
                v["kind"], v["static_assert"] = "static_assert", msg
                r.verdict = "static_assert"
    return results


# ------------------------------------------------------------------------------------- the sweep


def run_sweep(configs: Iterable[GemmConfig], *, smt: bool = True,
              log: Callable[[str], None] = print) -> list[SweepRecord]:
    """:func:`sweep_config` on every configuration (ids ``c000``...), then the GPU roles
    (:func:`gpu_plan`)."""
    records = []
    t0 = time.perf_counter()
    for i, cfg in enumerate(configs):
        records.append(sweep_config(cfg, f"c{i:03d}", smt=smt))
        if (i + 1) % 50 == 0:
            log(f"  {i + 1} configs in {time.perf_counter() - t0:.0f} s")
    assign_gpu_roles(records)
    return records


def assign_gpu_roles(records: Sequence[SweepRecord]) -> None:
    """``required``: every rejected, printable configuration whose verdict is ``cutlass`` or
    ``unclassified``. ``confirm``: per hardware (rule, reason) pair, the printable configuration
    that isolates it best (fewest other pairs; ties: sample order), one per pair."""
    for r in records:
        r.gpu = ""
        if r.outcome == "rejected" and r.verdict in ("cutlass", "unclassified") and "render_error" not in r.printed:
            r.gpu = "required"
    hw = [r for r in records if r.outcome == "rejected" and r.verdict == "hardware" and "render_error" not in r.printed]
    for pair in sorted({(v["rule"], v["reason"]) for r in hw for v in r.violations if v["kind"] == "hardware"}):
        rep = min((r for r in hw if pair in r.pairs()), key=lambda r: (len(r.pairs()), r.id))
        rep.gpu = "confirm"


#: out-of-sample configurations that isolate a hardware rule the sample only hits together with
#: another one (the GPU run's ``probe`` role): (id, config, the rule it isolates)
ISOLATING_PROBES: tuple[tuple[str, GemmConfig, str], ...] = (
    # ping-pong 128x256: 256 fp32 accumulators per thread (> 255), shared memory fits (3 stages)
    ("probe_registers", GemmConfig(tile_m=128, tile_n=256, cluster_m=1, stages=3, schedule="pingpong", epi_m=64),
     "registers"),
    # a cooperative 64-row tile (epi_m 128 is the derived value, so epilogue.tile comes with it)
    ("probe_coop_m64", GemmConfig(tile_m=64, tile_n=128, cluster_m=1, stages=6), "gmma.m_tile"),
)


def gpu_plan(records: Sequence[SweepRecord],
             baselines: Sequence[str] = ("c1x1", "streamk_c2x1")) -> list[tuple[str, str, GemmConfig]]:
    """``(id, role, config)`` to build and run on the GPU: baselines from :data:`SILICON_CORRECT`
    first (they must be benign, else the run means nothing), then ``required``, ``confirm`` and the
    :data:`ISOLATING_PROBES` (``probe``)."""
    plan = [(f"baseline_{b}", "baseline", SILICON_CORRECT[b]) for b in baselines]
    for role in ("required", "confirm"):
        plan += [(r.id, role, r.config) for r in records if r.gpu == role]
    plan += [(ident, "probe", cfg) for ident, cfg, _ in ISOLATING_PROBES]
    return plan


def summary(records: Sequence[SweepRecord]) -> dict[str, Any]:
    """Counts: by outcome, by verdict, by rule (configs with the rule / with it alone), by (rule,
    reason, kind), the GPU list sizes, unclassified violations."""
    rejected = [r for r in records if r.outcome in ("rejected", "refused")]
    by_rule: dict[str, dict[str, int]] = {}
    for r in rejected:
        for rule in r.rules:
            d = by_rule.setdefault(rule, {"configs": 0, "alone": 0})
            d["configs"] += 1
            d["alone"] += len(r.rules) == 1
    pairs = Counter((v["rule"], v["reason"], v["kind"]) for r in rejected for v in r.violations)
    return {
        "configs": len(records),
        "outcome": dict(Counter(r.outcome for r in records)),
        "verdict": dict(Counter(r.verdict for r in rejected)),
        "rule_sets": {" + ".join(k): n for k, n in Counter(tuple(r.rules) for r in rejected).most_common()},
        "by_rule": dict(sorted(by_rule.items())),
        "by_reason": [{"rule": a, "reason": b, "kind": c, "violations": n} for (a, b, c), n in sorted(pairs.items())],
        "gpu": dict(Counter(r.gpu for r in records if r.gpu)),
        "unclassified": [{"id": r.id, **v} for r in rejected for v in r.violations if v["kind"] == "unclassified"],
        "unprintable": [{"id": r.id, "error": r.printed["render_error"]} for r in rejected
                        if "render_error" in r.printed],
        "smem_printed_mismatch": [r.id for r in rejected if "kSmemBytes" in r.printed
                                  and any(v["rule"] == "smem.capacity" and v["kind"] == "hardware"
                                          and f"kSmemBytes {r.printed['kSmemBytes']} " not in v["numbers"]
                                          for v in r.violations)],
    }


# ------------------------------------------------------------------------------------- GPU run


def run_gpu(plan: Sequence[tuple[str, str, GemmConfig]], work: str | Path, *,
            expected_sha: dict[str, str] | None = None,
            shapes: Sequence[tuple[str, tuple[int, int, int]]] | None = None, kernel_timeout_s: float = 10.0,
            workers: int | None = None, seed: int = 0, log: Callable[[str], None] = print) -> list[dict[str, Any]]:
    """Build every planned configuration WITHOUT the verifier (the production template, the
    project's nvcc flags, in parallel) and run each in a child process with a deadline
    (:func:`argus_cutlass.testing.gpu.run_job`: random operands, D and its padding / guard rows
    poisoned with NaN, fp32 reference, per-element tolerance by output dtype).

    Returns one row per planned config: id, role, kernel, outcome (``benign`` / ``wrong`` /
    ``hung`` / ``crashed`` / ``compile_fail`` / ``error``), per-shape numbers, and ``verdict``:
    ``ok`` (baseline benign), ``HARNESS`` (baseline not benign: nothing else means anything),
    ``shown`` (rejected and not benign), ``FALSE ALARM`` (a required one benign, no documented race
    / UB), ``NOT SHOWN`` (a confirm / probe of a hardware rule ran correctly: the rule's effect is
    not a wrong result, e.g. spills), ``benign (documented: ...)``, or ``no verdict`` (``error``:
    the runner could not run it).
    ``expected_sha``: id -> sha256 of the source the CPU sweep printed; a mismatch is recorded.
    """
    from argus_cutlass.kernels.gemm.program import build_program
    from argus_cutlass.render.gemm import render_gemm
    from argus_cutlass.testing import gpu

    shapes = tuple(shapes or gpu.SHAPES)
    jobs = [gpu.Job(ident, role, cfg, build_program(cfg)) for ident, role, cfg in plan]
    t0 = time.perf_counter()
    builds = gpu.build_jobs(jobs, work, workers=workers)
    log(f"built {sum(b.so_path is not None for b in builds.values())}/{len(jobs)} in {time.perf_counter() - t0:.0f} s")
    rows: list[dict[str, Any]] = []
    for job in jobs:
        b = builds[job.id]
        sha = hashlib.sha256(render_gemm(job.program).encode()).hexdigest()
        row: dict[str, Any] = {"id": job.id, "role": job.base, "kernel": job.name, "fields": job.config.model_dump(),
                               "sha256": sha, "build": asdict(b)}
        if expected_sha and job.id in expected_sha and expected_sha[job.id] != sha:
            row["sha_mismatch"] = expected_sha[job.id]
        if b.so_path is None:
            row["outcome"], row["shapes"] = "compile_fail", []
        else:
            row["shapes"] = gpu.run_job(b.so_path, job.name, job.config, shapes, seed=seed,
                                        kernel_timeout_s=kernel_timeout_s)
            row["outcome"] = next((s["outcome"] for s in row["shapes"] if s["outcome"] != "benign"),
                                  "benign" if row["shapes"] else "crashed")
        row["verdict"] = _gpu_verdict(row)
        rows.append(row)
        log(f"{job.id:28s} {job.base:9s} {row['outcome']:12s} {row['verdict']:12s} {_numbers(row)}")
    return rows


def _gpu_verdict(row: dict[str, Any]) -> str:
    out = row["outcome"]
    if out == "error":
        return "no verdict"
    if row["role"] == "baseline":
        return "ok" if out == "benign" else "HARNESS"
    if out != "benign":
        return "shown"
    return "FALSE ALARM" if row["role"] == "required" else "NOT SHOWN"


def _numbers(row: dict[str, Any]) -> str:
    if row["outcome"] == "compile_fail":
        sa = row["build"].get("static_asserts") or []
        return f"static_assert: {sa[0]}" if sa else " ".join(row["build"].get("error", "").split())[-160:]
    parts = []
    for s in row["shapes"]:
        if "rel_err" in s:
            parts.append(f"{s['shape']}: rel {s['rel_err']:.2e} bad {s['bad']} NaN {s['nan']} oob {s['out_of_bounds']}")
        else:
            parts.append(f"{s['shape']}: {str(s.get('detail', ''))[:120]}")
    return "; ".join(parts)


def apply_documented(rows: list[dict[str, Any]], records: Sequence[SweepRecord]) -> None:
    """Turn a rejected config's ``FALSE ALARM`` into ``benign (documented: ...)`` when every one of
    its (rule, reason) pairs is in :data:`DOCUMENTED_BENIGN`."""
    by_id = {r.id: r for r in records}
    for row in rows:
        rec = by_id.get(row["id"])
        if row["verdict"] != "FALSE ALARM" or rec is None:
            continue
        docs = [DOCUMENTED_BENIGN.get(p) for p in rec.pairs()]
        if docs and all(docs):
            row["verdict"] = f"benign (documented: {'; '.join(d for d in docs if d)})"


# ------------------------------------------------------------------------------------- output


def _fields_text(fields: dict[str, Any]) -> str:
    f = fields
    sched = {"streamk": " streamK", "splitk": f" splitK{f['splits']}"}.get(f["scheduler"], "")
    return (f"{f['dtype']}/{f['out_dtype']} {f['layout']} {f['tile_m']}x{f['tile_n']}x{f['tile_k']} "
            f"c{f['cluster_m']}x{f['cluster_n']} s{f['stages']} {f['schedule'][:4]} e{f['epi_m']}x{f['epi_n']} "
            f"{f['raster']}/{f['swizzle']}{sched}{' swapAB' if f['swap_ab'] else ''}")


def markdown(records: Sequence[SweepRecord], compiles: Sequence[CompileRecord], command: str,
             meta: dict[str, Any]) -> str:
    """The report: command, counts by outcome / verdict / rule, the sources table, the compiled
    representatives, suspected false alarms, and the GPU list."""
    s = summary(records)
    lines = [f"# False-alarm sweep of the GEMM verifier ({len(records)} random configurations)", "",
             "Command:", "", f"    {command}", "",
             f"Sampler: `argus_cutlass.testing.sweep.sample_configs(n={meta['n']}, seed={meta['seed']})` over every "
             "GemmSpace fragment x dtype (bf16, fp16) x out_dtype (bf16, fp16, fp32) x layout (tn, nt, nn, tt); "
             f"verifier: `verify_gemm(build_program(cfg), smt={meta['smt']})`; {meta['seconds']:.0f} s.", "",
             "## Outcomes", "", "| outcome | configs |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in sorted(s["outcome"].items())]
    lines += ["", "Verdict of each rejected configuration (the strongest kind among its violations: hardware > "
              "static_assert > cutlass > unclassified):", "", "| verdict | configs |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in sorted(s["verdict"].items())]
    lines += ["", "## Rejections by rule", "", "| rule | configs | rule alone |", "|---|---|---|"]
    lines += [f"| `{k}` | {v['configs']} | {v['alone']} |" for k, v in s["by_rule"].items()]
    lines += ["", "Rule sets of the rejected configurations:", "", "| rules | configs |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in s["rule_sets"].items()]
    lines += ["", "## Violations by (rule, reason) and the rule they are tied to", "",
              "| rule | reason | kind | violations |", "|---|---|---|---|"]
    lines += [f"| `{d['rule']}` | {d['reason']} | {d['kind']} | {d['violations']} |" for d in s["by_reason"]]
    used = {(d["rule"], d["reason"]) for d in s["by_reason"]}
    lines += ["", "## Sources (`argus_cutlass.testing.sweep.RULE_SOURCES`; rows hit by this sweep marked *)", "",
              "| | rule | reason | kind | limit | source | what happens |", "|---|---|---|---|---|---|---|"]
    for src in RULE_SOURCES:
        if src.reason == "relation" and (src.rule, src.reason) not in used:
            continue
        mark = "*" if (src.rule, src.reason) in used else ""
        cells = [c.replace("|", "\\|") for c in (src.limit, src.source, src.effect)]
        lines.append(f"| {mark} | `{src.rule}` | {src.reason} | {src.kind} | {cells[0]} | {cells[1]} | {cells[2]} |")
    lines += ["", "(The program's consistency relations — pipeline.buffers, loop.step, mma.*, cluster.consistency, "
              "epilogue.partition, smem.disjoint — are printed as static_asserts in `templates/gemm/traits.j2`; "
              "no sampled configuration violates one.)", ""]
    lines += ["## Compiled representatives (nvcc, the project's flags; one per (rule, reason) pair)", ""]
    if compiles:
        lines += ["| config | pairs | built | static_assert | ptxas | regs | spill B | s |",
                  "|---|---|---|---|---|---|---|---|"]
        for c in compiles:
            pairs = ", ".join(f"{a}/{b}" for a, b in c.pairs)
            sa = "; ".join(c.static_asserts) or "-"
            lines.append(f"| {c.id} | {pairs} | {'yes' if c.built else 'NO: ' + ' '.join(c.error.split())[:120]} | "
                         f"{sa} | {'; '.join(c.ptxas_messages) or '-'} | {c.registers} | {c.spill_bytes} | "
                         f"{c.seconds:.0f} |")
    else:
        lines.append("(not run: `--no-compile`)")
    lines += ["", "## Suspected false alarms", ""]
    unc = s["unclassified"]
    if unc:
        groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for u in unc:
            groups.setdefault((u["rule"], u["reason"]), []).append(u)
        by_id = {r.id: r for r in records}
        lines += ["Violations that match no named rule (or fire inside a model margin), by (rule, reason):", "",
                  "| rule | reason | configs | example | message |", "|---|---|---|---|---|"]
        for (rule, reason), us in groups.items():
            ids = sorted({u["id"] for u in us})
            ex = by_id[ids[0]]
            shown = ", ".join(ids[:8]) + (f" ... ({len(ids)})" if len(ids) > 8 else "")
            msg = " ".join((us[0]["numbers"] or us[0]["message"]).split())[:220].replace("|", "/")
            lines.append(f"| `{rule}` | {reason} | {shown} | {_fields_text(ex.fields)} | {msg} |")
    else:
        lines.append("None on the CPU side: every violation of every rejected configuration matches a named rule. "
                     "The `cutlass` ones are not enforced by our printed kernel, so they are on the GPU list below.")
    smem = [r for r in records if r.outcome == "rejected" and "kSmemBytes" in r.printed
            and any(v["rule"] == "smem.capacity" for v in r.violations)]
    if smem:
        lines += ["", f"Printed kernels: for all {len(smem)} smem.capacity rejections the printed `kSmemBytes` (what "
                  "`cudaFuncSetAttribute` is asked for) was evaluated from the .cu; it differs from the verifier's "
                  f"model in {len(s['smem_printed_mismatch'])} ({s['smem_printed_mismatch'] or 'none'})."]
    if s["unprintable"]:
        lines += ["", "Rejected configurations the template cannot print (no GPU run possible):", ""]
        lines += [f"- {u['id']}: {u['error'][:200]}" for u in s["unprintable"]]
    req = [r for r in records if r.gpu == "required"]
    conf = [r for r in records if r.gpu == "confirm"]
    lines += ["", f"## For the H200: {len(req)} required + {len(conf)} confirm (+ 2 baselines, "
              f"{len(ISOLATING_PROBES)} probes)", "",
              "`python bench/false_alarms.py --out <dir> --gpu` builds these WITHOUT the verifier and runs each in a "
              "child process with a timeout (`argus_cutlass.testing.sweep.run_gpu`): random inputs, D poisoned with "
              "NaN, fp32 reference; a benign result for a required one is a FALSE ALARM.", "",
              "| id | role | config | kernel | rules | sha256[:12] |", "|---|---|---|---|---|---|"]
    for r in req + conf:
        lines.append(f"| {r.id} | {r.gpu} | {_fields_text(r.fields)} | `{r.kernel}` | {', '.join(r.rules)} | "
                     f"{r.printed.get('sha256', '')[:12]} |")
    for ident, cfg, rule in ISOLATING_PROBES:
        lines.append(f"| {ident} | probe ({rule}) | {_fields_text(cfg.model_dump())} | (out of sample) | "
                     f"{rule} | |")
    unknown = [r for r in records if r.outcome == "unknown"]
    if unknown:
        lines += ["", "## Accepted without every obligation proved (`unknown`)", ""]
        lines += [f"- {r.id} {_fields_text(r.fields)}: {'; '.join(r.unknowns)[:300]}" for r in unknown]
    return "\n".join(lines) + "\n"


def gpu_markdown(rows: Sequence[dict[str, Any]], command: str) -> str:
    lines = ["# False-alarm sweep: H200 runs of the rejected configurations", "", "Command:", "", f"    {command}", "",
             "| id | role | config | silicon | verdict | numbers |", "|---|---|---|---|---|---|"]
    for r in rows:
        note = " ".join(_numbers(r).replace("|", "/").split())
        lines.append(f"| {r['id']} | {r['role']} | {_fields_text(r['fields'])} | {r['outcome']} | "
                     f"{r['verdict']} | {note} |")
    counts = Counter(r["verdict"] for r in rows)
    lines += ["", "Verdicts: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())), ""]
    return "\n".join(lines)


def write_outputs(records: Sequence[SweepRecord], compiles: Sequence[CompileRecord], out: str | Path, command: str,
                  meta: dict[str, Any], stem: str = "false_alarms") -> tuple[Path, Path]:
    """``<out>/<stem>.json`` (meta, summary, sources, compiles, every record) and ``<out>/<stem>.md``."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    j, md = out / f"{stem}.json", out / f"{stem}.md"
    data = {"command": command, "meta": meta, "summary": summary(records),
            "sources": [s.row() for s in RULE_SOURCES], "compiles": [asdict(c) for c in compiles]}
    head = json.dumps(data, indent=1, default=str)[:-2]  # drop the closing "\n}"
    rows = ",\n  ".join(json.dumps(asdict(r), default=str, separators=(",", ":")) for r in records)
    j.write_text(f'{head},\n "configs": [\n  {rows}\n ]\n}}\n')  # one configuration per line
    md.write_text(markdown(records, compiles, command, meta))
    return j, md


def load_records(path: str | Path) -> tuple[list[SweepRecord], dict[str, Any]]:
    """The records and meta of a ``false_alarms.json`` written by :func:`write_outputs`."""
    data = json.loads(Path(path).read_text())
    return [SweepRecord(**r) for r in data["configs"]], data.get("meta", {})
