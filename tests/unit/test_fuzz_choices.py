"""The GPU fuzz module's draws and the API's kernel choice for each of them, on the CPU.

``tests/gpu/test_fuzz_gpu.py`` runs seeded random problems through the API's own kernel choice on a Hopper GPU.
Here, without a GPU: the draws are reproducible from the seed (``ARGUS_FUZZ_SEED``) and cover every GEMM flavour,
every drawn problem is one its family's rules accept (cuBLAS runs every GEMM drawn, so none may be refused), and
the API chooses, verifies and renders a kernel for every one of them (the verifier's fast tiers; the device run
adds z3), within the module's kernel budget (its fixture compiles them all in one batch).
"""

from __future__ import annotations

import functools
import importlib.util
import sys
from pathlib import Path

import pytest

from argus_cutlass.errors import ProblemError


def _gpu_module():
    name = "gpu_test_fuzz_cases"
    if name not in sys.modules:  # registered before it runs: its dataclasses look their module up
        path = Path(__file__).resolve().parents[1] / "gpu" / "test_fuzz_gpu.py"
        spec = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    return sys.modules[name]


FUZZ = _gpu_module()
CASES = FUZZ.draw_cases(FUZZ.DEFAULT_SEED)


@functools.cache
def _generated(config, build_problem):
    from argus_cutlass.generate import generate

    return generate(config, build_problem, smt=False)


@functools.cache
def _choice(case_id: str):
    """``FUZZ.choose(problem, smt=False)``, each distinct (configuration, build problem) generated once (the
    reusing draws share their kernels)."""
    case = next(c for c in CASES if c.id == case_id)
    choice = FUZZ.choose(case.problem, generate=False)
    kernel = _generated(choice.config, choice.build_problem)
    return FUZZ.Choice(choice.config, choice.build_problem, choice.source, choice.detail, kernel.name, kernel.source)


def test_draws_are_reproducible_from_the_seed():
    again = FUZZ.draw_cases(FUZZ.DEFAULT_SEED)
    assert [c.id for c in again] == [c.id for c in CASES]
    assert [c.input_seed for c in again] == [c.input_seed for c in CASES]
    other = FUZZ.draw_cases(FUZZ.DEFAULT_SEED + 1)
    assert [c.id for c in other] != [c.id for c in CASES]
    for cases, seed in ((CASES, FUZZ.DEFAULT_SEED), (other, FUZZ.DEFAULT_SEED + 1)):
        assert all(c.id.startswith(f"s{seed}-") for c in cases)
    assert len({c.id for c in CASES}) == len(CASES), "two cases share a test id"
    counts = {f: sum(c.family == f for c in CASES) for f in ("gemm", "moe", "attention")}
    assert counts == {"gemm": FUZZ.GEMM_CASES, "moe": FUZZ.MOE_CASES, "attention": FUZZ.ATTENTION_CASES}


def test_draws_cover_the_axes():
    """Every GEMM flavour, odd and aligned sizes, shipped buckets; MoE routings and both dtypes; attention head
    dims, masks, varlen and both dtypes."""
    gemm = [c.problem for c in CASES if c.family == "gemm"]
    assert {(p.dtype, p.out_dtype, p.layout) for p in gemm} == set(FUZZ.GEMM_FLAVORS)
    assert any(p.staging() for p in gemm) and any(not p.staging() for p in gemm)
    assert any(p.m == 1 or p.m % 2 for p in gemm) and max(p.m for p in gemm) >= 1000
    assert any("shipped" in c.note for c in CASES if c.family == "gemm")
    assert any((c.alpha, c.beta) != (1.0, 0.0) for c in CASES if c.family == "gemm")
    moe = [c for c in CASES if c.family == "moe"]
    assert {c.routing for c in moe} == set(FUZZ.MOE_ROUTINGS)
    assert {c.problem.dtype for c in moe} == {"bf16", "fp16"}
    attn = [c.problem for c in CASES if c.family == "attention"]
    assert {p.causal for p in attn} == {False, True} and {p.varlen for p in attn} == {False, True}
    assert {p.dtype for p in attn} == {"bf16", "fp16"} and len({p.head_dim for p in attn}) >= 3


def test_seed_from_the_environment(monkeypatch):
    monkeypatch.delenv(FUZZ.SEED_ENV, raising=False)
    assert FUZZ.fuzz_seed() == FUZZ.DEFAULT_SEED
    monkeypatch.setenv(FUZZ.SEED_ENV, "17")
    assert FUZZ.fuzz_seed() == 17
    for bad in ("-1", "x7", str(2**64)):
        monkeypatch.setenv(FUZZ.SEED_ENV, bad)
        with pytest.raises(ProblemError) as info:
            FUZZ.fuzz_seed()
        assert info.value.rule == "cli.seed" and FUZZ.SEED_ENV in str(info.value)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_every_drawn_problem_gets_a_verified_kernel(case):
    """No drawn problem breaks its family's rules (a GEMM: cuBLAS runs it), and the API's choice for it builds,
    verifies and renders."""
    assert FUZZ.documented_refusal(case.problem) is None, f"{case.id}: drawn problem refused by its own rules"
    choice = _choice(case.id)
    assert choice.source in ("store", "shipped", "costmodel", "heuristic"), choice.source
    assert choice.kernel and choice.kernel in choice.source_text, case.id


def test_kernel_budget():
    """The default seed's draws need at most KERNEL_BUDGET kernels (the GPU module builds them in one batch), and
    every reusing draw really shares its kernel with the draw it names."""
    names = {c.id: _choice(c.id).kernel for c in CASES}
    assert len(set(names.values())) <= FUZZ.KERNEL_BUDGET, len(set(names.values()))
    for c in CASES:
        if "same kernel" in c.note:
            tag = c.note[:3]
            old = next(o for o in CASES if o.family == c.family and f"{o.family[0]}{o.index:02d}" == tag)
            assert names[c.id] == names[old.id], (c.id, old.id)


def test_choice_is_what_the_api_builds():
    """:func:`choose` renders the program ``api.precompile`` builds: a GEMM's configuration and staged operands
    are ``api.gemm_kernel_key``'s (the key ``api.gemm_kernel`` loads the kernel under), and the kernel choose
    names is the one generated from them."""
    from argus_cutlass import api

    for c in CASES:
        if c.family != "gemm":
            continue
        choice = _choice(c.id)
        cfg, _, staged = api.gemm_kernel_key(c.problem)
        assert cfg == choice.config and staged == tuple(s.name for s in c.problem.staging()), c.id
    first = CASES[0]
    assert FUZZ.choose(first.problem, smt=False).kernel == _choice(first.id).kernel
