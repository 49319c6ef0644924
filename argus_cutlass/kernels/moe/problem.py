"""One mixture-of-experts (MoE) layer with SwiGLU experts: sizes, dtype, routing and the rules.

Tensors (row-major)::

    x        (T, H)       tokens                                   bf16 / fp16
    ids      (T, k)       router top-k expert ids, in [0, E)       integer
    weights  (T, k)       router top-k weights, finite             floating
    w13      (E, 2I, H)   rows [0, I) = gate, rows [I, 2I) = up    bf16 / fp16
    w2       (E, H, I)    down projection                          bf16 / fp16
    y        (T, H)       output

For token ``t`` and slot ``j`` with ``e = ids[t, j]`` and ``w = weights[t, j]``::

    h   = silu(x_t W13[e, :I]^T) * (x_t W13[e, I:]^T)     (length I)
    y_t += w * (h W2[e]^T)                                 (length H)

Every token contributes ``k`` routed rows (``T * k`` in all); expert ``e`` sees ``count_e`` of them
(``sum_e count_e = T * k``). The kernels to come permute the rows by expert
(:mod:`argus_cutlass.hw.routing`), run the gate+up grouped GEMM with SiLU * up fused, the
down grouped GEMM, and combine the ``k`` weighted rows of each token back in token order.

Rules checked by :meth:`MoEProblem.validate` (the ``rule`` of the raised
:class:`~argus_cutlass.errors.ProblemError`):

==========================  =========================================================================
``problem.size``            tokens, experts, topk, hidden, ffn are integers >= 1
``problem.token_range``     tokens <= 2**20 (the range the index proofs will be stated for: T * k and
                            T * k * max(H, I) row offsets are reasoned about for T up to 2^20)
``problem.experts``         experts <= 1024 (the routing scan holds one expert per thread of one CTA)
``problem.weight_rows``     E x 2I and E x H < 2^31 (TMA row coordinates of the expert weights are int32)
``problem.width``           H, I <= 2^16 (the widths the verifier proves the grouped walks for in bounded time)
``problem.topk``            1 <= topk <= experts (a token's k experts are distinct)
``problem.dtype``           bf16 or fp16
``tma.contiguous_extent``   hidden and ffn are multiples of 8 elements (16 bytes, TMA's rule for the
                            contiguous extent and the row pitch)
``problem.routing``         (:meth:`MoEProblem.check_routing`) ids and weights are ``(T, k)``, ids are
                            integers in [0, E) with no expert twice in a token's k slots, weights finite
==========================  =========================================================================
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any

from argus_cutlass.dsl.moe_ir import MAX_TOKENS_BITS
from argus_cutlass.errors import ProblemError

DTYPES = ("bf16", "fp16")
ELEMENT_BYTES = {"bf16": 2, "fp16": 2}
#: the largest token count the family is specified for (issue 11: T up to 2^20)
MAX_TOKENS = 2**MAX_TOKENS_BITS
#: the most experts one layer may have: route_scan gives each expert a thread of one 1024-thread CTA
#: (the verifier's rule moe.launch states the same bound on the layer)
MAX_EXPERTS = 1024
#: the widest H and I the layer is verified for: the verifier runs the grouped walks' every (m-tile, n-block)
#: unit on its routings (``moe.group_tiles``), which takes ~10 s at H = I = 2^16 and grows with the widths (a
#: fuzzed H = 2^29 ran for over 18 min); every released MoE model is well inside (H <= 7168, I <= 32768)
MAX_WIDTH = 2**16
#: TMA's 16-byte rule, in elements of a 2-byte dtype
CONTIGUOUS_ALIGN_ELEMENTS = 8
#: H200 HBM3e bandwidth, the default of :meth:`MoEProblem.floor_ms`
H200_HBM_BYTES_PER_S = 4.8e12

#: the MoE layers of ``ANCHORS.md``: name -> (experts E, topk k, hidden H, ffn I)
MODEL_SHAPES: dict[str, tuple[int, int, int, int]] = {
    "mixtral": (8, 2, 4096, 14336),
    "qwen3-30b-a3b": (128, 8, 2048, 768),
    "deepseek-v2-lite": (64, 6, 2048, 1408),
}


def _is_int(x: object) -> bool:
    """An integer (Python or numpy), not a bool and not a float."""
    if isinstance(x, (bool, float)):
        return False
    try:
        operator.index(x)
    except TypeError:
        return False
    return True


def _to_numpy(a: Any, name: str) -> Any:
    """A numpy view/copy of a numpy array, a torch tensor (any device) or a nested list."""
    import numpy as np

    if hasattr(a, "detach") and hasattr(a, "cpu"):  # a torch tensor; torch is not imported here
        t = a.detach().cpu()
        if getattr(t, "is_floating_point", lambda: False)() and str(t.dtype) in ("torch.bfloat16", "torch.float16"):
            t = t.float()
        return t.numpy()
    try:
        return np.asarray(a)
    except Exception as exc:  # noqa: BLE001 - report any unconvertible input as a routing error
        raise ProblemError("problem.routing", f"{name} of type {type(a).__name__} is not an array: {exc}") from None


def routing_value_errors(topk_ids: Any, topk_weights: Any, experts: int, *, skip_padding: bool = False,
                         rule: str = "problem.routing") -> list[ProblemError]:
    """The value rules of a router's output (``(T, k)`` numpy arrays, shapes and dtypes already checked), each
    error naming the first offender: every id in [0, E) (or ``-1``, a padding slot, with ``skip_padding``), no
    expert twice in a token's slots, every weight of a routed slot finite. The one statement of these rules:
    :meth:`MoEProblem.routing_violations` (``problem.routing``) and the op's gate
    :func:`argus_cutlass.kernels.moe.library.check_routing_values` (``moe.input``, which finds offenders on the
    device and calls this for the message) both use it.

    >>> import numpy as np
    >>> for e in routing_value_errors(np.array([[0, 0], [1, 9]]), np.ones((2, 2)), 8):
    ...     print(e.message)
    topk_ids[1, 1] = 9 is outside [0, E=8) (1 id(s) out of range)
    topk_ids[0, 1] = 0 repeats topk_ids[0, 0] (1 token(s) with a repeated expert): a token's k experts are distinct
    >>> routing_value_errors(np.array([[-1, -1, 3]]), np.array([[np.nan, 1.0, 0.5]]), 8, skip_padding=True)
    []
    """
    import numpy as np

    ids = np.asarray(topk_ids).astype(np.int64)
    w = np.asarray(topk_weights)
    pad = (ids == -1) if skip_padding else np.zeros(ids.shape, dtype=bool)
    errs: list[ProblemError] = []
    bad = np.argwhere(((ids < 0) | (ids >= experts)) & ~pad)
    if bad.size:
        t, j = (int(v) for v in bad[0])
        errs.append(ProblemError(
            rule, f"topk_ids[{t}, {j}] = {int(ids[t, j])} is outside [0, E={experts})"
            + (" and is not -1 padding" if skip_padding else "") + f" ({len(bad)} id(s) out of range)",
            "pass padding='skip' to let -1 slots add nothing" if rule == "moe.input" and not skip_padding else None))
    if ids.ndim == 2 and ids.shape[1] > 1:
        # padding slots get distinct negative keys, so several -1 slots of one token are no repeat
        key = np.where(pad, -2 - np.arange(ids.shape[1]), ids)
        srt = np.sort(key, axis=1)
        dup_rows = np.flatnonzero((srt[:, 1:] == srt[:, :-1]).any(axis=1))
        if dup_rows.size:
            t = int(dup_rows[0])
            row = key[t].tolist()
            j = next(j for j in range(1, len(row)) if row[j] in row[:j])
            errs.append(ProblemError(
                rule, f"topk_ids[{t}, {j}] = {row[j]} repeats topk_ids[{t}, {row.index(row[j])}] ({len(dup_rows)} "
                f"token(s) with a repeated expert): a token's k experts are distinct",
                "pass the router's top-k indices (torch.topk gives distinct ones)"))
    nonfinite = np.argwhere(~np.isfinite(w) & ~pad)
    if nonfinite.size:
        t, j = (int(v) for v in nonfinite[0])
        errs.append(ProblemError(
            rule, f"topk_weights[{t}, {j}] = {float(w[t, j])} is not finite ({len(nonfinite)} non-finite weight(s) "
            "of routed slots)", "the router's weights must be finite numbers (a NaN weight makes the token's output NaN)"))
    return errs


@dataclass(frozen=True)
class MoEProblem:
    """Sizes of one MoE layer with SwiGLU experts (see the module docstring for the tensors).

    Attributes:
        tokens: T, the tokens of the batch (1 .. 2**20).
        experts: E, the experts of the layer.
        topk: k, the experts each token is routed to (distinct, 1 <= k <= E).
        hidden: H, the model width (x, y, the K of gate+up, the N of down).
        ffn: I, the expert's intermediate width (gate and up each have I rows).
        dtype: ``bf16`` or ``fp16`` (x, w13, w2, y).
    """

    tokens: int
    experts: int
    topk: int
    hidden: int
    ffn: int
    dtype: str = "bf16"

    @classmethod
    def for_model(cls, model: str, tokens: int, dtype: str = "bf16") -> MoEProblem:
        """The problem of one of :data:`MODEL_SHAPES` at ``tokens`` tokens."""
        if model not in MODEL_SHAPES:
            raise ProblemError("problem.model", f"unknown MoE model {model!r}", f"one of {sorted(MODEL_SHAPES)}")
        e, k, h, i = MODEL_SHAPES[model]
        return cls(tokens, e, k, h, i, dtype)

    # ---- derived --------------------------------------------------------------------

    @property
    def routed_rows(self) -> int:
        """``T * k``, the rows of the permuted activations."""
        return self.tokens * self.topk

    @property
    def element_bytes(self) -> int:
        return ELEMENT_BYTES.get(self.dtype, 2)

    def _rows(self, counts: Any) -> int:
        if counts is None:
            return self.routed_rows
        return int(sum(int(c) for c in counts))

    def flops(self, counts: Any = None) -> float:
        """``2 * rows * (2I * H + H * I)``: gate+up (``rows x 2I x H``) and down (``rows x H x I``)
        for the routed rows (``sum(counts)``, or ``T * k`` when ``counts`` is None). SiLU, the
        product and the weighted combine are not counted (the field's convention)."""
        rows = self._rows(counts)
        h, i = self.hidden, self.ffn
        return 2.0 * rows * (2 * i * h + h * i)

    def active_experts(self, counts: Any = None) -> int:
        """Experts with at least one routed row; with ``counts`` None, the most there can be
        (``min(E, T * k)``)."""
        if counts is None:
            return min(self.experts, self.routed_rows)
        return sum(1 for c in counts if int(c) > 0)

    def weight_bytes_read(self, counts: Any = None) -> int:
        """Bytes of expert weights a kernel must read at least once: ``E_active * 3 * I * H``
        elements (w13 and w2 of every expert with a routed row). Experts with no row need not be
        read. This is the floor at small T, where the layer is bound by weight traffic."""
        return self.active_experts(counts) * 3 * self.ffn * self.hidden * self.element_bytes

    def activation_bytes(self) -> int:
        """Bytes of x read once and y written once (``2 * T * H`` elements); intermediate traffic
        (the permuted rows, h) is not counted: a fused kernel may keep it on chip."""
        return 2 * self.tokens * self.hidden * self.element_bytes

    def floor_ms(self, counts: Any = None, hbm_bytes_per_s: float = H200_HBM_BYTES_PER_S) -> float:
        """A lower bound on the layer's time from memory traffic alone: the active experts' weights
        plus x in and y out, at ``hbm_bytes_per_s`` (default the H200's 4.8 TB/s)."""
        if not hbm_bytes_per_s > 0:
            raise ProblemError("problem.bandwidth", f"hbm_bytes_per_s={hbm_bytes_per_s!r} must be > 0")
        return (self.weight_bytes_read(counts) + self.activation_bytes()) / hbm_bytes_per_s * 1e3

    # ---- validation ------------------------------------------------------------------

    def violations(self) -> list[ProblemError]:
        """Every rule this problem breaks (empty when it is valid), in a fixed order."""
        errs: list[ProblemError] = []
        for name in ("tokens", "experts", "topk", "hidden", "ffn"):
            v = getattr(self, name)
            if not _is_int(v) or v < 1:
                errs.append(ProblemError("problem.size", f"{name}={v!r} must be an integer >= 1"))
        if self.dtype not in DTYPES:
            errs.append(ProblemError("problem.dtype", f"dtype={self.dtype!r}: x, w13 and w2 must be one of {DTYPES}"))
        if errs:
            return errs
        if self.tokens > MAX_TOKENS:
            errs.append(ProblemError(
                "problem.token_range", f"tokens={self.tokens} > 2^20: the MoE kernels' index arithmetic is "
                "specified (and will be proved) for T up to 2^20",
                "split the batch into chunks of at most 2^20 tokens; the layer is token-wise, so the "
                "chunks' outputs concatenate"))
        if self.experts > MAX_EXPERTS:
            errs.append(ProblemError(
                "problem.experts", f"experts={self.experts} > {MAX_EXPERTS}: the routing scan kernel gives each expert "
                f"one thread of a single {MAX_EXPERTS}-thread CTA (input --experts / MoEProblem.experts)",
                f"at most {MAX_EXPERTS} experts per layer"))
        for what, rows, inputs in (("E x 2I (the W13 rows)", self.experts * 2 * self.ffn, "--experts / --ffn"),
                                    ("E x H (the W2 rows)", self.experts * self.hidden, "--experts / --hidden")):
            if rows > 2**31 - 1:
                errs.append(ProblemError(
                    "problem.weight_rows", f"{what} = {rows} > 2^31 - 1: the expert weights are addressed by TMA "
                    f"row coordinates, which are signed 32-bit (PTX ISA 9.7.9.25, cp.async.bulk.tensor) (inputs "
                    f"{inputs})", "split the experts over more than one layer call"))
        for name in ("hidden", "ffn"):
            v = getattr(self, name)
            if v > MAX_WIDTH:
                errs.append(ProblemError(
                    "problem.width", f"{name}={v} > 2^16: the layer is verified for H and I up to {MAX_WIDTH} (the "
                    "verifier runs every tile of the grouped GEMMs on its routings; wider layers are outside what "
                    f"it proves in bounded time) (input --{name})",
                    "split the layer's width: H over several down-projection calls, or I over several experts"))
        if self.topk > self.experts:
            errs.append(ProblemError(
                "problem.topk", f"topk={self.topk} > experts={self.experts}: a token's k experts are distinct",
                "topk must be between 1 and the number of experts"))
        for name in ("hidden", "ffn"):
            v = getattr(self, name)
            if v % CONTIGUOUS_ALIGN_ELEMENTS:
                errs.append(ProblemError(
                    "tma.contiguous_extent", f"{name}={v} is not a multiple of {CONTIGUOUS_ALIGN_ELEMENTS} "
                    f"elements ({CONTIGUOUS_ALIGN_ELEMENTS * self.element_bytes} bytes): TMA needs the contiguous "
                    "extent and row pitch in multiples of 16 bytes",
                    f"pad {name} with zeros to the next multiple of {CONTIGUOUS_ALIGN_ELEMENTS} (zero columns of x / "
                    "w13 / w2 leave y unchanged)"))
        return errs

    def validate(self) -> MoEProblem:
        """Check every rule; returns ``self`` when valid.

        Raises:
            ProblemError: the first violation's rule; the message lists all of them.
        """
        ProblemError.raise_all(self.violations(), f"this {type(self).__name__}")
        return self

    def routing_violations(self, topk_ids: Any, topk_weights: Any) -> list[ProblemError]:
        """Every ``problem.routing`` rule the router's output breaks (empty when it is valid).

        ``topk_ids`` and ``topk_weights`` are numpy arrays or torch tensors (any device; copied to
        the host), of shape ``(T, k)``.
        """
        import numpy as np

        ids = _to_numpy(topk_ids, "topk_ids")
        w = _to_numpy(topk_weights, "topk_weights")
        want = (self.tokens, self.topk)
        errs: list[ProblemError] = []
        if ids.shape != want:
            errs.append(ProblemError("problem.routing", f"topk_ids has shape {tuple(ids.shape)}, expected (T, k) = {want}"))
        if w.shape != want:
            errs.append(ProblemError("problem.routing",
                                     f"topk_weights has shape {tuple(w.shape)}, expected (T, k) = {want}"))
        if ids.dtype.kind not in "iu":
            errs.append(ProblemError("problem.routing", f"topk_ids has dtype {ids.dtype}: expert ids must be integers",
                                     "pass the router's indices (torch.topk(...).indices), not its values"))
        if w.dtype.kind not in "iuf":
            errs.append(ProblemError("problem.routing", f"topk_weights has dtype {w.dtype}: weights must be real numbers"))
        if errs:
            return errs
        return routing_value_errors(ids, w, self.experts)

    def check_routing(self, topk_ids: Any, topk_weights: Any) -> MoEProblem:
        """Check the router's output against this problem; returns ``self`` when valid.

        Raises:
            ProblemError: ``problem.routing``, naming the first bad ``(token, slot)``.
        """
        ProblemError.raise_all(self.routing_violations(topk_ids, topk_weights), f"the routing of {self!r}")
        return self

    def describe(self) -> str:
        """A short label, e.g. ``t256 e8 k2 h4096 i14336 bf16``."""
        return f"t{self.tokens} e{self.experts} k{self.topk} h{self.hidden} i{self.ffn} {self.dtype}"

