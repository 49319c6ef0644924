"""Layout-algebra laws checked over whole small domains, plus hypothesis-generated layouts."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from argus_cutlass.dsl.atoms import GmmaSmemAtom, Swizzle
from argus_cutlass.layout import (
    Layout,
    LayoutError,
    SwizzledLayout,
    apply_swizzle,
    atom_layout,
    complement,
    composition,
    cosize,
    eval_layout,
    gmma_c_layout,
    layout_image,
    make_layout,
    make_ordered_layout,
    size,
    tile_to_shape,
)

SMALL_LAYOUTS = [
    Layout(8, 1),
    Layout((4, 2), (1, 4)),
    Layout((4, 2), (2, 1)),
    Layout((2, (2, 3)), (1, (6, 2))),
    Layout(((2, 2), 4), ((1, 8), 2)),
    Layout((3, 4, 2), (8, 1, 4)),
]


@st.composite
def compact_layouts(draw, max_rank: int = 3):
    """A compact (bijective onto [0, size)) layout with a random mode order."""
    rank = draw(st.integers(1, max_rank))
    shape = tuple(draw(st.integers(1, 4)) for _ in range(rank))
    order = draw(st.permutations(list(range(rank))))
    return make_ordered_layout(shape, order)


@st.composite
def layouts(draw, max_rank: int = 3):
    rank = draw(st.integers(1, max_rank))
    shape = tuple(draw(st.integers(1, 4)) for _ in range(rank))
    stride = tuple(draw(st.integers(0, 12)) for _ in range(rank))
    return Layout(shape, stride)


@pytest.mark.parametrize("layout", SMALL_LAYOUTS, ids=str)
def test_eval_layout_matches_pycute_on_whole_domain(layout):
    idx = np.arange(size(layout))
    got = eval_layout(layout, idx)
    want = [layout(int(i)) for i in idx]
    assert list(got) == want


@given(layouts())
def test_eval_layout_matches_pycute_hypothesis(layout):
    assert list(layout_image(layout)) == [layout(i) for i in range(size(layout))]


@pytest.mark.parametrize("a,b", [
    (Layout((4, 2), (2, 1)), Layout(4, 2)),
    (Layout((6, 2), (8, 2)), Layout((4, 3), (3, 1))),
    (Layout(((2, 2), 4), ((1, 8), 2)), Layout((2, 4), (4, 1))),
    (Layout(20, 2), Layout((4, 5), (5, 1))),
], ids=str)
def test_composition_law(a, b):
    r = composition(a, b)
    for i in range(size(b)):
        assert r(i) == a(b(i))


@st.composite
def pow2_layouts(draw, max_rank: int = 2, compact: bool = False):
    """Power-of-2 shapes and strides: CuTe's divisibility condition always holds for these."""
    rank = draw(st.integers(1, max_rank))
    shape = tuple(1 << draw(st.integers(0, 2)) for _ in range(rank))
    if compact:
        return make_ordered_layout(shape, draw(st.permutations(list(range(rank)))))
    return Layout(shape, tuple(1 << draw(st.integers(0, 3)) for _ in range(rank)))


@settings(max_examples=80, deadline=None)
@given(pow2_layouts(max_rank=3, compact=True), pow2_layouts())
def test_composition_law_hypothesis(a, b):
    assume(cosize(b) <= size(a))
    try:
        r = composition(a, b)
    except LayoutError:  # not a composable pair (CuTe divisibility condition)
        assume(False)
    for i in range(size(b)):
        assert r(i) == a(b(i))


def test_composition_rejects_non_divisible_pair_with_message():
    with pytest.raises(LayoutError, match=r"has size 2 != size\(b\) = 3"):
        composition(Layout((4, 2), (2, 1)), Layout((1, 3), (0, 2)))


@pytest.mark.parametrize("a,m", [
    (Layout(4, 1), 24), (Layout(6, 4), 48), (Layout((2, 4), (1, 6)), 48), (Layout((2, 2), (1, 4)), 16),
], ids=str)
def test_complement_is_disjoint_and_covers(a, m):
    c = complement(a, m)
    full = make_layout(a, c)
    img = layout_image(full)
    assert len(set(img.tolist())) == len(img)  # (A, complement) is injective: disjoint images
    assert size(full) >= m
    a_img = set(layout_image(a).tolist())
    c_img = set(layout_image(c).tolist())
    assert a_img & c_img <= {0}


@given(compact_layouts(max_rank=2), st.integers(1, 3))
def test_complement_hypothesis(a, k):
    m = size(a) * k
    full = make_layout(a, complement(a, m))
    img = layout_image(full)
    assert sorted(img.tolist()) == list(range(size(full)))


