"""The experience store: concurrent writers, best-entry rules, and the lookup fallbacks."""

from __future__ import annotations

import json
import multiprocessing as mp
from pathlib import Path

import pytest

from argus_cutlass.agent import store as store_mod
from argus_cutlass.agent.planner import Problem
from argus_cutlass.agent.store import ExperienceStore, entry_key, make_entry, tuned_or_default
from argus_cutlass.kernels.gemm.config import GemmConfig
from argus_cutlass.kernels.gemm.heuristics import default_config

GPU = "NVIDIA H200"
N_UPDATES = 40


def _writer(path: str, wid: int, n: int) -> None:
    st = ExperienceStore(path)
    for i in range(n):
        st.add_rewards(GPU, "gemm", Problem(4096, 4096, 4096), [("cta_tile", 1.0)])
        st.record_best(GPU, "gemm", Problem(1 + wid, 8 << i, 64), GemmConfig(), 1.0)  # a new bucket each time


def test_two_concurrent_writer_processes_lose_no_update(tmp_path):
    path = str(tmp_path / "exp.json")
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=_writer, args=(path, w, N_UPDATES)) for w in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    st = ExperienceStore(path)
    av = st.action_values(GPU, "gemm", Problem(4096, 4096, 4096))
    assert av.stats["cta_tile"] == (2 * N_UPDATES, 2.0 * N_UPDATES)
    data = json.loads((tmp_path / "exp.json").read_text())
    assert len(data["entries"]) == 2 * N_UPDATES
    assert not list(tmp_path.glob("*.tmp"))


def test_best_entry_keeps_highest_tflops(tmp_path):
    st = ExperienceStore(tmp_path / "e.json")
    p = Problem(8192, 8192, 8192)
    assert st.record_best(GPU, "gemm", p, GemmConfig(), 2.0)
    assert not st.record_best(GPU, "gemm", p, GemmConfig(cluster_m=1), 2.5)  # slower: kept old
    assert st.record_best(GPU, "gemm", p, GemmConfig(swizzle=4), 1.5)
    e = st.lookup(GPU, "gemm", p)
    assert e["config"]["swizzle"] == 4 and e["ms"] == 1.5
    assert e["tflops"] == pytest.approx(p.flops / 1.5e-3 / 1e12)


def test_an_entry_timed_another_way_is_replaced_not_compared(tmp_path):
    """A ~25 us decode kernel reads 10-25 % faster from a CUDA graph than one launch between events: an entry
    of the other method (none recorded: the stores of before session 28) gives way to the current method's
    measurement even when slower; entries of one method compare by TFLOP/s."""
    st = ExperienceStore(tmp_path / "e.json")
    p = Problem(1, 4096, 14336)
    assert st.record_best(GPU, "gemm", p, GemmConfig(), 0.020)                       # legacy: no timing
    assert st.record_best(GPU, "gemm", p, GemmConfig(swizzle=4), 0.025, timing="graph")
    assert not st.record_best(GPU, "gemm", p, GemmConfig(), 0.026, timing="graph")   # same method, slower
    assert st.record_best(GPU, "gemm", p, GemmConfig(cluster_m=1), 0.024, timing="graph")
    e = st.lookup(GPU, "gemm", p)
    assert (e["config"]["cluster_m"], e["ms"], e["timing"]) == (1, 0.024, "graph")


def test_lookup_falls_back_user_then_shipped_then_heuristic(tmp_path, monkeypatch):
    monkeypatch.setenv("ARGUS_GEMM_UNTUNED", "heuristic")   # the untuned rule under test here (default: cost model)
    st = ExperienceStore(tmp_path / "e.json")
    shape = (512, 8192, 8192)
    heur = default_config(*shape)
    monkeypatch.setattr(store_mod, "shipped_entries", lambda: [])
    assert tuned_or_default("gemm", *shape, gpu=GPU, store=st) == heur
    shipped_cfg = heur.replace(swizzle=2)
    entry = make_entry(GPU, "gemm", Problem(*shape), shipped_cfg, 0.1)
    monkeypatch.setattr(store_mod, "shipped_entries", lambda: [entry])
    assert tuned_or_default("gemm", *shape, gpu=GPU, store=st) == shipped_cfg
    assert tuned_or_default("gemm", *shape, gpu="NVIDIA H100 80GB HBM3", store=st) == shipped_cfg  # sm_90 too
    assert tuned_or_default("gemm", *shape, gpu="NVIDIA A100-SXM4-80GB", store=st) == heur  # no known arch
    user_cfg = heur.replace(raster="along_m")
    st.record_best(GPU, "gemm", Problem(*shape), user_cfg, 0.09)
    assert tuned_or_default("gemm", *shape, gpu=GPU, store=st) == user_cfg
    # a stored config the verifier rejects is skipped
    st.update(lambda d: d["entries"][entry_key(GPU, "gemm", Problem(*shape))]["config"].update(stages=12))
    assert tuned_or_default("gemm", *shape, gpu=GPU, store=st) == shipped_cfg


