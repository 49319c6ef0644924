"""MoE layer on the H200 against the fp32 reference (issue 11, Deliver 5). Marked ``gpu``.

    pytest -q -m gpu tests/gpu/test_moe_gpu.py

Cases: the three ANCHORS shapes (their small-T layers gather in ``heuristics.gather_slices_for``
column slices) x T in {1, 16, 256, 2048, 8192} (uniform routing), top-1/2/6/8,
skewed routing, experts with no token, all tokens to one expert, group sizes 128 / 130 / 65, -1
padding skipped, fp16, CUDA-graph capture, and the bad-input errors. The small-T path
(``heuristics.small_t_config``: 64-row ping-pong tiles, groups padded to 64; the heuristic's pick
for T <= 256) explicitly: the three shapes x T in {1, 16, 256} x uniform / skewed routing, groups
of exactly 64 / 128 rows and of 65, CUDA-graph capture on each side of the bucket edge. The banded
grouped walk (``MoEConfig.gu_band_m`` / ``dn_band_m``; the large-T default is banded, so the anchor
cases at T = 2048 / 8192 run it too) explicitly: bands that do not divide the m-tile count (each case
asserts it on the routing), skewed routing, empty experts, one expert, group sizes 128 / 130 / 65,
more units than CTAs, the banded ping-pong (64-row) path, and the walk's bands of 1. The sliced gather
(``MoEConfig.gather_slices``) explicitly: slices of H that do not divide its vectors, -1 padding (a
whole token and single slots), output and workspace poisoned with NaN. The large-T short-group layers (dynamic
walk and row-bounded tiles where the 128-row m-tiles' padding is large: the T = 300 / 777 cases of top-k, routings
and CUDA-graph capture take them) and their group sizes around the tile explicitly.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from argus_cutlass.kernels.moe.check import fp32_layer, make_inputs, run_and_check, run_back_to_back  # noqa: E402
from argus_cutlass.kernels.moe.problem import MODEL_SHAPES, MoEProblem  # noqa: E402

pytestmark = pytest.mark.gpu


def _lib(problem, config=None):
    from argus_cutlass.api import moe_kernel

    return moe_kernel(problem, config, smt=False)


def _small():
    from argus_cutlass.kernels.moe.heuristics import small_t_config

    return small_t_config()


#: the layers this module builds (sizes; each in both T buckets)
_LAYERS = ([MoEProblem.for_model(m, t) for m in sorted(MODEL_SHAPES) for t in (16, 2048)]
           + [MoEProblem(300, e, k, 512, 256) for e, k in ((8, 1), (8, 2), (64, 6), (128, 8))]
           + [MoEProblem(t, 8, 2, 512, 256) for t in (162, 256)] + [MoEProblem(777, 16, 2, 512, 384)]
           + [MoEProblem(256, 8, 2, 512, 256, "fp16"), MoEProblem(64, 8, 2, 256, 128), MoEProblem(32, 8, 2, 256, 128)])


#: sliced gathers of the explicit cases (E, k, H, I, gather_slices): H / 8 vectors not a multiple of the
#: slices (520 / 8 = 65 vectors in 22 + 22 + 21; 2056 / 8 = 257 in 8 x 33 - 7; 4104 / 8 = 513 in 16 x 33 - 15)
_SLICED = ((8, 2, 520, 256, 3), (64, 6, 2056, 384, 8), (16, 2, 4104, 256, 16))


def _sliced(slices: int, small_t: bool = True):
    base = _small().replace(gu_band_m=1, dn_band_m=1) if small_t else _banded(0, 0)
    return base.replace(gather_slices=slices)


def _banded(gu: int, dn: int, small_t: bool = False):
    from argus_cutlass.kernels.moe.config import MoEConfig

    base = _small() if small_t else MoEConfig()
    return base.replace(gu_band_m=gu, dn_band_m=dn)


#: banded walks of the explicit cases: (gate+up band, down band, small-T path)
_BANDS = ((3, 5, False), (4, 3, True), (1, 1, False), (16, 8, False))
#: the sizes of the banded cases (E, k, H, I): gate+up 2 / 3 n-blocks, down 4 n-blocks
_BAND_SHAPES = ((16, 2, 512, 384), (8, 2, 512, 256))


def _tile_k128(problem):
    """``problem``'s default with 128-deep k stages, stage counts halved (the tuner's move, space.with_tile_k)."""
    from argus_cutlass.kernels.moe.heuristics import default_config
    from argus_cutlass.kernels.moe.space import with_tile_k

    return with_tile_k(default_config(problem), 128)


#: 128-deep k stages (the tuner's tile_k move): both tile paths, K = H and K = I not multiples of 128
_TILE_K128 = [(q, _tile_k128(q)) for q in (MoEProblem.for_model("qwen3-30b-a3b", 16),
                                            MoEProblem.for_model("mixtral", 2048),
                                            MoEProblem(300, 16, 2, 520, 392))]


def _default(problem):
    from argus_cutlass.kernels.moe.heuristics import default_config

    return default_config(problem)


def _narrow(problem):
    """``problem``'s default with both GEMMs' 64-column n-tiles (gate+up: 32 gate + 32 up columns) and 12
    stages (space.KNOBS since session 24: the finest small-T units)."""
    from argus_cutlass.kernels.moe.heuristics import default_config

    return default_config(problem).replace(gu_tile_n=64, dn_tile_n=64, gu_stages=12, dn_stages=12)


#: 64-column n-tiles on the small-T path: two anchors and an explicit case whose 2I = 784 and H = 520 are not
#: multiples of 64
_NARROW = [(q, _narrow(q)) for q in (MoEProblem.for_model("qwen3-30b-a3b", 16), MoEProblem.for_model("mixtral", 16),
                                      MoEProblem(100, 16, 2, 520, 392))]


#: the weights loaded evict-first (MoEConfig.weights_evict_first): both T buckets
_EVICT_FIRST = [(q, _default(q).replace(weights_evict_first=True))
                for q in (MoEProblem.for_model("qwen3-30b-a3b", 16), MoEProblem(300, 16, 2, 520, 392))]


def _row_bounded(tile_m: int = 64, dtype: str = "bf16"):
    """The small-T configuration of ``tile_m``-row tiles in ``dtype`` with row-bounded tiles (MoEConfig.row_bounded)."""
    from argus_cutlass.kernels.moe.heuristics import small_t_config

    return small_t_config(dtype, tile_m=tile_m).replace(row_bounded=True)


#: row-bounded tiles (3-D tensor maps, boxes shifted by each m-tile's routed rows): both tile paths, group sizes
#: at and across the padding (exactly one / two m-tiles, one row past, one row), empty experts, an anchor shape
_ROW_BOUNDED = [(MoEProblem(162, 8, 2, 512, 256), 64, [64, 128, 65, 63, 1, 0, 3, 0]),
                (MoEProblem(200, 8, 2, 1024, 512), 128, [128, 129, 65, 1, 0, 0, 77, 0]),
                (MoEProblem.for_model("qwen3-30b-a3b", 16), 64, None),
                (MoEProblem(256, 8, 2, 512, 256, "fp16"), 128, None)]


@pytest.fixture(scope="module", autouse=True)
def _prebuilt():
    """Generate and compile every layer of the module in one parallel nvcc batch (the tests then hit
    the compile cache; one layer compiles in 20-40 s, serially the module would take minutes)."""
    from argus_cutlass.generate import compile_many, generate
    from argus_cutlass.kernels.moe.heuristics import default_config

    kernels = {}
    for p in _LAYERS:
        for t in (16, 2048):  # both T buckets: the small-T layer and the large one
            q = MoEProblem(t, p.experts, p.topk, p.hidden, p.ffn, p.dtype)
            k = generate(default_config(q), q, smt=False)
            kernels[k.name] = k
    for m in sorted(MODEL_SHAPES):   # the anchors' other buckets (small-T bands, large-T gather slices)
        for t in (256, 8192):
            q = MoEProblem.for_model(m, t)
            k = generate(default_config(q), q, smt=False)
            kernels[k.name] = k
    for q in (_SMALL_T_128, MoEProblem(200, 8, 2, 1024, 512)):
        k = generate(default_config(q), q, smt=False)
        kernels[k.name] = k
    for q, cfg in _TILE_K128 + _NARROW + _EVICT_FIRST:
        k = generate(cfg, q, smt=False)
        kernels[k.name] = k
    for e, k_, h, i in _BAND_SHAPES:
        for gu, dn, small_t in _BANDS:
            q = MoEProblem(300, e, k_, h, i)
            k = generate(_banded(gu, dn, small_t), q, smt=False)
            kernels[k.name] = k
    for e, k_, h, i, sl in _SLICED:
        for small_t, t in ((True, 16), (False, 300)):
            q = MoEProblem(t, e, k_, h, i)
            k = generate(_sliced(sl, small_t), q, smt=False)
            kernels[k.name] = k
    for t, e, k_, h, i, _routing, _sizes, small_t, (gu, dn) in _LOOKAHEAD_CASES:
        for change in ({"work_lookahead": 1}, {"pdl": True}, {"pdl": True, "weight_prefetch": 8}):
            k = generate(_banded(gu, dn, small_t).replace(**change), MoEProblem(t, e, k_, h, i), smt=False)
            kernels[k.name] = k
    for q in (MoEProblem(256, 8, 2, 512, 256), MoEProblem(300, 8, 2, 512, 256)):   # the graph-capture layers
        for pdl, wp in ((True, 8), (False, 0)):   # (the small-T heuristic takes pdl since session 23)
            k = generate(default_config(q).with_pdl(pdl, wp), q, smt=False)
            kernels[k.name] = k
    for q in (MoEProblem(16, 16, 2, 1024, 512), MoEProblem(700, 16, 2, 1024, 512)):   # the back-to-back layers
        for wp in (0, 16):
            k = generate(default_config(q).with_pdl(True, wp), q, smt=False)
            kernels[k.name] = k
    for q, tile_m, _sizes in _ROW_BOUNDED:
        k = generate(_row_bounded(tile_m, q.dtype), q, smt=False)
        kernels[k.name] = k
        k = generate(_row_bounded(tile_m, q.dtype).replace(handoff=False, pdl=False), q, smt=False)
        kernels[k.name] = k
    failed = [a for a in compile_many(list(kernels.values())) if isinstance(a, Exception)]
    assert not failed, failed[0]


@pytest.mark.parametrize("routing", ["uniform", "skewed"])
@pytest.mark.parametrize("model", sorted(MODEL_SHAPES))
@pytest.mark.parametrize("tokens", [1, 16, 256])
def test_small_t_path(model, tokens, routing):
    p = MoEProblem.for_model(model, tokens)
    chk = run_and_check(_lib(p, _small()), p, routing=routing)
    assert chk.ok, chk


def test_small_t_heuristic_picks_the_small_path():
    from argus_cutlass.kernels.moe.heuristics import SMALL_T, default_config

    from argus_cutlass.kernels.moe.heuristics import GATHER_UNROLL, SMALL_T_HANDOFF, SMALL_T_PDL, SMALL_T_ROW_BOUNDED_TILE_M
    from argus_cutlass.kernels.moe.heuristics import SMALL_T_COMBINE_HANDOFF, SMALL_T_DYNAMIC_WALK, SMALL_T_FUSED_ROUTING

    from argus_cutlass.kernels.moe.heuristics import SINGLE_TILE_GU_N, small_t_config

    assert default_config(MoEProblem.for_model("qwen3-30b-a3b", SMALL_T)) == _small().replace(
        gu_band_m=4, dn_band_m=4, gather_slices=32,   # bands: SMALL_T / 64 m-tiles (heuristics.small_t_band); the
        # gather: 256 rows x 256 vectors / (256 threads x 4) = 64 slices, capped at 4 KB / 128 B = 32 (gather_slices_for)
        gather_unroll=GATHER_UNROLL, pdl=SMALL_T_PDL, handoff=SMALL_T_HANDOFF, gu_tile_n=SINGLE_TILE_GU_N,
        row_bounded=64 in SMALL_T_ROW_BOUNDED_TILE_M, combine_handoff=SMALL_T_PDL and SMALL_T_COMBINE_HANDOFF,
        fused_routing=SMALL_T_FUSED_ROUTING,   # down: more than one wave of units; E = 128 fits one routing chunk
        dynamic_walk=SMALL_T_DYNAMIC_WALK)   # the same wave rule (session 46)
    # Mixtral at T = 256: 64 rows per expert on average -> the 128-row small-T tiles (heuristics.small_t_tile_m)
    assert default_config(MoEProblem.for_model("mixtral", SMALL_T)) == small_t_config(tile_m=128).replace(
        gu_band_m=2, dn_band_m=2, gather_slices=64, gather_unroll=GATHER_UNROLL, pdl=SMALL_T_PDL,
        handoff=SMALL_T_HANDOFF, row_bounded=128 in SMALL_T_ROW_BOUNDED_TILE_M,
        combine_handoff=False, fused_routing=SMALL_T_FUSED_ROUTING)   # 8 x 1 m-tile x 16 = 128 down units: one wave
    assert default_config(MoEProblem.for_model("mixtral", SMALL_T + 1)).tile_m == 128


#: the small-T bucket's 128-row tiles (heuristics.small_t_tile_m: E 8, k 2, T 129-256), with pdl
_SMALL_T_128 = MoEProblem(256, 8, 2, 1024, 512)


@pytest.mark.parametrize("routing", ["uniform", "skewed", "zero_experts", "all_to_one"])
def test_small_t_128_row_tiles(routing):
    cfg = _default(_SMALL_T_128)
    assert cfg.tile_m == 128 and cfg.pdl and cfg.gu_band_m == 2
    chk = run_and_check(_lib(_SMALL_T_128, cfg), _SMALL_T_128, routing=routing)
    assert chk.ok, chk


def test_small_t_128_row_tiles_group_sizes():
    """Groups across the 128-row padding: one and two m-tiles per expert, empty experts."""
    p = MoEProblem(200, 8, 2, 1024, 512)
    cfg = _default(p)
    assert cfg.tile_m == 128
    chk = run_and_check(_lib(p, cfg), p, routing="sizes", sizes=[128, 129, 65, 1, 0, 0, 77, 0])
    assert chk.ok, chk


def test_small_t_group_sizes_at_the_64_row_padding():
    p = MoEProblem(162, 8, 2, 512, 256)
    chk = run_and_check(_lib(p, _small()), p, routing="sizes", sizes=[64, 128, 65, 63, 1, 0, 3, 0])
    assert chk.ok, chk


#: (case of _ROW_BOUNDED, routing): every routing on every case, group sizes only where the case has them
_ROW_BOUNDED_RUNS = [(c, r) for c, (_p, _t, sizes) in enumerate(_ROW_BOUNDED)
                     for r in ("uniform", "skewed", "zero_experts", "all_to_one") + (("sizes",) if sizes else ())]


@pytest.mark.parametrize("plain", [False, True], ids=["pdl_handoff", "plain"])
@pytest.mark.parametrize("case,routing", _ROW_BOUNDED_RUNS)
def test_row_bounded_tiles(case, routing, plain):
    """Row-bounded tiles: only each m-tile's routed rows are loaded (the box rows past the m-tile zero-filled out of
    the 3-D map's bounds) and stored (the out-of-bound rows clipped), with and without pdl + handoff."""
    p, tile_m, sizes = _ROW_BOUNDED[case]
    cfg = _row_bounded(tile_m, p.dtype)
    if plain:
        cfg = cfg.replace(handoff=False, pdl=False)
    chk = run_and_check(_lib(p, cfg), p, routing=routing, sizes=sizes if routing == "sizes" else None)
    assert chk.ok, chk


