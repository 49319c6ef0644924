"""The planner and the default policy on simulated rewards (no GPU, no network)."""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics

import pytest

from argus_cutlass.agent.costmodel import predict_ms
from argus_cutlass.agent.kb import load_knowledge
from argus_cutlass.agent.planner import (
    FAIL_REWARD,
    Action,
    ActionValues,
    DefaultPolicy,
    Measurement,
    Problem,
    Proposal,
    RandomPolicy,
    run_episode,
)
from argus_cutlass.kernels.gemm.config import GemmConfig
from argus_cutlass.kernels.gemm.space import EnumFragment, GemmSpace, IntRangeFragment, feasible


def space() -> GemmSpace:
    """A mid-size space (1728 points) so that episodes stay fast."""
    return GemmSpace(fragments={
        "tile_m": EnumFragment((64, 128, 256), 128),
        "tile_n": EnumFragment((64, 128, 192, 256), 256),
        "tile_k": EnumFragment((64,), 64),
        "cluster": EnumFragment(((1, 1), (2, 1), (1, 2)), (2, 1)),
        "stages": IntRangeFragment(3, 8, 4),
        "schedule": EnumFragment(("cooperative", "pingpong"), "cooperative"),
        "raster": EnumFragment(("along_n", "along_m"), "along_n"),
        "swizzle": EnumFragment((1, 4), 1),
        "epi_n": EnumFragment((32,), 32),
    })


SPACE = space()


def synthetic(problem: Problem, calls: list | None = None):
    """Hidden run time: the roofline model distorted by a fixed per-config factor in
    [0.7, 1.3] and a preference the model does not know (along_m walks 10% faster)."""

    def evaluate(cfgs: list[GemmConfig]) -> list[Measurement]:
        if calls is not None:
            calls.append(list(cfgs))
        out = []
        for c in cfgs:
            h = int(hashlib.sha256(c.model_dump_json().encode()).hexdigest()[:8], 16) / 2**32
            ms = predict_ms(c, problem.m, problem.n, problem.k) * (0.7 + 0.6 * h)
            ms *= 0.9 if c.raster == "along_m" else 1.0
            out.append(Measurement("ok", ms))
        return out

    return evaluate


PROBLEMS = [Problem(4096, 4096, 4096), Problem(64, 14336, 4096), Problem(512, 8192, 8192)]


def test_default_policy_beats_random_over_seeds():
    budget = 10
    wins, ratios = 0, []
    for p in PROBLEMS:
        for seed in range(4):
            d = run_episode(p, SPACE, DefaultPolicy(seed=seed), synthetic(p), budget, batch=2).best_ms
            r = run_episode(p, SPACE, RandomPolicy(seed=seed), synthetic(p), budget, batch=2).best_ms
            wins += d <= r
            ratios.append(r / d)
    assert wins >= 9, f"default won only {wins}/12"
    assert statistics.geometric_mean(ratios) > 1.05


def test_default_policy_is_deterministic_for_a_seed():
    p = PROBLEMS[0]
    runs = [[(s.action.technique, s.config) for s in
             run_episode(p, SPACE, DefaultPolicy(seed=7), synthetic(p), 8, batch=2).steps] for _ in range(2)]
    assert runs[0] == runs[1]
    other = [(s.action.technique, s.config) for s in
             run_episode(p, SPACE, DefaultPolicy(seed=8), synthetic(p), 8, batch=2).steps]
    assert len(other) == len(runs[0])


def test_action_values_learn_across_episodes(monkeypatch):
    """Only the raster order pays off: after a few episodes raster_order has the highest
    value, and a policy carrying the learned values finds the fast config sooner than a
    fresh one (same seeds). The cost model's hand-set constants are pinned: this tests the
    learning, not the shipped calibration (which moves the order proposals are ranked in)."""
    from argus_cutlass.agent import costmodel

    monkeypatch.setattr(costmodel, "calibrated", costmodel.CostParams)
    p = Problem(4096, 4096, 4096)
    own = space()  # the module's SPACE memoises its ranking per problem (made with the calibrated constants)

    def evaluate(cfgs):
        return [Measurement("ok", 1.0 if c.raster == "along_n" else 0.8) for c in cfgs]

    values = ActionValues()
    for seed in range(6):
        run_episode(p, own, DefaultPolicy(values=values, seed=seed), evaluate, 6, batch=1)
    assert max(values.stats, key=values.mean) == "raster_order"
    assert values.mean("raster_order") > 0.1
    learned, fresh = [], []
    for seed in range(10, 16):
        trained = ActionValues(dict(values.stats))
        for pol, out in ((DefaultPolicy(values=trained, seed=seed), learned), (DefaultPolicy(seed=seed), fresh)):
            res = run_episode(p, own, pol, evaluate, 12, batch=1)
            out.append(res.evaluations_to_reach(0.8) or 13)
    assert sum(learned) < sum(fresh), (learned, fresh)


