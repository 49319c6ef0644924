"""The tuning loop: state, actions, rewards, and the offline policies.

* **State**: the problem, the search space, the incumbent configuration and its time, the
  history of steps (action, config, status, time, reward, feedback).
* **Action**: a knowledge-base technique with parameters (GemmConfig knob values).
* **Reward**: measured speed-up over the incumbent, ``incumbent_ms / ms - 1``; a failure
  (verifier violation, compile error, wrong numerics, launch error) scores
  :data:`FAIL_REWARD` and carries its feedback.

Every proposal goes through :func:`argus_cutlass.kernels.gemm.space.feasible` (the verifier) in
:func:`run_episode` before it reaches the evaluator; a violation is fed back to the policy
and never compiled. The evaluator receives the feasible proposals of a round as one batch
(the GPU evaluator compiles them in parallel through ``compile_many``).

Policies: :class:`DefaultPolicy` (offline, seeded: Thompson sampling over techniques,
candidates ranked by :mod:`.costmodel`), :class:`RandomPolicy` (baseline) and the LLM
policy in :mod:`.llm`.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from argus_cutlass.agent.costmodel import predict_ms
from argus_cutlass.agent.kb import KnowledgeBase, Technique, load_knowledge, problem_env

from argus_cutlass.kernels.gemm.config import GemmConfig
from argus_cutlass.kernels.gemm.space import GemmSpace, feasible
from argus_cutlass.kernels.gemm.problem import GemmProblem

#: reward of a failed candidate (verifier, compile, numerics, launch)
FAIL_REWARD = -1.0
#: statuses of a step
STATUSES = ("ok", "verify_failed", "compile_error", "check_failed", "launch_error", "invalid")


#: proposal ids that are not knowledge-base techniques (no action value is learnt for them)
NON_TECHNIQUE_ACTIONS = frozenset({"baseline", "untuned", "cost_model_rank", "random"})   # SEED_ACTIONS among them


@dataclass(frozen=True)
class Problem(GemmProblem):
    """The problem being tuned: a :class:`~argus_cutlass.kernels.gemm.problem.GemmProblem`
    (``D[M,N] = A[M,K] @ B[K,N]``, sizes in elements, default leading dimensions) plus the
    planner's views of it: the experience-store bucket and the knowledge-base environment."""

    def bucket(self) -> str:
        """Shape bucket of the experience store: each size rounded up to a power of two."""
        def p2(x: int) -> int:
            return 1 << max(0, math.ceil(math.log2(max(1, x))))
        return f"m{p2(self.m)}_n{p2(self.n)}_k{p2(self.k)}"

    def env(self, cfg: GemmConfig) -> dict[str, Any]:
        return problem_env(self.m, self.n, self.k, cfg)


@dataclass(frozen=True)
class Action:
    """A technique id with its knob values (``params``: GemmConfig field -> value)."""

    technique: str
    params: tuple[tuple[str, Any], ...] = ()
    rationale: str = ""


@dataclass(frozen=True)
class Proposal:
    action: Action
    config: GemmConfig


@dataclass(frozen=True)
class Measurement:
    """What the evaluator found for one config: ``status`` (see :data:`STATUSES`), ``ms``
    (median milliseconds, None unless ok), ``feedback`` (compile log lines, check summary)."""

    status: str
    ms: float | None = None
    feedback: str = ""


@dataclass(frozen=True)
class Step:
    """One proposal and its outcome (a row of the tuning log)."""

    index: int
    action: Action
    config: GemmConfig
    status: str
    ms: float | None
    reward: float
    feedback: str
    incumbent_ms: float | None
    measured: bool

    def as_dict(self, problem: GemmProblem | None = None) -> dict[str, Any]:
        """A JSON-ready row; ``kernel`` is the name of the config's program for ``problem`` (None
        when the configuration has no program)."""
        from argus_cutlass.errors import ArgusError
        from argus_cutlass.generate import kernel_name

        try:
            name: str | None = kernel_name(self.config, problem)
        except ArgusError:
            name = None
        return {
            "step": self.index, "technique": self.action.technique,
            "params": {k: list(v) if isinstance(v, tuple) else v for k, v in self.action.params},
            "rationale": self.action.rationale, "kernel": name,
            "config": self.config.model_dump(), "status": self.status, "ms": self.ms,
            "reward": self.reward, "feedback": self.feedback, "incumbent_ms": self.incumbent_ms,
            "measured": self.measured,
        }


Evaluator = Callable[[list[GemmConfig]], list[Measurement]]


