"""Seeded random problems of every family through the API's own kernel choice, on a Hopper GPU.

Run on the device machine: ``pytest -q -m gpu tests/gpu/test_fuzz_gpu.py`` (``bash bench/device_pending.sh OUT
fuzz [gemm|moe|attention]``). The hand-written GPU tests pin a configuration per case; this module pins none: each
problem gets the kernel a user's call gets (:mod:`argus_cutlass.api`, the same choice as the main commands'
:func:`argus_cutlass.generate.configure`: the user's experience store, then the shipped table
``agent/tuned_h200.json`` by shape bucket, then GEMM's cost model (on the aligned-staging path too), the
attention and MoE heuristics), so a wrong choice on a shape nobody wrote a test for shows up here.

Seed: ``ARGUS_FUZZ_SEED`` (an integer from 0 to 2**64-1; default :data:`DEFAULT_SEED`), read once at collection
(:func:`fuzz_seed`) and part of every test id (``s<seed>-...``), so a failure names the seed that reproduces it.

Draws (:func:`draw_cases`; each family from its own generator, so the draws of one family do not move when
another's change; each family's main axes spread evenly over its draws; every :data:`REUSE_EVERY`-th draw runs an
earlier draw's kernel on another problem, which keeps the default seed at 39 kernels, :data:`KERNEL_BUDGET`):

* GEMM (:data:`GEMM_CASES`): every input / output dtype and layout; M from 1 to 9000 biased to small and odd
  values, N and K with odd values (N = 33, K = 72, values not multiples of 8 that only the aligned-staging path
  runs); a share of the shapes inside a bucket of the shipped table (its bf16 / fp16 sibling and another layout
  now and then), the rest left to the cost model; alpha / beta != (1, 0) on a share. cuBLAS runs every one of
  them, so the API must not refuse any (issue: no problem cuBLAS runs is refused).
* MoE (:data:`MOE_CASES`): E in {8, 16, 60, 64, 128}, top-k 1..8, H and I multiples of 64, T in {1, 3, 16, 100,
  257, 1000, 2000, 3000}, bf16 and fp16; routings uniform, skewed (one hot expert), empty experts, all tokens'
  first slot to one expert, and -1 padding (a whole token and single slots; ``padding="skip"``).
* Attention (:data:`ATTENTION_CASES`): batch, heads with GQA / MQA, every head dim, bf16 / fp16, causal or not,
  lengths not multiples of a tile (1, 77, 1000, 3001, ...), q length != k length, varlen batches with lengths 0
  and 1, ``seqused_k`` with NaN in the key slots past it.

Path: the module fixture asks the API for every selected case's configuration
(:func:`argus_cutlass.api.precompile_jobs`), then builds all of them in one parallel batch
(:func:`argus_cutlass.api.precompile`, with the fp32 reference GEMMs beside it); a test takes its library from
the API without building (``api.gemm_kernel`` / ``moe_kernel`` / ``attention_kernel`` with ``build=False``).
A problem the API refuses fails its test with the error, unless the problem's own rules document the refusal
(:func:`documented_refusal`; then the test asserts that rule). Checks, inputs fresh random normal (seeded by the
case), outputs poisoned with NaN first:

* GEMM: :func:`argus_cutlass.kernels.gemm.check.run_and_check` (the fp32 reference GEMM; relative Frobenius error
  and element-wise bounds per output dtype, every element of D written).
* MoE: the layer from the API's library with ``y`` NaN and the workspace 0xFF, then :func:`argus_cutlass.api.moe`
  itself, each against the fp32 layer: max error <= 3 x the same-precision ``_grouped_mm`` layer's + 2e-2
  (:func:`argus_cutlass.kernels.moe.check.run_and_check`'s rule).
* Attention: :func:`argus_cutlass.kernels.attention.check.run_and_check` (O, its head-dim padding and LSE
  poisoned), then :func:`argus_cutlass.api.attention` on other fresh inputs, both under that module's tolerances.

A failure message names the seed, the problem, the kernel (name, where its configuration came from) and the
error against its bound. :func:`choose` (configuration, verification and the rendered ``.cu`` of one problem,
no GPU) is what ``tests/unit/test_fuzz_choices.py`` runs over every drawn problem on the CPU.
"""

from __future__ import annotations

import math
import os
import sys
import zlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

from argus_cutlass.errors import ProblemError
from argus_cutlass.kernels.attention.config import HEAD_DIMS
from argus_cutlass.kernels.attention.problem import AttentionProblem
from argus_cutlass.kernels.gemm.problem import GemmProblem
from argus_cutlass.kernels.moe.problem import MoEProblem

pytestmark = pytest.mark.gpu

