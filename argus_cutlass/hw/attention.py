"""The attention template's index arithmetic, written once for Python ints and z3 integers.

``templates/attention/mainloop.j2`` computes, per tile, how many kv blocks a query block reads,
which of them need the mask, and which scores the mask sets to ``-inf``; ``kernel_body.j2`` maps
each consumer register to the row it stores. The verifier (:mod:`argus_cutlass.verify.attention`)
evaluates the same formulas here against the specification, concretely (ints) and symbolically
(z3 ``Int``; :class:`Z3IntOps`), so the two tiers cannot drift. Every function takes the program's
:class:`~argus_cutlass.dsl.ir.Mask` node (its ``causal``, ``bottom_right``, ``key_bound``,
``diagonal_shift`` fields) and the tile extents; lengths are one batch's query count ``Lq`` and key
count ``Lk`` (``seqused_k`` when given).

Specification (FlashAttention >= 2.1, cuDNN's bottom-right causal mask): row ``q`` attends key
``key`` iff ``0 <= key < Lk`` and, when causal, ``key <= q + Lk - Lq``.

>>> from types import SimpleNamespace as NS
>>> m = NS(causal=True, bottom_right=True, key_bound=True, diagonal_shift=0)
>>> kv_blocks(INT_OPS, m, 128, 128, 0, 1, 300)   # Lq = 1 sees all 300 keys: 3 blocks
3
>>> attends(INT_OPS, m, 128, 128, 0, 0, 299, 1, 300), attends(INT_OPS, m, 128, 128, 0, 0, 300, 1, 300)
(True, False)
"""

from __future__ import annotations

from typing import Any


class PyIntOps:
    """Python ints and bools."""

    name = "enum"

    @staticmethod
    def min(a: Any, b: Any) -> Any:
        return a if a < b else b

    @staticmethod
    def max(a: Any, b: Any) -> Any:
        return a if a > b else b

    @staticmethod
    def ite(c: Any, a: Any, b: Any) -> Any:
        return a if c else b

    @staticmethod
    def and_(*xs: Any) -> Any:
        return all(xs)

    @staticmethod
    def or_(*xs: Any) -> Any:
        return any(xs)

    @staticmethod
    def not_(x: Any) -> Any:
        return not x

    @staticmethod
    def div(a: Any, c: int) -> Any:
        """``a / c`` for ``a >= 0`` and a positive constant ``c`` (C's division there)."""
        return a // c

    @staticmethod
    def const_bool(x: bool) -> Any:
        return bool(x)


INT_OPS = PyIntOps()


class Z3IntOps:
    """z3 ``Int`` terms (unbounded integers; the caller bounds the variables). ``z3`` is imported
    when an instance is made."""

    name = "smt"

    def __init__(self) -> None:
        import z3

        self.z3 = z3

    def min(self, a: Any, b: Any) -> Any:
        return self.z3.If(a < b, a, b)

    def max(self, a: Any, b: Any) -> Any:
        return self.z3.If(a > b, a, b)

    def ite(self, c: Any, a: Any, b: Any) -> Any:
        return self.z3.If(c, a, b)

    def and_(self, *xs: Any) -> Any:
        return self.z3.And(*xs)

    def or_(self, *xs: Any) -> Any:
        return self.z3.Or(*xs)

    def not_(self, x: Any) -> Any:
        return self.z3.Not(x)

    def div(self, a: Any, c: int) -> Any:
        return a / c  # z3 Int division: floor for a positive divisor (= C's for a >= 0)

    def const_bool(self, x: bool) -> Any:
        return self.z3.BoolVal(bool(x))


def diagonal(ops: Any, mask: Any, Lq: Any, Lk: Any) -> Any:
    """The causal diagonal's offset: row ``q`` sees keys ``<= q + diagonal`` (``tile_of`` /
    ``apply_mask``: ``shift = kBottomRight ? Lk - Lq : 0``, plus ``kMaskDiagonalShift``)."""
    return (Lk - Lq if mask.bottom_right else 0) + mask.diagonal_shift