def test_make_ordered_layout_orders_strides():
    assert make_ordered_layout((4, 2, 3), (2, 1, 3)) == Layout((4, 2, 3), (2, 1, 8))
    assert make_ordered_layout((4, 2), (1, 1)) == Layout((4, 2), (1, 4))


def test_tile_to_shape_known_cute_result():
    # CuTe: tile_to_shape(Layout<(8,64),(64,1)>, (128,64,2)) for a K-major SW128 bf16 atom
    r = tile_to_shape(Layout((8, 64), (64, 1)), (128, 64, 2))
    assert r == Layout((128, 64, 2), (64, 1, 8192))
    # MN-major atom, K repeats first (Step<2,1,3>)
    r = tile_to_shape(Layout((64, 8), (1, 64)), (128, 64, 3), (2, 1, 3))
    assert r(64, 0, 0) == 64 * 64 and r(0, 8, 0) == 512 and r(0, 0, 1) == 128 * 64


@pytest.mark.parametrize("block,shape,order", [
    (Layout((2, 4), (4, 1)), (6, 8), (1, 2)),
    (Layout((2, 4), (4, 1)), (6, 8, 2), (2, 1, 3)),
    (Layout((4, 2), (1, 4)), (8, 4, 3), (1, 2, 3)),
    (Layout((2, 2), (1, 2)), (4, 6), (2, 1)),
], ids=str)
def test_tile_to_shape_law(block, shape, order):
    r = tile_to_shape(block, shape, order)
    bshape = list(block.shape) + [1] * (len(shape) - len(block.shape))
    reps = [s // b for s, b in zip(shape, bshape)]
    ordered = make_ordered_layout(reps, order)
    for crd in itertools.product(*[range(s) for s in shape]):
        inner = tuple(c % b for c, b in zip(crd, bshape))[: len(block.shape)]
        outer = tuple(c // b for c, b in zip(crd, bshape))
        assert r(*crd) == block(*inner) + cosize(block) * ordered(*outer)
    # compact block -> compact result
    assert sorted(layout_image(r).tolist()) == list(range(size(r)))


def test_tile_to_shape_rejects_non_multiple():
    with pytest.raises(LayoutError, match="target extent 12 of mode 1 is not a multiple of the block extent 8"):
        tile_to_shape(Layout((8, 8), (8, 1)), (16, 12))


@pytest.mark.parametrize("b,m,s", [(b, m, s) for b in range(0, 4) for m in range(0, 4) for s in range(max(b, 1), 5)])
def test_swizzle_is_bijective_involution_on_its_period(b, m, s):
    period = 1 << (b + m + s)
    x = np.arange(period * 2)
    y = apply_swizzle(b, m, s, x)
    assert (apply_swizzle(b, m, s, y) == x).all()
    assert sorted(y[:period].tolist()) == list(range(period))
    # atoms.Swizzle agrees
    assert (Swizzle(b, m, s)(x) == y).all()


def test_swizzle_128b_bf16_known_values():
    sw = GmmaSmemAtom("K", 128, 16).element_swizzle  # Swizzle<3,3,3>
    assert (sw.bits, sw.base, sw.shift) == (3, 3, 3)
    # row 1 of the 8x64 atom: its 8-element chunks are XORed with 1
    assert [int(sw(64 + 8 * c)) for c in range(8)] == [64 + 8 * (c ^ 1) for c in range(8)]
    lay = SwizzledLayout(sw, atom_layout(GmmaSmemAtom("K", 128, 16)))
    img = lay.image()
    assert sorted(img.tolist()) == list(range(512)) and lay(3, 0) == 3 * 64 + 8 * 3


def test_gmma_c_layout_matches_ptx_fragment():
    """PTX ISA 9.7.15.4 wgmma D fragment: row = 16*warp + lane/4 + 8*i, col = 2*(lane%4) + j + 8*c."""
    for n in (8, 64, 256):
        c = gmma_c_layout(n)
        for t in range(128):
            warp, lane = divmod(t, 32)
            for v in range(n // 2):
                j, i, col8 = v % 2, (v // 2) % 2, v // 4
                row = 16 * warp + lane // 4 + 8 * i
                col = 2 * (lane % 4) + j + 8 * col8
                assert c(t, v) == row + 64 * col
        assert sorted(layout_image(c).tolist()) == list(range(64 * n))


def test_gmma_c_layout_rejects_bad_n():
    with pytest.raises(LayoutError, match="GMMA N=12 is not a multiple of 8"):
        gmma_c_layout(12)


def test_composition_rejects_non_admissible_pair_pycute_gets_wrong():
    # pycute returns (2,2):(2,2) here, whose R(3) = 4 while a(b(3)) = a(2) = 1
    with pytest.raises(LayoutError, match=r"not admissible \(R\(3\) = 4 but a\(b\(3\)\) = 1"):
        composition(Layout((1, 2, 2), (1, 2, 1)), Layout((2, 2), (1, 1)))