def test_row_bounded_tiles_back_to_back():
    """Calls enqueued back to back on one workspace: each call's tile_rows table is its own routing's."""
    p = MoEProblem(162, 8, 2, 512, 256)
    lib = _lib(p, _row_bounded())
    for j, (y, ref) in enumerate(run_back_to_back(lib, p, (1, 2, 3))):
        assert torch.isfinite(y.float()).all(), j
        rel = float((y.float() - ref).norm() / ref.norm())
        assert rel < 2e-2, (j, rel)   # bf16 operands: 1e-3 .. 1e-2 (METHOD.md)


@pytest.mark.parametrize("routing", ["uniform", "skewed"])
@pytest.mark.parametrize("case", range(len(_TILE_K128)))
def test_tile_k_128(case, routing):
    p, cfg = _TILE_K128[case]
    assert cfg.tile_k == 128
    chk = run_and_check(_lib(p, cfg), p, routing=routing)
    assert chk.ok, chk


@pytest.mark.parametrize("routing", ["uniform", "skewed"])
@pytest.mark.parametrize("case", range(len(_EVICT_FIRST)))
def test_weights_evict_first(case, routing):
    """The weights loaded evict-first (a cache hint: the same bytes, the same result)."""
    p, cfg = _EVICT_FIRST[case]
    assert cfg.weights_evict_first
    chk = run_and_check(_lib(p, cfg), p, routing=routing)
    assert chk.ok, chk


