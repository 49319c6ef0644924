"""IR nodes of the MoE family beyond the GEMM mainloop, and :class:`MoELayer` (one layer's programs).

The layer is four kernels printed into one ``.cu`` (``templates/moe/``):

============== =========================================================================
kernel         program / node
============== =========================================================================
route          :class:`Routing`: per-CTA expert histograms, a one-CTA scan (counts, offsets,
               padded offsets, the expert of every m-tile), the stable permutation and the
               gather of x rows into the permuted buffer ``xs``
gate+up        a GEMM :class:`~argus_cutlass.dsl.ir.Program` (family ``moe``): the GEMM family's
               mainloop nodes, B read from expert ``e``'s W13 rows in paired halves, SwiGLU in
               the epilogue, the grouped tile scheduler
down           the same for W2, plain epilogue
combine        :class:`Combine`: ``y[t] = sum_j w[t, j] * out[permuted_row[t, j]]`` in fp32
============== =========================================================================

:class:`IndexWidth` nodes name every index product the templates print with its C type: the
renderer prints each product *from* the node (``ctype(variable) * constant ...``, the constants
named by ``factors`` through :data:`FACTOR_CPP`) and the verifier bounds that same product for
``T <= 2^tokens_bits``; both read :data:`INDEX_SITES` (which product each index is, and which
sizes bound its variable), so a node that disagrees with the site is refused by the verifier
(``moe.index_width``) or by the renderer (an unknown factor). Every other quantity the templates
print is a field here or in the two GEMM programs; ``tests/unit/test_moe_coupling.py`` mutates
every field of the routing, combine, index and layer nodes (and the MoE fields of the GEMM
programs) and requires a changed compiled ``.cu`` or a refusal by the DSL, renderer or verifier.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from argus_cutlass.dsl.ir import (DTYPE_BYTES, _CANON_SKIP, Program, SourceLoc, _canonical, _dsl_error, _edit,
                                 check_c_remainder_operand)

__all__ = ["COMBINE_HANDOFF_FIELDS", "Combine", "EDGE_KNOBS", "FACTOR_CPP", "HANDOFF_EDGES", "HANDOFF_FIELDS",
           "HandoffEdge", "handoff_edge", "INDEX_SITES", "IndexSite", "IndexWidth", "MoELayer", "Region",
           "REGION_CTYPES", "Routing", "WORKSPACE_CONSTS", "WORKSPACE_VARS", "Workspace", "CTYPES",
           "MAX_EXPERTS", "MAX_CTA_THREADS", "MAX_WORKSPACE_PARAM"]

#: index C types and their largest value
CTYPES = {"int32_t": 2**31 - 1, "int64_t": 2**63 - 1, "uint32_t": 2**32 - 1}
#: the signed index C types (a -1 sentinel survives them)
SIGNED_CTYPES = ("int32_t", "int64_t")
#: the route_scan kernel holds one expert per thread of one CTA of at most 1024 threads
MAX_EXPERTS = 1024
#: CUDA's limit on the threads of one CTA (CUDA C++ Programming Guide, "Thread Hierarchy" / compute capability
#: table: 1024 threads per block)
MAX_CTA_THREADS = 1024
#: the layer's proofs must cover T up to 2^MAX_TOKENS_BITS tokens (issue 11: T up to 2^20; the problem's MAX_TOKENS):
#: ``MoELayer.tokens_bits`` below it makes the host entry refuse token counts the family promises (rule moe.launch)
MAX_TOKENS_BITS = 20

#: how the constant factors of an index product are printed (the first factor is the site's variable)
FACTOR_CPP = {"k": "kTopk", "H": "kHidden", "I": "kFfn", "2I": "(2 * kFfn)", "E": "kExperts", "N_blocks": "tiles_n"}
#: each grouped GEMM's (N, K) as layer sizes (keys of FACTOR_CPP): gate+up writes h, I columns (the SwiGLU of its
#: 2I weight rows), over K = H; down writes out, H columns, over K = I. The programs carry them as params
#: ``n_size`` / ``k_size``; the host prints them in run_grouped's call (rule moe.launch checks them)
GROUPED_EXTENTS = {"gate_up": ("I", "H"), "down": ("H", "I")}
#: the layer sizes a grouped GEMM's extent may name (:meth:`MoELayer.size`; each a constant of FACTOR_CPP)
LAYER_SIZES = ("H", "I", "2I", "k", "E")


@dataclass(frozen=True)
class IndexSite:
    """What one index node means: the product ``factors`` the kernel computes (``factors[0]`` the
    variable, printed ``ctype(variable)``, the others constants of :data:`FACTOR_CPP`), the size
    bounding the variable (``"last"``: it is at most ``size - 1``; ``"extent"``: the size itself is
    printed), the largest term added to the product (sizes, each contributing ``size - 1``), a C
    type the hardware fixes (``None``: free), whether a ``-1`` sentinel must survive, the program
    points that print it, and how the variable is printed there."""

    factors: tuple[str, ...]
    var: str
    addend: tuple[str, ...]
    fixed_ctype: str | None
    signed: bool
    points: str


#: every index the MoE templates print, shared by the renderer (``render/moe.py``) and the verifier
#: (``verify/moe.py::_check_index_width``)
INDEX_SITES: dict[str, IndexSite] = {
    # s = t * k + j (combine, weights), rows = T * k, s = chunk_id * kChunk + threadIdx (route_*)
    "routed_row": IndexSite(("T", "k"), "extent", ("chunk",), None, False,
                            "route_count / route_permute s and rows, combine t * kTopk + j"),
    # a row of xs / h / out, the offsets, the stored permuted_row array (-1: a skipped slot)
    "permuted_row": IndexSite(("rows",), "extent", (), None, True,
                              "route_permute pos, permuted_row[], offsets[], combine row[]"),
    # t * H: x and y rows
    "x_offset": IndexSite(("T", "H"), "last", (), None, False, "route_permute gather x, combine store y"),
    # row * H: xs and out rows
    "xs_offset": IndexSite(("rows", "H"), "last", (), None, False, "route_permute gather xs, combine load out"),
    # chunk * E + e: the per-CTA histograms
    "block_count": IndexSite(("chunks", "E"), "last", ("E",), None, False, "route_count / route_scan / route_permute"),
    # expert * 2I + row: W13's TMA row coordinate and extent (PTX cp.async.bulk.tensor coordinates are .s32)
    "w13_row": IndexSite(("E", "2I"), "extent", (), "int32_t", False, "gate+up b_mn0, W13 tensor map rows"),
    # expert * H + row: W2's TMA row coordinate and extent
    "w2_row": IndexSite(("E", "H"), "extent", (), "int32_t", False, "down b_mn0, W2 tensor map rows"),
    # a grouped scheduler's unit u = cta + first * step, advanced by stride * step
    "tile_unit": IndexSite(("tiles", "N_blocks"), "extent", ("walk",), None, False,
                           "moe/work.j2 Scheduler u, step, units"),
}


@dataclass(frozen=True)
class Routing:
    """The routing kernels' semantics.

    For routed row ``s = t * k + j`` (token t, slot j) with expert ``e = ids[s]``:

    * ``counts[e] = #{s : ids[s] == e}`` (ids outside ``[0, E)`` are skipped when ``invalid ==
      "skip"``: they get no row and add nothing to y);
    * ``offsets`` = the ``scan`` (``exclusive``: ``off_0 = 0``, ``off_{e+1} = off_e + count_e``) of
      the group sizes padded to ``pad`` rows (``ceil(count_e / pad) * pad``; ``pad`` = the GEMMs'
      tile_m), so every group starts on a tile boundary;
    * ``permuted_row[s] = off_e + rank_base + #{s' < s : ids[s'] == e}`` (``rank`` ``stable``:
      the order of (t, j) inside each group, the only rank the template prints and the verifier
      accepts; ``rank_base`` 0 in a correct kernel), counted per
      CTA of ``chunk`` rows plus the exclusive scan of the earlier CTAs' counts of ``e``;
    * ``tile_expert[i] = e`` for the ``ceil(count_e / pad)`` m-tiles of group e; ``tiles_m`` =
      their number (empty groups get no tile);
    * ``xs[permuted_row[s], :] = x[t, :]`` (the gather), 16-byte vectors of ``vec`` elements.

    The gather's slicing (``route_permute<<<(chunks, slices), chunk>>>``): with ``slices`` 1 and
    ``slice_cols`` 0 (the defaults: the kernel before slicing, printed unchanged) CTA ``x`` copies
    whole rows. Otherwise CTA ``(x, y)`` copies vectors ``[v0, min(v0 + slice_cols / vec, H / vec))``
    of each of its rows, ``v0 = y * (slice_stride / vec)`` (C integer division, as printed);
    correct: ``slice_stride = slice_cols = ceil(ceil(H / vec) / slices) * vec``. Every y ranks the
    chunk (the rank reads only ids, offsets and block_counts, which this kernel does not write, so
    every y finds the same rows); only ``y == 0`` stores ``permuted_row`` (one writer per entry).

    ``unroll`` (1, the default: the loop printed unchanged): each thread of a CTA takes the gather's
    vectors ``q = q0 + u * chunk`` for ``u < unroll`` per step, ``q0 = thread, thread + chunk * unroll,
    ...``, loading all of them before storing any (``unroll`` 16-byte loads in flight per thread instead
    of one), the same vectors per thread as the plain loop ``q = thread, thread + chunk, ...``.

    ``scan_threads`` (1024, the default): route_scan's one CTA, printed as its launch
    (``route_scan<<<1, kScanThreads>>>``), its ``__launch_bounds__``, its shared array ``tiles[kScanThreads]``
    and the bound of its Hillis-Steele loop (``for (d = 1; d < kScanThreads; d <<= 1)``): thread e owns expert
    e, so it must be at least E and at most CUDA's 1024 threads per CTA; a partial last warp is legal (``__syncthreads``
    waits for it; rule ``moe.launch``, which also runs the printed loop). The loop is an inclusive scan for any thread count (its last step has
    ``d >= kScanThreads / 2``, so each sum spans ``>= kScanThreads`` entries): a power of two is not needed.
    """

    chunk: int
    pad: int
    scan: str
    rank: str
    rank_base: int
    invalid: str
    loc: SourceLoc
    slices: int = field(default=1, metadata=_CANON_SKIP)
    slice_cols: int = field(default=0, metadata=_CANON_SKIP)
    slice_stride: int = field(default=0, metadata=_CANON_SKIP)
    unroll: int = field(default=1, metadata=_CANON_SKIP)
    scan_threads: int = field(default=MAX_CTA_THREADS, metadata=_CANON_SKIP)
    #: where each group's padding rows lie in its ``ceil(count_e / pad) * pad`` rows: ``"after"`` (the default,
    #: every earlier kernel: ``permuted_row[s] = off_e + rank``, the padding ends the group's last m-tile) or
    #: ``"before"``: ``permuted_row[s] = off_{e+1} - count_e + rank`` (route_permute reads ``counts``), the padding
    #: starts the group's FIRST m-tile, so every m-tile's routed rows end it (row-bounded tiles: a TMA box
    #: placed at row ``pad - valid`` holds them, and its rows past the m-tile are out of bounds)
    group_padding: str = field(default="after", metadata=_CANON_SKIP)
    #: route_scan also writes ``tile_rows[base_e + i]``, the routed rows of m-tile ``i`` of group e, plus
    #: ``tile_rows_delta``: ``count_e - (t_e - 1) * pad`` for ``i == 0`` and ``pad`` for the others (it needs the
    #: padding ``"before"``: the table exists for the grouped GEMMs' ``row_bound`` boxes, which need the routed rows
    #: to end each m-tile); False (the default): no such table (the scan printed unchanged)
    tile_rows: bool = field(default=False, metadata=_CANON_SKIP)
    #: added to each printed ``tile_rows`` entry (0 in a correct kernel: the mutation knob)
    tile_rows_delta: int = field(default=0, metadata=_CANON_SKIP)
    #: fused routing for single-chunk calls: when the run-time T gives one routing chunk (``T * k <= chunk``) the host
    #: launches ONE kernel ``route_fused<<<(1, slices), chunk>>>`` instead of route_count / route_scan / route_permute:
    #: each CTA loads the chunk's ids, builds the expert histogram in shared memory (thread e owns expert e, so it
    #: needs ``E <= chunk``: :class:`MoELayer` refuses more), scans it with route_scan's printed formulas (the same
    #: fields: pad, scan, group_padding, tile_rows, rank_base) and ranks and gathers its slice of x into xs with
    #: route_permute's; only CTA ``y == 0`` writes the tables (counts, offsets, tile_expert, tiles_m, tile_rows, the
    #: handoffs' zeroed counters, permuted_row). Other T keep the three kernels. False (the default): the host
    #: launches the three kernels for every T (the ``.cu`` printed unchanged)
    fused: bool = field(default=False, metadata=_CANON_SKIP)
    #: the host takes the fused path when ``chunks <= fused_max_chunks`` (1 in a correct kernel: the mutation knob;
    #: route_fused routes the first chunk's rows only)
    fused_max_chunks: int = field(default=1, metadata=_CANON_SKIP)
    #: route_fused's own scan (``""``: the node's ``scan``, the correct kernel; ``"exclusive"`` / ``"inclusive"``:
    #: the mutation knob)
    fused_scan: str = field(default="", metadata=_CANON_SKIP)
    #: which CTAs of route_fused write the tables: ``"first"`` (y == 0, correct) or ``"all"`` (every y: the
    #: mutation knob, several writers of each entry)
    fused_writers: str = field(default="first", metadata=_CANON_SKIP)
    #: route_fused zeroes the handoffs' counters where it writes tile_expert (True, correct; each needs the layer's
    #: ``<edge>_zero`` too: the mutation knob)
    fused_zero: bool = field(default=True, metadata=_CANON_SKIP)

    @property
    def fused_scan_kind(self) -> str:
        """The scan route_fused prints: ``fused_scan``, or the node's ``scan`` when that is empty."""
        return self.fused_scan or self.scan

    @property
    def sliced(self) -> bool:
        """Whether the printed gather is the sliced one (any slicing field off its default)."""
        return (self.slices, self.slice_cols, self.slice_stride) != (1, 0, 0)

    def __post_init__(self) -> None:
        if self.scan not in ("exclusive", "inclusive"):
            _dsl_error("dsl.operand", self.loc, f"routing scan {self.scan!r}: expected 'exclusive' or 'inclusive'")
        if self.rank not in ("stable", "block"):
            _dsl_error("dsl.operand", self.loc, f"routing rank {self.rank!r}: expected 'stable' or 'block'")
        if self.invalid not in ("skip", "clamp"):
            _dsl_error("dsl.operand", self.loc, f"routing invalid {self.invalid!r}: expected 'skip' or 'clamp'")
        for f in ("chunk", "pad", "slices", "unroll", "scan_threads"):
            v = getattr(self, f)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                _dsl_error("dsl.operand", self.loc, f"routing {f} {v!r} must be an int >= 1")
        for f in ("slice_cols", "slice_stride"):
            v = getattr(self, f)
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                _dsl_error("dsl.operand", self.loc, f"routing {f} {v!r} must be an int >= 0")
        if self.group_padding not in ("after", "before"):
            _dsl_error("dsl.operand", self.loc, f"routing group_padding {self.group_padding!r}: expected 'after' or "
                       "'before'")
        if not isinstance(self.tile_rows, bool):
            _dsl_error("dsl.operand", self.loc, f"routing tile_rows {self.tile_rows!r} must be a bool")
        if self.tile_rows and self.group_padding != "before":
            _dsl_error("dsl.operand", self.loc, f"routing tile_rows with group_padding {self.group_padding!r}: the "
                       "table's row counts are those of the padding 'before' each group's routed rows (the layout "
                       "row-bounded boxes need)")
        if not isinstance(self.tile_rows_delta, int) or isinstance(self.tile_rows_delta, bool) or \
                (self.tile_rows_delta and not self.tile_rows):
            _dsl_error("dsl.operand", self.loc, f"routing tile_rows_delta {self.tile_rows_delta!r} must be an int, "
                       "0 without tile_rows")
        for f in ("fused", "fused_zero"):
            if not isinstance(getattr(self, f), bool):
                _dsl_error("dsl.operand", self.loc, f"routing {f} {getattr(self, f)!r} must be a bool")
        m = self.fused_max_chunks
        if not isinstance(m, int) or isinstance(m, bool) or not 1 <= m <= 1 << 20:
            _dsl_error("dsl.operand", self.loc, f"routing fused_max_chunks {m!r} must be an int in [1, 2^20] (the host "
                       "takes the fused path for chunks <= fused_max_chunks; 1 in a correct kernel)")
        if self.fused_scan not in ("", "exclusive", "inclusive"):
            _dsl_error("dsl.operand", self.loc, f"routing fused_scan {self.fused_scan!r}: expected '' (the node's "
                       "scan), 'exclusive' or 'inclusive'")
        if self.fused_writers not in ("first", "all"):
            _dsl_error("dsl.operand", self.loc, f"routing fused_writers {self.fused_writers!r}: expected 'first' "
                       "(CTA y == 0 writes the tables) or 'all'")
        if self.fused_scan and self.fused_scan == self.scan:
            _dsl_error("dsl.operand", self.loc, f"routing fused_scan {self.fused_scan!r} is the node's scan: leave it "
                       "'' (route_fused then prints the node's scan; the knob states a different one)")
        if not self.fused:
            changed = [f for f, d in (("fused_max_chunks", 1), ("fused_scan", ""), ("fused_writers", "first"),
                                      ("fused_zero", True)) if getattr(self, f) != d]
            if changed:
                _dsl_error("dsl.operand", self.loc, f"routing {', '.join(changed)} set without fused (nothing prints "
                           "them)")


