"""The gate+up -> down handoff per m-tile (``MoEConfig.handoff``, rule ``moe.handoff``) on the H200 against the
fp32 reference, output poisoned. Marked ``gpu``.

    pytest -q -m gpu tests/gpu/test_moe_handoff_gpu.py

The down GEMM loads an m-tile's h rows once every gate+up unit of that m-tile has stored its rows and
released a per-m-tile counter; with pdl the down CTAs run while gate+up's last units still run. Cases: the
walks and routings of the lookahead cases (partial bands, empty experts, groups of 65 / 1 rows, all tokens to
one expert, Qwen3's small-T layer; both tile paths), each with pdl on and off; the anchors' small-T layers
(shipped / heuristic configuration + handoff); five calls back to back on one workspace (route_scan re-zeroes
the counters each call: a stale count would let a call's down read the previous call's h).

The down -> combine handoff (``MoEConfig.combine_handoff``, rule ``moe.combine_handoff``; tests named
``*combine_handoff*``, ``pytest -k combine_handoff``; device step ``bash bench/device_pending.sh OUT moe-handoff
combine_handoff``): it changes when the combine reads out, not what it adds, so y must be BITWISE equal to the layer
without it (same GEMMs, same fp32 sums in the same order) on the edge routings: -1 padding (a token with no valid
slot), empty experts and groups of 65 / 1 rows, one hot expert with more units than CTAs, all tokens to one expert,
Qwen3's small-T layer, both tile paths, with and without the gate+up handoff and row-bounded tiles; outputs and
workspaces poisoned (0xFF: NaN, counters -1) before every call; five calls back to back; the anchors' shipped
small-T layers with it switched on.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from argus_cutlass.kernels.moe.check import run_and_check, run_back_to_back  # noqa: E402
from argus_cutlass.kernels.moe.problem import MoEProblem  # noqa: E402

from argus_cutlass.kernels.moe.check import bitwise_equal, run_poisoned  # noqa: E402

pytestmark = pytest.mark.gpu

#: (T, E, k, H, I, routing, sizes, small_t, bands): more units than CTAs in both GEMMs (the down CTAs meet
#: m-tiles gate+up has not finished), partial last bands, empty experts and odd groups, one expert owning
#: most m-tiles
_CASES = (
    (777, 16, 2, 2048, 2048, "skewed", None, False, (3, 5)),
    (678, 8, 2, 2048, 2048, "sizes", [640, 650, 65, 1, 0, 0, 0, 0], True, (4, 3)),
    (4000, 8, 2, 1024, 1024, "skewed", None, False, (0, 0)),
    (16, 128, 8, 2048, 768, "uniform", None, True, (1, 1)),
    (1200, 8, 2, 2048, 2048, "all_to_one", None, False, (1, 1)),
)
#: the anchors' small-T cells (the bench's T = 16 / 256)
_ANCHORS = (("qwen3-30b-a3b", 16), ("deepseek-v2-lite", 16), ("mixtral", 16), ("mixtral", 256))


def _cfg(small_t: bool, bands: tuple[int, int], pdl: bool):
    from argus_cutlass.kernels.moe.config import MoEConfig
    from argus_cutlass.kernels.moe.heuristics import small_t_config

    base = small_t_config() if small_t else MoEConfig()
    return base.replace(gu_band_m=bands[0], dn_band_m=bands[1], pdl=pdl, handoff=True)


def _anchor_cfg(model: str, t: int):
    from argus_cutlass.generate import configure

    p = MoEProblem.for_model(model, t)
    return p, configure(p)[0].replace(handoff=True)


def _lib(problem, config):
    from argus_cutlass.api import moe_kernel

    return moe_kernel(problem, config, smt=False)


#: the down -> combine handoff's cases: (T, E, k, H, I, routing, sizes, tile_m, handoff, row_bounded, invalid (token,
#: slot) pairs set to -1, slot -1 the last)
_CH_CASES = (
    (300, 8, 2, 256, 512, "uniform", None, 64, True, False, ((3, 0), (7, -1), (150, 0), (150, -1), (299, -1))),
    (678, 8, 2, 2048, 2048, "sizes", [640, 650, 65, 1, 0, 0, 0, 0], 64, True, True, ()),
    (4096, 8, 2, 256, 512, "skewed", None, 64, False, False, ()),
    (1200, 8, 2, 2048, 2048, "all_to_one", None, 128, True, False, ()),
    (16, 128, 8, 2048, 768, "uniform", None, 64, True, True, ((0, 0), (5, -1))),
    (777, 16, 2, 2048, 2048, "skewed", None, 128, False, False, ((1, 1),)),
    (300, 8, 2, 256, 512, "uniform", None, 128, True, True, ((299, 0), (299, 1))),
)
#: the back-to-back case: Qwen-like small-T layer, both handoffs
_CH_BACK_TO_BACK = (16, 16, 2, 1024, 512, "uniform", None, 64, True, False, ())


def _ch_problem(case):
    t, e, k, h, i = case[:5]
    return MoEProblem(t, e, k, h, i)


def _ch_cfg(case, ch: bool):
    from argus_cutlass.kernels.moe.config import MoEConfig
    from argus_cutlass.kernels.moe.heuristics import small_t_config

    tile_m, handoff, row_bounded = case[7:10]
    if tile_m == 64:
        base = small_t_config()
    else:   # the 128-row cooperative tile: the small-T 128-row configuration (row-bounded) or the large-T default
        base = small_t_config(tile_m=128) if row_bounded else MoEConfig()
    return base.replace(pdl=True, handoff=handoff, row_bounded=row_bounded, combine_handoff=ch)


def _anchor_ch_cfg(model: str, t: int, ch: bool):
    return _anchor_cfg(model, t)[1].replace(combine_handoff=ch)






@pytest.fixture(scope="module", autouse=True)
def _prebuilt():
    """Every layer of the module in one parallel nvcc batch."""
    from argus_cutlass.generate import compile_many, generate

    kernels = {}
    for t, e, k_, h, i, _r, _s, small_t, bands in _CASES:
        for pdl in (False, True):
            kn = generate(_cfg(small_t, bands, pdl), MoEProblem(t, e, k_, h, i), smt=False)
            kernels[kn.name] = kn
    for model, t in _ANCHORS:
        p, cfg = _anchor_cfg(model, t)
        kn = generate(cfg, p, smt=False)
        kernels[kn.name] = kn
    q = MoEProblem(16, 16, 2, 1024, 512)
    kn = generate(_cfg(True, (1, 1), True), q, smt=False)
    kernels[kn.name] = kn
    for case in _CH_CASES:   # the down -> combine handoff, off and on
        for ch in (False, True):
            kn = generate(_ch_cfg(case, ch), _ch_problem(case), smt=False)
            kernels[kn.name] = kn
    for model, t in _ANCHORS:
        p, cfg = _anchor_cfg(model, t)
        for ch in (False, True):
            kn = generate(_anchor_ch_cfg(model, t, ch), p, smt=False)
            kernels[kn.name] = kn
    for ch in (False, True):
        kn = generate(_ch_cfg(_CH_BACK_TO_BACK, ch), _ch_problem(_CH_BACK_TO_BACK), smt=False)
        kernels[kn.name] = kn
    failed = [a for a in compile_many(list(kernels.values())) if isinstance(a, Exception)]
    assert not failed, failed[0]


@pytest.mark.parametrize("pdl", [False, True])
@pytest.mark.parametrize("case", range(len(_CASES)))
def test_handoff(case, pdl):
    t, e, k, h, i, routing, sizes, small_t, bands = _CASES[case]
    p = MoEProblem(t, e, k, h, i)
    lib = _lib(p, _cfg(small_t, bands, pdl))
    assert lib.layer.handoff and lib.layer.pdl == pdl
    for seed in range(3):
        chk = run_and_check(lib, p, routing=routing, sizes=sizes, seed=100 * case + seed)
        assert chk.ok, (case, seed, chk)


@pytest.mark.parametrize("model,t", _ANCHORS)
def test_handoff_anchor_layers(model, t):
    p, cfg = _anchor_cfg(model, t)
    lib = _lib(p, cfg)
    for routing in ("uniform", "skewed"):
        chk = run_and_check(lib, p, routing=routing, seed=7)
        assert chk.ok, (model, t, routing, chk)


def test_handoff_back_to_back():
    """Five calls enqueued back to back on one stream and one workspace, no host synchronisation between
    them: each call's route_scan zeroes the counters its gate+up then fills; each output against its own
    fp32 reference (outputs poisoned)."""
    p = MoEProblem(16, 16, 2, 1024, 512)
    lib = _lib(p, _cfg(True, (1, 1), True))
    for j, (y, ref) in enumerate(run_back_to_back(lib, p, range(60, 65))):
        assert torch.isfinite(y.float()).all(), j
        rel = float((y.float() - ref).norm() / ref.norm())
        assert rel < 2e-2, (j, rel)


@pytest.mark.parametrize("case", range(len(_CH_CASES)))
def test_combine_handoff_is_bitwise_equal(case):
    """combine_handoff on vs off: the same y bit for bit on the edge routings (three seeds), and within the fp32
    bound of the reference (-1 slots add nothing)."""
    from argus_cutlass.kernels.moe.check import fp32_layer, make_inputs

    c = _CH_CASES[case]
    p = _ch_problem(c)
    off, on = _lib(p, _ch_cfg(c, False)), _lib(p, _ch_cfg(c, True))
    assert on.layer.combine_handoff and not off.layer.combine_handoff and on.layer.pdl
    for seed in range(3):
        x, ids, w, w13, w2 = make_inputs(p, c[5], 1000 * case + seed, c[6])
        for t, j in c[10]:
            ids[t, j % p.topk] = -1
        y_off = run_poisoned(off, p.tokens, x, ids, w, w13, w2)
        y_on = run_poisoned(on, p.tokens, x, ids, w, w13, w2)
        assert torch.isfinite(y_on.float()).all(), (case, seed)
        assert bitwise_equal(y_on, y_off), (case, seed, float((y_on.float() - y_off.float()).abs().max()))
        ref = fp32_layer(x, ids, w, w13, w2)   # ids outside [0, E) add nothing
        rel = float((y_on.float() - ref).norm() / ref.norm())
        assert rel < 2e-2, (case, seed, rel)


@pytest.mark.parametrize("model,t", _ANCHORS)
def test_combine_handoff_anchor_layers_bitwise(model, t):
    """The anchors' shipped small-T layers with combine_handoff switched on: bitwise the shipped layer's y."""
    from argus_cutlass.kernels.moe.check import make_inputs

    p, _cfg_shipped = _anchor_cfg(model, t)
    off, on = _lib(p, _anchor_ch_cfg(model, t, False)), _lib(p, _anchor_ch_cfg(model, t, True))
    for routing in ("uniform", "skewed"):
        x, ids, w, w13, w2 = make_inputs(p, routing, 7)
        assert bitwise_equal(run_poisoned(on, p.tokens, x, ids, w, w13, w2),
                             run_poisoned(off, p.tokens, x, ids, w, w13, w2)), (model, t, routing)


def test_combine_handoff_back_to_back():
    """Five calls enqueued back to back on one stream and one workspace: each call's route_scan zeroes out_ready
    (and tile_ready) before its down fills them; each y bitwise the layer without the combine handoff, run the same
    way, and close to its fp32 reference."""
    p = _ch_problem(_CH_BACK_TO_BACK)
    off, on = _lib(p, _ch_cfg(_CH_BACK_TO_BACK, False)), _lib(p, _ch_cfg(_CH_BACK_TO_BACK, True))
    got_on, got_off = run_back_to_back(on, p, range(70, 75)), run_back_to_back(off, p, range(70, 75))
    for j, ((y, ref), (y_off, _)) in enumerate(zip(got_on, got_off)):
        assert bitwise_equal(y, y_off), j
        rel = float((y.float() - ref).norm() / ref.norm())
        assert rel < 2e-2, (j, rel)


#: the child of test_a_miscounted_handoff_traps_instead_of_hanging: a layer whose down producer waits for one
#: gate+up signal more than an m-tile gets (handoff_target_delta = +1, what moe.handoff refuses as a deadlock),
#: printed with a 2 s time-out (below the rule's minimum: this layer is never verified), built and run once
_TRAP_CHILD = r"""
import dataclasses, time, torch
from argus_cutlass.build.nvcc import compile_many
from argus_cutlass.kernels.moe.check import make_inputs
from argus_cutlass.kernels.moe.config import MoEConfig
from argus_cutlass.kernels.moe.library import MoEKernelLibrary
from argus_cutlass.kernels.moe.problem import MoEProblem
from argus_cutlass.kernels.moe.program import build_layer
from argus_cutlass.testing.mutants_moe import unverified_job
p = MoEProblem(300, 8, 2, 256, 512)
layer = build_layer(MoEConfig(tile_m=64, gu_tile_n=256, dn_tile_n=128, gu_stages=5, dn_stages=8, pdl=True,
                              handoff=True), p)