@pytest.mark.parametrize("routing", ["uniform", "skewed", "zero_experts"])
@pytest.mark.parametrize("case", range(len(_NARROW)))
def test_narrow_n_tiles(case, routing):
    p, cfg = _NARROW[case]
    assert cfg.gu_tile_n == cfg.dn_tile_n == 64
    chk = run_and_check(_lib(p, cfg), p, routing=routing)
    assert chk.ok, chk


@pytest.mark.parametrize("model", sorted(MODEL_SHAPES))
@pytest.mark.parametrize("tokens", [1, 16, 256, 2048, 8192])
def test_anchor_shapes(model, tokens):
    p = MoEProblem.for_model(model, tokens)
    chk = run_and_check(_lib(p), p)
    assert chk.ok, chk


@pytest.mark.parametrize("experts,topk", [(8, 1), (8, 2), (64, 6), (128, 8)])
def test_topk(experts, topk):
    p = MoEProblem(300, experts, topk, 512, 256)
    assert run_and_check(_lib(p), p, routing="uniform").ok


@pytest.mark.parametrize("routing", ["skewed", "zero_experts", "all_to_one"])
def test_routings(routing):
    p = MoEProblem(777, 16, 2, 512, 384)
    assert run_and_check(_lib(p), p, routing=routing).ok


