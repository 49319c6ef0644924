"""``argus-cutlass tune attention``: measure the first ``--budget`` configurations of
:func:`argus_cutlass.kernels.attention.space.candidates` (FA3's configuration first, then the analytic
order) for one problem through :func:`argus_cutlass.agent.tune_family.run_tune_family` (one orchestrated
batch, cuDNN beside the best, recorded under :func:`argus_cutlass.agent.store.attention_key`, where
``argus-cutlass attention`` picks it up); writes ``DIR/tune_attention.json``.

Exit codes: 0 at least one candidate passed every stage that ran; 1 none did; 2 bad input (raised as
an :class:`~argus_cutlass.errors.ArgusError`, printed by the CLI).
"""

from __future__ import annotations

import time
from typing import Any

from argus_cutlass.agent.tune_family import Family, check_options, run_tune_family

RESULT_FILE = "tune_attention.json"

__all__ = ["RESULT_FILE", "check_options", "run_tune_attention"]


def _knobs(cfg: Any) -> str:
    from argus_cutlass.kernels.attention.space import knob_values

    v = knob_values(cfg)
    return (f"{v['tile_m']}x{v['tile_n']} s{v['stages']} {'pingpong' if v['pingpong'] else 'free'} "
            f"{v['scheduler']}")


def run_tune_attention(args: Any, say: Any = print, *, problem: Any) -> int:
    """The ``tune attention`` command for the validated ``problem`` (an AttentionProblem; args:
    budget, seed, workers, out, and optionally quiet); ``say`` prints a progress line (the CLI passes its
    own printer). Returns the exit code (:func:`argus_cutlass.agent.tune_family.run_tune_family`)."""
    from argus_cutlass.agent.store import attention_key, record_attention_best
    from argus_cutlass.kernels.attention.space import AttentionSpace, candidates, estimate

    check_options(args)
    t0 = time.perf_counter()
    space = AttentionSpace.for_problem(problem)
    ranked = candidates(problem)
    configs = ranked[: args.budget]
    p = problem
    say(f"problem   attention batch={p.batch} heads={p.heads}/{p.kv_heads} seqlen_q={p.seqlen_q} "
        f"seqlen_k={p.seqlen_k} head_dim={p.head_dim} {p.dtype}{' causal' if p.causal else ''}")
    say(f"space     {space.size} configurations, {len(ranked)} distinct feasible; measuring the first "
        f"{len(configs)} (FA3's first, then the analytic order)")
    first = estimate(configs[0], problem) if configs else 1.0
    family = Family(RESULT_FILE, _knobs, "cuDNN", "cudnn_ms", record_attention_best, attention_key,
                    extra_row=lambda cfg: {"estimate": round(estimate(cfg, problem) / first, 4) if first else None})
    space_info = {"head_dim": space.head_dim, "causal": space.causal, "varlen": space.varlen, "dtype": space.dtype,
                  "size": space.size, "feasible": len(ranked)}
    return run_tune_family(args, say, problem, configs, p.flops, family, {"space": space_info}, t0)