#: the seed when ``ARGUS_FUZZ_SEED`` is not set
DEFAULT_SEED = 2026
#: the environment variable that overrides :data:`DEFAULT_SEED`
SEED_ENV = "ARGUS_FUZZ_SEED"
#: problems drawn per family
GEMM_CASES, MOE_CASES, ATTENTION_CASES = 30, 12, 10
#: every REUSE_EVERY-th draw of a family reuses an earlier draw's kernel on another problem (GEMM: the same shape,
#: other alpha / beta; MoE: the same layer, T in the same bucket, another routing; attention: the same head dim,
#: dtype, mask and key bucket, other sizes), which bounds the kernels to build
REUSE_EVERY = {"gemm": 5, "moe": 3, "attention": 3}
#: the most distinct kernels the default seed's draws may need (the module fixture compiles them in one batch)
KERNEL_BUDGET = 42

# ---- GEMM draws ---------------------------------------------------------------------------------

#: M values a serving stack meets (decode batches, odd prefill lengths) and tile edges +- 1
GEMM_M = (1, 2, 3, 5, 7, 8, 13, 16, 17, 24, 31, 33, 64, 100, 127, 129, 255, 300, 513, 1000, 1023, 2049, 3001,
          4097, 6000, 8191, 9000)
#: N and K values: odd ones (1, 33, 100 and others not multiples of 8 run only on the aligned-staging path) and
#: tile edges
GEMM_N = (1, 8, 16, 24, 33, 40, 72, 100, 136, 264, 520, 1000, 1024, 2000, 2056, 4096, 5000)
GEMM_K = (1, 3, 16, 33, 64, 72, 100, 264, 520, 1000, 1064, 4096, 4104, 5000, 8192)
#: host and device memory per GEMM case: elements of D (M x N) and of A and B
GEMM_MAX_MN, GEMM_MAX_OPERAND = 2**24, 2**25
#: (alpha, beta) pairs besides (1, 0)
GEMM_SCALARS = ((0.5, 0.0), (-1.0, 1.0), (1.0, 0.5), (2.0, -0.75))

# ---- MoE draws ----------------------------------------------------------------------------------

MOE_EXPERTS = (8, 16, 60, 64, 128)
MOE_HIDDEN = (512, 768, 1024, 1536, 2048)
MOE_FFN = (256, 384, 512, 768, 1024, 1408, 1536)
MOE_TOKENS = (1, 3, 16, 100, 257, 1000, 2000, 3000)
#: layer shapes of the shipped table's MoE entries (E, k, H, I): a share of the draws lands on them
MOE_SHIPPED = ((64, 6, 2048, 1408), (128, 8, 2048, 768))
MOE_ROUTINGS = ("uniform", "skewed", "zero_experts", "all_to_one", "padded")
#: the MoE check's absolute tolerance (kernels.moe.check.run_and_check)
MOE_ATOL = 2e-2

# ---- attention draws ----------------------------------------------------------------------------

ATTENTION_LENGTHS = (1, 3, 77, 127, 129, 300, 500, 1000, 1500, 2000, 3001)
#: (heads, kv_heads): MHA, GQA 2:1 / 4:1 / 8:1, MQA
ATTENTION_HEADS = ((4, 4), (8, 8), (8, 4), (8, 2), (16, 2), (8, 1), (12, 3))
#: query heads x batch x query length x key length bound (the fp32 reference's score matrices)
ATTENTION_MAX_WORK = 2**28


# ---- the seed and the cases ---------------------------------------------------------------------------------


def fuzz_seed() -> int:
    """``ARGUS_FUZZ_SEED`` as an integer from 0 to 2**64-1, or :data:`DEFAULT_SEED` when unset.

    Raises:
        ProblemError: ``cli.seed`` for a value that is not such an integer.
    """
    from argus_cutlass.settings import check_seed

    text = os.environ.get(SEED_ENV, "").strip()
    if not text:
        return DEFAULT_SEED
    return check_seed(int(text) if text.isdigit() else text, SEED_ENV)


@dataclass(frozen=True)
class FuzzCase:
    """One drawn problem and what its check runs.

    Attributes:
        family: ``gemm``, ``moe`` or ``attention``; index: its place among the family's draws.
        seed: the fuzz seed it was drawn with; problem: the problem the API is asked for.
        alpha, beta: GEMM epilogue scalars. routing: MoE routing kind (:data:`MOE_ROUTINGS`).
        ids_int64, weights_like_x: MoE: topk_ids passed as int64 (torch.topk's indices), weights in x's dtype.
        note: how the draw was made (``shipped bucket``, ``free``...), for the report.
    """

    family: str
    index: int
    seed: int
    problem: Any
    alpha: float = 1.0
    beta: float = 0.0
    routing: str = ""
    ids_int64: bool = False
    weights_like_x: bool = False
    note: str = ""

    @property
    def input_seed(self) -> int:
        """The seed of the case's random inputs (from the fuzz seed, the family and the index)."""
        return zlib.crc32(f"{self.seed}/{self.family}/{self.index}".encode()) & 0x7FFFFFFF

    @property
    def id(self) -> str:
        return f"s{self.seed}-{self.family[0]}{self.index:02d}-{describe(self)}"