def test_group_sizes_not_tile_multiples():
    p = MoEProblem(162, 8, 2, 512, 256)
    chk = run_and_check(_lib(p), p, routing="sizes", sizes=[128, 130, 65, 1, 0, 0, 0, 0])
    assert chk.ok, chk


def test_short_group_large_t_layer_group_sizes():
    """The large-T heuristic's short-group layer (dynamic walk + row-bounded 128-row tiles, heuristics.
    SHORT_GROUP_PADDING, session 47) on group sizes around its tile: one row past a tile, two tiles plus two rows,
    a single row, empty experts."""
    p = MoEProblem(300, 8, 2, 512, 256)
    from argus_cutlass.kernels.moe.heuristics import default_config

    cfg = default_config(p)
    assert cfg.tile_m == 128 and cfg.dynamic_walk and cfg.row_bounded
    chk = run_and_check(_lib(p), p, routing="sizes", sizes=[128, 130, 65, 129, 1, 0, 147, 0])
    assert chk.ok, chk


def test_fp16():
    p = MoEProblem(256, 8, 2, 512, 256, "fp16")
    assert run_and_check(_lib(p), p).ok


def test_minus_one_padding_is_skipped():
    from argus_cutlass.api import moe

    p = MoEProblem(64, 8, 2, 256, 128)
    x, ids, w, w13, w2 = make_inputs(p, seed=5)
    ids[3, 1] = -1
    ids[10, 0] = -1
    y = moe(x, ids, w, w13, w2, padding="skip")
    ref = fp32_layer(x, ids, w, w13, w2)
    assert float((y.float() - ref).abs().max()) < 3e-2


