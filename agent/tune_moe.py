"""``argus-cutlass tune moe``: measure the first ``--budget`` configurations of
:func:`argus_cutlass.kernels.moe.space.candidates` (the heuristic's configuration for the problem's T
first, then its one-knob neighbours) for one layer problem through
:func:`argus_cutlass.agent.tune_family.run_tune_family` (one orchestrated batch, the torch
``_grouped_mm`` layer beside the best, recorded under :func:`argus_cutlass.agent.store.moe_key`, the
power-of-two T bucket, where ``argus-cutlass moe`` and ``argus_cutlass.torch.moe`` pick it up); writes
``DIR/tune_moe.json``.

Exit codes: 0 at least one candidate passed every stage that ran; 1 none did; 2 bad input (raised as
an :class:`~argus_cutlass.errors.ArgusError`, printed by the CLI).
"""

from __future__ import annotations

import time
from typing import Any

from argus_cutlass.agent.tune_family import Family, check_options, run_tune_family

RESULT_FILE = "tune_moe.json"

__all__ = ["RESULT_FILE", "run_tune_moe"]


def _knobs(cfg: Any) -> str:
    return (f"m{cfg.tile_m} gu{cfg.gu_tile_n}x{cfg.gu_stages} dn{cfg.dn_tile_n}x{cfg.dn_stages} "
            f"bands {cfg.gu_band_m}/{cfg.dn_band_m} gather {cfg.gather_slices} epi {cfg.epi_n}")


def run_tune_moe(args: Any, say: Any = print, *, problem: Any, configs: list[Any] | None = None) -> int:
    """The ``tune moe`` command for the validated ``problem`` (an MoEProblem; args: budget, seed,
    workers, out, and optionally quiet); ``say`` prints a progress line; ``configs``: the candidates
    when the caller already has them (default :func:`~argus_cutlass.kernels.moe.space.candidates`).
    Returns the exit code (:func:`argus_cutlass.agent.tune_family.run_tune_family`)."""
    from argus_cutlass.agent.store import moe_key, record_moe_best
    from argus_cutlass.kernels.moe.space import candidates

    check_options(args)
    t0 = time.perf_counter()
    p = problem
    say(f"problem   moe tokens={p.tokens} experts={p.experts} topk={p.topk} hidden={p.hidden} ffn={p.ffn} {p.dtype}")
    if configs is None:
        configs = candidates(p, args.budget)   # each verified: about 0.3-0.5 s a candidate
    say(f"space     measuring {len(configs)} feasible candidates (the heuristic's first, then its one-knob "
        "neighbours)")
    from argus_cutlass.kernels.moe.heuristics import default_config

    family = Family(RESULT_FILE, _knobs, "torch _grouped_mm layer", "grouped_mm_ms", record_moe_best, moe_key,
                    heuristic=default_config)
    return run_tune_family(args, say, p, configs, p.flops(), family, {}, t0)