@dataclass
class State:
    problem: Problem
    space: GemmSpace
    incumbent: GemmConfig
    incumbent_ms: float | None = None
    history: list[Step] = field(default_factory=list)

    @property
    def tried(self) -> set[GemmConfig]:
        return {s.config for s in self.history}

    @property
    def measured(self) -> int:
        return sum(s.measured for s in self.history)


class Policy(Protocol):
    name: str

    def propose(self, state: State, count: int) -> list[Proposal]: ...

    def observe(self, step: Step) -> None: ...


# ---- learned action values ----------------------------------------------------------------


@dataclass
class ActionValues:
    """Gaussian posterior of each technique's reward (Thompson sampling).

    Prior: mean ``prior_mean`` worth ``prior_n`` observations, spread ``sigma``; the posterior
    mean is ``(prior_n*prior_mean + sum) / (prior_n + n)``, its std ``sigma / sqrt(prior_n + n)``.
    """

    stats: dict[str, tuple[int, float]] = field(default_factory=dict)  # id -> (n, sum)
    prior_mean: float = 0.0
    prior_n: float = 1.0
    sigma: float = 0.3

    def update(self, technique: str, reward: float) -> None:
        n, s = self.stats.get(technique, (0, 0.0))
        self.stats[technique] = (n + 1, s + reward)

    def mean(self, technique: str) -> float:
        n, s = self.stats.get(technique, (0, 0.0))
        return (self.prior_n * self.prior_mean + s) / (self.prior_n + n)

    def sample(self, technique: str, rng: random.Random) -> float:
        n, _ = self.stats.get(technique, (0, 0.0))
        return self.mean(technique) + rng.gauss(0.0, self.sigma / math.sqrt(self.prior_n + n))

    def to_dict(self) -> dict[str, dict[str, float]]:
        return {t: {"n": n, "sum": s, "mean": self.mean(t)} for t, (n, s) in sorted(self.stats.items())}

    @classmethod
    def from_dict(cls, d: dict[str, dict[str, float]]) -> ActionValues:
        return cls({t: (int(v["n"]), float(v["sum"])) for t, v in d.items()})


# ---- policies -----------------------------------------------------------------------------


def _params(old: GemmConfig, new: GemmConfig, knobs: Sequence[str]) -> tuple[tuple[str, Any], ...]:
    a, b = old.model_dump(), new.model_dump()
    return tuple((k, b[k]) for k in knobs if a[k] != b[k]) or tuple((k, b[k]) for k in b if a[k] != b[k])


def _rank(configs: Sequence[GemmConfig], problem: Problem) -> list[GemmConfig]:
    """``configs`` by predicted time, ties kept in the given (space) order."""
    return [c for _, _, c in sorted(
        (predict_ms(c, problem.m, problem.n, problem.k), i, c) for i, c in enumerate(configs))]


def ranked(space: GemmSpace, problem: Problem) -> list[GemmConfig]:
    """Every point of ``space`` by predicted time (memoised in ``space.memo`` per problem)."""
    key = ("ranked", problem)
    if key not in space.memo:
        space.memo[key] = _rank(space.all, problem)
    return space.memo[key]


def ranked_feasible(space: GemmSpace, problem: Problem, exclude: set[GemmConfig],
                    candidates: Sequence[GemmConfig] | None = None, limit: int = 1) -> list[GemmConfig]:
    """Up to ``limit`` feasible configs, best predicted first: sort by the cost model, then
    run the verifier down the list (memoised) so only the needed ones are verified. Configurations that
    differ only in ``acc_sets`` (the same predicted time) count once: the first of them is taken."""
    order = ranked(space, problem) if candidates is None else _rank(candidates, problem)
    out: list[GemmConfig] = []
    picked = set()   # the cost model does not model acc_sets: a twin of a picked config differing only in it is skipped
    for c in order:
        twin = c.replace(acc_sets=1)
        if c not in exclude and twin not in picked and feasible(c)[0]:
            out.append(c)
            picked.add(twin)
            if len(out) >= limit:
                break
    return out


