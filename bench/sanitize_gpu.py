"""The three families' edge problems under NVIDIA compute-sanitizer (memcheck / synccheck / racecheck).

The numerics tests (``tests/gpu``) see a wrong value; they do not see an out-of-bounds read that
happens to return harmless data, a write into padding, a barrier a warp skipped or a shared-memory
race the schedule happened to win. This script runs the public ops (``argus_cutlass.torch`` /
``argus_cutlass.api``) on the problems where those bugs live -- residues in every mode, the staged
(non-TMA) operand and epilogue paths, decode swap-AB, odd and packed sequence lengths, GQA, MoE
routings with empty experts, one expert taking every token, -1 padding, group sizes that are not
tile multiples, T = 1 -- each checked against an fp32 reference with the output poisoned (NaN) first.

Two phases, so nvcc never runs under the sanitizer (the kernels are loaded from the disk cache,
``ARGUS_CACHE_DIR``):

    python3 bench/sanitize_gpu.py --build                 # build + numerics, no sanitizer
    compute-sanitizer --tool memcheck --error-exitcode 9 python3 bench/sanitize_gpu.py [--only gemm,moe]

Each case prints one line ``case <name>: max error E (bound B) PASS|FAIL``; the exit status is 1
when a numerics check failed (the sanitizer's own ``--error-exitcode`` reports its findings).
Device step: ``bash bench/device_pending.sh $OUT sanitize``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

import torch

import argus_cutlass.torch as at
from argus_cutlass import api
from argus_cutlass.kernels.attention.library import problem_from_tensors
from argus_cutlass.kernels.attention.problem import AttentionProblem
from argus_cutlass.kernels.attention.reference import attention_reference
from argus_cutlass.kernels.moe.check import fp32_layer, make_inputs
from argus_cutlass.kernels.moe.problem import MoEProblem

DT = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
#: with --build, the cases append their problems here (no kernel runs); then one parallel precompile
COLLECT: list[Any] | None = None


def _operand(rows: int, cols: int, major: str, dtype: Any, pad: int = 0) -> Any:
    """A (rows, cols) view, row-major (``major == "row"``) or column-major, leading dimension + ``pad``."""
    if major == "row":
        return torch.randn(rows, cols + pad, device="cuda", dtype=dtype)[:, :cols]
    return torch.randn(cols, rows + pad, device="cuda", dtype=dtype)[:, :rows].t()


#: (name, M, N, K, layout, dtype, out dtype, lda/ldb pad): residues in every mode, decode, the staged paths
GEMM_CASES = (
    ("tn_residues", 1000, 5000, 4104, "tn", "bf16", "bf16", 0),
    ("tn_decode_m1", 1, 4096, 4096, "tn", "bf16", "bf16", 0),
    ("tn_m7_k72", 7, 1000, 72, "tn", "fp16", "fp32", 0),
    ("tn_m100", 100, 3072, 2048, "tn", "bf16", "bf16", 0),
    ("nt_m300_staged_a", 300, 512, 264, "nt", "bf16", "bf16", 0),
    ("tt_n33_staged_d", 520, 33, 1000, "tt", "bf16", "bf16", 0),
    ("nn_m17", 17, 4096, 1024, "nn", "fp16", "fp16", 8),
    ("tn_m3000", 3000, 768, 2048, "tn", "bf16", "fp32", 0),
)


def gemm_cases() -> list[tuple[str, Callable[[], tuple[float, float]]]]:
    out = []
    for name, m, n, k, layout, dt, odt, pad in GEMM_CASES:
        def run(m=m, n=n, k=k, layout=layout, dt=dt, odt=odt, pad=pad) -> tuple[float, float]:
            a = _operand(m, k, "row" if layout[0] == "t" else "col", DT[dt], pad)
            b = _operand(k, n, "row" if layout[1] == "t" else "col", DT[dt], pad)
            y = torch.full((m, n), float("nan"), device="cuda", dtype=DT[odt])
            if COLLECT is not None:
                COLLECT.append(at.gemm_problem(a, b, out=y))
                return 0.0, 0.0
            at.gemm(a, b, out=y)
            ref = a.float() @ b.float()
            same = (a @ b).to(DT[odt]).float()
            err = (y.float() - ref).abs().max().item()
            return err, 2 * (same - ref).abs().max().item() + 1e-2
        out.append((f"gemm_{name}", run))
    return out


#: (name, batch, seqlen_q, seqlen_k, heads, kv heads, head dim, causal) or varlen (batch 0: packed lengths)
ATTN_CASES = (
    ("s1", 1, 1, 1, 4, 4, 64, False),
    ("s77_causal_gqa", 2, 77, 77, 8, 2, 128, True),
    ("s1000_d96", 1, 1000, 1000, 2, 2, 96, False),
    ("sq300_sk500_causal", 2, 300, 500, 4, 1, 128, True),
    ("d256_s129", 1, 129, 129, 2, 2, 256, True),
)
VARLEN_CASES = (("varlen_1_100_257", (1, 100, 257), 4, 2, 64, True),)


def attention_cases() -> list[tuple[str, Callable[[], tuple[float, float]]]]:
    out = []
    for name, b, sq, sk, h, hk, d, causal in ATTN_CASES:
        def run(b=b, sq=sq, sk=sk, h=h, hk=hk, d=d, causal=causal) -> tuple[float, float]:
            q = torch.randn(b, sq, h, d, device="cuda", dtype=torch.bfloat16)
            k = torch.randn(b, sk, hk, d, device="cuda", dtype=torch.bfloat16)
            v = torch.randn(b, sk, hk, d, device="cuda", dtype=torch.bfloat16)
            if COLLECT is not None:
                COLLECT.append(problem_from_tensors(q, k, v, causal=causal))
                return 0.0, 0.0
            o, _ = at.attention(q, k, v, causal=causal)
            o_ref, _ = attention_reference(problem_from_tensors(q, k, v, causal=causal), q, k, v)
            return (o.float() - o_ref).abs().max().item(), 2e-2
        out.append((f"attention_{name}", run))
    for name, lens, h, hk, d, causal in VARLEN_CASES:
        def run(lens=lens, h=h, hk=hk, d=d, causal=causal) -> tuple[float, float]:
            total = sum(lens)
            cu = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], device="cuda", dtype=torch.int32)
            q = torch.randn(total, h, d, device="cuda", dtype=torch.bfloat16)
            k = torch.randn(total, hk, d, device="cuda", dtype=torch.bfloat16)
            v = torch.randn(total, hk, d, device="cuda", dtype=torch.bfloat16)
            if COLLECT is not None:
                COLLECT.append(AttentionProblem.varlen_problem(lens, lens, h, hk, d, causal=causal))
                return 0.0, 0.0
            o, _ = at.attention(q, k, v, causal=causal, cu_seqlens_q=cu, cu_seqlens_k=cu)
            err = 0.0
            for i, n in enumerate(lens):  # each sequence against the dense reference of its own rows
                s = slice(int(cu[i]), int(cu[i + 1]))
                qi, ki, vi = q[s][None], k[s][None], v[s][None]
                ref, _ = attention_reference(problem_from_tensors(qi, ki, vi, causal=causal), qi, ki, vi)
                err = max(err, (o[s].float() - ref[0]).abs().max().item())
            return err, 2e-2
        out.append((f"attention_{name}", run))
    return out


#: (name, T, E, k, H, I, dtype, routing, sizes): the routings of issue 11's bug classes
MOE_CASES = (
    ("t1", 1, 8, 2, 1024, 512, "bf16", "uniform", None),
    ("t16_zero_experts", 16, 16, 4, 1024, 512, "bf16", "zero_experts", None),
    ("t130_all_to_one", 130, 8, 2, 1024, 512, "fp16", "all_to_one", None),
    ("t100_skewed", 100, 64, 6, 2048, 1408, "bf16", "skewed", None),
    ("sizes_128_130_65", 197, 4, 2, 1024, 512, "bf16", "sizes", [128, 130, 65, 71]),
    ("t3000_uniform", 3000, 8, 2, 1024, 512, "bf16", "uniform", None),
)


def moe_cases() -> list[tuple[str, Callable[[], tuple[float, float]]]]:
    out = []
    for name, t, e, k, h, i, dt, routing, sizes in MOE_CASES:
        def run(t=t, e=e, k=k, h=h, i=i, dt=dt, routing=routing, sizes=sizes) -> tuple[float, float]:
            if COLLECT is not None:
                COLLECT.append(MoEProblem(t, e, k, h, i, dt))
                return 0.0, 0.0
            x, ids, w, w13, w2 = make_inputs(MoEProblem(t, e, k, h, i, dt), routing=routing, seed=7, sizes=sizes)
            y = at.moe(x, ids, w, w13, w2)
            ref = fp32_layer(x, ids, w, w13, w2)
            return (y.float() - ref).abs().max().item(), 2e-2 * ref.abs().max().item() + 1e-2
        out.append((f"moe_{name}", run))

    def padded() -> tuple[float, float]:  # -1 slots (padding) are skipped by rule, never read
        if COLLECT is not None:
            COLLECT.append(MoEProblem(64, 8, 2, 1024, 512, "bf16"))
            return 0.0, 0.0
        x, ids, w, w13, w2 = make_inputs(MoEProblem(64, 8, 2, 1024, 512, "bf16"), seed=8)
        ids[::3, 1] = -1
        y = api.moe(x, ids, w, w13, w2, padding="skip")
        keep = (ids >= 0)
        ref = fp32_layer(x, ids.clamp(min=0), w * keep, w13, w2)
        return (y.float() - ref).abs().max().item(), 2e-2 * ref.abs().max().item() + 1e-2
    out.append(("moe_minus_one_padding", padded))
    return out


FAMILIES = {"gemm": gemm_cases, "attention": attention_cases, "moe": moe_cases}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", action="store_true", help="only build and check (run without the sanitizer first)")
    ap.add_argument("--only", default="gemm,attention,moe", help="comma-separated families")
    ap.add_argument("--cases", default="", help="comma-separated substrings: only the cases whose name has one")
    args = ap.parse_args(argv)
    torch.manual_seed(0)
    failed = 0
    global COLLECT
    if args.build:  # every kernel in one parallel nvcc batch, then the numerics below (the cache is warm)
        COLLECT = []
        for fam in args.only.split(","):
            for name, run in FAMILIES[fam]():
                if not args.cases or any(c in name for c in args.cases.split(",")):
                    run()
        problems, COLLECT = COLLECT, None
        print(f"built {at.precompile(problems)} kernel(s) for {len(problems)} problem(s)", flush=True)
    for fam in args.only.split(","):
        for name, run in FAMILIES[fam]():
            if args.cases and not any(c in name for c in args.cases.split(",")):
                continue
            try:
                err, bound = run()
                torch.cuda.synchronize()
            except Exception as exc:  # noqa: BLE001 - report the case and go on to the next
                print(f"case {name}: ERROR {type(exc).__name__}: {exc}", flush=True)
                failed += 1
                continue
            ok = err == err and err <= bound
            failed += not ok
            print(f"case {name}: max error {err:.4g} (bound {bound:.4g}) {'PASS' if ok else 'FAIL'}", flush=True)
    print(f"{'FAILED' if failed else 'OK'}: {failed} case(s) failed", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
