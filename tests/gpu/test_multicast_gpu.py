"""Silicon agreement of the TMA multicast model (``tma.multicast``, G5 across a cluster).

The probe (``templates/multicast_probe.cu.j2``, inline PTX, no CUTLASS) launches one
thread-block cluster. Every CTA copies its slice of a tile from its source block into the
CTAs its ``ctaMask`` names (``cp.async.bulk ... .multicast::cluster``), expects a whole tile
of transaction bytes on its own mbarrier and waits a bounded time. The tables (slice, source
block and mask per ``%cluster_ctarank``) come from the DSL program's multicast loads through
:func:`argus_cutlass.verify.multicast.probe_tables`, which also predicts every CTA's tile and
whether its barrier completes.

* **Correct programs**: CUTLASS's slicing and masks for clusters 2x1, 1x2, 2x2, 4x2 and 2x4
  (A and B). Every CTA must get exactly the predicted tile (all rows, from its own block) and
  a completed barrier.
* **Mutant programs** (the four ``multicast_mask`` mutants of the mutation suite, 2x2
  cluster): the tiles must equal the model's prediction, rows that arrive twice from
  different blocks excepted (then either source is allowed), and so must the barrier states.
  A missing slice must leave its rows unwritten and, when bytes are missing, the barrier
  incomplete (the hang the model predicts).

Run: ``pytest -q -m gpu tests/gpu/test_multicast_gpu.py`` (``ARGUS_PROBE_OUT=x.json`` also
writes ``x_multicast.json``).
"""

from __future__ import annotations

import numpy as np
import pytest

from argus_cutlass.kernels.gemm.config import GemmConfig
from argus_cutlass.programs.gemm import build_gemm_program
from argus_cutlass.programs.gemm_dsl import gemm_dsl_program
from argus_cutlass.runtime.probe_kernels import MULTICAST_PROBE, build_probe, run_multicast_probe
from argus_cutlass.verify.multicast import probe_tables
from argus_cutlass.verify.mutants import CATALOGUE

pytestmark = pytest.mark.gpu
RESULTS: dict[str, dict] = {}
#: written to ARGUS_PROBE_OUT by tests/gpu/conftest.py
PROBE_SUFFIX = "_multicast"
CLUSTERS = [(2, 1), (1, 2), (2, 2), (4, 2), (2, 4)]
MUTANTS = [m.id for m in CATALOGUE.values() if m.cls == "multicast_mask"]


@pytest.fixture(scope="module")
def probe_so(gpu_device):
    return str(build_probe(MULTICAST_PROBE).path)


def _run(load, so):
    t = probe_tables(load)
    tiles, done, ranks = run_multicast_probe(t.src, t.slice, t.src_block, t.mask, t.cluster, t.rows_per_slice,
                                             so_path=so)
    assert ranks.tolist() == list(range(t.cluster[0] * t.cluster[1]))  # CTA i read %cluster_ctarank i
    return t, tiles, done


def _compare(t, tiles, done) -> dict:
    clear = ~t.ambiguous
    rows_agree = (tiles == t.predicted).all(axis=2)
    either = np.zeros_like(rows_agree)
    for r, row in zip(*np.nonzero(t.ambiguous), strict=True):  # two blocks raced: either is allowed
        either[r, row] = any((tiles[r, row] == t.src[b, row]).all() for b in range(t.src.shape[0]))
    return {"rows": int(rows_agree.size), "agree": int((rows_agree & clear).sum() + either.sum()),
            "ambiguous": int(t.ambiguous.sum()), "unwritten_rows": int((tiles == 0xFFFF).all(axis=2).sum()),
            "barrier_completed": done.tolist(), "model_completed": t.complete.tolist(),
            "overfilled": t.overfilled.tolist()}


@pytest.mark.parametrize("cluster", CLUSTERS, ids=[f"{m}x{n}" for m, n in CLUSTERS])
def test_cutlass_multicast_delivers_each_row_once(cluster, probe_so):
    cfg = GemmConfig(cluster_m=cluster[0], cluster_n=cluster[1], stages=3)
    dsl = gemm_dsl_program(build_gemm_program(cfg))
    loads = [ld for ld in dsl.loads if ld.copy.multicast > 1]
    assert loads
    for ld in loads:
        t, tiles, done = _run(ld, probe_so)
        row = RESULTS[f"{cluster[0]}x{cluster[1]}_{ld.dst}"] = _compare(t, tiles, done)
        assert row["agree"] == row["rows"] and row["unwritten_rows"] == 0
        assert done.all() and t.complete.all()


@pytest.mark.parametrize("mutant", MUTANTS)
def test_mutant_multicast_matches_the_model(mutant, probe_so):
    m = CATALOGUE[mutant]
    _, dsl = m.build_verifier_program()
    load = next(ld for ld in dsl.loads if ld.copy.multicast > 1 and
                (ld.mask_axis != ld.share_axis or ld.slice_axis != ld.share_axis or not ld.mask_self
                 or ld.rank_order != "col"))
    t, tiles, done = _run(load, probe_so)
    row = RESULTS[mutant] = _compare(t, tiles, done)
    assert row["agree"] == row["rows"], row
    sure = ~t.overfilled  # an overfilled barrier's phase is not specified by PTX
    assert (done[sure] == t.complete[sure]).all(), row
    own = np.array([[(tiles[r, i] == t.src[b, i]).all() for i in range(t.tile_rows)]
                    for r, b in enumerate(t.src_block)])
    assert not own.all()  # the silicon really delivers a wrong or incomplete tile somewhere