def describe(case: FuzzCase) -> str:
    """A short text of the case's problem (its test id without the seed and index)."""
    p = case.problem
    if case.family == "gemm":
        scal = "" if (case.alpha, case.beta) == (1.0, 0.0) else f"-a{case.alpha:g}b{case.beta:g}"
        return f"{p.dtype}-{p.out_dtype}-{p.layout}-{p.m}x{p.n}x{p.k}{scal}"
    if case.family == "moe":
        return (f"{p.dtype}-T{p.tokens}-E{p.experts}k{p.topk}-H{p.hidden}I{p.ffn}-{case.routing}"
                + ("-i64" if case.ids_int64 else "") + ("-wx" if case.weights_like_x else ""))
    mask = "causal" if p.causal else "full"
    used = "-used" if p.seqused_k is not None else ""
    if p.varlen:
        lens = "q" + ".".join(map(str, p.seqlens_q)) + "-k" + ".".join(map(str, p.seqlens_k))
        return f"{p.dtype}-d{p.head_dim}-{mask}-varlen-h{p.heads}kv{p.kv_heads}-{lens}{used}"
    return f"{p.dtype}-d{p.head_dim}-{mask}-b{p.batch}-h{p.heads}kv{p.kv_heads}-sq{p.seqlen_q}-sk{p.seqlen_k}{used}"


def _rng(seed: int, family: str) -> np.random.Generator:
    return np.random.default_rng([seed, zlib.crc32(family.encode())])


def _pick(rng: np.random.Generator, values: tuple) -> Any:
    return values[int(rng.integers(len(values)))]


def _spread(rng: np.random.Generator, values: tuple, count: int) -> list[Any]:
    """``count`` values that cycle through ``values`` (each as often as the count allows), shuffled: an axis of a
    family's draws covered evenly whatever the seed."""
    out = [values[j % len(values)] for j in range(count)]
    return [out[int(j)] for j in rng.permutation(count)]


def _log_uniform(rng: np.random.Generator, lo: int, hi: int) -> int:
    return int(min(hi, max(lo, round(math.exp(rng.uniform(math.log(lo), math.log(hi)))))))


def _odd(rng: np.random.Generator, v: int, lo: int, hi: int) -> int:
    """``v`` made odd half the time (kept in [lo, hi])."""
    if rng.random() < 0.5 and v % 2 == 0:
        v = v + 1 if v + 1 <= hi else v - 1
    return max(lo, v)


def _gemm_size(rng: np.random.Generator, specials: tuple[int, ...], lo: int, hi: int, small: float) -> int:
    r = rng.random()
    if r < 0.45:
        return _pick(rng, specials)
    if r < 0.45 + small:
        return int(rng.integers(1, 65))
    return _odd(rng, _log_uniform(rng, lo, hi), lo, hi)


def _gemm_fits(m: int, n: int, k: int) -> bool:
    return m * n <= GEMM_MAX_MN and m * k <= GEMM_MAX_OPERAND and k * n <= GEMM_MAX_OPERAND


def _shipped_gemm_entries() -> list[dict[str, Any]]:
    from argus_cutlass.agent.store import shipped_entries

    return [e for e in shipped_entries() if e.get("kernel") == "gemm" and isinstance(e.get("bucket"), str)]