@pytest.mark.parametrize("pdl", [False, True])
@pytest.mark.parametrize("tokens", [256, 300])  # the small-T layer, then the large-T one
def test_cuda_graph_capture(tokens, pdl):
    """The layer captured in a CUDA graph (no host synchronisation on the group sizes); with pdl the
    programmatic launches become the graph's programmatic edges."""
    from argus_cutlass.kernels.moe.heuristics import default_config

    p = MoEProblem(tokens, 8, 2, 512, 256)
    lib = _lib(p, default_config(p).with_pdl(pdl, 8 if pdl else 0))
    assert lib.layer.pdl == pdl
    x, ids, w, w13, w2 = make_inputs(p, seed=2)
    ws = torch.empty(lib.workspace_bytes(p.tokens), dtype=torch.uint8, device="cuda")
    ids32, w32 = ids.int().contiguous(), w.float().contiguous()
    y = torch.empty_like(x)
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        lib(x, ids32, w32, w13, w2, y, ws, p.tokens, s.cuda_stream)  # warm (tensor-map encoder, attributes)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=s):
        lib(x, ids32, w32, w13, w2, y, ws, p.tokens, s.cuda_stream)
    y.zero_()
    g.replay()
    torch.cuda.synchronize()
    ref = fp32_layer(x, ids, w, w13, w2)
    assert float((y.float() - ref).abs().max()) < 3e-2


def test_bad_inputs_named():
    from argus_cutlass.api import moe
    from argus_cutlass.errors import ProblemError

    p = MoEProblem(32, 8, 2, 256, 128)
    x, ids, w, w13, w2 = make_inputs(p)
    bad = ids.clone()
    bad[0, 0] = 8
    with pytest.raises(ProblemError, match=r"topk_ids\[0, 0\] = 8"):
        moe(x, bad, w, w13, w2)
    bad[0, 0] = -1
    with pytest.raises(ProblemError, match="outside"):
        moe(x, bad, w, w13, w2)
    with pytest.raises(ProblemError, match="w13 has dtype"):
        moe(x, ids, w, w13.half(), w2)
    with pytest.raises(ProblemError, match="w2 has shape"):
        moe(x, ids, w, w13, w2[:4])
    with pytest.raises(ProblemError, match="topk_ids has 31 rows"):
        moe(x, ids[:31], w[:31], w13, w2)
    with pytest.raises(ProblemError, match="is on cpu"):
        moe(x, ids.cpu(), w, w13, w2)