#: the bench shape table's 13 shapes (entries measured by bench/agent_eval.py; kept by --keep-existing)
BENCH_SHAPES = {(8192, 8192, 8192), (4096, 4096, 4096), (2048, 8192, 8192), (512, 8192, 8192), (128, 8192, 8192),
                (16, 8192, 8192), (1, 4096, 4096), (8192, 28672, 8192), (8192, 8192, 28672), (128, 28672, 8192),
                (4096, 10240, 8192), (64, 14336, 4096), (2048, 4096, 14336)}


def test_shipped_entries_are_measured_h200_bests_the_verifier_accepts():
    from argus_cutlass.kernels.gemm.config import GemmConfig
    from argus_cutlass.kernels.gemm.space import feasible

    data = json.loads(
        __import__("importlib.resources", fromlist=["files"]).files("argus_cutlass.agent")
        .joinpath("tuned_h200.json").read_text())
    assert "measured by bench/agent_eval.py on NVIDIA H200" in data["note"]
    gemm = [e for e in data["entries"] if e["kernel"] == "gemm"]
    # one per (bucket, measured shape): the bench shape table's 13 (bench/agent_eval.py), then each shape of the
    # model-shape sweep not among them, with the time the sweep measured for that kernel there
    # (bench/sweep_gemm.py --merge-shipped --keep-existing)
    assert len(gemm) == len({(e["dtype"], e["out_dtype"], e["layout"], e["bucket"], tuple(e["shape"])) for e in gemm})
    assert "bench/sweep_gemm.py --merge-shipped --keep-existing" in data["note_gemm_sweep"]
    from argus_cutlass.agent.measure import table_key

    root = Path(__file__).resolve().parents[2]
    flavors = {(e["dtype"], e["out_dtype"], e["layout"]) for e in gemm}
    # issue 13 item 4: bf16 and fp16, tn and nt, bf16 and fp32 outputs, each from its own swept table
    # (all eight since session 25: every combination of the three)
    assert flavors == {(d, o or d, ly) for d in ("bf16", "fp16") for o in (None, "fp32") for ly in ("tn", "nt")}
    for fl in flavors:
        name = "_".join(fl)
        sweep = json.loads((root / "bench" / "data" / f"gemm_sweep_{name}_h200.json").read_text())["shapes"]
        of_fl = [e for e in gemm if (e["dtype"], e["out_dtype"], e["layout"]) == fl]
        note = data["note_gemm_sweep" if name == "bf16_bf16_tn" else f"note_gemm_sweep_{name}"]
        # bf16 tn keeps its bench entries (--keep-existing); every other flavor's entries are its own table's bests
        how = "--merge-shipped --keep-existing" if name == "bf16_bf16_tn" else "--merge-shipped"
        assert f"gemm_sweep_{name}_h200.json" in note and how in note
        measured = {k for k, row in sweep.items() if any(row["kernels"].values())}
        # the bf16 tn flavor's 13 bench shapes keep their bench/agent_eval.py entries; every other entry is a sweep's
        kept = BENCH_SHAPES if name == "bf16_bf16_tn" else set()
        assert len([e for e in of_fl if tuple(e["shape"]) in kept]) == len(kept)
        swept = [e for e in of_fl if tuple(e["shape"]) not in kept]
        assert len(swept) + len(kept & {tuple(map(int, k.split("x"))) for k in measured}) == len(measured), name
        # a decode row re-timed from CUDA graphs (session 27: bench/sweep_gemm.py --refine --graph, merged after the
        # per-launch table) ships that table's best and time
        gpath = root / "bench" / "data" / f"gemm_sweep_{name}_graph_h200.json"
        graph = json.loads(gpath.read_text())["shapes"] if gpath.is_file() else {}
        graph = {k: row for k, row in graph.items() if row.get("timing") == "graph" and any(row["kernels"].values())}
        if graph:
            assert f"gemm_sweep_{name}_graph_h200.json" in note   # the merge says where they came from
        for e in swept:
            key = "x".join(map(str, e["shape"]))
            kernels = {k: v for k, v in (graph.get(key) or sweep[key])["kernels"].items() if v}
            kname = table_key(GemmConfig(**e["config"]), kernels)
            assert kname and kernels[kname] == e["ms"] == min(kernels.values()), (name, e["shape"])
    assert {e["kernel"] for e in data["entries"]} == {"gemm", "attention", "moe"}
    assert "measured by bench/tune_attention_grid.py on NVIDIA H200" in data["note_attention"]
    assert "measured by bench/tune_moe_grid.py on NVIDIA H200" in data["note_moe"]
    from argus_cutlass.agent.store import moe_key
    from argus_cutlass.kernels.moe.config import MoEConfig
    from argus_cutlass.kernels.moe.problem import MoEProblem
    from argus_cutlass.kernels.moe.space import feasible as moe_feasible

    moe = [e for e in data["entries"] if e["kernel"] == "moe"]
    assert len(moe) == len({e["key"] for e in moe}) >= 11   # the bench cells (bench/test_moe_bench.py)
    for e in moe:   # each a measured layer the verifier accepts, keyed by its problem's T bucket
        p = MoEProblem(**e["problem"])
        assert e["gpu"] == "NVIDIA H200" and e["key"] == moe_key("NVIDIA H200", p)
        assert e["ms"] > 0 and e["grouped_mm_ms"] > 0
        assert moe_feasible(MoEConfig(**e["config"]), p)
    for e in gemm:
        assert e["gpu"] == "NVIDIA H200"
        cfg = GemmConfig(**e["config"])
        ok, reasons = feasible(cfg)
        assert ok, reasons
        assert e["bucket"] == Problem(*e["shape"]).bucket()


