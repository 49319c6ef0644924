"""The dynamic (atomic-ticket) walk of the grouped GEMMs (``MoEConfig.dynamic_walk``, rule ``moe.dynamic_walk``) on
the H200. Marked ``gpu``; NOT yet run on silicon (built in session 43 without a GPU).

    pytest -q -m gpu tests/gpu/test_moe_dynamic_walk_gpu.py

Ticket t is the static walk's unit t and every unit sums its whole k range in the same order, so y must be BITWISE
equal to the same layer without the dynamic walk: edge routings (skewed with -1 padding, empty experts, all tokens to
one expert, group sizes 65 / 128 / 130) at T = 16, 256 and 2048, both tile paths (ping-pong 64-row tiles with pdl,
both handoffs, row-bounded tiles and fused routing; cooperative 128-row tiles in stream order), workspaces and outputs
poisoned (0xFF: a ticket counter the routing did not zero starts at -1); and back-to-back calls on one workspace and
one stream without host synchronisation (each call's counters zeroed by its own routing, T alternating).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from argus_cutlass.kernels.moe.problem import MoEProblem  # noqa: E402

from argus_cutlass.kernels.moe.check import bitwise_equal, run_poisoned  # noqa: E402

pytestmark = pytest.mark.gpu

#: (E, k, H, I, tile_m, small-T features: pdl + handoff + combine_handoff + row_bounded + fused_routing)
_LAYERS = (
    (8, 2, 256, 512, 64, True),
    (8, 2, 256, 512, 128, False),
    (64, 6, 2048, 1408, 64, True),
)
_TOKENS = (16, 256, 2048)
#: routings: (label, routing kind, invalid (token, slot) pairs set to -1)
_ROUTINGS = (("skewed", "skewed", ((0, 0), (1, -1))), ("empty_experts", "zero_experts", ()),
             ("all_to_one", "all_to_one", ()), ("sizes_65_128_130", "sizes", ()))


def _cfg(case, dynamic: bool):
    from argus_cutlass.kernels.moe.config import MoEConfig
    from argus_cutlass.kernels.moe.heuristics import small_t_config

    e, k, h, i, tile_m, small = case
    base = small_t_config(tile_m=tile_m) if tile_m == 64 else MoEConfig()
    if small:
        base = base.replace(pdl=True, handoff=True, combine_handoff=True, row_bounded=True,
                            fused_routing=e <= base.route_chunk)
    return base.replace(weight_prefetch=0, work_lookahead=0, dynamic_walk=dynamic)


def _lib(problem, config):
    from argus_cutlass.api import moe_kernel

    return moe_kernel(problem, config, smt=False)


def _sizes(rows: int, experts: int, tokens: int) -> tuple[int, ...] | None:
    """Group sizes 65 / 128 / 130 (an empty expert between) with the rest spread over the later experts, at most T
    each (a token's k experts are distinct), when they fit; None otherwise."""
    head = (65, 0, 128, 130)
    rest, n = rows - sum(head), experts - len(head)
    if rest < 0 or n < 1 or max(head) > tokens or rest > n * tokens:
        return None
    tail = [min(tokens, rest - tokens * j) if rest > tokens * j else 0 for j in range(n)]
    return head + tuple(tail)


def _inputs(p, kind, seed, invalid=()):
    from argus_cutlass.kernels.moe.check import make_inputs

    sizes = _sizes(p.tokens * p.topk, p.experts, p.tokens) if kind == "sizes" else None
    if kind == "sizes" and sizes is None:
        return None
    x, ids, w, w13, w2 = make_inputs(p, kind, seed, sizes=sizes)
    for t, j in invalid:
        if t < p.tokens:
            ids[t, j % p.topk] = -1
    return x, ids, w, w13, w2






@pytest.mark.parametrize("case", range(len(_LAYERS)))
def test_dynamic_walk_is_bitwise_equal(case):
    """dynamic_walk on vs off: the same y bit for bit at T = 16, 256, 2048 on the edge routings."""
    c = _LAYERS[case]
    e, k, h, i = c[:4]
    p0 = MoEProblem(16, e, k, h, i)
    off, on = _lib(p0, _cfg(c, False)), _lib(p0, _cfg(c, True))
    assert on.layer.dynamic_parts() == ("gate_up", "down") and not off.layer.dynamic_parts()
    for t in _TOKENS:
        p = MoEProblem(t, e, k, h, i)
        for label, kind, invalid in _ROUTINGS:
            inp = _inputs(p, kind, 17 * t + case, invalid)
            if inp is None:
                continue
            y_off = run_poisoned(off, t, *inp)
            y_on = run_poisoned(on, t, *inp)
            assert not torch.isnan(y_on.float()).any(), (case, t, label)
            assert bitwise_equal(y_on, y_off), (case, t, label)


@pytest.mark.parametrize("case", [0, 1])
def test_dynamic_walk_back_to_back(case):
    """Calls enqueued back to back on one stream and one workspace (T alternating 16 / 2048 / 256), no host
    synchronisation: each call's routing zeroes the counters its GEMMs then take tickets from; each y bitwise equal
    to the static walk's y of the same inputs."""
    c = _LAYERS[case]
    e, k, h, i = c[:4]
    p0 = MoEProblem(16, e, k, h, i)
    off, on = _lib(p0, _cfg(c, False)), _lib(p0, _cfg(c, True))
    ts = (16, 2048, 16, 256, 256, 2048, 16)
    inputs = [_inputs(MoEProblem(t, e, k, h, i), "skewed", 700 + j) for j, t in enumerate(ts)]
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