def test_default_policy_finds_split_k_for_small_mn_long_k():
    """When the hidden times reward split-K (64 tiles, K = 16384), the policy reaches it."""
    frags = dict(SPACE.fragments)
    frags["decomposition"] = EnumFragment((("persistent", 1), ("streamk", 1), ("splitk", 2), ("splitk", 4)),
                                          ("persistent", 1))
    frags["stages"] = IntRangeFragment(4, 6, 4)
    sp = GemmSpace(fragments=frags)
    p = Problem(512, 2048, 16384)

    def evaluate(cfgs):
        return [Measurement("ok", 0.5 / c.splits if c.scheduler == "splitk" else 0.6) for c in cfgs]

    res = run_episode(p, sp, DefaultPolicy(seed=0), evaluate, 8, batch=2)
    assert res.best.scheduler == "splitk" and res.best.splits == 4
    assert any(s.action.technique in ("split_k", "cost_model_rank") and s.config.scheduler == "splitk"
               for s in res.steps)


def test_unavailable_techniques_never_proposed():
    unavailable = {t.id for t in load_knowledge().techniques if not t.available}
    for p in PROBLEMS:
        res = run_episode(p, SPACE, DefaultPolicy(seed=1), synthetic(p), 12, batch=3)
        assert not {s.action.technique for s in res.steps} & unavailable


class _BadThenGood:
    """Proposes an infeasible config first, then a feasible one."""

    name = "scripted"

    def __init__(self) -> None:
        self.seen = []
        self.proposed_bad = False

    def propose(self, state, count):
        if not self.proposed_bad:
            self.proposed_bad = True
            return [Proposal(Action("pipeline_depth", (("stages", 8),)), state.incumbent.replace(stages=8))]
        return [Proposal(Action("raster_order", (("raster", "along_m"),)), state.incumbent.replace(raster="along_m"))]

    def observe(self, step):
        self.seen.append(step)


def test_verifier_rejects_before_compiling_and_feeds_back():
    p = Problem(4096, 4096, 4096)
    calls: list = []
    pol = _BadThenGood()
    res = run_episode(p, GemmSpace(), pol, synthetic(p, calls), 2)
    bad = [s for s in res.steps if s.status == "verify_failed"]
    assert len(bad) == 1 and not bad[0].measured and bad[0].reward == FAIL_REWARD
    assert "smem.capacity" in bad[0].feedback
    assert all(c.stages != 8 for batch in calls for c in batch)  # never reached the evaluator
    assert pol.seen[1].status == "verify_failed"
    assert all(feasible(c)[0] for batch in calls for c in batch)


def test_failures_score_negative_with_feedback():
    p = Problem(512, 8192, 8192)

    def evaluate(cfgs):
        return [Measurement("compile_error", None, "[ptxas.C7510] serialized") if c.schedule == "pingpong"
                else Measurement("ok", 1.0) for c in cfgs]

    res = run_episode(p, SPACE, DefaultPolicy(seed=0), evaluate, 8, batch=2)
    failed = [s for s in res.steps if s.status == "compile_error"]
    assert res.best is not None and res.best.schedule == "cooperative"
    for s in failed:
        assert s.reward == FAIL_REWARD and "C7510" in s.feedback


def test_tune_writes_best_cu_and_incremental_log(tmp_path):
    from argus_cutlass.agent.tune import log_name, tune

    p = Problem(1024, 1024, 1024)
    res = tune(p, DefaultPolicy(seed=0), synthetic(p), tmp_path, budget=4, batch=2)
    lines = [json.loads(x) for x in (tmp_path / log_name(p)).read_text().splitlines()]
    assert lines[0]["event"] == "start" and lines[-1]["event"] == "end"
    cands = [x for x in lines if x["event"] == "candidate"]
    assert sum(x["measured"] for x in cands) == 4
    assert all({"technique", "config", "status", "ms", "reward", "feedback"} <= set(x) for x in cands)
    best = min((x for x in cands if x["ms"]), key=lambda x: x["ms"])
    cu = tmp_path / f"{best['kernel']}.cu"
    assert lines[-1]["cu"] == str(cu) and best["kernel"] in cu.read_text()
    assert res.best_ms == min(x["ms"] for x in cands if x["ms"])