class DefaultPolicy:
    """Offline policy, deterministic under ``seed``.

    First round: the cost model's best feasible configs over the whole space. Later rounds:
    per slot, Thompson-sample a value for each applicable technique (learned across
    episodes in :attr:`values`), take the best, and propose its move from the incumbent with
    the lowest predicted time (moves = space points differing only in its knobs, verified).
    When no technique has a move left it falls back to the global cost-model order.
    """

    name = "default"

    def __init__(self, kb: KnowledgeBase | None = None, values: ActionValues | None = None,
                 seed: int = 0, first_round: int = 2) -> None:
        self.kb = kb or load_knowledge()
        self.values = values if values is not None else ActionValues()
        self.rng = random.Random(seed)
        self.first_round = first_round
        self._moves: dict[tuple[GemmConfig, str], list[GemmConfig]] = {}

    def _moves_of(self, state: State, tech: Technique) -> list[GemmConfig]:
        key = (state.incumbent, tech.id)
        if key not in self._moves:
            p = state.problem
            self._moves[key] = _rank(state.space.moves(state.incumbent, tech.knobs), p)
        return self._moves[key]

    def propose(self, state: State, count: int) -> list[Proposal]:
        out: list[Proposal] = []
        taken = set(state.tried)
        if not any(s.measured and s.action.technique not in SEED_ACTIONS for s in state.history):
            # only the episode's seeds so far (the baseline, the untuned choice): seed with the global ranking
            for c in ranked_feasible(state.space, state.problem, taken, limit=min(count, self.first_round)):
                out.append(Proposal(Action("cost_model_rank", _params(state.incumbent, c, ()),
                                           "best predicted time over the feasible space"), c))
                taken.add(c)
        env = state.problem.env(state.incumbent)
        while len(out) < count:
            scored = []
            for tech in self.kb.applicable(env):
                nxt = next((c for c in self._moves_of(state, tech) if c not in taken and feasible(c)[0]), None)
                if nxt is not None:
                    scored.append((self.values.sample(tech.id, self.rng), tech.id, tech, nxt))
            if not scored:
                rest = ranked_feasible(state.space, state.problem, taken, limit=1)
                if not rest:
                    break
                out.append(Proposal(Action("cost_model_rank", _params(state.incumbent, rest[0], ()),
                                           "no technique has an untried move"), rest[0]))
                taken.add(rest[0])
                continue
            _, _, tech, cfg = max(scored, key=lambda x: (x[0], x[1]))
            out.append(Proposal(Action(tech.id, _params(state.incumbent, cfg, tech.knobs),
                                       f"value {self.values.mean(tech.id):+.3f}; lowest predicted time"), cfg))
            taken.add(cfg)
        return out

    def observe(self, step: Step) -> None:
        if step.action.technique not in NON_TECHNIQUE_ACTIONS:
            self.values.update(step.action.technique, step.reward)


class RandomPolicy:
    """Uniform random feasible configs of the space (the baseline of the evaluation)."""

    name = "random"

    def __init__(self, seed: int = 0) -> None:
        self.rng = random.Random(seed)

    def propose(self, state: State, count: int) -> list[Proposal]:
        taken = set(state.tried)
        pool = [c for c in state.space.all if c not in taken]
        self.rng.shuffle(pool)
        out = []
        for c in pool:
            if len(out) >= count:
                break
            if feasible(c)[0]:
                out.append(Proposal(Action("random", ()), c))
        return out

    def observe(self, step: Step) -> None:
        return None


# ---- the episode --------------------------------------------------------------------------


@dataclass
class EpisodeResult:
    best: GemmConfig | None
    best_ms: float | None
    steps: list[Step]

    @property
    def measured(self) -> list[Step]:
        return [s for s in self.steps if s.measured]

    def evaluations_to_reach(self, target_ms: float) -> int | None:
        """Measured candidates needed until one ran in ``<= target_ms`` (None: never)."""
        for i, s in enumerate(self.measured, 1):
            if s.status == "ok" and s.ms is not None and s.ms <= target_ms:
                return i
        return None


def untuned_choice(problem: Problem, space: GemmSpace) -> list[GemmConfig]:
    """The configuration ``argus-cutlass gemm`` runs for ``problem`` without a tuned entry (the calibrated cost
    model's first choice of the declared sub-space, :func:`~argus_cutlass.agent.costmodel.costmodel_choice`,
    ranked with its measured residuals), as a list of one when it is a feasible point of ``space``, else empty.
    ``tune --shapes`` / ``--model`` (:func:`~argus_cutlass.agent.tune_many.plan_candidates`) measures it right
    after the heuristic: the analytic order of the whole space lacks those
    residuals (session 29: the cluster-K kernel that wins 8x8x4096 ranks ~1000th there). A problem on the
    aligned-staging path gets the same rule (session 44: its GEMM is the direct TMA kernel over the staged
    copies; :func:`~argus_cutlass.agent.store.lookup_config`)."""
    from argus_cutlass.agent.costmodel import costmodel_choice

    problem.validate_any()  # a problem no path runs: ProblemError naming the rule
    cfg = costmodel_choice(problem.m, problem.n, problem.k, problem.dtype, problem.out_dtype, problem.layout)
    return [cfg] if cfg is not None and space.contains(cfg) and feasible(cfg)[0] else []


