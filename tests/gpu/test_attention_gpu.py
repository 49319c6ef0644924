"""Attention forward correctness on a Hopper GPU against the fp32 reference (issue 10, item 5).

Run on the device machine: ``pytest -q -m gpu tests/gpu/test_attention_gpu.py``. Every kernel is
generated, verified, compiled (one parallel nvcc batch for the whole module) and loaded through the
orchestrator (``argus_cutlass.generate.build_many``); each case draws fresh random inputs (NaN in
the head-dim padding of Q/K/V and in every KV-cache slot past ``seqused_k``), poisons O, its
padding and LSE with NaN, runs the kernel and compares with
:func:`argus_cutlass.kernels.attention.reference.attention_reference`
(:func:`argus_cutlass.kernels.attention.check.run_and_check`).

Coverage: every head dim, causal and not, lengths not dividing any block (1, 3, 127, 129, 1000),
q length != kv length both ways (bottom-right causal alignment, rows with no key), GQA 8:1 and MQA,
fp16 and bf16, varlen batches mixing lengths 0 and 1, ``seqused_k`` with NaN past it (a batch with
``seqused_k = 0``: every row fully masked), and the tensor rules refused before any launch.
The ``quad16`` O epilogue (16-byte stores after the quad's lane exchange, ``AttentionConfig.epilogue``)
runs its own set (:data:`QUAD16`): every head dim, causal and not, varlen with lengths 0 and 1 mixed
in, ``seqused_k``, lengths 1 / 127 / 1000, rows that see no key, fp16.
"""

from __future__ import annotations

import math

import pytest

from argus_cutlass.errors import ProblemError
from argus_cutlass.kernels.attention.check import make_inputs, run_and_check
from argus_cutlass.kernels.attention.config import HEAD_DIMS
from argus_cutlass.kernels.attention.heuristics import default_config
from argus_cutlass.kernels.attention.problem import AttentionProblem

torch = pytest.importorskip("torch", reason="the attention check runs on torch tensors")

pytestmark = pytest.mark.gpu

#: (seqlen_q, seqlen_k, heads, kv_heads)
FIXED = (
    (1, 1, 4, 4),
    (3, 127, 16, 2),     # GQA 8:1
    (127, 129, 8, 1),    # MQA
    (129, 127, 4, 2),
    (1000, 1000, 4, 4),
    (1, 1000, 8, 8),     # decode-like: one query, bottom-right causal sees every key
    (1000, 3, 4, 1),     # causal: rows 0..996 see no key (O = 0, LSE = -inf)
)
VARLEN = dict(seqlens_q=(0, 1, 129, 1000, 3, 64), seqlens_k=(5, 1, 300, 1000, 0, 64))
SEQUSED_VARLEN = (3, 1, 0, 777, 0, 64)


def _problems() -> list[tuple[str, AttentionProblem]]:
    out = []
    for d in HEAD_DIMS:
        for causal in (False, True):
            for sq, sk, h, hk in FIXED:
                out.append((f"d{d}-{'causal' if causal else 'full'}-sq{sq}-sk{sk}-h{h}/{hk}",
                            AttentionProblem(2, h, hk, sq, sk, d, "bf16", causal)))
            out.append((f"d{d}-{'causal' if causal else 'full'}-varlen",
                        AttentionProblem.varlen_problem(heads=4, kv_heads=2, head_dim=d, causal=causal, **VARLEN)))
            out.append((f"d{d}-{'causal' if causal else 'full'}-varlen-seqused",
                        AttentionProblem.varlen_problem(heads=4, kv_heads=1, head_dim=d, causal=causal,
                                                        seqused_k=SEQUSED_VARLEN, **VARLEN)))
            out.append((f"d{d}-{'causal' if causal else 'full'}-seqused",
                        AttentionProblem(3, 4, 2, 200, 1000, d, "bf16", causal, seqused_k=(0, 77, 1000))))
    for d in (64, 128, 256):
        for causal in (False, True):
            out.append((f"fp16-d{d}-{'causal' if causal else 'full'}",
                        AttentionProblem(2, 8, 2, 1000, 1000, d, "fp16", causal)))
            out.append((f"fp16-d{d}-{'causal' if causal else 'full'}-varlen",
                        AttentionProblem.varlen_problem(heads=4, kv_heads=4, head_dim=d, dtype="fp16", causal=causal,
                                                        **VARLEN)))
    out.append(("d128-full-long", AttentionProblem(1, 16, 16, 4096, 4096, 128, "bf16", False)))
    out.append(("d128-causal-long", AttentionProblem(1, 16, 16, 4096, 4096, 128, "bf16", True)))
    return out