@dataclass(frozen=True)
class Combine:
    """``y[t, :] = sum_{j < terms} weight(t, j) * out[row(t, j), :]``, accumulated in ``acc_dtype``.

    ``row_map`` ``permuted_row`` reads row ``permuted_row[t * k + j]`` (the un-permute: the inverse
    of the gather's ``source``); ``weight_slot_shift`` 0 reads slot j's own weight. ``terms`` is k in
    a correct kernel; a slot whose id was skipped (``permuted_row < 0``) adds nothing.
    """

    terms: int
    row_map: str
    weighted: bool
    weight_slot_shift: int
    acc_dtype: str
    threads: int
    loc: SourceLoc

    def __post_init__(self) -> None:
        check_c_remainder_operand(self.weight_slot_shift, "combine weight_slot_shift", self.loc)
        if self.row_map not in ("permuted_row", "identity"):
            _dsl_error("dsl.operand", self.loc, f"combine row_map {self.row_map!r}: expected 'permuted_row' or "
                       "'identity'")
        if self.acc_dtype not in ("fp32", "bf16", "fp16"):
            _dsl_error("dsl.operand", self.loc, f"combine acc_dtype {self.acc_dtype!r}")


@dataclass(frozen=True)
class IndexWidth:
    """One index product the kernels print: ``product(factors)`` computed in ``ctype``.

    Factors are size names bounded by the verifier: ``T`` (tokens, up to ``2^tokens_bits``), ``k``,
    ``E``, ``H``, ``I``, ``rows`` (the padded permuted rows, ``T*k + E*(pad-1)``), ``tiles``
    (m-tiles, ``rows / pad``), ``chunks`` (CTAs of the routing kernels), ``2I``.
    """

    name: str
    factors: tuple[str, ...]
    ctype: str
    loc: SourceLoc

    def __post_init__(self) -> None:
        if self.ctype not in CTYPES:
            _dsl_error("dsl.operand", self.loc, f"index {self.name!r}: ctype {self.ctype!r}, expected one of "
                       f"{sorted(CTYPES)}")