def kv_blocks(ops: Any, mask: Any, tile_m: int, tile_n: int, m_block: Any, Lq: Any, Lk: Any,
              rounding: str = "ceil") -> Any:
    """``Tile::n_blocks`` of ``tile_of``: one past the last kv block any row of query block
    ``m_block`` may see (0: every row of the tile is fully masked). ``rounding``: the kv loop node's
    (``ceil``: a last partial block is read; ``floor`` drops it -- the template refuses to print it, and the
    verifier's coverage check finds the keys it drops)."""
    limit = Lk
    if mask.causal:
        last_row = ops.min((m_block + 1) * tile_m, Lq) - 1
        limit = ops.min(limit, last_row + diagonal(ops, mask, Lq, Lk) + 1)
    up = tile_n - 1 if rounding == "ceil" else 0
    return ops.ite(limit > 0, ops.div(ops.max(limit, 0) + up, tile_n), 0)


def block_needs_mask(ops: Any, mask: Any, tile_m: int, tile_n: int, m_block: Any, n: Any, Lq: Any, Lk: Any) -> Any:
    """``block_needs_mask``: kv block ``n`` may hold a key past the length or past the diagonal of
    the tile's first row; the kernel skips ``apply_mask`` on the other blocks."""
    need = (n + 1) * tile_n > Lk
    if mask.causal:
        need = ops.or_(need, (n + 1) * tile_n - 1 > m_block * tile_m + diagonal(ops, mask, Lq, Lk))
    return need


def masked(ops: Any, mask: Any, q: Any, key: Any, Lq: Any, Lk: Any) -> Any:
    """``apply_mask`` on the batch-local (row, key): the score becomes ``-inf``."""
    out = ops.const_bool(False)
    if mask.key_bound:
        out = ops.or_(out, key >= Lk)
    if mask.causal:
        out = ops.or_(out, key > q + diagonal(ops, mask, Lq, Lk))
    return out


def attends(ops: Any, mask: Any, tile_m: int, tile_n: int, m_block: Any, q: Any, key: Any, Lq: Any, Lk: Any,
            rounding: str = "ceil") -> Any:
    """Whether the kernel lets row ``q`` of query block ``m_block`` attend ``key >= 0``: the key's
    block is read (``key < n_blocks * tile_n``, :func:`kv_blocks` with the kv loop's ``rounding``) and, where
    the block is masked, the mask keeps it."""
    n = ops.div(key, tile_n)
    read = key < kv_blocks(ops, mask, tile_m, tile_n, m_block, Lq, Lk, rounding) * tile_n
    dropped = ops.and_(block_needs_mask(ops, mask, tile_m, tile_n, m_block, n, Lq, Lk),
                       masked(ops, mask, q, key, Lq, Lk))
    return ops.and_(read, ops.not_(dropped))


def spec_attends(ops: Any, causal: bool, q: Any, key: Any, Lq: Any, Lk: Any) -> Any:
    """The specification: ``0 <= key < Lk`` and, causal, ``key <= q + Lk - Lq`` (bottom-right)."""
    ok = key < Lk
    if causal:
        ok = ops.and_(ok, key <= q + Lk - Lq)
    return ok