PROBLEMS = _problems()


def _quad16() -> list[tuple[str, AttentionProblem]]:
    out = []
    for d in HEAD_DIMS:
        for causal in (False, True):
            mask = "causal" if causal else "full"
            out.append((f"quad16-d{d}-{mask}-varlen",
                        AttentionProblem.varlen_problem(heads=4, kv_heads=2, head_dim=d, causal=causal, **VARLEN)))
            for sq, sk in ((1, 1), (127, 129), (1000, 1000), (1000, 3)):  # (1000, 3) causal: 997 rows see no key
                out.append((f"quad16-d{d}-{mask}-sq{sq}-sk{sk}", AttentionProblem(2, 4, 2, sq, sk, d, "bf16", causal)))
    out.append(("quad16-d128-causal-varlen-seqused",
                AttentionProblem.varlen_problem(heads=4, kv_heads=1, head_dim=128, causal=True,
                                                seqused_k=SEQUSED_VARLEN, **VARLEN)))
    out.append(("quad16-fp16-d64-causal", AttentionProblem(2, 8, 2, 1000, 1000, 64, "fp16", True)))
    out.append(("quad16-fp16-d256-varlen",
                AttentionProblem.varlen_problem(heads=4, kv_heads=4, head_dim=256, dtype="fp16", **VARLEN)))
    return out


#: problems run with the quad16 O epilogue
QUAD16 = _quad16()


def _cfg(p: AttentionProblem, epilogue: str = "direct"):
    return default_config(p.head_dim, p.dtype, p.causal, p.varlen).replace(epilogue=epilogue)


@pytest.fixture(scope="module")
def libraries():
    from argus_cutlass.generate import build_many

    return build_many([_cfg(p) for _, p in PROBLEMS] + [_cfg(p, "quad16") for _, p in QUAD16])


def _lib(libraries, p, epilogue: str = "direct"):
    from argus_cutlass.generate import kernel_name

    return libraries[kernel_name(_cfg(p, epilogue))]


@pytest.mark.parametrize("problem", [p for _, p in PROBLEMS], ids=[i for i, _ in PROBLEMS])
def test_attention_matches_reference(libraries, problem):
    res = run_and_check(_lib(libraries, problem), problem, seed=hash(problem.describe()) % 1000)
    assert res.passed, res.summary()


@pytest.mark.parametrize("problem", [p for _, p in QUAD16], ids=[i for i, _ in QUAD16])
def test_quad16_epilogue_matches_reference(libraries, problem):
    res = run_and_check(_lib(libraries, problem, "quad16"), problem, seed=hash(problem.describe()) % 1000)
    assert res.passed, res.summary()


@pytest.mark.parametrize("epilogue", ["direct", "quad16"])
def test_fully_masked_rows_are_zero_with_minus_inf_lse(libraries, epilogue):
    p = AttentionProblem(1, 2, 2, 100, 10, 128, "bf16", True)  # rows 0..89 see no key
    lib = _lib(libraries, p, epilogue)
    ins = make_inputs(p, seed=3)
    o, lse = lib.forward(ins.q, ins.k, ins.v)
    torch.cuda.synchronize()
    assert torch.all(o[:, :90] == 0)
    assert torch.all(torch.isneginf(lse[:, :, :90]))
    assert torch.all(torch.isfinite(lse[:, :, 90:]))
    assert not torch.isnan(o).any()


