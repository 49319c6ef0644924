"""Silicon agreement of the TMA multicast model (``tma.multicast``, G5 across a cluster).

The probe (``templates/multicast_probe.cu.j2``, inline PTX, no CUTLASS; one nvcc build for the
whole module) launches one thread-block cluster. Every CTA copies its slice of a tile (one
16-byte row per TMA box of the load's stage) from its source block into the CTAs its 16-bit
``ctaMask`` names (``cp.async.bulk ... .multicast::cluster``), expects a whole tile of
transaction bytes on its own mbarrier and waits a bounded number of polls. The tables (slice,
source block and mask per ``%cluster_ctarank``) come from a program's multicast loads through
:func:`argus_cutlass.verify.multicast.probe_tables` under the kernel's placement of cluster
ranks (:func:`~argus_cutlass.verify.multicast.placement_of`, the raster), which also predicts
every CTA's tile and whether its barrier completes.

* **Correct programs** (``build_program(GemmConfig(cluster_m, cluster_n, raster))``, clusters
  2x1, 1x2, 2x2, 4x2 and 2x4, rasters along N and along M; every one accepted by
  ``tma.multicast``): every CTA must get exactly the predicted tile, which is its own block's
  tile (every row once), and a completed barrier.
* **Mutant programs** (the catalogue's ``multicast`` class, ``mutant_program(m)``; the verifier
  rejects each with ``tma.multicast``): the changed multicast load's replay must equal the
  model's prediction row by row (a row that arrives twice from different blocks may hold either
  sender's data), and so must the barrier states (an overfilled barrier excepted: PTX does not
  specify its phase). Somewhere the silicon must deliver a tile that is not the CTA's own (the
  mistake is real). A missing slice leaves its rows unwritten and, when bytes are missing, the
  barrier incomplete (the hang the model predicts).

Not replayed: a plain ``load`` sliced for multicast (class ``tma_kind``); the probe always
issues the multicast form, so it cannot show what a plain load writes.

Run: ``pytest -q -m gpu tests/gpu/test_multicast_gpu.py`` (``ARGUS_PROBE_OUT=x.json`` also
writes ``x_multicast.json``).
"""

from __future__ import annotations

import numpy as np
import pytest

from argus_cutlass.dsl.ir import Program, TmaLoad
from argus_cutlass.kernels.gemm.config import GemmConfig
from argus_cutlass.kernels.gemm.program import build_program
from argus_cutlass.runtime.probe_kernels import MULTICAST_PROBE, build_probe, run_multicast_probe
from argus_cutlass.testing.mutants import baseline_program, load_catalogue, mutant_program
from argus_cutlass.verify import verify_gemm
from argus_cutlass.verify.multicast import MulticastProbe, check_multicast, placement_of, probe_tables

pytestmark = pytest.mark.gpu
RESULTS: dict[str, dict] = {}
#: written to ARGUS_PROBE_OUT by tests/gpu/conftest.py
PROBE_SUFFIX = "_multicast"
#: (cluster_m, cluster_n): at most 8 CTAs (the probe's portable cluster limit)
CLUSTERS = [(2, 1), (1, 2), (2, 2), (4, 2), (2, 4)]
RASTERS = ["along_n", "along_m"]
MUTANTS = [m.id for m in load_catalogue().values() if m.cls == "multicast"]


@pytest.fixture(scope="module")
def probe_so(gpu_device):
    return str(build_probe(MULTICAST_PROBE).path)


def _run(load: TmaLoad, program: Program, so: str) -> tuple[MulticastProbe, np.ndarray, np.ndarray]:
    """Replay ``load`` under ``program``'s rank placement; returns the tables, every rank's tile
    ``(ranks, boxes, 8)`` uint16 and its barrier state ``(ranks,)`` bool."""
    t = probe_tables(load, placement_of(program))
    tiles, done, ranks = run_multicast_probe(t.src, t.slice, t.src_block, t.mask, t.cluster, t.rows_per_slice,
                                             so_path=so)
    assert ranks.tolist() == list(range(t.cluster[0] * t.cluster[1]))  # CTA i read %cluster_ctarank i
    return t, tiles, done


def _senders(t: MulticastProbe, rank: int, row: int) -> set[int]:
    """Source blocks of every copy the probe was told to deliver into ``row`` of ``rank``."""
    per = t.rows_per_slice
    return {int(t.src_block[s]) for s in range(t.slice.size)
            if t.mask[s] >> rank & 1 and t.slice[s] * per <= row < (t.slice[s] + 1) * per}


def _compare(t: MulticastProbe, tiles: np.ndarray, done: np.ndarray) -> dict:
    """Row-by-row agreement of the silicon tiles with the model (see the module docstring)."""
    rows_agree = (tiles == t.predicted).all(axis=2) & ~t.ambiguous
    for r, row in zip(*np.nonzero(t.ambiguous), strict=True):  # two blocks raced: either sender is allowed
        rows_agree[r, row] = any((tiles[r, row] == t.src[b, row]).all()
                                 for b in _senders(t, int(r), int(row)))
    own = np.array([[(tiles[r, i] == t.src[b, i]).all() for i in range(t.tile_rows)]
                    for r, b in enumerate(t.src_block)])
    return {"rows": int(rows_agree.size), "agree": int(rows_agree.sum()), "ambiguous": int(t.ambiguous.sum()),
            "own_rows": int(own.sum()), "unwritten_rows": int((tiles == 0xFFFF).all(axis=2).sum()),
            "barrier_completed": done.tolist(), "model_completed": t.complete.tolist(),
            "overfilled": t.overfilled.tolist()}


@pytest.mark.parametrize("raster", RASTERS)
@pytest.mark.parametrize("cluster", CLUSTERS, ids=[f"{m}x{n}" for m, n in CLUSTERS])
def test_correct_multicast_delivers_each_box_once(cluster, raster, probe_so):
    program = build_program(GemmConfig(cluster_m=cluster[0], cluster_n=cluster[1], raster=raster))
    assert placement_of(program) == raster
    _, violations = check_multicast(program)
    assert not violations, violations[0].message  # the verifier accepts this program's multicast
    loads = [ld for ld in program.loads if ld.copy.multicast > 1]
    assert loads
    for ld in loads:
        t, tiles, done = _run(ld, program, probe_so)
        row = RESULTS[f"{cluster[0]}x{cluster[1]}_{raster}_{ld.name}"] = _compare(t, tiles, done)
        assert row["agree"] == row["rows"], row
        # every CTA holds its own block's whole tile
        assert row["own_rows"] == row["rows"] and row["unwritten_rows"] == 0, row
        assert done.all() and t.complete.all(), row


@pytest.mark.parametrize("mutant", MUTANTS)
def test_mutant_multicast_matches_the_model(mutant, probe_so):
    m = load_catalogue()[mutant]
    program, base = mutant_program(m), baseline_program(m)
    assert "tma.multicast" in {v.rule for v in verify_gemm(program, smt=False).violations}
    changed = [ld for ld in program.loads if ld.copy.multicast > 1 and ld != base.load_into(ld.dst)]
    assert changed, "the mutant changes no multicast load"
    own_all = True
    for ld in changed:
        t, tiles, done = _run(ld, program, probe_so)
        row = RESULTS[f"{mutant}_{ld.name}"] = _compare(t, tiles, done)
        assert row["agree"] == row["rows"], row
        sure = ~t.overfilled  # an overfilled barrier's phase is not specified by PTX
        assert (done[sure] == t.complete[sure]).all(), row
        own_all &= row["own_rows"] == row["rows"]
    assert not own_all  # the silicon really delivers a wrong or incomplete tile somewhere
