"""Numerics and timing of a built MoE layer on a GPU (torch; not exercised on the CPU).

:func:`run_and_check` compares the layer with the fp32 torch reference
(:func:`argus_cutlass.kernels.moe.reference.torch_reference_fp32` when present, else an fp32
evaluation here) under STYLE.md (b) 11: ``err(ours) <= 3 * err(same-precision torch baseline) +
atol``, both against the fp32 reference. :func:`time_layer` / :func:`time_baseline` give median
milliseconds of CUDA-event intervals, interleaved by the caller.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from argus_cutlass.kernels.moe.problem import MoEProblem

__all__ = ["ANCHOR_HBM_BYTES_PER_S", "MoECheck", "TIMED_ROUTING", "TIMING_SEED", "bitwise_equal", "check_layers",
           "copy_bytes_per_s", "fp32_layer", "make_inputs", "run_and_check", "run_back_to_back", "run_poisoned", "time_baseline", "time_fn", "time_layer",
           "timed_counts", "timed_floor_ms", "timed_inputs"]

#: the seed of the timed inputs (:func:`time_layer`, :func:`time_baseline`, :func:`timed_counts`)
TIMING_SEED = 1
#: the HBM bandwidth the issue's floor is stated at (``../shared/ANCHORS.md``: 4.3 TB/s reached on the H200)
ANCHOR_HBM_BYTES_PER_S = 4.3e12


@dataclass(frozen=True)
class MoECheck:
    """Max abs errors against fp32 (ours, the torch baseline), the bound, and ``ok``."""

    problem: MoEProblem
    routing: str
    err: float
    baseline_err: float
    bound: float
    ok: bool

    @property
    def passed(self) -> bool:
        """``ok`` (the name the orchestrator reads for every family's check)."""
        return self.ok

    def as_dict(self) -> dict[str, Any]:
        return {"routing": self.routing, "max_abs_error": self.err, "baseline_max_abs_error": self.baseline_err,
                "bound": self.bound, "passed": self.ok}

    def summary(self) -> str:
        return (f"{'PASS' if self.ok else 'FAIL'}: max |y - fp32| {self.err:.3g} (bound {self.bound:.3g} = 3 x the "
                f"_grouped_mm layer's {self.baseline_err:.3g} + atol), {self.routing} routing")


def make_inputs(problem: MoEProblem, routing: str = "uniform", seed: int = 0, sizes: Any = None,
                device: str = "cuda") -> tuple[Any, ...]:
    """``(x, ids, weights, w13, w2)`` torch tensors on ``device``: x ~ N(0, 1), weights ~ N(0, 1) /
    sqrt(fan-in), drawn on ``device`` by a generator seeded with ``seed`` (the same values for the same
    seed and device; a CPU draw of Mixtral's 1.4 G weights took ~7 s per call, which made the tuner's
    check + timing of a candidate cost 10-30 s: RESULTS.md session 19), router output from
    :func:`~argus_cutlass.hw.routing.make_routing` (numpy, seeded)."""
    import torch

    from argus_cutlass.hw.routing import make_routing

    p = problem
    g = torch.Generator(device=device).manual_seed(seed)
    dt = torch.bfloat16 if p.dtype == "bf16" else torch.float16

    def draw(*shape: int, scale: float = 1.0) -> Any:
        return torch.randn(*shape, generator=g, device=device).mul_(scale).to(dt)

    x = draw(p.tokens, p.hidden)
    w13 = draw(p.experts, 2 * p.ffn, p.hidden, scale=p.hidden ** -0.5)
    w2 = draw(p.experts, p.hidden, p.ffn, scale=p.ffn ** -0.5)
    ids, w = make_routing(routing, p.tokens, p.experts, p.topk, seed=seed, sizes=sizes)
    return x, torch.from_numpy(ids).to(device), torch.from_numpy(w).to(device), w13, w2


#: the routing of the timed runs (:func:`time_layer`, :func:`time_baseline`, the benches): :func:`make_inputs`'s
#: default kind, drawn with ``TIMING_SEED``
TIMED_ROUTING = "uniform"


def timed_inputs(problem: MoEProblem, device: str = "cuda") -> tuple[Any, ...]:
    """:func:`make_inputs` of a timed run: ``TIMED_ROUTING`` with ``TIMING_SEED`` (what :func:`timed_counts`
    counts, so a printed floor is the floor of the routing that was timed)."""
    return make_inputs(problem, TIMED_ROUTING, TIMING_SEED, device=device)


def fp32_layer(x: Any, ids: Any, weights: Any, w13: Any, w2: Any) -> Any:
    """The layer in fp32 (T, H), token by slot (the definition in ``problem.py``); ids outside
    [0, E) add nothing."""
    import torch

    xf, w13f, w2f = x.float(), w13.float(), w2.float()
    i = w13.shape[1] // 2
    y = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
    e_ = w13.shape[0]
    for e in range(e_):
        tok, slot = (ids == e).nonzero(as_tuple=True)
        if tok.numel() == 0:
            continue
        gu = xf[tok] @ w13f[e].t()
        h = torch.nn.functional.silu(gu[:, :i]) * gu[:, i:]
        y.index_add_(0, tok, weights[tok, slot].float().unsqueeze(1) * (h @ w2f[e].t()))
    return y


def run_and_check(lib: Any, problem: MoEProblem, *, routing: str = "uniform", seed: int = 0, sizes: Any = None,
                  atol: float = 2e-2) -> MoECheck:
    """Run ``lib`` once (output poisoned first) and compare with fp32 and the torch baseline."""
    return check_layers(problem, {"layer": lib.forward}, routing=routing, seed=seed, sizes=sizes, atol=atol)["layer"]


def check_layers(problem: MoEProblem, layers: dict[str, Any], *, routing: str = "uniform", seed: int = 0,
                 sizes: Any = None, atol: float = 2e-2) -> dict[str, MoECheck]:
    """{name: MoECheck} of each ``layers[name](x, ids, weights, w13, w2) -> y`` run once on the same
    :func:`make_inputs`, against one fp32 reference and one bound (3 x the ``_grouped_mm`` layer's error + atol):
    :func:`run_and_check` for one layer, or a layer beside another implementation (``bench/moe_vllm.py`` holds
    vLLM's fused MoE to the layer's tolerance). A y with a non-finite value (a poisoned output left unwritten)
    has error inf."""
    import torch

    from argus_cutlass.kernels.moe.baseline import grouped_mm_layer

    x, ids, w, w13, w2 = make_inputs(problem, routing, seed, sizes)
    ref = fp32_layer(x, ids, w, w13, w2)
    ys = {name: fn(x, ids, w, w13, w2) for name, fn in layers.items()}
    torch.cuda.synchronize()
    try:
        base = grouped_mm_layer(x, ids, w, w13, w2)
        berr = float((base.float() - ref).abs().max())
    except Exception:  # noqa: BLE001 - _grouped_mm lacks fp16 on some builds: compare against a rounding bound
        berr = float(ref.abs().max()) * 2 ** -7
    bound = 3.0 * berr + atol
    out = {}
    for name, y in ys.items():
        err = float((y.float() - ref).abs().max()) if y.numel() else 0.0
        if not torch.isfinite(y.float()).all():
            err = float("inf")
        out[name] = MoECheck(problem, routing, err, berr, bound, err <= bound)
    return out


def run_back_to_back(lib: Any, problem: MoEProblem, seeds: Any) -> list[tuple[Any, Any]]:
    """``(y, fp32 reference)`` of one call per seed, enqueued back to back on the current stream and one
    workspace with no host synchronisation between them (each on fresh inputs, its output poisoned with NaN
    first): what a later call's kernels may not see of an earlier call's (routing tables, counters, xs)."""
    import torch

    inputs = [make_inputs(problem, seed=s) for s in seeds]
    ws = torch.empty(lib.workspace_bytes(problem.tokens), dtype=torch.uint8, device="cuda")
    outs = [torch.full_like(x, float("nan")) for x, *_ in inputs]
    prepared = [(x, ids.int().contiguous(), w.float().contiguous(), w13, w2) for x, ids, w, w13, w2 in inputs]
    torch.cuda.synchronize()
    stream = torch.cuda.current_stream().cuda_stream
    for (x, ids32, w32, w13, w2), y in zip(prepared, outs):
        lib(x, ids32, w32, w13, w2, y, ws, problem.tokens, stream)
    torch.cuda.synchronize()
    return [(y, fp32_layer(x, ids, w, w13, w2)) for (x, ids, w, w13, w2), y in zip(inputs, outs)]


def run_poisoned(lib: Any, tokens: int, x: Any, ids: Any, w: Any, w13: Any, w2: Any) -> Any:
    """y of one call of ``lib`` at ``tokens`` with y poisoned (NaN) and the workspace poisoned (0xFF bytes: every
    counter -1), ids passed as they are (-1 padding is the kernel's to skip); synchronised."""
    import torch

    ws = torch.full((lib.workspace_bytes(tokens),), 0xFF, dtype=torch.uint8, device="cuda")
    y = torch.full_like(x, float("nan"))
    stream = torch.cuda.current_stream().cuda_stream
    lib(x, ids.int().contiguous(), w.float().contiguous(), w13, w2, y, ws, tokens, stream)
    torch.cuda.synchronize()
    return y


def bitwise_equal(a: Any, b: Any) -> bool:
    """Two 16-bit tensors (bf16 / fp16 outputs) equal bit for bit (NaN payloads included)."""
    import torch

    return a.shape == b.shape and torch.equal(a.view(torch.int16), b.view(torch.int16))


def time_fn(fn: Any, *, warmup: int = 10, iters: int = 50, flush_l2: bool = True) -> float:
    """Median milliseconds of ``fn()`` by CUDA events (L2 flushed before each call by default).

    The events of all ``iters`` calls are recorded first and read after one synchronization
    (``triton.testing.do_bench``'s pattern, as ``bench/test_gemm_bench.py`` times the GEMM): the host
    enqueues call ``i + 1`` while the device runs call ``i``, so the time is the device's, not the
    host's launch path. Until session 22 each call was synchronized before the next one was enqueued,
    so a layer whose host path (checks, allocations, six launches) outlasted the 256 MB flush before
    it was timed with the device waiting for its launches. A ``fn`` that synchronizes inside (the
    ``_grouped_mm`` layer reads its group sizes on the host) is timed as before.
    """
    import torch

    flush = torch.empty(256 * 2**20, dtype=torch.uint8, device="cuda") if flush_l2 else None
    for _ in range(warmup):
        fn()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(iters)]
    for a, b in events:
        if flush is not None:
            flush.zero_()
        a.record()
        fn()
        b.record()
    torch.cuda.synchronize()
    times = sorted(a.elapsed_time(b) for a, b in events)
    return times[len(times) // 2]


def copy_bytes_per_s(nbytes: int = 2**30, iters: int = 20) -> float:
    """This GPU's device-to-device copy bandwidth in bytes per second (bytes read plus bytes written over
    the median CUDA-event time of ``iters`` copies of an ``nbytes`` buffer, after 3 warm-up copies).

    The method by which ``../shared/ANCHORS.md`` / the device library reached 4.3 TB/s on the H200
    (:data:`ANCHOR_HBM_BYTES_PER_S`), so a floor at this rate is the issue's floor translated to the GPU
    the run has (an H100 80GB HBM3 copied ~3.0 TB/s, device library KINDS.md). ``nbytes`` (default 1 GiB)
    must outgrow the 50-60 MB L2 by far.

    Raises:
        ValueError: ``nbytes`` under 256 MiB (an L2-resident copy is not HBM bandwidth) or ``iters`` < 1.
    """
    if nbytes < 256 * 2**20 or iters < 1:
        raise ValueError(f"copy_bytes_per_s: nbytes={nbytes} must be >= 256 MiB and iters={iters} >= 1")
    import torch

    src = torch.empty(nbytes, dtype=torch.uint8, device="cuda").random_(0, 256)
    dst = torch.empty_like(src)
    ms = time_fn(lambda: dst.copy_(src), warmup=3, iters=iters, flush_l2=False)   # 1 GiB outgrows L2 anyway
    del src, dst
    torch.cuda.empty_cache()
    return 2 * nbytes / (ms * 1e-3)


@functools.lru_cache(maxsize=64)
def _timed_counts(problem: MoEProblem) -> tuple[int, ...]:
    import numpy as np

    from argus_cutlass.hw.routing import make_routing

    p = problem
    ids, _ = make_routing(TIMED_ROUTING, p.tokens, p.experts, p.topk, seed=TIMING_SEED)
    return tuple(int(c) for c in np.bincount(ids.ravel(), minlength=p.experts))


def timed_counts(problem: MoEProblem) -> Any:
    """Rows per expert (numpy int64, length E) of the routing of :func:`timed_inputs` (``TIMED_ROUTING``
    drawn by :func:`~argus_cutlass.hw.routing.make_routing` with ``TIMING_SEED``; host only, no GPU; cached
    per problem: at T = 2^20 the draw takes seconds).

    >>> from argus_cutlass.kernels.moe.problem import MoEProblem
    >>> c = timed_counts(MoEProblem(16, 128, 8, 2048, 768))
    >>> int(c.sum()), len(c), int((c > 0).sum()) < 128
    (128, 128, True)
    """
    import numpy as np

    return np.asarray(_timed_counts(problem), dtype=np.int64)


def timed_floor_ms(problem: MoEProblem, hbm_bytes_per_s: float = ANCHOR_HBM_BYTES_PER_S) -> float:
    """The activated-weight floor of a timed run (:meth:`MoEProblem.floor_ms` on :func:`timed_counts`):
    the experts the timed routing activates, not every expert. At T = 16 on Qwen3-30B-A3B (E = 128,
    k = 8) the 128 routed rows activate about 82 experts (85 with the timing seed), so the all-experts
    bound would be 1.5x too high and a layer could read as faster than its floor (the CLI printed 0.87x
    for Qwen3-30B-A3B T = 16 on the H200 in session 23 before this).

    >>> from argus_cutlass.kernels.moe.problem import MoEProblem
    >>> p = MoEProblem(16, 128, 8, 2048, 768)
    >>> timed_floor_ms(p) < p.floor_ms(hbm_bytes_per_s=ANCHOR_HBM_BYTES_PER_S)
    True
    """
    return problem.floor_ms(timed_counts(problem), hbm_bytes_per_s=hbm_bytes_per_s)


def time_layer(lib: Any, problem: MoEProblem, *, warmup: int = 10, iters: int = 50) -> float:
    """Median milliseconds of the layer on :func:`timed_inputs` (workspace allocated once, ids unchecked:
    what a captured layer costs), L2 flushed before each call."""
    import torch

    x, ids, w, w13, w2 = timed_inputs(problem)
    ws = torch.empty(lib.workspace_bytes(problem.tokens), dtype=torch.uint8, device="cuda")
    return time_fn(lambda: lib.forward(x, ids, w, w13, w2, workspace=ws, padding="unchecked"), warmup=warmup,
                   iters=iters)


def time_baseline(problem: MoEProblem, *, warmup: int = 10, iters: int = 50) -> float | None:
    """Median milliseconds of the torch ``_grouped_mm`` layer (:mod:`.baseline`) on the same inputs as
    :func:`time_layer`; None without torch, a GPU or ``torch._grouped_mm``."""
    try:
        import torch

        if not torch.cuda.is_available() or not hasattr(torch, "_grouped_mm"):
            return None
    except ImportError:
        return None
    from argus_cutlass.kernels.moe.baseline import grouped_mm_layer

    x, ids, w, w13, w2 = timed_inputs(problem)
    return time_fn(lambda: grouped_mm_layer(x, ids, w, w13, w2), warmup=warmup, iters=iters)