def _args(**kw):
    base = dict(m=256, n=512, k=512, dtype="bf16", out_dtype=None, layout="tn", budget=4, policy="default",
                seed=0, base_url=None, model=None, api_key=None, workers=None, out="out")
    base.update(kw)
    return argparse.Namespace(**base)


def test_run_tune_without_gpu_exits_2(tmp_path, monkeypatch, capsys):
    import argus_cutlass.runtime.cuda as cuda
    from argus_cutlass.agent.tune import run_tune

    monkeypatch.setattr(cuda, "gpu_available", lambda: cuda.GpuAvailability(False, "no driver (test)"))
    assert run_tune(_args(out=str(tmp_path))) == 2
    err = capsys.readouterr().err
    assert "tuning needs measurements" in err and "no driver (test)" in err


def test_run_tune_validates_inputs_first(tmp_path):
    from argus_cutlass.agent.tune import run_tune
    from argus_cutlass.errors import ProblemError

    with pytest.raises(ProblemError) as e:
        run_tune(_args(n=0, out=str(tmp_path)))  # N=255 breaks only TMA's rules: tuned through aligned staging
    assert e.value.rule == "problem.size" and "N=0" in str(e.value)
    with pytest.raises(ProblemError, match="tune.budget"):
        run_tune(_args(budget=0, out=str(tmp_path)))
    with pytest.raises(ProblemError, match="tune.policy"):
        run_tune(_args(policy="greedy", out=str(tmp_path)))


def test_problem_bucket():
    assert Problem(1, 4096, 4096).bucket() == "m1_n4096_k4096"
    assert Problem(8192, 28672, 8192).bucket() == "m8192_n32768_k8192"
    assert Problem(100, 10240, 8192).bucket() == "m128_n16384_k8192"


def test_cost_model_reads_the_program():
    """The cost model's inputs come from the kernel's program (tile from the MMA and the k loop,
    stages from the pipeline, cluster from the launch, walk and decomposition from the schedule);
    the planner's search-time shortcut over configurations gives the same inputs for every sampled
    point of the whole space whose MMA tile is well formed (rule gmma.m_tile: the cooperative
    schedule needs tile_m % 128 == 0, ping-pong tile_m % 64 == 0), and a program edit moves the
    prediction."""
    import random

    from argus_cutlass.agent.costmodel import shape_of, shape_of_config
    from argus_cutlass.errors import ArgusError
    from argus_cutlass.kernels.gemm.program import build_program

    space, rng, checked = GemmSpace(), random.Random(0), 0
    for _ in range(1500):
        cfg = space.sample(rng)
        if cfg.tile_m % (128 if cfg.schedule == "cooperative" else 64):
            continue
        try:
            program = build_program(cfg)
        except ArgusError:
            continue  # no program (smem.atom): nothing to predict
        assert shape_of(program) == shape_of_config(cfg), cfg
        checked += 1
    assert checked > 500
    program = build_program(GemmConfig())
    deeper = program.replace_node("pipeline", "mainloop", stages=2)
    assert shape_of(deeper).stages == 2
    assert predict_ms(deeper, 4096, 4096, 256) != predict_ms(program, 4096, 4096, 256)


def test_seeding_the_untuned_choice_keeps_the_policys_first_round():
    """run_episode(seed_untuned=True) measures the cost model's untuned choice right after the baseline; the
    default policy's first round (the global ranking's cost_model_rank proposals) still follows (review, session
    30: counting every measured step had switched that round off)."""
    from argus_cutlass.agent.planner import untuned_choice

    full = GemmSpace()
    p = Problem(512, 10240, 8192)
    (choice,) = untuned_choice(p, full)
    off = run_episode(p, full, DefaultPolicy(seed=0), synthetic(p), 4, batch=2)
    on = run_episode(p, full, DefaultPolicy(seed=0), synthetic(p), 5, batch=2, seed_untuned=True)
    assert [s.action.technique for s in off.steps] == ["baseline", "cost_model_rank", "cost_model_rank", *(
        s.action.technique for s in off.steps[3:])]
    techniques = [s.action.technique for s in on.steps]
    assert techniques[:4] == ["baseline", "untuned", "cost_model_rank", "cost_model_rank"], techniques
    assert on.steps[1].config == choice and on.steps[1].measured