def _in_bucket(rng: np.random.Generator, bucket: int) -> int:
    """A value whose power-of-two bucket is ``bucket``: in (bucket / 2, bucket]; a multiple of 8 (the direct TMA
    path) half the time, else odd half the time."""
    lo = bucket // 2 + 1
    v = int(rng.integers(lo, bucket + 1)) if bucket > 1 else 1
    if bucket >= 16 and rng.random() < 0.5:
        return -(-v // 8) * 8
    return v if bucket <= 2 else _odd(rng, v, lo, bucket)


#: every (dtype, out_dtype, layout) of the GEMM family
GEMM_FLAVORS = tuple((d, o, lay) for d in ("bf16", "fp16") for o in ("bf16", "fp16", "fp32")
                     for lay in ("tn", "nt", "nn", "tt"))


def _bucket_entries(entries: list[dict[str, Any]], flavor: tuple[str, str, str]) -> tuple[list[dict[str, Any]], str]:
    """The shipped entries a problem of ``flavor`` looks up (its own, else its bf16 / fp16 sibling's:
    ``store._sibling_problem``), and a note; all entries (a bucket's shape only) when neither exists."""
    d, o, lay = flavor
    own = [e for e in entries if (e["dtype"], e["out_dtype"], e["layout"]) == flavor]
    if own:
        return own, "shipped bucket"
    sd = {"bf16": "fp16", "fp16": "bf16"}[d]
    sib = (sd, sd if o == d else o, lay)
    sibs = [e for e in entries if (e["dtype"], e["out_dtype"], e["layout"]) == sib]
    if sibs:
        return sibs, "shipped bucket of the sibling dtype"
    return entries, "a shipped bucket's shape, no entry for this flavour"


def _draw_gemm(rng: np.random.Generator, seed: int, index: int, flavor: tuple[str, str, str],
               entries: list[dict[str, Any]], earlier: list[FuzzCase]) -> FuzzCase:
    if (index + 1) % REUSE_EVERY["gemm"] == 0 and earlier:  # an earlier problem (its kernel) with other scalars
        old = earlier[int(rng.integers(len(earlier)))]
        scalars = [s for s in ((1.0, 0.0),) + GEMM_SCALARS if s != (old.alpha, old.beta)]
        alpha, beta = _pick(rng, tuple(scalars))
        return FuzzCase("gemm", index, seed, old.problem, alpha=alpha, beta=beta,
                        note=f"g{old.index:02d} again, other alpha / beta (same kernel)")
    dtype, out, layout = flavor
    in_bucket = rng.random() < 0.45 and bool(entries)
    for _ in range(200):
        if in_bucket:
            cands, note = _bucket_entries(entries, flavor)
            e = cands[int(rng.integers(len(cands)))]
            bm, bn, bk = (int(part[1:]) for part in e["bucket"].split("_"))
            m, n, k = _in_bucket(rng, bm), _in_bucket(rng, bn), _in_bucket(rng, bk)
            note = f"{note} {e['bucket']}"
        else:
            m = _gemm_size(rng, GEMM_M, 1, 9000, 0.2)
            n = _gemm_size(rng, GEMM_N, 1, 8192, 0.1)
            k = _gemm_size(rng, GEMM_K, 1, 8192, 0.1)
            note = "free"
        if _gemm_fits(m, n, k):
            break
    else:  # pragma: no cover - 200 draws over the memory caps: a small one
        m, n, k, note = 17, 33, 72, "fallback"
    alpha, beta = _pick(rng, GEMM_SCALARS) if rng.random() < 0.3 else (1.0, 0.0)
    return FuzzCase("gemm", index, seed, GemmProblem(m, n, k, dtype, out, layout), alpha=alpha, beta=beta, note=note)


def _draw_moe(rng: np.random.Generator, seed: int, index: int, axes: dict[str, Any],
              earlier: list[FuzzCase]) -> FuzzCase:
    from argus_cutlass.kernels.moe.heuristics import tokens_bucket

    routing = axes["routing"]
    if (index + 1) % REUSE_EVERY["moe"] == 0 and earlier:  # an earlier layer's kernel: T in its bucket, routed anew
        old = earlier[int(rng.integers(len(earlier)))]
        p = old.problem
        b = tokens_bucket(p.tokens)
        t = _in_bucket(rng, b) if b > 2 else p.tokens
        e, k, h, i, dtype = p.experts, p.topk, p.hidden, p.ffn, p.dtype
        routing = _pick(rng, tuple(r for r in MOE_ROUTINGS if r != old.routing))
        note = f"m{old.index:02d}'s layer, T in its bucket (same kernel)"
    elif axes["dtype"] == "bf16" and rng.random() < 0.35:  # a layer and T bucket of the shipped MoE entries
        e, k, h, i = _pick(rng, MOE_SHIPPED)
        dtype, t = "bf16", _pick(rng, (16, 2000))
        note = "shipped layer shape and T bucket"
    else:
        dtype, e, t = axes["dtype"], axes["experts"], axes["tokens"]
        k = int(rng.integers(1, min(8, e) + 1))
        h, i = _pick(rng, MOE_HIDDEN), _pick(rng, MOE_FFN)
        note = "free"
    if routing == "zero_experts" and e <= k:
        routing = "skewed"
    return FuzzCase("moe", index, seed, MoEProblem(t, e, k, h, i, dtype), routing=routing,
                    ids_int64=bool(rng.random() < 0.5), weights_like_x=bool(rng.random() < 0.3), note=note)


def _attention_lengths(rng: np.random.Generator, varlen: bool, shipped: bool) -> tuple[Any, Any, Any]:
    """``(seqlen(s)_q, seqlen(s)_k, seqused_k)``: fixed lengths (a KV cache's used lengths now and then), or
    varlen batches with lengths 0 and 1 mixed in."""
    if varlen:
        b = int(rng.integers(2, 6))
        sq = [_pick(rng, (0, 1) + ATTENTION_LENGTHS[:8]) for _ in range(b)]
        sk = [q if rng.random() < 0.5 else _pick(rng, (0, 1) + ATTENTION_LENGTHS[:8]) for q in sq]
        used = [int(rng.integers(0, s + 1)) for s in sk] if rng.random() < 0.3 else None
        return sq, sk, used
    sq = _pick(rng, ATTENTION_LENGTHS)
    if shipped:
        sk = _pick(rng, (300, 500, 1500, 2000))
    else:
        sk = sq if rng.random() < 0.5 else _pick(rng, ATTENTION_LENGTHS)
    return sq, sk, ("used" if rng.random() < 0.25 else None)


def _draw_attention(rng: np.random.Generator, seed: int, index: int, axes: dict[str, Any],
                    earlier: list[FuzzCase]) -> FuzzCase:
    from argus_cutlass.agent.store import attention_key

    old = earlier[int(rng.integers(len(earlier)))] if (index + 1) % REUSE_EVERY["attention"] == 0 and earlier else None
    if old is not None:  # an earlier problem's kernel: its head dim, dtype, mask, varlen and key bucket
        q = old.problem
        d, dtype, causal, varlen = q.head_dim, q.dtype, q.causal, q.varlen
    else:
        d, dtype, causal, varlen = axes["head_dim"], axes["dtype"], axes["causal"], axes["kind"] == "varlen"
    shipped = old is None and axes["kind"] == "shipped"
    if shipped:  # a key bucket of the shipped attention entries: bf16, fixed lengths, d 64 / 128 / 256
        dtype, varlen = "bf16", False
        d = d if d in (64, 128, 256) else _pick(rng, (64, 128, 256))
    for _ in range(200):
        heads, kv_heads = _pick(rng, ATTENTION_HEADS)
        sq, sk, used = _attention_lengths(rng, varlen, shipped)
        if varlen:
            p = AttentionProblem.varlen_problem(sq, sk, heads, kv_heads, d, dtype, causal, seqused_k=used)
            work = heads * sum(a * c for a, c in zip(sq, sk))
        else:
            b = int(rng.integers(1, 4))
            used = tuple(int(rng.integers(0, sk + 1)) for _ in range(b)) if used else None
            p = AttentionProblem(b, heads, kv_heads, sq, sk, d, dtype, causal, seqused_k=used)
            work = b * heads * sq * sk
        if work > ATTENTION_MAX_WORK:
            continue
        if old is None:
            return FuzzCase("attention", index, seed, p, note=("varlen" if varlen else "fixed")
                            + (" (shipped bucket)" if shipped else ""))
        if attention_key("", p) == attention_key("", old.problem):
            return FuzzCase("attention", index, seed, p, note=f"a{old.index:02d}'s kernel, other sizes (same kernel)")
    if old is not None:
        return FuzzCase("attention", index, seed, old.problem, note=f"a{old.index:02d} again (same kernel)")
    return FuzzCase("attention", index, seed, AttentionProblem(1, 4, 4, 77, 77, d, dtype, causal), note="fallback")


def _axes(rng: np.random.Generator, count: int, **values: tuple) -> list[dict[str, Any]]:
    """Per draw, one value of each axis (:func:`_spread` per axis)."""
    cols = {name: _spread(rng, vals, count) for name, vals in values.items()}
    return [{name: col[j] for name, col in cols.items()} for j in range(count)]


def draw_cases(seed: int) -> list[FuzzCase]:
    """Every family's draws for ``seed`` (GEMM, then MoE, then attention; deterministic). Each family's axes
    (GEMM flavour; MoE dtype, E, T, routing; attention head dim, dtype, mask, varlen / fixed / shipped bucket) are
    spread evenly over its new draws (:func:`_spread`; every :data:`REUSE_EVERY`-th draw reuses an earlier kernel), the
    rest drawn at random."""
    entries = _shipped_gemm_entries()
    families = (
        ("gemm", GEMM_CASES, dict(flavor=GEMM_FLAVORS),
         lambda r, j, ax, e: _draw_gemm(r, seed, j, ax["flavor"], entries, e)),
        ("moe", MOE_CASES, dict(dtype=("bf16", "bf16", "fp16"), experts=MOE_EXPERTS, tokens=MOE_TOKENS,
                                routing=MOE_ROUTINGS),
         lambda r, j, ax, e: _draw_moe(r, seed, j, ax, e)),
        ("attention", ATTENTION_CASES, dict(head_dim=HEAD_DIMS, dtype=("bf16", "fp16"), causal=(False, True),
                                            kind=("varlen", "shipped", "fixed")),
         lambda r, j, ax, e: _draw_attention(r, seed, j, ax, e)),
    )
    out: list[FuzzCase] = []
    for family, count, values, draw in families:
        rng, drawn = _rng(seed, family), []
        new = [j for j in range(count) if (j + 1) % REUSE_EVERY[family] != 0]
        axes = dict(zip(new, _axes(rng, len(new), **values)))
        reused = {v: values[v][0] for v in values}  # a reusing draw takes its values from the earlier draw
        for j in range(count):
            drawn.append(draw(rng, j, axes.get(j, reused), [c for c in drawn if "same kernel" not in c.note]))
        out += drawn
    return out


# ---- the API's choice ---------------------------------------------------------------------------------------


def documented_refusal(problem: Any) -> str | None:
    """The rule of the problem's own checks that refuses it (what the API documents it refuses: a GEMM breaking a
    rule no path runs, ``GemmProblem.validate_any``; an MoE or attention problem breaking ``validate``), or
    None when it must run."""
    try:
        problem.validate_any() if isinstance(problem, GemmProblem) else problem.validate()
    except ProblemError as exc:
        return exc.rule
    return None


@dataclass(frozen=True)
class Choice:
    """What the API builds for one problem.

    Attributes:
        config: the configuration (``api.precompile_jobs``); build_problem: the problem its program is built for.
        source, detail: where the configuration came from (:func:`argus_cutlass.generate.configure`).
        kernel: the kernel name; source_text: the rendered ``.cu`` (None until generated).
    """

    config: Any
    build_problem: Any
    source: str
    detail: str
    kernel: str | None = None
    source_text: str | None = field(default=None, repr=False)

    def label(self) -> str:
        return f"{self.kernel or '<not generated>'} ({self.source} configuration: {self.config!r})"


def api_job(problem: Any) -> tuple[Any, Any]:
    """``(config, build problem)``: what :func:`argus_cutlass.api.precompile` builds for ``problem``
    (:func:`argus_cutlass.api.precompile_jobs`; when the kernel is already loaded in this process, the same
    lookups it makes).

    Raises:
        ProblemError, ConfigError: as the API refuses the problem.
    """
    from argus_cutlass import api

    jobs = api.precompile_jobs([problem])
    if jobs:
        ((_, _, job),) = jobs
        return job
    if isinstance(problem, GemmProblem):
        from argus_cutlass.generate import gemm_build_problem

        return api.gemm_config(problem.validate_any()), gemm_build_problem(problem)
    if isinstance(problem, AttentionProblem):
        return api._configured(problem.validate()), None
    return api._moe_config(problem.validate()), problem


def choose(problem: Any, *, generate: bool = True, smt: bool | None = None) -> Choice:
    """The API's kernel for ``problem`` without a GPU: its configuration (:func:`api_job`) and, with ``generate``,
    the program built, verified (``smt`` as :func:`argus_cutlass.generate.generate`; None: z3 when installed, as
    ``api.precompile``) and rendered.

    Raises:
        ProblemError, ConfigError, VerificationError, UnprovedError: as the API refuses or fails the problem.
    """
    from argus_cutlass.generate import configure
    from argus_cutlass.generate import generate as gen

    cfg, bp = api_job(problem)
    looked = configure(problem)
    source = looked.source if looked.config == cfg else f"{looked.source}? (the API's cached choice differs)"
    if not generate:
        return Choice(cfg, bp, source, looked.detail)
    kernel = gen(cfg, bp, smt=smt)
    return Choice(cfg, bp, source, looked.detail, kernel.name, kernel.source)


def distinct_kernels(choices: list[Choice]) -> int:
    """How many kernels ``choices`` need built (generated ones by name, the others by configuration and build
    problem)."""
    return len({c.kernel if c.kernel else (repr(c.config), repr(c.build_problem)) for c in choices})


# ---- collection -------------------------------------------------------------------------------------------------

_FAMILY_OF_TEST = {"test_gemm_fuzz": "gemm", "test_moe_fuzz": "moe", "test_attention_fuzz": "attention"}


def pytest_generate_tests(metafunc):
    family = _FAMILY_OF_TEST.get(metafunc.function.__name__)
    if family is not None and "case" in metafunc.fixturenames:
        cases = [c for c in draw_cases(fuzz_seed()) if c.family == family]
        metafunc.parametrize("case", cases, ids=[c.id for c in cases])


# ---- the one build ----------------------------------------------------------------------------------------------


def _reference_jobs(cases: list[FuzzCase]) -> list[Any]:
    from argus_cutlass.build.nvcc import CompileJob
    from argus_cutlass.kernels.gemm.reference import render_reference

    flavors = sorted({(c.problem.dtype, c.problem.out_dtype, c.problem.layout) for c in cases if c.family == "gemm"})
    jobs = []
    for flavor in flavors:
        name, source = render_reference(*flavor)
        jobs.append(CompileJob(source, name, "shared"))  # reference_library's compile_cu call: the same cache key
    return jobs


@pytest.fixture(scope="module")
def built(request) -> dict[str, Any]:
    """case id -> its :class:`Choice` (kernel built and loaded by the API), or the exception the API raised for
    it. Every selected case's kernel is built by one ``api.precompile`` call (one parallel nvcc batch; the fp32
    reference GEMMs of the selected GEMM flavours compile beside it); when that call fails, each problem is built
    on its own so that the failure lands on the cases it belongs to."""
    from concurrent.futures import ThreadPoolExecutor

    from argus_cutlass import api
    from argus_cutlass.build.nvcc import compile_many

    me = sys.modules[__name__]
    cases = [item.callspec.params["case"] for item in request.session.items
             if getattr(item, "module", None) is me and hasattr(item, "callspec") and "case" in item.callspec.params]
    out: dict[str, Any] = {}
    todo: list[FuzzCase] = []
    for c in cases:
        if documented_refusal(c.problem) is not None:
            continue
        try:
            out[c.id] = choose(c.problem, generate=False)
            todo.append(c)
        except Exception as exc:  # noqa: BLE001 - whatever the choice raises is this case's finding
            out[c.id] = exc
    with ThreadPoolExecutor(max_workers=1) as pool:
        refs = pool.submit(compile_many, _reference_jobs(todo), return_exceptions=True)
        try:
            api.precompile([c.problem for c in todo])
        except Exception:  # noqa: BLE001 - built one by one below, so that each error lands on its cases
            for c in todo:
                try:
                    api.precompile([c.problem])
                except Exception as exc:  # noqa: BLE001 - this case's finding, reported by its test
                    out[c.id] = exc
        refs.result()
    return out


def _library(case: FuzzCase, built: dict[str, Any]) -> tuple[Any, Choice] | None:
    """The API's library for the case (never built here) and the choice; fails the test with the API's error. None
    for a problem its own rules refuse, after asserting that the API refuses it with that rule."""
    from argus_cutlass import api

    p = case.problem
    rule = documented_refusal(p)
    if rule is not None:
        with pytest.raises(ProblemError) as info:
            api.precompile_jobs([p])
        assert info.value.rule == rule, f"{case.id}: refused with {info.value.rule}, its rules say {rule}"
        return None
    got = built[case.id]
    if isinstance(got, Exception):
        cublas = " (cuBLAS runs this problem)" if case.family == "gemm" else ""
        pytest.fail(f"[seed {case.seed}] {case.id}{cublas}: the API refused or failed it: {type(got).__name__}: {got}",
                    pytrace=False)
    kernel_of = {"gemm": api.gemm_kernel, "moe": api.moe_kernel, "attention": api.attention_kernel}[case.family]
    lib = kernel_of(p, build=False)
    return lib, Choice(got.config, got.build_problem, got.source, got.detail, lib.name)


def _where(case: FuzzCase, choice: Choice) -> str:
    return f"[seed {case.seed}] {case.id} ({case.note}) -> kernel {choice.label()}"


# ---- the tests --------------------------------------------------------------------------------------------------


def test_gemm_fuzz(case: FuzzCase, built, gpu_device):
    from argus_cutlass.kernels.gemm.check import run_and_check

    found = _library(case, built)
    if found is None:
        return
    lib, choice = found
    r = run_and_check(lib, case.problem, alpha=case.alpha, beta=case.beta, seed=case.input_seed)
    assert r.passed, (f"{_where(case, choice)}: {r.summary()}; {r.element_errors} element errors; max abs error "
                      f"{r.max_abs_error:.3e}")


def _moe_inputs(case: FuzzCase) -> tuple[Any, ...]:
    """``(x, ids, weights, w13, w2)`` of the case (:func:`argus_cutlass.kernels.moe.check.make_inputs`); the
    ``padded`` routing sets every slot of one token and single slots of others to -1."""
    import torch

    from argus_cutlass.kernels.moe.check import make_inputs

    p = case.problem
    kind = "uniform" if case.routing == "padded" else case.routing
    x, ids, w, w13, w2 = make_inputs(p, kind, case.input_seed)
    if case.routing == "padded":
        rng = np.random.default_rng(case.input_seed)
        ids[int(rng.integers(p.tokens))] = -1
        for t in rng.integers(p.tokens, size=max(1, p.tokens // 7)):
            ids[int(t), int(rng.integers(p.topk))] = -1
    if case.ids_int64:
        ids = ids.to(torch.int64)
    if case.weights_like_x:
        w = w.to(x.dtype)
    return x, ids, w, w13, w2


def _moe_bound(case: FuzzCase, x, ids, w, w13, w2, ref) -> tuple[float, float]:
    """``(bound, baseline error)``: 3 x the same-precision ``_grouped_mm`` layer's max error + atol (a -1 slot as
    expert 0 with weight 0); a rounding bound where ``_grouped_mm`` lacks the dtype."""
    from argus_cutlass.kernels.moe.baseline import grouped_mm_layer

    try:
        base = grouped_mm_layer(x, ids.clamp(min=0), w.float() * (ids >= 0), w13, w2)
        berr = float((base.float() - ref).abs().max())
    except Exception:  # noqa: BLE001 - _grouped_mm lacks fp16 on some builds (kernels.moe.check does the same)
        berr = float(ref.abs().max()) * 2 ** -7
    return 3.0 * berr + MOE_ATOL, berr


def test_moe_fuzz(case: FuzzCase, built, gpu_device):
    torch = pytest.importorskip("torch")
    from argus_cutlass import api
    from argus_cutlass.kernels.moe.check import fp32_layer

    found = _library(case, built)
    if found is None:
        return
    lib, choice = found
    p = case.problem
    x, ids, w, w13, w2 = _moe_inputs(case)
    ref = fp32_layer(x, ids, w.float(), w13, w2)
    bound, berr = _moe_bound(case, x, ids, w, w13, w2, ref)
    # the API's library, y and the workspace poisoned
    y = torch.full_like(x, float("nan"))
    ws = torch.full((lib.workspace_bytes(p.tokens),), 0xFF, dtype=torch.uint8, device=x.device)
    lib(x, ids.to(torch.int32).contiguous(), w.float().contiguous(), w13, w2, y, ws, p.tokens,
        torch.cuda.current_stream().cuda_stream)
    torch.cuda.synchronize()
    nan = int((~torch.isfinite(y.float())).sum())
    err = float((y.float() - ref).abs().max()) if nan == 0 else math.inf
    assert nan == 0 and err <= bound, (f"{_where(case, choice)}: library call, y poisoned: {nan} non-finite outputs, "
                                       f"max |y - fp32| {err:.3g} > bound {bound:.3g} (3 x _grouped_mm's {berr:.3g} "
                                       f"+ {MOE_ATOL})")
    # the Python function itself
    y2 = api.moe(x, ids, w, w13, w2, padding="skip" if case.routing == "padded" else "refuse", build=False)
    torch.cuda.synchronize()
    nan2 = int((~torch.isfinite(y2.float())).sum())
    err2 = float((y2.float() - ref).abs().max()) if nan2 == 0 else math.inf
    assert nan2 == 0 and err2 <= bound, (f"{_where(case, choice)}: api.moe: {nan2} non-finite outputs, max |y - fp32| "
                                         f"{err2:.3g} > bound {bound:.3g}")
    if case.routing == "padded":
        fully = (ids < 0).all(dim=1)
        assert float(y[fully].float().abs().max()) == 0.0, \
            f"{_where(case, choice)}: a token with every slot -1 is not 0"


def test_attention_fuzz(case: FuzzCase, built, gpu_device):
    torch = pytest.importorskip("torch")
    from argus_cutlass import api
    from argus_cutlass.kernels.attention.check import compare, make_inputs, run_and_check
    from argus_cutlass.kernels.attention.reference import attention_reference

    found = _library(case, built)
    if found is None:
        return
    lib, choice = found
    p = case.problem
    res = run_and_check(lib, p, seed=case.input_seed)
    assert res.passed, f"{_where(case, choice)}: library call, O and LSE poisoned: {res.summary()}"
    ins = make_inputs(p, case.input_seed + 1)
    o, lse = api.attention(ins.q, ins.k, ins.v, causal=p.causal, cu_seqlens_q=ins.cu_seqlens_q,
                           cu_seqlens_k=ins.cu_seqlens_k, seqused_k=ins.seqused_k, build=False)
    torch.cuda.synchronize()
    ref_o, ref_lse = attention_reference(p, ins.q, ins.k, ins.v)
    cmp = compare(p, o, torch.empty(0, device=o.device), lse, ref_o, ref_lse)
    assert cmp["passed"], (f"{_where(case, choice)}: api.attention: rel_error {cmp['rel_error']:.3e} (tol "
                           f"{cmp['tolerance']:.0e}), max abs {cmp['max_abs_error']:.3e}, "
                           f"{cmp['element_errors']} element errors, {cmp['nan_count']} NaN, {cmp['lse_errors']} LSE "
                           f"errors, {cmp['empty_row_errors']} errors on rows that see no key")