def tile_of(t: int, m_blocks: int, heads: int, longest_first: bool) -> tuple[int, int, int]:
    """``tile_of``'s ``(m_block, head, batch)`` of work unit ``t`` (m_block fastest)."""
    mb = t % m_blocks
    return (m_blocks - 1 - mb if longest_first else mb), (t // m_blocks) % heads, t // (m_blocks * heads)


def load_head(kind: str, head: int, heads: int, kv_heads: int) -> int:
    """The head a load with ``TmaLoad.head`` ``kind`` addresses for query head ``head``
    (``"kv"``: ``head / (heads / kv_heads)``, as ``producer`` computes ``kv_head``)."""
    return head // (heads // kv_heads) if kind == "kv" else head


def store_row(t: Any, h: Any, row_offset: int) -> Any:
    """``store_output``: the row (of the warpgroup's 64) where thread ``t`` stores its row half ``h``."""
    return (16 * (t // 32) + (t % 32) // 4 + 8 * h + row_offset) % 64


#: 32-bit words one store of each ``RowOutput.store_mode`` writes (4-byte / 16-byte stores)
STORE_WORDS = {"direct": 1, "quad16": 4}


def quad_exchange(lanes: list[list[Any]], b: int) -> str | None:
    """One butterfly stage of ``store_output`` (``quad16``) on the 32 lanes' word arrays, in place.

    For each ``k < len(words)`` with ``k & b == 0``, in order (the template's unrolled loop): every
    lane computes ``hi = lane & b != 0``, sends ``words[k]`` if ``hi`` else ``words[k ^ b]``
    (``__shfl_xor_sync(~0u, send, b)``: it receives lane ``lane ^ b``'s send), and writes what it
    received into ``words[k]`` if ``hi`` else ``words[k ^ b]``. Returns a message when the stage
    names a register past the thread's words or a lane mask outside ``[1, 31]``, else None.

    >>> lanes = [[(lane, k) for k in range(4)] for lane in range(32)]
    >>> quad_exchange(lanes, 2), quad_exchange(lanes, 1)
    (None, None)
    >>> lanes[1]  # lane 1 now holds word 1 (column block 4 g + 1) of lanes 0..3: a transpose
    [(0, 1), (1, 1), (2, 1), (3, 1)]
    """
    n = len(lanes[0])
    if not 1 <= b <= 31:
        return f"lane mask {b} is outside [1, 31] (shfl.sync.bfly within a warp)"
    for k in range(n):
        if k & b:
            continue
        kb = k ^ b
        if kb >= n:
            return f"stage {b} exchanges word {k} with word {kb}, past the thread's {n} words"
        sent = [lanes[lane][kb if not (lane & b) else k] for lane in range(32)]
        for lane in range(32):
            lanes[lane][k if lane & b else kb] = sent[lane ^ b]
    return None


def output_store_map(out: Any, head_dim: int) -> tuple[list[tuple[int, ...]], str | None]:
    """The elements ``store_output`` writes for one consumer warpgroup, as the template computes them
    from the :class:`~argus_cutlass.dsl.ir.RowOutput` node ``out`` (``store_mode``, ``shuffle``,
    ``group_cols``, ``lane_cols``, ``row_offset``).

    Each record is ``(t, h, g, w, e, row, d, src_t, src_reg)``: thread ``t`` of the warpgroup, for its
    row half ``h`` and store ``g``, writes word ``w`` element ``e`` at ``(row, d)`` of the warpgroup's
    64 x ``head_dim`` tile, and that value is accumulator register ``src_reg`` of thread ``src_t``
    (after the exchange). The second item is a message when the exchange itself is malformed.

    >>> from types import SimpleNamespace as NS
    >>> recs, err = output_store_map(NS(store_mode="quad16", shuffle=(2, 1), group_cols=32, lane_cols=8,
    ...                                 row_offset=0), 64)
    >>> err, len(recs), recs[1]  # 64 x 64 elements; thread 0's (row 0, d 1) is its own register 1
    (None, 4096, (0, 0, 0, 0, 1, 0, 1, 0, 1))
    """
    words = STORE_WORDS[out.store_mode]
    groups = head_dim // (8 * words)
    recs: list[tuple[int, ...]] = []
    for g in range(groups):
        lanes = [[(lane, g * words + k) for k in range(words)] for lane in range(32)]
        for b in out.shuffle:
            err = quad_exchange(lanes, b)
            if err is not None:
                return recs, err
        for t in range(128):
            lane, warp = t % 32, t // 32
            for h in (0, 1):
                row = store_row(t, h, out.row_offset)
                for w in range(words):
                    src_lane, block = lanes[lane][w]
                    for e in (0, 1):
                        d = out.group_cols * g + out.lane_cols * (lane % 4) + 2 * w + e
                        recs.append((t, h, g, w, e, row, d, 32 * warp + src_lane, 4 * block + 2 * h + e))
    return recs, None
