"""The Python entry points: configuration -> verified program -> source -> built kernel.

Thin, stable names over the orchestrator :mod:`argus_cutlass.generate` (which the CLI, the agent
and the benchmarks use too): nothing here runs a stage itself.

>>> from argus_cutlass.kernels.gemm.config import GemmConfig
>>> kernel = generate_gemm(GemmConfig(layout="nt"))
>>> kernel.name == kernel.program.kernel_name()
True
>>> "cute::SM90_TMA_LOAD_MULTICAST_2D" in kernel.source  # B is multicast across the 2x1 cluster
True
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from argus_cutlass.generate import GeneratedKernel, build_many as _build_many, compile_kernel, generate, load
from argus_cutlass.kernels.gemm.config import GemmConfig
from argus_cutlass.kernels.gemm.problem import GemmProblem
from argus_cutlass.settings import check_workers

__all__ = ["GeneratedKernel", "attention", "attention_kernel", "build_gemm", "build_many", "gemm_config", "gemm_kernel",
           "gemm_kernel_key", "generate_gemm", "moe", "moe_kernel"]


def generate_gemm(cfg: GemmConfig, problem: GemmProblem | None = None, *, smt: bool = True,
                  allow_unknown: bool = False) -> GeneratedKernel:
    """Build, verify and render ``cfg`` (:func:`argus_cutlass.generate.generate`).

    Args:
        problem: the problem it will run: the symbolic-K proofs then cover its K (default:
            K < 2^24).
        smt: run the verifier's z3 tier (symbolic K, pipeline induction) too.
        allow_unknown: render even when some obligations came back ``unknown`` or undecided (the
            ``.cu`` header lists them). Checks skipped with ``smt=False`` never need it (the header
            lists them as not checked).

    Raises:
        ConfigError: the configuration has no program, or the template cannot print it.
        VerificationError: the verifier found a violation (``.report`` has all of them).
        UnprovedError: ``verify.unknown`` / ``verify.undecided`` (no violation, but obligations not
            proved).
        ToolchainError: ``toolchain.z3`` when ``smt`` and z3-solver is not installed.
    """
    return generate(cfg, problem, smt=smt, allow_unknown=allow_unknown)


def build_gemm(kernel: GeneratedKernel | GemmConfig) -> Any:
    """Compile (through the content-addressed cache) and load a GEMM kernel.

    Returns:
        :class:`argus_cutlass.kernels.gemm.library.GemmKernelLibrary`, callable as
        ``lib(A, B, C, D, M, N, K, lda, ldb, ldc, ldd, alpha, beta, stream)``.

    Raises:
        ToolchainError: nvcc or the CUTLASS headers are missing.
        CompileError: nvcc/ptxas failed or warned C7510.
    """
    if isinstance(kernel, GemmConfig):
        kernel = generate_gemm(kernel)
    return load(kernel, compile_kernel(kernel))


def build_many(configs: Iterable[GemmConfig], max_workers: int | None = None) -> dict[str, Any]:
    """Compile several configurations in parallel; returns ``{kernel name: library}``
    (:func:`argus_cutlass.generate.build_many`). ``max_workers``: parallel nvcc processes, None for
    the CPU count, else an integer >= 1.

    Raises:
        ProblemError: ``build.workers`` naming ``max_workers`` when it is 0, negative or not an integer;
            the errors of :func:`argus_cutlass.generate.build_many`.
    """
    check_workers(max_workers, "max_workers", "build.workers")
    return _build_many(configs, workers=max_workers)


# ---- dispatch: configuration per shape, built kernel per configuration ----------------------------

_GEMM_CONFIGS: dict[tuple[Any, ...], GemmConfig] = {}
_GEMM_LIBS: dict[tuple[GemmConfig, int | None, tuple[str, ...]], Any] = {}


def gemm_shape_key(problem: GemmProblem) -> tuple[Any, ...]:
    """``(dtype, out_dtype, layout, M, N, K)``: what :func:`gemm_config` looks a configuration up by.

    >>> gemm_shape_key(GemmProblem(100, 4096, 3000))
    ('bf16', 'bf16', 'tn', 100, 4096, 3000)
    """
    p = problem
    return (p.dtype, p.out_dtype, p.layout, int(p.m), int(p.n), int(p.k))


def gemm_config(problem: GemmProblem) -> GemmConfig:
    """The orchestrator's configuration (:func:`argus_cutlass.generate.configure`: user store, shipped
    table, the untuned rule) for ``problem``'s shape and types (:func:`gemm_shape_key`; its leading
    dimensions and pointers do not change it), looked up once per shape and process: the same choice as
    ``argus-cutlass gemm`` for that shape (a bucket of the shipped table holds entries measured at several
    shapes, and the lookup takes the one measured nearest), whatever the order of the calls. Kernels are
    built once per configuration (:func:`gemm_kernel_key`), so shapes that share one share the kernel."""
    from argus_cutlass.generate import configure

    key = gemm_shape_key(problem)
    if key not in _GEMM_CONFIGS:
        dtype, out_dtype, layout, m, n, k = key
        _GEMM_CONFIGS[key] = configure(GemmProblem(m, n, k, dtype, out_dtype, layout))[0]
    return _GEMM_CONFIGS[key]


def _gemm_build_problem(problem: GemmProblem) -> GemmProblem | None:
    """The problem a kernel is built for (:func:`argus_cutlass.generate.gemm_build_problem`)."""
    from argus_cutlass.generate import gemm_build_problem

    return gemm_build_problem(problem)


def _gemm_key(cfg: GemmConfig,
              build_problem: GemmProblem | None) -> tuple[GemmConfig, int | None, tuple[str, ...]]:
    """``(config, K bits or None, staged operands)``: the configuration and what else its program
    depends on (:func:`argus_cutlass.generate.gemm_program_key`). K bits is None for the default proof
    range (K < 2^K_BOUND_BITS); the staged operands (``A``, ``B``, ``D``; ``()`` for the direct TMA
    path) come from the build problem's staging plan, so a direct, an A-staged and a D-staged call of
    one shape each get their own kernel (an aligned call never runs a staged kernel, which
    would copy its operands for nothing).

    >>> cfg = GemmConfig(layout="nt")
    >>> _gemm_key(cfg, _gemm_build_problem(GemmProblem(300, 4096, 4096, layout="nt")))[1:]
    (None, ('A',))
    >>> _gemm_key(cfg, _gemm_build_problem(GemmProblem(256, 4096, 4096, layout="nt")))[1:]
    (None, ())
    """
    from argus_cutlass.generate import gemm_program_key

    return (cfg, *gemm_program_key(build_problem))


def gemm_kernel_key(problem: GemmProblem, config: GemmConfig | None = None) -> tuple[Any, ...]:
    """The key :func:`gemm_kernel` loads ``problem``'s kernel under (``problem`` accepted by
    ``validate_any``): the configuration of its shape (or ``config``), the proof range and the
    staging plan (:func:`_gemm_key`)."""
    cfg = config if config is not None else gemm_config(problem)
    return _gemm_key(cfg, _gemm_build_problem(problem))


def _not_built(family: str, what: str) -> Any:
    from argus_cutlass.errors import NotPrecompiledError

    raise NotPrecompiledError(
        "capture.not_precompiled",
        f"the {family} kernel for {what} is not built in this process, and building "
        "is not allowed here (inside a CUDA graph capture)",
        "call argus_cutlass.torch.precompile(...) with this shape before capturing (the first call outside "
        "the capture builds it too)")


def _loaded(cache: dict, key: Any, cfg: Any, problem: Any, *, smt: bool | None, build: bool,
            family: str, what: Any) -> Any:
    """``cache[key]``, else generate (verify), compile (content-addressed cache) and load ``cfg`` for
    ``problem`` into it; with ``build`` False a miss raises :class:`NotPrecompiledError` (``what()``
    describes the problem)."""
    lib = cache.get(key)
    if lib is None:
        if not build:
            _not_built(family, what())
        kernel = generate(cfg, problem, smt=smt)
        lib = cache[key] = load(kernel, compile_kernel(kernel))
    return lib


def gemm_kernel(problem: GemmProblem, config: GemmConfig | None = None, *, build: bool = True,
                smt: bool | None = None) -> Any:
    """The built :class:`~argus_cutlass.kernels.gemm.library.GemmKernelLibrary` for ``problem``:
    the shape's configuration (:func:`gemm_config`) unless ``config`` is given, generated,
    verified, compiled (content-addressed cache) and loaded once per (configuration, proof range,
    staging plan) and process (:func:`gemm_kernel_key`). A problem that breaks only TMA's 16-byte
    rules (``problem.staging()``, including the pointers named in ``problem.unaligned``) gets a kernel
    that stages those operands through aligned copies (``_stgA``, ``_stgD``... in its name).

    Args:
        build: False: raise instead of building a kernel that is not loaded yet.

    Raises:
        NotPrecompiledError: ``capture.not_precompiled`` when ``build`` is False and it is not loaded.
        ConfigError, VerificationError, UnprovedError, ToolchainError, CompileError: as
            :func:`argus_cutlass.generate.generate` and :func:`~argus_cutlass.generate.compile_kernel`.
    """
    cfg = config if config is not None else gemm_config(problem)
    bp = _gemm_build_problem(problem)
    return _loaded(_GEMM_LIBS, _gemm_key(cfg, bp), cfg, bp, smt=smt, build=build, family="GEMM",
                   what=lambda: f"M={problem.m} N={problem.n} K={problem.k}")


def precompile_jobs(problems: Iterable[Any]) -> list[tuple[Any, Any, Any]]:
    """``(cache, key, (config, build problem))`` for each problem (GEMM, attention or MoE) whose kernel is
    not loaded yet in this process (one per distinct key)."""
    from argus_cutlass.kernels.attention.problem import AttentionProblem
    from argus_cutlass.kernels.moe.problem import MoEProblem

    jobs: dict[tuple[int, Any], tuple[Any, Any, Any]] = {}
    for p in problems:
        if isinstance(p, GemmProblem):
            cfg, bp = gemm_config(p.validate_any()), _gemm_build_problem(p)
            cache, key, job = _GEMM_LIBS, _gemm_key(cfg, bp), (cfg, bp)
        elif isinstance(p, AttentionProblem):
            cfg = _configured(p.validate())
            cache, key, job = _ATTENTION_LIBS, cfg, (cfg, None)
        elif isinstance(p, MoEProblem):
            cfg = _moe_config(p.validate())
            cache, key, job = _MOE_LIBS, _moe_key(cfg, p), (cfg, p)
        else:
            raise TypeError(f"precompile takes GemmProblem, AttentionProblem or MoEProblem, got {type(p).__name__}")
        if key not in cache:
            jobs[(id(cache), key)] = (cache, key, job)
    return list(jobs.values())


def precompile(problems: Iterable[Any], *, workers: int | None = None, smt: bool | None = None) -> int:
    """Build (in parallel, through :func:`argus_cutlass.generate.build_jobs` and the disk cache) and
    load the kernels of ``problems`` that this process has not loaded yet; returns how many were built.
    A GEMM problem that needs aligned staging (``GemmProblem.staging``) gets its staged kernel, the one
    :func:`gemm_kernel` later looks up for it (its workspace is stream-ordered, ``cudaMallocAsync``,
    so a CUDA graph capture can run it).

    Raises:
        ProblemError: a problem breaks a rule no path can run (``GemmProblem.validate_any``); and the
            errors of :func:`argus_cutlass.generate.build_jobs`.
    """
    from argus_cutlass.generate import build, build_jobs

    todo = precompile_jobs(problems)
    if not todo:
        return 0
    names: dict[Any, str] = {}
    libs = build_jobs([job for _, _, job in todo], workers=workers, smt=smt, names=names)
    for cache, key, job in todo:  # a builder that does not report names: the program's own
        cache[key] = libs[names[job] if job in names else build(*job).kernel_name()]
    return len(todo)


# ---- attention ---------------------------------------------------------------------------------

_ATTENTION_LIBS: dict[Any, Any] = {}
_ATTENTION_CONFIGS: dict[str, Any] = {}


def _configured(problem: Any) -> Any:
    """The orchestrator's configuration for ``problem``, looked up once per shape bucket and process
    (the lookup reads the experience store from disk; a call on the inference path must not)."""
    from argus_cutlass.agent.store import attention_key
    from argus_cutlass.generate import configure

    key = attention_key("", problem)
    if key not in _ATTENTION_CONFIGS:
        _ATTENTION_CONFIGS[key] = configure(problem)[0]
    return _ATTENTION_CONFIGS[key]


def attention_kernel(problem: Any, config: Any = None, *, smt: bool | None = None, build: bool = True) -> Any:
    """The built :class:`~argus_cutlass.kernels.attention.library.AttentionKernelLibrary` for an
    :class:`~argus_cutlass.kernels.attention.problem.AttentionProblem` (configured through the
    orchestrator: user store, shipped table, then FA3's tile per head dim), generated, verified,
    compiled (content-addressed cache) and loaded once per configuration and process; the
    configuration is looked up once per shape bucket (:func:`~argus_cutlass.agent.store.attention_key`).
    ``build=False`` raises instead of building a kernel that is not loaded yet.

    Raises:
        NotPrecompiledError: ``capture.not_precompiled`` (``build`` False, kernel not loaded).
        ConfigError, VerificationError, UnprovedError, ToolchainError, CompileError: as
        :func:`argus_cutlass.generate.generate` and :func:`~argus_cutlass.generate.compile_kernel`.
    """
    cfg = config if config is not None else _configured(problem)
    return _loaded(_ATTENTION_LIBS, cfg, cfg, None, smt=smt, build=build, family="attention",
                   what=problem.describe)


def attention(q: Any, k: Any, v: Any, *, causal: bool = False, cu_seqlens_q: Any = None, cu_seqlens_k: Any = None,
              max_seqlen_q: int | None = None, max_seqlen_k: int | None = None, seqused_k: Any = None,
              softmax_scale: float | None = None, config: Any = None, build: bool = True,
              read_lengths: bool = True) -> tuple[Any, Any]:
    """FlashAttention forward on torch tensors: ``(o, lse)``.

    Args:
        q: ``(batch, seqlen_q, heads, head_dim)`` bf16/fp16 CUDA tensor, or packed
            ``(total_q, heads, head_dim)`` with ``cu_seqlens_q``; k, v: ``(batch, seqlen_k,
            kv_heads, head_dim)`` or packed ``(total_k, kv_heads, head_dim)``; kv_heads divides heads
            (GQA; MQA with 1). The head dim (64, 96, 128, 192 or 256) must be contiguous and every
            other stride a multiple of 16 bytes.
        causal: bottom-right aligned causal mask (row i sees keys j <= i + Lk - Lq).
        cu_seqlens_q, cu_seqlens_k: int32 ``(batch + 1,)`` cumulative lengths (varlen).
        max_seqlen_q, max_seqlen_k: varlen maxima (read from cu_seqlens when None).
        seqused_k: int32 ``(batch,)``: only the first ``seqused_k[b]`` keys of batch b are attended.
        softmax_scale: default ``1 / sqrt(head_dim)``.
        config: an :class:`~argus_cutlass.kernels.attention.config.AttentionConfig` to use instead
            of the configured one.
        build: False: raise :class:`~argus_cutlass.errors.NotPrecompiledError` instead of building
            a kernel that is not loaded yet (CUDA graph capture).
        read_lengths: False: do not read ``cu_seqlens_*`` / ``seqused_k`` on the host (capture; see
            :func:`~argus_cutlass.kernels.attention.library.problem_from_tensors`).

    Returns:
        ``o`` (q's shape and dtype) and ``lse`` (fp32, natural log; ``(batch, heads, seqlen_q)``, or
        ``(heads, total_q)`` with varlen; ``-inf`` and an all-zero O row where a row sees no key).

    Raises:
        ProblemError: a tensor breaks a rule (:mod:`argus_cutlass.kernels.attention.library`).
        and the errors of :func:`attention_kernel`.

    The first call per configuration generates and compiles the kernel (seconds, cached on disk).
    """
    from argus_cutlass.kernels.attention.library import problem_from_tensors

    problem = problem_from_tensors(q, k, v, causal=causal, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k,
                                   seqused_k=seqused_k, max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k,
                                   softmax_scale=softmax_scale, read_lengths=read_lengths)
    lib = attention_kernel(problem, config, build=build)
    return lib.forward(q, k, v, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k, seqused_k=seqused_k,
                       problem=problem)


_MOE_LIBS: dict[Any, Any] = {}
_MOE_CONFIGS: dict[str, Any] = {}


def _moe_config(problem: Any) -> Any:
    """The orchestrator's configuration (:func:`argus_cutlass.generate.configure`) of ``problem``'s
    tuned-table bucket (:func:`argus_cutlass.agent.store.moe_key`: E, k, H, I, dtype and T rounded up
    to a power of two, whose edges include the heuristic's small/large edge, so the heuristic's choice
    does not split a bucket), looked up once per bucket and process: the lookup reads the experience
    store from disk and verifies a tuned entry's layer, which a call on the inference path must not do
    each time."""
    from argus_cutlass.agent.store import moe_key
    from argus_cutlass.generate import configure

    key = moe_key("", problem)
    if key not in _MOE_CONFIGS:
        _MOE_CONFIGS[key] = configure(problem)[0]
    return _MOE_CONFIGS[key]


def _moe_key(cfg: Any, problem: Any) -> tuple[Any, ...]:
    return (cfg, problem.experts, problem.topk, problem.hidden, problem.ffn, problem.dtype)


def moe_kernel(problem: Any, config: Any = None, *, smt: bool | None = None, build: bool = True) -> Any:
    """The built :class:`~argus_cutlass.kernels.moe.library.MoEKernelLibrary` for an
    :class:`~argus_cutlass.kernels.moe.problem.MoEProblem` (E, k, H, I and dtype are compile-time;
    T is a run-time argument up to 2^20), generated, verified, compiled and loaded once per
    (configuration, E, k, H, I, dtype) and process; the configuration is the T bucket's
    (:func:`argus_cutlass.generate.configure`). ``build=False`` raises instead of building a layer
    that is not loaded yet.

    Raises:
        NotPrecompiledError: ``capture.not_precompiled`` (``build`` False, layer not loaded).
        ConfigError, VerificationError, UnprovedError, ToolchainError, CompileError: as
        :func:`argus_cutlass.generate.generate` and :func:`~argus_cutlass.generate.compile_kernel`.
    """
    cfg = config if config is not None else _moe_config(problem)
    return _loaded(_MOE_LIBS, _moe_key(cfg, problem), cfg, problem, smt=smt, build=build, family="MoE",
                   what=lambda: f"T={problem.tokens} E={problem.experts} k={problem.topk} H={problem.hidden} "
                                f"I={problem.ffn} {problem.dtype}")


def moe(x: Any, topk_ids: Any, topk_weights: Any, w13: Any, w2: Any, *, config: Any = None,
        padding: str = "refuse", workspace: Any = None, build: bool = True) -> Any:
    """One mixture-of-experts layer with SwiGLU experts on torch tensors: ``y`` (T, H), x's dtype.

    ``y[t] = sum_j topk_weights[t, j] * (silu(x[t] W13[e, :I]^T) * (x[t] W13[e, I:]^T)) W2[e]^T`` with
    ``e = topk_ids[t, j]``, accumulated in fp32.

    Args:
        x: ``(T, H)`` bf16 / fp16 CUDA tensor, contiguous, 1 <= T <= 2^20, H a multiple of 8.
        topk_ids: ``(T, k)`` integer tensor of expert ids in [0, E) (distinct per token).
        topk_weights: ``(T, k)`` floating tensor (used in fp32).
        w13: ``(E, 2I)`` x ``H`` per expert, ``(E, 2I, H)``: rows [0, I) gate, [I, 2I) up; x's dtype.
        w2: ``(E, H, I)``, x's dtype; I a multiple of 8.
        config: a :class:`~argus_cutlass.kernels.moe.config.MoEConfig` (default: the heuristic).
        padding: ``"refuse"`` ids outside [0, E); ``"skip"`` lets -1 slots add nothing;
            ``"unchecked"`` skips the host check of the ids (no synchronisation: for CUDA graph
            capture; the kernel skips every id outside [0, E), never reading out of bounds).
        workspace: a uint8 CUDA tensor to reuse (allocated when None or too small).
        build: False: raise :class:`~argus_cutlass.errors.NotPrecompiledError` instead of building
            a layer that is not loaded yet (CUDA graph capture).

    Raises:
        ProblemError: ``moe.input`` (names the tensor: shape, dtype, device, E / k disagreement,
            ids out of range or repeated within a token, non-finite weights), ``tma.contiguous_extent`` /
            ``tma.alignment`` (the 16-byte rules),
            ``problem.token_range`` (T > 2^20).
        and the errors of :func:`moe_kernel`.

    The first call per layer shape generates and compiles the kernels (seconds, cached on disk).
    """
    from argus_cutlass.kernels.moe.library import check_inputs

    problem = check_inputs(x, topk_ids, topk_weights, w13, w2, padding=padding)
    lib = moe_kernel(problem, config, build=build)
    return lib.forward(x, topk_ids, topk_weights, w13, w2, workspace=workspace,
                       padding="unchecked")