# ---- the banded grouped walk ---------------------------------------------------------------------


def _tiles_m(lib, ids) -> int:
    """The m-tiles the routing kernel will write for ``ids`` (the verifier's simulation of the printed
    routing kernels, on the CPU)."""
    from argus_cutlass.verify.moe import simulate_routing

    return simulate_routing(lib.layer, ids.cpu().numpy())["tiles_m"]


def _run_banded(p, gu, dn, small_t, routing, sizes=None, seed=0):
    """Run the banded layer on ``p`` (fp32 reference, output poisoned by ``run_and_check``) and
    return the routing's m-tile count; the walk printed is the banded one."""
    from argus_cutlass.hw.routing import make_routing

    lib = _lib(p, _banded(gu, dn, small_t))
    assert (lib.layer.gate_up.schedule.band_m, lib.layer.down.schedule.band_m) == (gu, dn)
    chk = run_and_check(lib, p, routing=routing, sizes=sizes, seed=seed)
    assert chk.ok, (gu, dn, small_t, chk)
    ids, _ = make_routing(routing, p.tokens, p.experts, p.topk, seed=seed, sizes=sizes)
    return _tiles_m(lib, torch.from_numpy(ids))


@pytest.mark.parametrize("routing", ["uniform", "skewed", "zero_experts", "all_to_one"])
@pytest.mark.parametrize("gu,dn,small_t", [b for b in _BANDS if b[:2] != (16, 8)])
def test_banded_walk_routings(gu, dn, small_t, routing):
    """E = 16, T = 777: bands of 3 / 5 (128-row tiles), 4 / 3 (64-row ping-pong) and 1 / 1 over the
    routing's m-tiles; the uniform and skewed routings leave a partial last band (asserted)."""
    p = MoEProblem(777, 16, 2, 512, 384)
    tiles_m = _run_banded(p, gu, dn, small_t, routing)
    if routing in ("uniform", "skewed") and gu > 1:
        assert tiles_m % gu or tiles_m % dn, (tiles_m, gu, dn)


@pytest.mark.parametrize("gu,dn,small_t", [b for b in _BANDS if b[:2] != (16, 8)])
def test_banded_walk_group_sizes_and_empty_experts(gu, dn, small_t):
    """Groups of 128 / 130 / 65 / 1 rows and four empty experts: 5 m-tiles of 128 rows (8 of 64), so
    a band of 3 or 5 leaves a partial last band and a band of 16 / 8 holds fewer m-tiles than one band."""
    p = MoEProblem(162, 8, 2, 512, 256)
    tiles_m = _run_banded(p, gu, dn, small_t, "sizes", sizes=[128, 130, 65, 1, 0, 0, 0, 0])
    assert tiles_m == (8 if small_t else 5)
    assert gu == 1 or tiles_m % gu or tiles_m % dn