def start_config(problem: Problem, space: GemmSpace) -> GemmConfig:
    """The heuristic's config when it is a feasible point of ``space``, else the best
    predicted feasible one."""
    from argus_cutlass.kernels.gemm.heuristics import default_config

    cfg = default_config(problem.m, problem.n, problem.k, problem.dtype, problem.out_dtype, problem.layout)
    if space.contains(cfg) and feasible(cfg)[0]:
        return cfg
    best = ranked_feasible(space, problem, set(), limit=1)
    if not best:
        from argus_cutlass.errors import ConfigError

        raise ConfigError("space.empty", f"no feasible configuration in a space of {space.size}")
    return best[0]


#: the actions of an episode's seeds (:func:`episode_seeds`), measured before the policy proposes
SEED_ACTIONS = frozenset({"baseline", "untuned"})


def episode_seeds(problem: Problem, space: GemmSpace, untuned: bool = True) -> list[Proposal]:
    """The candidates an episode measures before its policy proposes: the heuristic's configuration
    (:func:`start_config`, action ``baseline``), then with ``untuned`` :func:`untuned_choice` (action ``untuned``:
    what runs without a tuned entry; measured too, with a budget >= 2 the best found is never slower than it).
    :func:`run_episode` and ``tune --shapes`` (:func:`~argus_cutlass.agent.tune_many.plan_candidates`) both start
    from these."""
    first = start_config(problem, space)
    seeds = [Proposal(Action("baseline", (), "heuristic / best predicted start"), first)]
    if untuned:
        seeds += [Proposal(Action("untuned", (), "the cost model's untuned choice (argus-cutlass gemm without a tuned "
                                  "entry)"), c) for c in untuned_choice(problem, space) if c != first]
    return seeds


def run_episode(problem: Problem, space: GemmSpace, policy: Policy, evaluate: Evaluator,
                budget: int, batch: int = 1, log: Callable[[Step], None] | None = None,
                max_rejections: int | None = None, seed_untuned: bool = False) -> EpisodeResult:
    """Tune ``problem`` over ``space`` with ``policy``: at most ``budget`` measured candidates.

    The first round measures the heuristic's configuration (``baseline``) and, with ``seed_untuned``,
    :func:`untuned_choice` (``untuned``: what ``argus-cutlass gemm`` runs without a tuned entry), then the
    policy proposes.

    Args:
        evaluate: measures a batch of verified configs (``Measurement`` per config, in order).
        batch: proposals per round (compiled together).
        seed_untuned: measure the untuned choice right after the baseline (`argus-cutlass tune gemm` does;
            off for comparing policies, `bench/agent_eval.py`).
        log: called with every :class:`Step` as soon as it is known (incremental log).
        max_rejections: proposals the verifier may reject before the episode stops
            (default ``4 * budget``), so a policy stuck on infeasible configs terminates.
    """
    max_rejections = 4 * budget if max_rejections is None else max_rejections
    seeds = episode_seeds(problem, space, seed_untuned)
    state = State(problem, space, seeds[0].config)   # the baseline seed
    steps = state.history
    rejected = 0

    def record(step: Step) -> None:
        steps.append(step)
        policy.observe(step)
        if log is not None:
            log(step)

    pending = seeds
    while state.measured < budget:
        if not pending:
            pending = policy.propose(state, min(batch, budget - state.measured))
            if not pending:
                break
        to_run: list[Proposal] = []
        for p in pending:
            if p.config in state.tried or p.config in {q.config for q in to_run}:
                continue
            ok, reasons = feasible(p.config)
            if not ok:
                rejected += 1
                record(Step(len(steps), p.action, p.config, "verify_failed", None, FAIL_REWARD,
                            "; ".join(reasons), state.incumbent_ms, False))
                continue
            to_run.append(p)
        pending = []
        if rejected > max_rejections:
            break
        if not to_run:
            continue
        to_run = to_run[: budget - state.measured]
        results = evaluate([p.config for p in to_run])
        base_ms = state.incumbent_ms
        for p, r in zip(to_run, results):
            if r.status == "ok" and r.ms is not None:
                reward = (base_ms / r.ms - 1.0) if base_ms else 0.0
            else:
                reward = FAIL_REWARD
            record(Step(len(steps), p.action, p.config, r.status, r.ms, reward, r.feedback, base_ms, True))
            if r.status == "ok" and r.ms is not None and (state.incumbent_ms is None or r.ms < state.incumbent_ms):
                state.incumbent, state.incumbent_ms = p.config, r.ms
    ok_steps = [s for s in steps if s.status == "ok" and s.ms is not None]
    if not ok_steps:
        return EpisodeResult(None, None, steps)
    best = min(ok_steps, key=lambda s: s.ms)  # type: ignore[arg-type, return-value]
    return EpisodeResult(best.config, best.ms, steps)