layer = dataclasses.replace(layer, handoff_target_delta=1, handoff_timeout_ms=2000)
art = compile_many([unverified_job(layer)])[0]
lib = MoEKernelLibrary(str(art.path), layer.kernel_name(), layer)
x, ids, w, w13, w2 = make_inputs(p, "uniform", 0)
print("RUNNING", flush=True)
t0 = time.perf_counter()
try:
    y = lib.forward(x, ids, w, w13, w2)
    torch.cuda.synchronize()
    print("RESULT finished", flush=True)
except Exception as exc:
    print(f"RESULT {type(exc).__name__} after {time.perf_counter() - t0:.1f} s: {exc}", flush=True)
"""


def test_a_miscounted_handoff_traps_instead_of_hanging():
    """handoff_timeout_ms on silicon: a down producer whose count never arrives (a miscount the verifier
    refuses) traps after its time-out, so the call fails with a CUDA launch failure instead of hanging the GPU.
    Run in a child process (the trap loses its CUDA context)."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", _TRAP_CHILD], capture_output=True, text=True, timeout=400)
    out = proc.stdout + proc.stderr
    assert "RUNNING" in out, out[-3000:]
    line = next((ln for ln in out.splitlines() if ln.startswith("RESULT")), "")
    assert line and "finished" not in line, out[-3000:]
    assert "launch failure" in line.lower(), line
    assert 1.9 <= float(line.split(" after ")[1].split(" s:")[0]) < 60, line   # the 2 s time-out, not another fault