#: the run-time quantities of the host's ``workspace_layout(T)`` a region count may name (members of the printed
#: ``struct Workspace``, int64): ``rows = T * k`` routed rows, ``chunks = ceil(rows / kChunk)`` routing CTAs,
#: :meth:`Workspace.padded_rows` and :meth:`Workspace.max_tiles`; each with its printed C++ text
WORKSPACE_VARS = {"rows": "w.rows", "chunks": "w.chunks", "padded_rows": "w.padded_rows", "max_tiles": "w.max_tiles"}
#: the layer constants a region count may name (keys of :meth:`MoELayer.size`), with their printed constants
WORKSPACE_CONSTS = {"E": "kExperts", "k": "kTopk", "H": "kHidden", "I": "kFfn"}
#: a region's element type: ``int32_t``, or the layer's aliases ``RowIndex`` (index ``permuted_row``'s C type) and
#: ``Element`` (the layer's dtype); :meth:`MoELayer.elem_bytes` gives their sizes
REGION_CTYPES = ("int32_t", "RowIndex", "Element")


def _c_div(a: Any, b: int) -> Any:
    """C's integer division (truncation toward zero) of ``a`` (an int or an int64 numpy array) by ``b`` > 0."""
    if isinstance(a, np.ndarray):
        return np.where(a < 0, -((-a) // b), a // b)
    return -((-a) // b) if a < 0 else a // b


@dataclass(frozen=True)
class Region:
    """One region of the layer's device workspace (a line of the printed ``workspace_layout``).

    ``count``: its size in ``elem`` elements, a sum of products ``((f, f, ...), ...)``; each factor is a name of
    :data:`WORKSPACE_VARS` (at most one per product, so the count is affine in each run-time quantity), of
    :data:`WORKSPACE_CONSTS`, or an int; printed ``w.chunks * kExperts``, ``(int64_t(kExperts) + 1)``.
    ``alias``: ``""`` (its own bytes, after the previous region's, aligned), or an earlier region whose bytes it
    reuses from that region's offset (``out`` reuses ``xs``: xs is dead once gate+up has read it; rule
    ``moe.workspace`` checks the two lifetimes and that the alias fits inside).
    """

    name: str
    elem: str
    count: tuple[tuple[str | int, ...], ...]
    alias: str = ""

    def elements(self, q: dict[str, Any]) -> Any:
        """The count at the quantities ``q`` (every name of WORKSPACE_VARS and WORKSPACE_CONSTS to an int or an
        int64 numpy array over T)."""
        total: Any = 0
        for term in self.count:
            v: Any = 1
            for f in term:
                v = v * (f if isinstance(f, int) else q[f])
            total = total + v
        return total

    def count_cpp(self) -> str:
        """The printed count: products joined by `` + `` (parenthesised when more than one), each in int64
        (a product of constants starts with ``int64_t(...)``).

        >>> Region("tile_expert", "int32_t", (("max_tiles",), ("E",))).count_cpp()
        '(w.max_tiles + int64_t(kExperts))'
        >>> Region("h", "Element", (("padded_rows", "I"),)).count_cpp()
        'w.padded_rows * kFfn'
        """
        terms = []
        for term in self.count:
            names = [str(f) if isinstance(f, int) else {**WORKSPACE_VARS, **WORKSPACE_CONSTS}[f] for f in term]
            if not isinstance(term[0], str) or term[0] not in WORKSPACE_VARS:
                names[0] = f"int64_t({names[0]})"
            terms.append(" * ".join(names))
        return terms[0] if len(terms) == 1 else "(" + " + ".join(terms) + ")"


#: the largest workspace ``align`` / ``group_rows`` / ``round_rows`` / ``tile_rows`` (a tile holds at most 256
#: rows: TMA boxes are at most 256 per mode, PTX ISA cp.async.bulk.tensor; the bound keeps a malformed node's
#: simulation and enumeration small)
MAX_WORKSPACE_PARAM = 4096


@dataclass(frozen=True)
class Workspace:
    """The layer's device workspace as the host's ``workspace_layout(T)`` prints it, one line per region.

    Quantities (T tokens at run time, int64 on the host)::

        rows        = T * k                    (routed rows)
        chunks      = ceil(rows / routing.chunk) (routing CTAs)
        padded_rows = ceil((rows + min(rows, E) * group_rows) / round_rows) * round_rows
        max_tiles   = padded_rows / tile_rows  (C division)

    ``padded_rows`` is the permuted buffers' rows (xs / h / out, the grouped GEMMs' M), ``max_tiles`` the m-tiles
    they hold (the GEMMs' grid bound). A correct layer has ``group_rows = pad - 1`` (each non-empty group rounded
    up to whole ``pad``-row tiles adds at most ``pad - 1`` rows) and ``round_rows = tile_rows = pad``; rule
    ``moe.workspace`` proves that every routing of every ``T <= 2^tokens_bits`` fits.

    Offsets (bytes): a region without ``alias`` starts at the end of the previous one rounded up to ``align``
    (``(o + align - 1) / align * align``), an aliased one at its alias's offset; ``workspace_bytes(T)`` is the
    aligned end of the last. The host refuses a workspace whose base is not a multiple of ``align``
    (kErrWorkspace), so each region starts ``align``-aligned. ``align`` 256 is our choice (cudaMalloc's
    alignment; whole 32-byte L2 sectors); the kernels need 16 (the tensor maps' global addresses, CUDA driver API
    ``cuTensorMapEncodeTiled``, and the 16-byte vector accesses of the gather and the combine), which is what rule
    ``moe.workspace`` requires (a multiple of 16).

    Raises:
        argus_cutlass.errors.DslError: ``dsl.operand`` for a malformed region (unknown element type or factor,
            two run-time factors in one product, an alias that names no earlier region, a duplicate name) or a
            ``align`` / ``round_rows`` / ``tile_rows`` outside [1, MAX_WORKSPACE_PARAM], ``group_rows`` outside [0,
            MAX_WORKSPACE_PARAM].
    """

    regions: tuple[Region, ...]
    align: int
    group_rows: int
    round_rows: int
    tile_rows: int
    loc: SourceLoc

    def __post_init__(self) -> None:
        for f, lo in (("align", 1), ("group_rows", 0), ("round_rows", 1), ("tile_rows", 1)):
            v = getattr(self, f)
            if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= MAX_WORKSPACE_PARAM:
                _dsl_error("dsl.operand", self.loc, f"workspace {f} {v!r} must be an int in [{lo}, "
                           f"{MAX_WORKSPACE_PARAM}]")
        seen: list[str] = []
        for r in self.regions:
            if not isinstance(r, Region):
                _dsl_error("dsl.operand", self.loc, f"workspace region {r!r} is not a Region")
            if not isinstance(r.name, str) or not r.name.isidentifier() or r.name in seen + ["bytes", *WORKSPACE_VARS]:
                _dsl_error("dsl.operand", self.loc, f"workspace region name {r.name!r}: an identifier, once, not "
                           f"'bytes' or {sorted(WORKSPACE_VARS)}")
            if r.elem not in REGION_CTYPES:
                _dsl_error("dsl.operand", self.loc, f"workspace region {r.name!r}: elem {r.elem!r}, expected one of "
                           f"{list(REGION_CTYPES)}")
            if not isinstance(r.count, tuple) or not r.count or not all(isinstance(t, tuple) and t for t in r.count):
                _dsl_error("dsl.operand", self.loc, f"workspace region {r.name!r}: count {r.count!r} must be a "
                           "non-empty tuple of non-empty products")
            for term in r.count:
                bad = [f for f in term if not ((isinstance(f, int) and not isinstance(f, bool)) or
                                               f in WORKSPACE_VARS or f in WORKSPACE_CONSTS)]
                if bad:
                    _dsl_error("dsl.operand", self.loc, f"workspace region {r.name!r}: factor(s) {bad} are neither "
                               f"ints nor {sorted(WORKSPACE_VARS)} / {sorted(WORKSPACE_CONSTS)}")
                if sum(isinstance(f, str) and f in WORKSPACE_VARS for f in term) > 1:
                    _dsl_error("dsl.operand", self.loc, f"workspace region {r.name!r}: product {term} multiplies two "
                               "run-time quantities (a count is affine in each)")
            if r.alias and (r.alias not in seen or self.region(r.alias).alias):
                _dsl_error("dsl.operand", self.loc, f"workspace region {r.name!r}: alias {r.alias!r} names no earlier "
                           "region with its own bytes")
            seen.append(r.name)

    def region(self, name: str) -> Region:
        """The region called ``name``.

        Raises:
            KeyError: no such region (the message lists them).
        """
        for r in self.regions:
            if r.name == name:
                return r
        raise KeyError(f"no workspace region {name!r}; have {[r.name for r in self.regions]}")

    def padded_rows(self, rows: Any, experts: int) -> Any:
        """The printed ``padded_rows`` for ``rows`` routed rows (an int or an int64 numpy array)."""
        groups = np.minimum(rows, experts) if isinstance(rows, np.ndarray) else min(rows, experts)
        return (rows + groups * self.group_rows + self.round_rows - 1) // self.round_rows * self.round_rows

    def max_tiles(self, padded_rows: Any) -> Any:
        """The printed ``max_tiles`` of ``padded_rows``."""
        return padded_rows // self.tile_rows

    def align_up(self, v: Any) -> Any:
        """The printed ``align_up(v)``: ``(v + align - 1) / align * align`` in C (truncating) division."""
        return _c_div(v + self.align - 1, self.align) * self.align


#: the layer fields of the gate+up -> down handoff (``MoELayer.handoff``)
HANDOFF_FIELDS = ("handoff", "handoff_target_delta", "handoff_signal", "handoff_fence", "handoff_zero",
                  "handoff_backoff_ns", "handoff_timeout_ms")
#: the layer fields of the down -> combine handoff (``MoELayer.combine_handoff``): the knobs of
#: :data:`HANDOFF_FIELDS` for this edge plus the combine's two waiter-side choices (``_slot``, ``_load``)
COMBINE_HANDOFF_FIELDS = ("combine_handoff", "combine_handoff_target_delta", "combine_handoff_signal",
                          "combine_handoff_fence", "combine_handoff_zero", "combine_handoff_slot", "combine_handoff_load",
                          "combine_handoff_backoff_ns", "combine_handoff_timeout_ms")
#: the knobs every handoff edge has, as suffixes of its switch (``<edge>_target_delta``, ...)
EDGE_KNOBS = ("target_delta", "signal", "fence", "zero", "backoff_ns", "timeout_ms")


@dataclass(frozen=True)
class HandoffEdge:
    """One per-m-tile handoff between two kernels of the layer: every unit ``(tm, tn)`` of the grouped GEMM
    ``signaller``, once its TMA stores of ``tensor`` are complete, adds 1 to ``counter[tm]`` (``red.release.gpu``);
    kernel ``waiter`` reads m-tile ``tm``'s rows of ``tensor`` only after ``counter[tm]`` (``ld.acquire.gpu``)
    reached the signaller's n-blocks per m-tile. ``name`` is the layer's switch; its knobs are the layer fields
    ``<name>_<knob>`` for every knob of :data:`EDGE_KNOBS` (``fields``: all of them, the switch first); ``rule``
    / ``invariant`` the verifier rule that proves it; ``const`` the prefix of its printed constants
    (``k<const>Target``, ``k<const>BackoffNs``, ``k<const>TimeoutNs``); ``who`` / ``whom`` the two kernels as
    the printed comments name them.

    >>> [e.name for e in HANDOFF_EDGES], handoff_edge("combine_handoff").counter
    (['handoff', 'combine_handoff'], 'out_ready')
    """

    name: str
    signaller: str
    waiter: str
    counter: str
    tensor: str
    rule: str
    invariant: str
    const: str
    who: str
    whom: str
    fields: tuple[str, ...]


#: the layer's handoff edges, in launch order: gate+up -> down (``handoff``, h) and down -> combine
#: (``combine_handoff``, out)
HANDOFF_EDGES = (
    HandoffEdge("handoff", "gate_up", "down", "tile_ready", "h", "moe.handoff", "M11", "Handoff", "gate+up", "down",
                HANDOFF_FIELDS),
    HandoffEdge("combine_handoff", "down", "combine", "out_ready", "out", "moe.combine_handoff", "M13",
                "CombineHandoff", "down", "combine", COMBINE_HANDOFF_FIELDS),
)


def handoff_edge(name: str) -> HandoffEdge:
    """The edge of :data:`HANDOFF_EDGES` called ``name``.

    Raises:
        KeyError: no such edge (the message lists them).
    """
    for e in HANDOFF_EDGES:
        if e.name == name:
            return e
    raise KeyError(f"no handoff edge {name!r}; have {[e.name for e in HANDOFF_EDGES]}")

#: the longest ``__nanosleep`` (PTX ISA "nanosleep": the sleep duration is at most 1 millisecond)
MAX_HANDOFF_BACKOFF_NS = 1_000_000
#: the slowest rates a correct gate+up kernel is assumed to run at when bounding how long the down producer can wait
#: for an m-tile (:meth:`MoELayer.handoff_wait_bound_ms`): ~1/10 of the H200's dense bf16 tensor peak (989 TFLOP/s)
#: and ~1/5 of its HBM bandwidth (4.8 TB/s)
HANDOFF_MIN_FLOPS = 1e14
HANDOFF_MIN_BYTES_PER_S = 1e12
#: a handoff time-out must be at least this many times :meth:`MoELayer.handoff_wait_bound_ms` (and at least
#: :data:`MIN_HANDOFF_TIMEOUT_MS`): headroom for a GPU time-sliced with other work
HANDOFF_TIMEOUT_MARGIN = 10
MIN_HANDOFF_TIMEOUT_MS = 10_000

#: the most k-tiles a grouped GEMM's producer prefetches into L2 before its wait (``MoELayer.weight_prefetch``)
MAX_WEIGHT_PREFETCH = 64


@dataclass(frozen=True)
class MoELayer:
    """All programs of one MoE layer (the unit the verifier proves and the template prints).

    Attributes:
        name: readable label (the kernel name appends a hash of every node).
        experts, topk, hidden, ffn, dtype: the layer's compile-time sizes (E, k, H, I).
        tokens_bits: the proofs hold for ``T <= 2^tokens_bits`` (the host entry refuses larger T).
        routing, combine: see :class:`Routing`, :class:`Combine`.
        gate_up, down: the two grouped GEMM programs (family ``moe``).
        indices: every printed index product with its C type.
        workspace: the device workspace's regions, alignment and padded-rows / max-tiles formulas, printed as the
            host's ``workspace_layout(T)`` (:class:`Workspace`; rule ``moe.workspace``).
        pdl: programmatic dependent launch (PTX ISA ``griddepcontrol``, sm_90; CUDA
            ``cudaLaunchAttributeProgrammaticStreamSerialization``). False: the six kernels run in
            plain stream order. True: ``route_count`` stays in stream order (after the previous
            call's ``combine``); each later kernel is launched with the attribute, executes
            ``griddepcontrol.wait`` (which returns once the previous kernel has completed and its
            memory is visible) before its first global-memory access, and then
            ``griddepcontrol.launch_dependents``, so the next kernel's launch and prologue (CTA
            placement, barrier init, tensor-map prefetch) overlap the previous kernel's tail
            (rule ``moe.pdl``).
        weight_prefetch: with ``pdl``, k-tiles of its first unit's weight tile each grouped GEMM's
            producer thread prefetches into L2 (``cp.async.bulk.prefetch.tensor``) before its wait,
            reading the m-tile count and the expert id that route_scan wrote two launches before
            (0: none; at most ``MAX_WEIGHT_PREFETCH``; needs ``pdl``).
        handoff: the down GEMM starts an m-tile as soon as gate+up has stored that m-tile's h rows, not
            after the whole gate+up kernel (rule ``moe.handoff``). Each gate+up unit ``(tm, tn)``, once its
            TMA stores of h are complete (``cp.async.bulk.wait_group 0``, PTX ISA "cp.async.bulk.wait_group": the
            writes performed, not only the shared-memory source read) and fenced between the async and generic
            proxies (``fence.proxy.async.global``, PTX ISA "membar / fence"), adds 1 to ``tile_ready[tm]`` with
            ``red.release.gpu``; route_scan zeroes ``tile_ready[tm]`` where it writes ``tile_expert[tm]``.
            The down producer, before the loads of a unit of m-tile ``tm``, spins on ``ld.acquire.gpu``
            of ``tile_ready[tm]`` until it reaches the gate+up n-blocks per m-tile (``kHandoffTarget``),
            then fences the async proxy before its TMA loads read h. With ``pdl`` the down kernel then
            executes ``griddepcontrol.launch_dependents`` first and ``griddepcontrol.wait`` last (its
            completion still follows gate+up's, so every later kernel's order is unchanged). No deadlock:
            a programmatic down CTA launches only after every gate+up CTA is resident (each executed
            ``launch_dependents``), and a plain one after gate+up completed.
        handoff_target_delta, handoff_signal, handoff_fence, handoff_zero: the handoff's printed choices;
            a correct layer has 0 (the down producer waits for exactly the gate+up n-blocks of an m-tile),
            ``"complete"`` (``"read"``: the signal follows ``wait_group.read``, the writes may not have
            landed), True (the proxy fences printed) and True (route_scan zeroes the counters every call).
            Each needs ``handoff``.
        handoff_backoff_ns: the down producer's back-off between two reads of ``tile_ready[tm]``
            (``__nanosleep``; 0: none; at most 1 ms, PTX ISA "nanosleep"); a scheduling hint, no data-flow meaning.
        handoff_timeout_ms: 0 (the spin is unbounded) or the longest the down producer spins on one m-tile
            (``%globaltimer``, ns) before it executes ``trap``: the layer's launch then fails with
            ``cudaErrorLaunchFailure`` ("unspecified launch failure", sticky: the process's CUDA context is
            lost) instead of hanging the GPU. Rule ``moe.handoff`` proves the count and requires at least
            :data:`HANDOFF_TIMEOUT_MARGIN` x :meth:`handoff_wait_bound_ms` (a bound under assumed slowest rates)
            and :data:`MIN_HANDOFF_TIMEOUT_MS`, so a verified layer reaches it only on what the proof does not
            model, e.g. one workspace shared by two concurrent calls on different streams (their counters mix),
            or a GPU slower than the assumed rates.
        combine_handoff: the combine reads a term's row of ``out`` as soon as the down GEMM has stored that row's
            m-tile, not after the whole down kernel (rule ``moe.combine_handoff``, needs ``pdl``): the same release /
            acquire protocol as ``handoff`` on the next edge (:data:`HANDOFF_EDGES`). Each down unit ``(tm, tn)``,
            once its TMA stores of out are complete (``cp.async.bulk.wait_group 0``) and ordered for the generic
            proxy (``fence.proxy.async.global``; PTX ISA "Memory Consistency Model": the TMA stores are
            async-proxy writes, the combine's loads generic-proxy reads), adds 1 to ``out_ready[tm]``
            (``red.release.gpu``); route_scan zeroes ``out_ready[tm]`` where it writes ``tile_expert[tm]``. The
            combine CTA of token t executes ``griddepcontrol.launch_dependents`` first, reads its k rows and
            weights, then thread ``j % kCombineThreads`` of slot j spins on ``ld.acquire.gpu`` of
            ``out_ready[row_j / kPad]`` until it reaches the down n-blocks per m-tile (``kCombineHandoffTarget``),
            ``__syncthreads()`` passes the acquire on to the CTA (PTX ISA "bar.sync": a CTA-scope barrier, so
            causality order reaches every thread's later loads), the rows are read with ``__ldcg`` (``ld.global.cg``:
            L2, never the non-coherent ``.nc`` path, which PTX ISA "ld" allows only for data read-only for the
            kernel's lifetime), and the kernel's LAST statement is ``griddepcontrol.wait`` (PTX ISA
            "griddepcontrol"): it completes after down, so the next call's stream-ordered route_count and rule
            ``moe.pdl``'s order over two calls hold. No deadlock: a programmatic combine CTA launches only after
            every down CTA executed ``griddepcontrol.launch_dependents`` (so every down CTA has started -- resident or
            finished -- and runs to its end), and down never waits for the combine (it waits only for gate+up, whose CTAs were all resident
            before down launched).
        combine_handoff_target_delta, combine_handoff_signal, combine_handoff_fence, combine_handoff_zero,
        combine_handoff_backoff_ns, combine_handoff_timeout_ms: the ``handoff_*`` knobs for this edge (correct:
            0, ``"complete"``, True, True; the time-out bound :meth:`handoff_wait_bound_ms` of this edge covers
            gate+up and down: a combine CTA may launch while gate+up still runs when down triggers early).
        combine_handoff_slot: which term's row the combine's waiting thread j waits for: ``"own"`` (slot j's: the
            correct one) or ``"first"`` (slot 0's row for every term: the mutation knob).
        combine_handoff_load: how the combine reads out with the handoff: ``"cg"`` (``__ldcg``, L2; correct) or
            ``"nc"`` (``__ldg``, the non-coherent read-only path: may serve lines cached before down wrote them).
    """

    name: str
    experts: int
    topk: int
    hidden: int
    ffn: int
    dtype: str
    tokens_bits: int
    routing: Routing
    gate_up: Program
    down: Program
    combine: Combine
    indices: tuple[IndexWidth, ...]
    workspace: Workspace
    pdl: bool = field(default=False, metadata=_CANON_SKIP)
    weight_prefetch: int = field(default=0, metadata=_CANON_SKIP)
    handoff: bool = field(default=False, metadata=_CANON_SKIP)
    handoff_target_delta: int = field(default=0, metadata=_CANON_SKIP)
    handoff_signal: str = field(default="complete", metadata=_CANON_SKIP)
    handoff_fence: bool = field(default=True, metadata=_CANON_SKIP)
    handoff_zero: bool = field(default=True, metadata=_CANON_SKIP)
    handoff_backoff_ns: int = field(default=128, metadata=_CANON_SKIP)
    handoff_timeout_ms: int = field(default=0, metadata=_CANON_SKIP)
    combine_handoff: bool = field(default=False, metadata=_CANON_SKIP)
    combine_handoff_target_delta: int = field(default=0, metadata=_CANON_SKIP)
    combine_handoff_signal: str = field(default="complete", metadata=_CANON_SKIP)
    combine_handoff_fence: bool = field(default=True, metadata=_CANON_SKIP)
    combine_handoff_zero: bool = field(default=True, metadata=_CANON_SKIP)
    combine_handoff_slot: str = field(default="own", metadata=_CANON_SKIP)
    combine_handoff_load: str = field(default="cg", metadata=_CANON_SKIP)
    combine_handoff_backoff_ns: int = field(default=128, metadata=_CANON_SKIP)
    combine_handoff_timeout_ms: int = field(default=0, metadata=_CANON_SKIP)
    #: the routing (route_scan, and route_fused when the routing node is fused) zeroes the ticket counter of each grouped
    #: GEMM with the dynamic walk (``gu_tickets`` / ``dn_tickets``) every call (True, correct; the mutation knob)
    tickets_zero: bool = field(default=True, metadata=_CANON_SKIP)

    family = "moe"

    def dynamic_parts(self) -> tuple[str, ...]:
        """The grouped GEMMs that walk their units dynamically (schedule node ``slot_bytes`` >= 0: atomic tickets
        from their counter ``<gu|dn>_tickets``, rule ``moe.dynamic_walk``)."""
        return tuple(part for part in ("gate_up", "down") if self.program(part).schedule.dynamic_grouped)

    def __post_init__(self) -> None:
        loc = self.routing.loc
        for size in ("experts", "topk", "hidden", "ffn"):   # review, session 44: topk 0 reached the verifier
            v = getattr(self, size)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                _dsl_error("dsl.operand", loc, f"layer {self.name!r}: {size} {v!r} must be an int >= 1")
        if self.topk > self.experts:
            _dsl_error("dsl.operand", loc, f"layer {self.name!r}: topk {self.topk} > experts {self.experts} (a token's "
                       "k experts are distinct)")
        if not isinstance(self.pdl, bool):
            _dsl_error("dsl.operand", loc, f"layer {self.name!r}: pdl {self.pdl!r} must be a bool")
        wp = self.weight_prefetch
        if not isinstance(wp, int) or isinstance(wp, bool) or not 0 <= wp <= MAX_WEIGHT_PREFETCH:
            _dsl_error("dsl.operand", loc, f"layer {self.name!r}: weight_prefetch {wp!r} must be an int in "
                       f"[0, {MAX_WEIGHT_PREFETCH}] (k-tiles prefetched before the wait)")
        if wp and not self.pdl:
            _dsl_error("dsl.operand", loc, f"layer {self.name!r}: weight_prefetch={wp} needs pdl (without a "
                       "programmatic launch a kernel starts after its predecessor completed: nothing to overlap)")
        for edge in HANDOFF_EDGES:   # each edge's knobs, validated alike (the field names in the messages)
            self._check_edge_fields(edge.name)
        if self.combine_handoff_slot not in ("own", "first"):
            _dsl_error("dsl.operand", loc, f"layer {self.name!r}: combine_handoff_slot {self.combine_handoff_slot!r}: "
                       "expected 'own' (thread j waits for slot j's m-tile) or 'first'")
        if not isinstance(self.tickets_zero, bool):
            _dsl_error("dsl.operand", loc, f"layer {self.name!r}: tickets_zero {self.tickets_zero!r} must be a bool")
        if not self.tickets_zero and not self.dynamic_parts():
            _dsl_error("dsl.operand", loc, f"layer {self.name!r}: tickets_zero False without a dynamic walk (no ticket "
                       "counter to zero: nothing prints it)")
        if self.combine_handoff_load not in ("cg", "nc"):
            _dsl_error("dsl.operand", loc, f"layer {self.name!r}: combine_handoff_load {self.combine_handoff_load!r}: "
                       "expected 'cg' (__ldcg, L2) or 'nc' (__ldg)")
        for edge in HANDOFF_EDGES:
            if not getattr(self, edge.name):
                changed = [f.name for f in dataclasses.fields(self)
                           if f.name in edge.fields[1:] and getattr(self, f.name) != f.default]
                if changed:
                    _dsl_error("dsl.operand", loc, f"layer {self.name!r}: {', '.join(changed)} set without "
                               f"{edge.name} (nothing prints them)")
        if self.combine_handoff and not self.pdl:
            _dsl_error("dsl.operand", loc, f"layer {self.name!r}: combine_handoff needs pdl (without a programmatic "
                       "launch the combine starts after the down GEMM completed: nothing to overlap, and its "
                       "griddepcontrol.wait would not exist)")
        if self.routing.fused and self.experts > self.routing.chunk:
            _dsl_error("dsl.operand", loc, f"layer {self.name!r}: routing fused needs E <= routing chunk (E = "
                       f"{self.experts}, chunk = {self.routing.chunk}): route_fused's CTA of chunk threads scans the "
                       "experts one per thread (thread e owns expert e, as route_scan's); take a chunk of at least E "
                       "threads or leave fused off")
        if self.routing.fused and not self.routing.fused_zero and not (self.handoff or self.combine_handoff):
            _dsl_error("dsl.operand", loc, f"layer {self.name!r}: routing fused_zero False without handoff or "
                       "combine_handoff (route_fused zeroes no counter then: nothing prints it)")
        if self.routing.fused and self.weight_prefetch:
            _dsl_error("dsl.operand", loc, f"layer {self.name!r}: routing fused with weight_prefetch="
                       f"{self.weight_prefetch}: gate+up's prefetch reads tiles_m and tile_expert before its "
                       "griddepcontrol.wait, and route_fused, the kernel right before it, writes them (rule moe.pdl)")

    def _check_edge_fields(self, edge: str) -> None:
        """The knobs of handoff edge ``edge`` (:data:`EDGE_KNOBS`) are well-formed; ``dsl.operand`` naming the
        field otherwise."""
        loc = self.routing.loc
        for f in (edge, f"{edge}_fence", f"{edge}_zero"):
            if not isinstance(getattr(self, f), bool):
                _dsl_error("dsl.operand", loc, f"layer {self.name!r}: {f} {getattr(self, f)!r} must be a bool")
        d = getattr(self, f"{edge}_target_delta")
        if not isinstance(d, int) or isinstance(d, bool) or abs(d) >= 1 << 20:
            _dsl_error("dsl.operand", loc, f"layer {self.name!r}: {edge}_target_delta {d!r} must be an int in "
                       "(-2^20, 2^20)")
        sig = getattr(self, f"{edge}_signal")
        if sig not in ("complete", "read"):
            _dsl_error("dsl.operand", loc, f"layer {self.name!r}: {edge}_signal {sig!r}: expected "
                       "'complete' or 'read'")
        b = getattr(self, f"{edge}_backoff_ns")
        if not isinstance(b, int) or isinstance(b, bool) or not 0 <= b <= MAX_HANDOFF_BACKOFF_NS:
            _dsl_error("dsl.operand", loc, f"layer {self.name!r}: {edge}_backoff_ns {b!r} must be an int in "
                       f"[0, {MAX_HANDOFF_BACKOFF_NS}] (PTX ISA nanosleep: at most 1 ms)")
        t = getattr(self, f"{edge}_timeout_ms")
        if not isinstance(t, int) or isinstance(t, bool) or not 0 <= t < 1 << 31:
            _dsl_error("dsl.operand", loc, f"layer {self.name!r}: {edge}_timeout_ms {t!r} must be an int in "
                       "[0, 2^31) (0: no time-out)")

    def edge_knob(self, edge: str, knob: str) -> Any:
        """The layer field ``<edge>_<knob>`` of handoff edge ``edge`` (a knob of :data:`EDGE_KNOBS`, or ``""``: the
        switch itself).

        >>> from argus_cutlass.kernels.moe.config import MoEConfig
        >>> from argus_cutlass.kernels.moe.problem import MoEProblem
        >>> from argus_cutlass.kernels.moe.program import build_layer
        >>> layer = build_layer(MoEConfig(pdl=True, combine_handoff=True), MoEProblem(16, 8, 2, 256, 512))
        >>> layer.edge_knob("combine_handoff", ""), layer.edge_knob("combine_handoff", "signal")
        (True, 'complete')
        """
        handoff_edge(edge)   # KeyError naming the edges
        return getattr(self, f"{edge}_{knob}" if knob else edge)

    def handoff_target(self, edge: str = "handoff") -> int:
        """The count the waiter of handoff edge ``edge`` waits for in its counter (printed ``kHandoffTarget`` /
        ``kCombineHandoffTarget``): the signalling GEMM's n-blocks per m-tile, ``ceil(N / tile_n)`` of its epilogue
        (gate+up: N = I; down: N = H; its walk's ``tiles_n``), plus ``<edge>_target_delta`` (0 in a correct layer;
        rules ``moe.handoff`` / ``moe.combine_handoff`` count the signals)."""
        e = handoff_edge(edge)
        n = self.size(GROUPED_EXTENTS[e.signaller][0])
        return -(-n // self.program(e.signaller).epilogue.tile_n) + getattr(self, f"{edge}_target_delta")

    def size(self, name: str) -> int:
        """The layer size a :data:`FACTOR_CPP` key names (``"H"``: hidden, ``"I"``: ffn, ``"2I"``, ``"k"``, ``"E"``).

        Raises:
            KeyError: not a layer size.
        """
        return dict(zip(LAYER_SIZES, (self.hidden, self.ffn, 2 * self.ffn, self.topk, self.experts)))[name]

    def _gemm_bound_s(self, part: str) -> float:
        """Seconds grouped GEMM ``part`` takes at ``T = 2^tokens_bits`` under the assumed slowest rates: its
        ``2 T k W K`` flops (``W`` its weight rows per expert: 2I for gate+up, H for down) at
        :data:`HANDOFF_MIN_FLOPS` plus :data:`HANDOFF_MIN_BYTES_PER_S` over every expert's weights, the permuted A
        rows read once per n-block of the printed walk and the output written."""
        elem = DTYPE_BYTES[self.dtype]
        rows = (1 << self.tokens_bits) * self.topk
        n, k = (self.size(x) for x in GROUPED_EXTENTS[part])
        w_mult = 2 if part == "gate_up" else 1   # gate+up's weight rows: the gate and the up row of each h column
        flops = 2.0 * rows * w_mult * n * k
        n_blocks = -(-n // self.program(part).epilogue.tile_n)   # the printed walk's n-blocks per m-tile
        nbytes = elem * (self.experts * (w_mult * 1.0) * n * k + rows * k * n_blocks + rows * n)
        return flops / HANDOFF_MIN_FLOPS + nbytes / HANDOFF_MIN_BYTES_PER_S

    def handoff_wait_bound_ms(self, edge: str = "handoff") -> int:
        """A bound (ms, rounded up) of how long a correct waiter of handoff edge ``edge`` can wait for one m-tile,
        under assumed slowest rates: for ``handoff`` the whole gate+up GEMM at ``T = 2^tokens_bits`` run at
        :data:`HANDOFF_MIN_FLOPS` (its ``2 T k 2I H`` flops) plus :data:`HANDOFF_MIN_BYTES_PER_S` (every expert's W13,
        the permuted x read once per n-block of the printed walk, h written); for ``combine_handoff`` gate+up's plus
        down's (a combine CTA may launch while gate+up still runs: with the gate+up handoff the down kernel lets it
        launch before its own wait). The rates are assumptions (a tenth / a fifth of the H200's), not
        measurements: a GPU slower than them (or shared longer than the margin covers) could trap a correct call.
        An m-tile's signals arrive before the signaller ends, which the waiter cannot outwait: it starts only after
        every CTA of the kernel before it is resident (rule ``moe.pdl``). E.g. Mixtral (E 8, k 2, H 4096, I 14336,
        the shipped 256-column gate+up tile: 112 n-blocks) at T = 2^20: 4.9e14 flops (4.9 s) and 1.9 TB of operand
        traffic, nearly all the permuted x re-read per n-block (1.9 s): 6.9 s, so its time-out is at least 69 s.
        """
        parts = ("gate_up",) if handoff_edge(edge).signaller == "gate_up" else ("gate_up", "down")
        return math.ceil(1000.0 * sum(self._gemm_bound_s(part) for part in parts))

    def handoff_min_timeout_ms(self, edge: str = "handoff") -> int:
        """The shortest ``<edge>_timeout_ms`` rule ``moe.handoff`` / ``moe.combine_handoff`` accepts (other than 0):
        ``max(MIN_HANDOFF_TIMEOUT_MS, HANDOFF_TIMEOUT_MARGIN x handoff_wait_bound_ms(edge))``."""
        return max(MIN_HANDOFF_TIMEOUT_MS, HANDOFF_TIMEOUT_MARGIN * self.handoff_wait_bound_ms(edge))

    def elem_bytes(self, elem: str) -> int:
        """Bytes of a workspace element type (:data:`REGION_CTYPES`): ``int32_t`` 4, ``RowIndex`` the C type of
        index ``permuted_row``, ``Element`` the layer's dtype.

        Raises:
            KeyError: an unknown type or dtype, or no ``permuted_row`` index.
        """
        if elem == "int32_t":
            return 4
        if elem == "RowIndex":
            return {"int32_t": 4, "uint32_t": 4, "int64_t": 8}[self.index("permuted_row").ctype]
        if elem == "Element":
            return DTYPE_BYTES[self.dtype]
        raise KeyError(f"workspace element type {elem!r}: expected one of {list(REGION_CTYPES)}")

    def workspace_quantities(self, tokens: Any) -> dict[str, Any]:
        """The printed ``workspace_layout``'s quantities at ``tokens`` T (an int or an int64 numpy array):
        ``rows``, ``chunks``, ``padded_rows``, ``max_tiles`` and the constants E, k, H, I."""
        w = self.workspace
        rows = tokens * self.topk
        padded = w.padded_rows(rows, self.experts)
        return {"rows": rows, "chunks": (rows + self.routing.chunk - 1) // self.routing.chunk, "padded_rows": padded,
                "max_tiles": w.max_tiles(padded), "E": self.experts, "k": self.topk, "H": self.hidden, "I": self.ffn}

    def workspace_layout(self, tokens: Any) -> dict[str, Any]:
        """What the printed host ``workspace_layout(T)`` computes at ``tokens`` T (an int or an int64 numpy
        array): the quantities of :meth:`workspace_quantities`, each region's byte offset under its name, and
        ``bytes`` (``workspace_bytes(T)``); an example is in
        :func:`argus_cutlass.kernels.moe.program.workspace_node`.
        """
        w = self.workspace
        out = self.workspace_quantities(tokens)
        o: Any = 0
        for r in w.regions:
            if r.alias:
                out[r.name] = out[r.alias]
                continue
            out[r.name] = o
            o = w.align_up(o + r.elements(out) * self.elem_bytes(r.elem))
        out["bytes"] = o
        return out

    def fingerprint(self) -> str:
        """sha256 of every node field (source locations aside)."""
        return hashlib.sha256(_canonical(self).encode()).hexdigest()

    def kernel_name(self) -> str:
        """``argus_<name>_<8 hex digits of the fingerprint>``."""
        return f"argus_{self.name}_{self.fingerprint()[:8]}"

    def index(self, name: str) -> IndexWidth:
        for ix in self.indices:
            if ix.name == name:
                return ix
        raise KeyError(f"no index {name!r}; have {[i.name for i in self.indices]}")

    def program(self, part: str) -> Program:
        if part not in ("gate_up", "down"):
            raise KeyError(f"no GEMM program {part!r}: 'gate_up' or 'down'")
        return getattr(self, part)

    def replace_node(self, part: str, kind: str | None = None, key: str | None = None, /, **changes: Any) -> MoELayer:
        """A copy with one node changed. ``part``: ``routing`` / ``combine`` (``kind`` None),
        ``index`` (``key`` = the index name), ``layer`` (the layer's own scalar fields), ``workspace`` (its
        scalar fields), ``region`` (``key`` = the workspace region's name), or
        ``gate_up`` / ``down`` with a :meth:`Program.replace_node` ``kind`` and ``key``.

        Raises:
            KeyError: no such node or field. argus_cutlass.errors.DslError: a malformed edit.
        """
        if part in ("routing", "combine"):
            return dataclasses.replace(self, **{part: _edit(getattr(self, part), changes)})
        if part == "index":
            self.index(key)  # KeyError naming the indices
            return dataclasses.replace(self, indices=tuple(_edit(i, changes) if i.name == key else i
                                                           for i in self.indices))
        if part == "workspace":
            return dataclasses.replace(self, workspace=_edit(self.workspace, changes))
        if part == "region":
            ws = self.workspace
            ws.region(key)  # KeyError naming the regions
            regions = tuple(dataclasses.replace(r, **changes) if r.name == key else r for r in ws.regions)
            return dataclasses.replace(self, workspace=dataclasses.replace(ws, regions=regions))
        if part == "layer":
            for k in changes:
                if k not in ("experts", "topk", "hidden", "ffn", "dtype", "tokens_bits", "pdl", "weight_prefetch",
                             "tickets_zero", *HANDOFF_FIELDS, *COMBINE_HANDOFF_FIELDS):
                    raise KeyError(f"MoELayer has no scalar field {k!r}")
            return dataclasses.replace(self, **changes)
        prog = self.program(part)
        return dataclasses.replace(self, **{part: prog.replace_node(kind, key, **changes)})