@pytest.mark.parametrize("gu,dn,small_t", [(3, 5, False), (16, 8, False), (4, 3, True)])
def test_banded_walk_many_units(gu, dn, small_t):
    """T = 4000 skewed at E = 8: 67 m-tiles of 128 rows (131 of 64), more units than 132 CTAs, bands
    inside the hot expert and across experts, a partial last band; 16 / 8 is Mixtral's default band."""
    p = MoEProblem(4000, 8, 2, 512, 256)
    tiles_m = _run_banded(p, gu, dn, small_t, "skewed", seed=3)
    assert tiles_m * (256 // 128) > 132 or tiles_m * (512 // 128) > 132
    assert tiles_m % gu or tiles_m % dn, (tiles_m, gu, dn)


def test_banded_default_anchor_layer_is_banded():
    """The large-T default of the anchor shapes walks in bands (test_anchor_shapes runs it at T = 2048 and
    8192); the Mixtral layer's m-tile count at T = 2048 leaves a partial band."""
    from argus_cutlass.kernels.moe.heuristics import default_config

    p = MoEProblem.for_model("mixtral", 2048)
    cfg = default_config(p)
    assert (cfg.gu_band_m, cfg.dn_band_m) == (16, 8)
    lib = _lib(p, cfg)
    chk = run_and_check(lib, p, routing="skewed", seed=4)
    assert chk.ok, chk


def _run_sliced(p, cfg, invalid=(), seed=0):
    """Run ``cfg``'s layer on ``p`` with the (token, slot) pairs of ``invalid`` set to -1, y and the
    workspace poisoned (bf16 / fp16 NaN bytes: an xs column the gather skips reaches y as NaN); the
    error against the fp32 reference must stay within 3x the same-precision torch layer's + atol."""
    from argus_cutlass.kernels.moe.baseline import grouped_mm_layer

    lib = _lib(p, cfg)
    r = lib.layer.routing
    assert r.slices == cfg.gather_slices and r.unroll == cfg.gather_unroll, (r, cfg)
    assert cfg.gather_slices == 1 or p.hidden % r.slice_cols, (r, p.hidden)   # the uneven cases stay uneven
    x, ids, w, w13, w2 = make_inputs(p, "uniform", seed)
    for t, j in invalid:
        ids[t, j] = -1
    ref = fp32_layer(x, ids, w, w13, w2)
    y = torch.full_like(x, float("nan"))
    ws = torch.full((lib.workspace_bytes(p.tokens),), 0xFF, dtype=torch.uint8, device=x.device)
    lib(x, ids.to(torch.int32).contiguous(), w.float().contiguous(), w13, w2, y, ws, p.tokens,
        torch.cuda.current_stream().cuda_stream)
    torch.cuda.synchronize()
    assert torch.isfinite(y.float()).all(), "a poisoned element reached y"
    err = float((y.float() - ref).abs().max())
    try:  # the same-precision layer: a -1 slot as expert 0 with weight 0 adds nothing
        base = grouped_mm_layer(x, ids.clamp(min=0), w * (ids >= 0), w13, w2)
        berr = float((base.float() - ref).abs().max())
    except Exception:  # noqa: BLE001 - _grouped_mm lacks fp16 on some builds: a rounding bound
        berr = float(ref.abs().max()) * 2 ** -7
    assert err <= 3.0 * berr + 2e-2, (p, cfg.gather_slices, err, berr)
    return y


@pytest.mark.parametrize("small_t", [True, False])
@pytest.mark.parametrize("shape", _SLICED, ids=[f"h{s[2]}_g{s[4]}" for s in _SLICED])
def test_sliced_gather_uneven_slices(shape, small_t):
    """H / 8 vectors not a multiple of the slices (the last slice the short one): T = 16 on the small-T
    path (one routing chunk), T = 300 on the 128-row path (several chunks x slices)."""
    e, k, h, i, sl = shape
    _run_sliced(MoEProblem(16 if small_t else 300, e, k, h, i), _sliced(sl, small_t))


@pytest.mark.parametrize("shape", _SLICED, ids=[f"h{s[2]}_g{s[4]}" for s in _SLICED])
def test_sliced_gather_minus_one_padding(shape):
    """-1 ids: every slot of token 3 (its y row must be 0) and single slots of tokens 0, 7, 15; the sliced
    gather must skip them in every slice, and the row map (stored by y == 0 only) must keep -1."""
    e, k, h, i, sl = shape
    p = MoEProblem(16, e, k, h, i)
    y = _run_sliced(p, _sliced(sl), invalid=[(3, j) for j in range(k)] + [(0, 0), (7, k - 1), (15, 0)])
    assert float(y[3].float().abs().max()) == 0.0


@pytest.mark.parametrize("unroll", [2, 4, 8])
@pytest.mark.parametrize("shape", _SLICED + ((8, 2, 520, 256, 1),), ids=[f"h{s[2]}_g{s[4]}" for s in _SLICED] + ["h520_g1"])
def test_unrolled_gather(shape, unroll):
    """gather_unroll: several vectors loaded per thread before storing; uneven slices, the unsliced loop,
    several chunks (T = 300) and -1 ids (token 3's every slot, tokens 0 and 7's single slots), y and the
    workspace poisoned."""
    e, k, h, i, sl = shape
    p = MoEProblem(300, e, k, h, i)
    cfg = _sliced(sl, small_t=False) if sl > 1 else _banded(0, 0)
    y = _run_sliced(p, cfg.replace(gather_unroll=unroll), invalid=[(3, j) for j in range(k)] + [(0, 0), (7, k - 1)])
    assert float(y[3].float().abs().max()) == 0.0


# ---- the grouped GEMMs' work lookahead -------------------------------------------------------------


_LOOKAHEAD_CASES = (
    # (T, E, k, H, I, routing, sizes, small_t, bands): the walks and routings where a read-ahead could go wrong,
    # each with more units than 132 CTAs (x 2 consumer warpgroups on the 64-row path) in both GEMMs, so every
    # producer reads a real next unit and runs off the end of the walk (asserted)
    (777, 16, 2, 2048, 2048, "skewed", None, False, (3, 5)),      # partial last band: 21 m-tiles, 336 units
    (678, 8, 2, 2048, 2048, "sizes", [640, 650, 65, 1, 0, 0, 0, 0], True, (4, 3)),   # empty experts, odd groups
    (4000, 8, 2, 1024, 1024, "skewed", None, False, (0, 0)),      # unbanded walk, 67 m-tiles
    (16, 128, 8, 2048, 768, "uniform", None, True, (1, 1)),       # Qwen3's small-T layer, 81 m-tiles
    (1200, 8, 2, 2048, 2048, "all_to_one", None, False, (1, 1)),  # one expert owns most m-tiles
)


@pytest.mark.parametrize("case", range(len(_LOOKAHEAD_CASES)))
def test_work_lookahead(case):
    """work_lookahead 1 (the grouped GEMMs' producers read their next unit's expert ahead) against the fp32
    layer, the output poisoned, on partial bands, empty experts, one hot expert and the unbanded walk."""
    from argus_cutlass.hw.routing import make_routing

    t, e, k, h, i, routing, sizes, small_t, (gu, dn) = _LOOKAHEAD_CASES[case]
    p = MoEProblem(t, e, k, h, i)
    cfg = _banded(gu, dn, small_t).replace(work_lookahead=1)
    lib = _lib(p, cfg)
    assert {lib.layer.gate_up.schedule.lookahead, lib.layer.down.schedule.lookahead} == {1}
    chk = run_and_check(lib, p, routing=routing, sizes=sizes, seed=case)
    assert chk.ok, (case, chk)
    ids, _ = make_routing(routing, t, e, k, seed=case, sizes=sizes)
    tiles_m = _tiles_m(lib, torch.from_numpy(ids))
    units = min(tiles_m * (2 * i // cfg.gu_tile_n), tiles_m * -(-h // cfg.dn_tile_n))
    assert units > 132 * (2 if cfg.tile_m == 64 else 1), (case, tiles_m, units)


# ---- programmatic dependent launch -----------------------------------------------------------------


@pytest.mark.parametrize("prefetch", [0, 8])
@pytest.mark.parametrize("case", range(len(_LOOKAHEAD_CASES)))
def test_pdl(case, prefetch):
    """pdl (every kernel after route_count launched programmatically, each waiting for the previous one
    before its first global access; with a weight prefetch the grouped GEMMs' producers prefetch their
    first weights into L2 before the wait) against the fp32 layer on the lookahead cases' walks and
    routings."""
    t, e, k, h, i, routing, sizes, small_t, (gu, dn) = _LOOKAHEAD_CASES[case]
    p = MoEProblem(t, e, k, h, i)
    lib = _lib(p, _banded(gu, dn, small_t).replace(pdl=True, weight_prefetch=prefetch))
    assert lib.layer.pdl and lib.layer.weight_prefetch == prefetch
    chk = run_and_check(lib, p, routing=routing, sizes=sizes, seed=case)
    assert chk.ok, (case, chk)


@pytest.mark.parametrize("prefetch", [0, 16])
@pytest.mark.parametrize("small_t", [True, False])
def test_pdl_back_to_back(small_t, prefetch):
    """Five calls enqueued back to back on one stream and one workspace, different inputs and outputs, no
    host synchronisation between them: with pdl a call's route_count waits in stream order for the
    previous call's combine, and its later kernels wait for their predecessor (rule moe.pdl over two
    calls: the permute rewrites xs, which the previous down GEMM wrote and its combine reads). Each
    output against its own fp32 reference; the outputs poisoned first."""
    from argus_cutlass.kernels.moe.heuristics import default_config

    p = MoEProblem(16 if small_t else 700, 16, 2, 1024, 512)
    lib = _lib(p, default_config(p).with_pdl(True, prefetch))
    for j, (y, ref) in enumerate(run_back_to_back(lib, p, range(40, 45))):
        assert torch.isfinite(y.float()).all(), j
        rel = float((y.float() - ref).norm() / ref.norm())
        assert rel < 2e-2, (j, rel)   # bf16 operands: 1e-3 .. 1e-2 (METHOD.md)
