"""CuTe layout algebra: pycute re-exports plus what pycute lacks.

A layout maps a coordinate (or a 1-D index, colexicographic) to an integer offset.
Everything here is pure integer arithmetic: no GPU, no solver.

Sources: CuTe ``cute/layout.hpp`` (``make_ordered_layout``, ``tile_to_shape``,
``blocked_product``), CUTLASS ``python/pycute/layout.py``.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
from pycute import (  # noqa: F401 - re-exported
    Layout,
    coalesce,
    complement,
    composition as _pycute_composition,
    cosize,
    crd2idx,
    flatten,
    idx2crd,
    is_int,
    is_tuple,
    left_inverse,
    logical_divide,
    logical_product,
    make_layout,
    product,
    right_inverse,
    size,
    tiled_divide,
    zipped_divide,
)


class LayoutError(ValueError):
    """A layout operation got incompatible shapes (names the operation and the numbers)."""


def _mode(layout: Layout, i: int) -> Layout:
    if not is_tuple(layout.shape):
        return layout if i == 0 else Layout(1, 0)
    return layout[i] if i < len(layout.shape) else Layout(1, 0)


def _rank(layout: Layout) -> int:
    return len(layout.shape) if is_tuple(layout.shape) else 1


def make_ordered_layout(shape: Sequence[int], order: Sequence[int]) -> Layout:
    """Compact layout of ``shape`` whose modes get strides in increasing ``order``.

    The mode with the smallest order value gets stride 1; ties keep mode order.
    Mirrors CuTe ``make_ordered_layout(shape, order)``.

    >>> make_ordered_layout((4, 2, 3), (2, 1, 3))
    Layout((4, 2, 3),(2, 1, 8))
    """
    if len(shape) != len(order):
        raise LayoutError(f"make_ordered_layout: shape rank {len(shape)} != order rank {len(order)}")
    strides = [0] * len(shape)
    acc = 1
    for i in sorted(range(len(shape)), key=lambda j: (order[j], j)):
        strides[i] = acc
        acc *= int(shape[i])
    return Layout(tuple(int(s) for s in shape), tuple(strides))


def tile_to_shape(block: Layout, shape: Sequence[int], order: Sequence[int] | None = None) -> Layout:
    """Repeat ``block`` until it covers ``shape``; the repeats follow ``order``.

    Result mode ``i`` is ``(block mode i, shape[i] / size(block mode i))`` with the
    repeat strided by ``cosize(block) * make_ordered_layout(reps, order).stride[i]``,
    each mode coalesced (CuTe ``tile_to_shape``: ``coalesce(blocked_product(block,
    make_ordered_layout(reps, order)), reps)``). ``order=None`` is column-major
    (mode 0 repeats fastest). Missing block modes are ``1:0``.

    Raises:
        LayoutError: ``shape[i]`` is not a multiple of block mode ``i``'s size, or the
            block has more modes than ``shape``.

    >>> tile_to_shape(Layout((8, 64), (64, 1)), (128, 64, 2))
    Layout((128, 64, 2),(64, 1, 8192))
    """
    r = len(shape)
    if _rank(block) > r:
        raise LayoutError(f"tile_to_shape: block rank {_rank(block)} > target rank {r}")
    order = tuple(range(1, r + 1)) if order is None else tuple(order)
    reps = []
    for i in range(r):
        bs = size(_mode(block, i))
        if shape[i] % bs:
            raise LayoutError(
                f"tile_to_shape: target extent {shape[i]} of mode {i} is not a multiple "
                f"of the block extent {bs}"
            )
        reps.append(shape[i] // bs)
    ordered = make_ordered_layout(reps, order)
    cos = cosize(block)
    modes = []
    for i in range(r):
        b = _mode(block, i)
        m = Layout((b.shape, reps[i]), (b.stride, cos * ordered.stride[i]))
        modes.append(coalesce(m))
    return make_layout(*modes)


def composition(a: Layout, b: Layout) -> Layout:
    """``a o b``: the layout ``R`` with ``R(i) == a(b(i))`` for every ``i < size(b)``.

    pycute's ``composition`` fails with a message-less ``AssertionError`` on non-divisible pairs,
    for some pairs (e.g. ``(4,2):(2,1) o (1,3):(0,2)``) silently returns a layout of the
    wrong size, and for non-admissible pairs (e.g. ``(1,2,2):(1,2,1) o (2,2):(1,1)``) one
    of the right size whose values are wrong; all three raise here (the last checked
    point-wise for ``size(b) <= 16384``).

    Raises:
        LayoutError: ``b``'s modes do not split ``a``'s shape (CuTe's divisibility condition).
    """
    try:
        r = _pycute_composition(a, b)
    except AssertionError:
        raise LayoutError(f"composition: {b} does not divide the shape of {a}") from None
    if size(r) != size(b):
        raise LayoutError(
            f"composition: {a} o {b} has size {size(r)} != size(b) = {size(b)} "
            f"(b's modes do not divide a's shape)"
        )
    if size(b) <= _COMPOSITION_CHECK_LIMIT:
        for i in range(size(b)):
            if r(i) != a(b(i)):
                raise LayoutError(
                    f"composition: {a} o {b} is not admissible (R({i}) = {r(i)} but "
                    f"a(b({i})) = {a(b(i))}: a mode of b crosses a mode boundary of a)"
                )
    return r


#: compositions up to this size are checked point-wise against R(i) == a(b(i))
_COMPOSITION_CHECK_LIMIT = 1 << 14


def _eval(shape: Any, stride: Any, c: Any, last: bool) -> Any:
    if is_int(shape):
        return c * stride
    if isinstance(c, tuple):
        if len(c) != len(shape):
            raise LayoutError(f"coordinate rank {len(c)} does not match shape {shape}")
        return sum(_eval(s, d, ci, True) for s, d, ci in zip(shape, stride, c))
    out = 0
    n = len(shape)
    for j, (s, d) in enumerate(zip(shape, stride)):
        sz = product(s)
        is_last = last and j == n - 1
        out = out + _eval(s, d, c if is_last else c % sz, is_last)
        c = c // sz
    return out


def eval_layout(layout: Layout, *coords: Any) -> Any:
    """``layout(*coords)`` on ints **or numpy integer arrays** (broadcast).

    With one coordinate it is a 1-D index (colexicographic over the whole shape);
    with ``rank(layout)`` coordinates each one indexes its mode (itself 1-D over a
    nested mode). Agrees with pycute ``Layout.__call__`` on ints.
    """
    if len(coords) == 1:
        return _eval(layout.shape, layout.stride, coords[0], True)
    if len(coords) != _rank(layout):
        raise LayoutError(f"{len(coords)} coordinates for a rank-{_rank(layout)} layout {layout}")
    return sum(
        _eval(s, d, c, True) for s, d, c in zip(layout.shape, layout.stride, coords)
    )


def layout_image(layout: Layout) -> np.ndarray:
    """All offsets of ``layout`` as an int64 array, indexed 0..size-1 (colexicographic)."""
    return np.asarray(eval_layout(layout, np.arange(size(layout), dtype=np.int64)), dtype=np.int64)
