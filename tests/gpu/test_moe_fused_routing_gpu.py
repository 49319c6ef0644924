"""The fused routing of one-chunk calls (``MoEConfig.fused_routing``, routing node ``fused``) on the H200. Marked
``gpu``; NOT yet run on silicon (built in session 42 without a GPU).

    pytest -q -m gpu tests/gpu/test_moe_fused_routing_gpu.py

A call with ``T * k <= route_chunk`` launches route_fused (histogram, scan, rank and gather in one kernel) instead of
route_count / route_scan / route_permute; the tables and rows it writes are the three kernels' (rules moe.offsets /
moe.bijection compare them on every simulated one-chunk routing), so y must be BITWISE equal to the layer without
it: edge routings at T * k <= chunk (-1 padding, empty experts, all tokens to one expert, the most tokens of one
chunk), the many-chunk fallback (T * k = chunk + k and T = 300), both tile paths, with the handoffs and row-bounded
tiles, workspaces and outputs poisoned; and back-to-back calls on one workspace alternating T = 16 and T = 300 (the
two launch chains mixed: a one-chunk call's route_fused after a many-chunk call's combine and vice versa).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from argus_cutlass.kernels.moe.problem import MoEProblem  # noqa: E402

from argus_cutlass.kernels.moe.check import bitwise_equal, run_poisoned  # noqa: E402

pytestmark = pytest.mark.gpu

#: (E, k, H, I, tile_m, handoff, row_bounded, combine_handoff, gather_slices)
_LAYERS = (
    (8, 2, 256, 512, 64, False, False, False, 1),
    (8, 2, 256, 512, 64, True, True, True, 4),
    (128, 8, 2048, 768, 64, True, True, False, 4),
    (16, 2, 1024, 512, 128, False, False, False, 1),
    (1, 1, 256, 512, 128, True, False, True, 2),
)
#: routings per layer: (label, routing, invalid (token, slot) pairs set to -1); T from the chunk (_tokens)
_ROUTINGS = (("uniform", ()), ("skewed", ((0, 0), (1, -1))), ("all_to_one", ()))


def _cfg(case, fused: bool):
    from argus_cutlass.kernels.moe.config import MoEConfig
    from argus_cutlass.kernels.moe.heuristics import small_t_config

    e, k, h, i, tile_m, handoff, rb, ch, slices = case
    base = small_t_config(tile_m=tile_m) if rb or tile_m == 64 else MoEConfig()
    return base.replace(pdl=handoff or ch, handoff=handoff, row_bounded=rb, combine_handoff=ch,
                        gather_slices=slices, fused_routing=fused, weight_prefetch=0)


def _tokens(case, chunk: int) -> tuple[int, ...]:
    """One-chunk T's (1, 16, the most of one chunk) and the fallback (one more, 300)."""
    k = case[1]
    t1 = chunk // k
    return tuple(dict.fromkeys((1, min(16, t1), t1, t1 + 1, 300)))


def _lib(problem, config):
    from argus_cutlass.api import moe_kernel

    return moe_kernel(problem, config, smt=False)






@pytest.mark.parametrize("case", range(len(_LAYERS)))
def test_fused_routing_is_bitwise_equal(case):
    """fused_routing on vs off: the same y bit for bit at every T (one chunk: route_fused; more: the three kernels)
    on the edge routings."""
    from argus_cutlass.kernels.moe.check import make_inputs

    c = _LAYERS[case]
    e, k, h, i = c[:4]
    p0 = MoEProblem(16, e, k, h, i)
    off, on = _lib(p0, _cfg(c, False)), _lib(p0, _cfg(c, True))
    assert on.layer.routing.fused and not off.layer.routing.fused
    for t in _tokens(c, on.layer.routing.chunk):
        p = MoEProblem(t, e, k, h, i)
        for label, invalid in _ROUTINGS:
            if label == "skewed" and e == 1:
                continue
            x, ids, w, w13, w2 = make_inputs(p, label, 31 * t + case)
            for tt, j in invalid:
                if tt < t:
                    ids[tt, j % k] = -1
            y_off = run_poisoned(off, t, x, ids, w, w13, w2)
            y_on = run_poisoned(on, t, x, ids, w, w13, w2)
            assert bitwise_equal(y_on, y_off), (case, t, label)


def test_fused_routing_back_to_back_alternating_t():
    """Calls enqueued back to back on one stream and one workspace, T alternating 16 (route_fused) and 300 (the three
    kernels), no host synchronisation: each y bitwise equal to the unfused layer's y of the same inputs."""
    from argus_cutlass.kernels.moe.check import make_inputs

    c = _LAYERS[1]
    e, k, h, i = c[:4]
    off, on = _lib(MoEProblem(16, e, k, h, i), _cfg(c, False)), _lib(MoEProblem(16, e, k, h, i), _cfg(c, True))
    ts = (16, 300, 16, 16, 300, 300, 16)
    inputs = [make_inputs(MoEProblem(t, e, k, h, i), "uniform", 900 + j) for j, t in enumerate(ts)]
    want = [run_poisoned(off, t, *inp) for t, inp in zip(ts, inputs)]
    ws = torch.full((on.workspace_bytes(max(ts)),), 0xFF, dtype=torch.uint8, device="cuda")
    outs = [torch.full_like(inp[0], float("nan")) for inp in inputs]
    prepared = [(x, ids.int().contiguous(), w.float().contiguous(), w13, w2) for x, ids, w, w13, w2 in inputs]
    torch.cuda.synchronize()
    stream = torch.cuda.current_stream().cuda_stream
    for t, (x, ids32, w32, w13, w2), y in zip(ts, prepared, outs):
        on(x, ids32, w32, w13, w2, y, ws, t, stream)
    torch.cuda.synchronize()
    for j, (y, ref) in enumerate(zip(outs, want)):
        assert bitwise_equal(y, ref), (j, ts[j])