def test_default_path_under_cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("ARGUS_CACHE_DIR", str(tmp_path))
    assert ExperienceStore().path == tmp_path / "agent" / "experience.json"
    ExperienceStore().add_rewards(GPU, "gemm", Problem(1, 4096, 4096), [("pipeline_depth", -1.0)])
    assert (tmp_path / "agent" / "experience.json").exists()


def _store_with_one_entry(path: Path) -> dict:
    st = ExperienceStore(path)
    assert st.record_best(GPU, "gemm", Problem(8, 1024, 4096), GemmConfig(), 1.0)
    return json.loads(path.read_text())


@pytest.mark.parametrize("damage", ["trailing_byte", "not_utf8", "other_version", "entries_list"])
def test_unusable_store_is_ignored_with_a_warning_and_moved_aside_not_overwritten(tmp_path, damage):
    """A store this version cannot use (damaged, not UTF-8, another format version, a list of entries) reads as empty
    with a warning naming the file, and the next write keeps it under ``<name>.unreadable-<time>`` instead of writing
    over its tuned entries (red team, session 34: it was silently replaced)."""
    p = tmp_path / "e.json"
    good = _store_with_one_entry(p)
    raw = p.read_bytes()
    broken = {"trailing_byte": raw + b"x", "not_utf8": raw.replace(b'"entries"', b'"entr\xffies"'),
              "other_version": json.dumps({**good, "version": 99}).encode(),
              "entries_list": json.dumps({**good, "entries": list(good["entries"].values())}).encode()}[damage]
    p.write_bytes(broken)
    st = ExperienceStore(p)
    with pytest.warns(UserWarning, match=str(p)):
        assert st.read()["entries"] == {}
    with pytest.warns(UserWarning, match="moved to"):
        assert st.record_best(GPU, "gemm", Problem(1, 4096, 4096), GemmConfig(), 1.0)
    kept = list(tmp_path.glob("e.json.unreadable-*"))
    assert len(kept) == 1 and kept[0].read_bytes() == broken   # the old file, byte for byte
    assert len(json.loads(p.read_text())["entries"]) == 1       # the new store holds the new entry only


def test_store_folder_that_is_a_file_is_a_clear_error(tmp_path):
    from argus_cutlass.errors import ArgusError

    (tmp_path / "f").write_text("")
    st = ExperienceStore(tmp_path / "f" / "agent" / "e.json")
    assert st.read()["entries"] == {}   # nothing stored yet: lookups fall back to the shipped table
    with pytest.raises(ArgusError, match=r"\[store.path\].*cannot create its folder"):
        st.record_best(GPU, "gemm", Problem(1, 4096, 4096), GemmConfig(), 1.0)