def test_nan_past_seqused_never_reaches_output(libraries):
    p = AttentionProblem(2, 4, 4, 64, 512, 64, "bf16", False, seqused_k=(100, 1))
    lib = _lib(libraries, p)
    ins = make_inputs(p, seed=5)  # K and V hold NaN in slots [100, 512) and [1, 512)
    assert torch.isnan(ins.k[0, 100:]).all() and torch.isnan(ins.v[1, 1:]).all()
    o, lse = lib.forward(ins.q, ins.k, ins.v, seqused_k=ins.seqused_k)
    torch.cuda.synchronize()
    assert torch.isfinite(o).all() and torch.isfinite(lse).all()


def test_tensor_rules_refused_before_launch(libraries):
    from argus_cutlass.kernels.attention.library import problem_from_tensors

    p = AttentionProblem(2, 4, 2, 64, 64, 128, "bf16", False)
    lib = _lib(libraries, p)
    ins = make_inputs(p, seed=1)
    q, k, v = ins.q.contiguous(), ins.k.contiguous(), ins.v.contiguous()
    cases = {
        "problem.heads": (q[:, :, :3], k, v, {}),
        "problem.dtype": (q, k.half(), v, {}),
        "problem.layout": (q.transpose(1, 3).contiguous().transpose(1, 3), k, v, {}),
        "tma.stride_alignment": (torch.empty(2, 64, 4, 132, dtype=q.dtype, device=q.device)[..., :128], k, v, {}),
        "tma.address_alignment": (torch.empty(2 * 64 * 4 * 128 + 1, dtype=q.dtype, device=q.device)[1:]
                                  .view(2, 64, 4, 128), k, v, {}),
        "attention.head_dim": (q[..., :80].contiguous(), k[..., :80].contiguous(), v[..., :80].contiguous(), {}),
        "problem.device": (q.cpu(), k, v, {}),
    }
    for rule, (qq, kk, vv, kw) in cases.items():
        with pytest.raises(ProblemError) as exc:
            problem_from_tensors(qq, kk, vv, **kw)
        assert exc.value.rule == rule, (rule, str(exc.value))
    # varlen: cu_seqlens not starting at 0, not monotone, disagreeing with the tensors
    qv, kv_ = q.reshape(-1, 4, 128), k.reshape(-1, 2, 128)
    dev = q.device
    for bad in ([1, 64, 128], [0, 100, 64, 128], [0, 64, 100]):
        with pytest.raises(ProblemError) as exc:
            problem_from_tensors(qv, kv_, kv_, cu_seqlens_q=torch.tensor(bad, dtype=torch.int32, device=dev),
                                 cu_seqlens_k=torch.tensor([0, 64, 128], dtype=torch.int32, device=dev))
        assert exc.value.rule == "problem.cu_seqlens", str(exc.value)
    with pytest.raises(ProblemError) as exc:
        lib.forward(q, k, v, causal=True)  # a non-causal kernel refuses a causal problem
    assert exc.value.rule == "problem.kernel"


def test_api_attention_returns_o_and_lse():
    from argus_cutlass.api import attention

    p = AttentionProblem(2, 8, 2, 333, 333, 64, "bf16", True)
    ins = make_inputs(p, seed=11)
    o, lse = attention(ins.q, ins.k, ins.v, causal=True)
    from argus_cutlass.kernels.attention.reference import attention_reference

    ro, rl = attention_reference(p, ins.q, ins.k, ins.v)
    assert o.shape == ins.q.shape and o.dtype == torch.bfloat16 and lse.shape == (2, 8, 333)
    err = float((o.float() - ro).norm() / ro.norm())
    assert err < 2e-2, err
    assert math.isfinite(float(lse.max()))
