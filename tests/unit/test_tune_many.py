"""``argus-cutlass tune --shapes`` (:mod:`argus_cutlass.agent.tune_many`) without a GPU or nvcc.

The stages are injected: ``candidates`` (a short fixed list instead of ranking the whole space),
``compile`` (no nvcc) and ``measure`` (deterministic fake timings), so these tests check the
driver: every shape gets its best recorded, the journal is valid JSON lines, a crash mid-way
loses nothing measured and a resumed run measures no (shape, config) twice and ends with the
same bests as an uninterrupted one; and the CLI's ``--shapes``/``--model`` errors.
The Ray path runs only when Ray is installed (``pip install argus_cutlass[tune]``).
"""

from __future__ import annotations

import json
import operator
import sys
import zlib

import pytest

from argus_cutlass.agent import tune_many
from argus_cutlass.agent.planner import Measurement
from argus_cutlass.agent.shapes import GemmShape
from argus_cutlass.agent.store import DEFAULT_GPU, ExperienceStore
from argus_cutlass.agent.tune_many import JOURNAL, Built, LocalBackend, config_key, shape_key, tune_shapes
from argus_cutlass.cli import build_parser, main
from argus_cutlass.kernels.gemm.config import GemmConfig

SHAPES = [GemmShape(128, 256, 512), GemmShape(256, 1024, 4096), GemmShape(8, 4096, 4096),
          GemmShape(512, 512, 1024, dtype="fp16", out_dtype="fp32", layout="nt")]
BUDGET = 4
KNOBS = [dict(tile_n=256, stages=4), dict(tile_n=128, stages=5), dict(tile_n=128, stages=6),
         dict(tile_n=64, stages=8), dict(tile_n=192, stages=3)]


def fake_candidates(problem, budget):
    return [GemmConfig(dtype=problem.dtype, out_dtype=problem.out_dtype, layout=problem.layout, **kn)
            for kn in KNOBS][:budget]


def fake_compile(problem, cfg):
    return Built("compiled", kernel=f"fake_{cfg.tile_n}_s{cfg.stages}", path="/nonexistent/fake.so")


def fake_ms(problem, cfg) -> float:
    """A deterministic time per (shape, config), in [1, 2) ms."""
    return 1.0 + zlib.crc32(f"{shape_key(problem)}|{config_key(cfg)}".encode()) / 2**32


class Recorder:
    """A fake GPU: deterministic times, every call remembered; raises after ``crash_after`` calls."""

    def __init__(self, crash_after: int | None = None) -> None:
        self.calls: list[tuple[str, str]] = []
        self.crash_after = crash_after

    def __call__(self, problem, cfg, built):
        if self.crash_after is not None and len(self.calls) >= self.crash_after:
            raise RuntimeError("simulated crash: the GPU node went away")
        self.calls.append((shape_key(problem), config_key(cfg)))
        return fake_ms(problem, cfg)


def run(tmp_path, out="out", store="store.json", measure=None, lines=None, **kw):
    kw.setdefault("budget", BUDGET)
    kw.setdefault("compile", fake_compile)
    return tune_shapes(SHAPES, out_dir=tmp_path / out, measure=measure or Recorder(), candidates=fake_candidates,
                       backend="local", store=ExperienceStore(tmp_path / store),
                       say=(lines.append if lines is not None else (lambda s: None)), **kw)


def expected_best(shape):
    p = shape.problem()
    return min(fake_candidates(p, BUDGET), key=lambda c: fake_ms(p, c))


def journal_lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def bests(store_path):
    data = json.loads(store_path.read_text())
    return {(e["shape"][0], e["shape"][1], e["shape"][2], e["dtype"]): (e["config"], e["ms"])
            for e in data["entries"].values()}


def test_every_shape_gets_its_best_recorded(tmp_path):
    lines: list[str] = []
    measure = Recorder()
    result = run(tmp_path, measure=measure, lines=lines)
    assert result.backend.startswith("local") and lines[0].startswith("backend   local")
    assert not result.compile_only and result.measured_now == len(SHAPES) * BUDGET and result.reused == 0
    assert len(measure.calls) == len(set(measure.calls)) == len(SHAPES) * BUDGET
    store = ExperienceStore(tmp_path / "store.json")
    for shape, sr in zip(SHAPES, result.shapes):
        best = expected_best(shape)
        assert sr.best == best and sr.best_ms == pytest.approx(fake_ms(shape.problem(), best)) and sr.recorded
        entry = store.lookup(DEFAULT_GPU, "gemm", tune_many._as_problem(shape))
        assert entry is not None and entry["config"] == best.model_dump()
        assert entry["shape"] == [shape.m, shape.n, shape.k] and entry["ms"] == pytest.approx(sr.best_ms)
    summary = json.loads((tmp_path / "out" / tune_many.SUMMARY).read_text())
    assert [r["shape"] for r in summary["shapes"]] == [s.label for s in SHAPES]


def test_journal_lines_are_json_with_the_stage_fields(tmp_path):
    run(tmp_path)
    lines = journal_lines(tmp_path / "out" / JOURNAL)
    for line in lines:
        assert {"shape", "config", "stage", "outcome", "ms", "time"} <= set(line)
    stages = [line["stage"] for line in lines]
    assert stages[0] == "run" and stages[-1] == "run"
    assert stages.count("plan") == len(SHAPES)
    assert stages.count("compile") == stages.count("measure") == len(SHAPES) * BUDGET
    assert stages.count("record") == len(SHAPES)
    for line in lines:
        if line["stage"] == "measure":
            assert line["outcome"] == "ok" and isinstance(line["ms"], float) and line["gpu"] == DEFAULT_GPU
            assert GemmConfig(**line["config"]).model_dump() == line["config"]


@pytest.mark.parametrize("crash_after", [0, 1, 7, len(SHAPES) * BUDGET - 1])
def test_a_crash_loses_nothing_measured_and_resume_measures_nothing_twice(tmp_path, crash_after):
    first = Recorder(crash_after=crash_after)
    with pytest.raises(RuntimeError, match="simulated crash"):
        run(tmp_path, measure=first)
    journal = tmp_path / "out" / JOURNAL
    measured = [(line["shape"], config_key(line["config"])) for line in journal_lines(journal)
                if line["stage"] == "measure"]
    assert measured == first.calls  # every finished measurement is in the journal
    assert not (tmp_path / "store.json").exists()  # nothing recorded before the crash

    compiles: list[str] = []

    def counting_compile(problem, cfg):
        compiles.append((shape_key(problem), config_key(cfg)))
        return fake_compile(problem, cfg)

    second = Recorder()
    lines: list[str] = []
    result = run(tmp_path, measure=second, compile=counting_compile, lines=lines)
    assert not set(first.calls) & set(second.calls)  # no (shape, config) measured twice
    assert len(first.calls) + len(second.calls) == len(SHAPES) * BUDGET
    assert not set(compiles) & set(first.calls)  # measured ones are not even rebuilt
    assert result.reused == len(first.calls) and result.measured_now == len(second.calls)
    assert any(line.startswith("journal   resuming") for line in lines) or crash_after == 0

    run(tmp_path, out="straight", store="straight.json")  # the uninterrupted run
    assert bests(tmp_path / "store.json") == bests(tmp_path / "straight.json")

    third = Recorder()
    again = run(tmp_path, measure=third)  # everything is in the journal now
    assert third.calls == [] and again.reused == len(SHAPES) * BUDGET
    assert [s.best for s in again.shapes] == [expected_best(s) for s in SHAPES]


def test_a_torn_last_line_is_ignored_on_resume(tmp_path):
    with pytest.raises(RuntimeError):
        run(tmp_path, measure=Recorder(crash_after=5))
    journal = tmp_path / "out" / JOURNAL
    with open(journal, "a") as f:
        f.write('{"shape": "128x256x512_bf16_bf16_tn", "config": {"tile')  # killed mid-write
    second = Recorder()
    lines: list[str] = []
    run(tmp_path, measure=second, lines=lines)
    assert len(second.calls) == len(SHAPES) * BUDGET - 5
    assert any("1 torn line ignored" in line for line in lines)
    raw = journal.read_text().splitlines()
    bad = [r for r in raw if not r.startswith("{") or not r.endswith("}")]
    assert len(bad) == 1 and bad[0].endswith('"tile')
    assert all(isinstance(json.loads(r), dict) for r in raw if r not in bad)


def test_a_journal_timed_another_way_is_measured_again_not_mixed(tmp_path):
    """Measure and baseline lines carry how they were timed; resuming a journal of another method (here the
    journals of before session 28: no timing, one launch between events) measures again instead of comparing
    times of two methods; the record says which method its time is."""
    run(tmp_path)
    journal = tmp_path / "out" / JOURNAL
    lines = journal_lines(journal)
    assert {line.get("timing") for line in lines
            if line["stage"] in ("measure", "baseline") or line["outcome"] == "start"} \
        == {tune_many.DEFAULT_TIMING}
    legacy = [{k: v for k, v in line.items() if k != "timing"} for line in lines]
    journal.write_text("".join(json.dumps(line) + "\n" for line in legacy))
    again = Recorder()
    result = run(tmp_path, measure=again)
    assert len(again.calls) == len(SHAPES) * BUDGET and result.reused == 0
    assert {e.get("timing") for e in json.loads((tmp_path / "store.json").read_text())["entries"].values()} \
        == {tune_many.DEFAULT_TIMING}


@pytest.mark.parametrize("candidates", [[{"tile_m": 128, "old_field": 1}], [7], [{"tile_n": "abc"}]])
def test_a_plan_line_this_version_cannot_read_is_planned_again_on_resume(tmp_path, candidates):
    """A plan line written by another version (an extra field, a number, a string where an int goes) is planned
    again, said so, and the measurements already journaled are reused (red team, session 34: a pydantic
    traceback)."""
    run(tmp_path)
    journal = tmp_path / "out" / JOURNAL
    lines = journal_lines(journal)
    plan = next(i for i, line in enumerate(lines) if line["stage"] == "plan")
    lines[plan] = {**lines[plan], "candidates": candidates}
    journal.write_text("".join(json.dumps(line) + "\n" for line in lines))
    again, said = Recorder(), []
    result = run(tmp_path, measure=again, lines=said)
    assert any("1 plan line(s) this version cannot read" in line and lines[plan]["shape"] in line for line in said)
    assert len(again.calls) == 0 and result.reused == len(SHAPES) * BUDGET


def test_no_resume_moves_the_old_journal_aside_and_measures_again(tmp_path):
    run(tmp_path)
    second = Recorder()
    run(tmp_path, measure=second, resume=False)
    assert len(second.calls) == len(SHAPES) * BUDGET
    assert (tmp_path / "out" / f"{JOURNAL}.1").is_file()


def test_a_larger_budget_measures_only_the_new_candidates(tmp_path):
    first = Recorder()
    run(tmp_path, measure=first, budget=2)
    second = Recorder()
    run(tmp_path, measure=second, budget=3)
    assert len(first.calls) == 2 * len(SHAPES) and len(second.calls) == len(SHAPES)
    assert not set(first.calls) & set(second.calls)


def test_failed_candidates_are_journaled_and_never_best(tmp_path):
    def picky_compile(problem, cfg):
        if cfg.stages == 4:
            return Built("rejected", error="[smem.capacity] too much shared memory")
        return fake_compile(problem, cfg)

    def picky_measure(problem, cfg, built):
        if cfg.stages == 5:
            return Measurement("check_failed", None, "rel. error 1e+00")
        return fake_ms(problem, cfg)

    result = run(tmp_path, measure=picky_measure, compile=picky_compile)
    for shape, sr in zip(SHAPES, result.shapes):
        assert sr.best is not None and sr.best.stages not in (4, 5)
        assert sr.failed == 2 and sr.measured == BUDGET - 1
    outcomes = {(line["stage"], line["outcome"]) for line in journal_lines(tmp_path / "out" / JOURNAL)}
    assert {("compile", "rejected"), ("measure", "check_failed"), ("measure", "ok")} <= outcomes
    compiles: list = []
    run(tmp_path, compile=lambda p, c: compiles.append(c) or fake_compile(p, c))
    assert compiles == []  # the rejected ones are not built again either


def test_an_unexpected_compile_exception_is_journaled_and_retried_on_resume(tmp_path):
    def buggy_compile(problem, cfg):
        if cfg.stages == 6:
            raise AssertionError("renderer bug")
        return fake_compile(problem, cfg)

    first = Recorder()
    result = run(tmp_path, measure=first, compile=buggy_compile)
    assert len(first.calls) == len(SHAPES) * (BUDGET - 1) and all(s.best is not None for s in result.shapes)
    errors = [line for line in journal_lines(tmp_path / "out" / JOURNAL) if line["outcome"] == "internal_error"]
    assert len(errors) == len(SHAPES) and "AssertionError: renderer bug" in errors[0]["error"]
    second = Recorder()
    run(tmp_path, measure=second)
    assert set(second.calls) == {(s.label, config_key(c)) for s in SHAPES
                                 for c in fake_candidates(s.problem(), BUDGET) if c.stages == 6}


def test_without_a_gpu_it_compiles_only_and_records_nothing(tmp_path):
    lines: list[str] = []
    measure = Recorder()
    result = run(tmp_path, measure=measure, gpus=0, lines=lines)
    assert result.compile_only and "no GPU" in result.reason and measure.calls == []
    assert not (tmp_path / "store.json").exists()
    outcomes = [line["outcome"] for line in journal_lines(tmp_path / "out" / JOURNAL) if line["stage"] == "compile"]
    assert outcomes == ["compiled"] * (len(SHAPES) * BUDGET)
    assert not any(line["stage"] in ("measure", "record") for line in journal_lines(tmp_path / "out" / JOURNAL))
    # later, with a GPU, the same out_dir measures every compiled candidate
    second = Recorder()
    result = run(tmp_path, measure=second)
    assert len(second.calls) == len(SHAPES) * BUDGET and all(s.recorded for s in result.shapes)


def test_baseline_runs_once_per_shape_and_is_reused(tmp_path):
    calls: list[str] = []

    def fake_baseline(problem):
        calls.append(shape_key(problem))
        return 1.5

    with pytest.raises(RuntimeError):
        run(tmp_path, measure=Recorder(crash_after=6), baseline=fake_baseline)
    run(tmp_path, baseline=fake_baseline)
    assert sorted(calls) == sorted(s.label for s in SHAPES)
    data = json.loads((tmp_path / "store.json").read_text())
    assert all(e["cublas_ms"] == 1.5 for e in data["entries"].values())


def test_quiet_prints_no_progress(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "tqdm", None)  # plain progress lines, also where tqdm is installed
    lines: list[str] = []
    run(tmp_path, quiet=True, lines=lines)
    assert lines and not any(line.startswith(("plan ", "compile ", "measure ")) for line in lines)
    loud: list[str] = []
    run(tmp_path, out="loud", lines=loud)
    assert any(line.startswith("measure   [") for line in loud)


def test_duplicate_shapes_are_tuned_once(tmp_path):
    measure = Recorder()
    tune_shapes([GemmShape(128, 256, 512), GemmShape(128, 256, 512, name="other")], budget=2, out_dir=tmp_path,
                measure=measure, compile=fake_compile, candidates=fake_candidates, backend="local",
                store=ExperienceStore(tmp_path / "s.json"), say=lambda s: None)
    assert len(measure.calls) == 2


def test_bad_inputs_are_problem_errors(tmp_path):
    from argus_cutlass.errors import ProblemError

    with pytest.raises(ProblemError, match="tune.budget"):
        run(tmp_path, budget=0)
    with pytest.raises(ProblemError, match="problem.size"):
        tune_shapes([GemmShape(0, 8, 16)], budget=1, out_dir=tmp_path, measure=Recorder(), backend="local")


def test_local_process_pool_maps_in_completion_order():
    backend = LocalBackend(workers=2, processes=True)
    got = dict(backend.map_cpu(operator.mul, [(2, 3), (4, 5), (6, 7)]))
    assert got == {0: 6, 1: 20, 2: 42}


# ---- CLI -----------------------------------------------------------------------------------


@pytest.mark.parametrize("args,needle", [
    (["tune"], "got neither"),
    (["tune", "--shapes", "s.csv", "--model", "c.json"], "got both"),
    (["tune", "--quiet", "--budget", "4"], "got neither"),
    (["tune", "--shapes", "s.csv", "--m-values", "1,8"], "--m-values applies to --model"),
    (["tune", "--model", "c.json", "--m-values", "1,x"], "tune.m_values"),
    (["tune", "--shapes", "s.csv", "--budget", "0"], "tune.budget"),
    (["tune", "--shapes", "s.csv", "gemm", "--m", "8", "--n", "8", "--k", "16"], "tune.shapes"),
])
def test_cli_shapes_errors_exit_2_with_one_line(args, needle, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.csv").write_text("m,n,k\n128,256,512\n")
    rc = main(args)
    out, err = capsys.readouterr()
    assert rc == 2
    assert len(err.strip().splitlines()) == 1 and err.startswith("argus-cutlass: error: [") and needle in err, err
    assert "Traceback" not in out + err


def test_cli_tune_kernels_still_parse():
    from argus_cutlass import cli

    args = build_parser().parse_args(["tune", "gemm", "--m", "8", "--n", "8", "--k", "16", "--budget", "3",
                                      "--model", "gpt", "--workers", "2", "--out", "o"])
    assert args.func is cli._cmd_tune and args.kernel == "gemm"
    assert (args.budget, args.model, args.workers, args.out) == (3, "gpt", 2, "o")
    args = build_parser().parse_args(["tune", "attention", "--batch", "1", "--heads", "2", "--seqlen-q", "128",
                                      "--head-dim", "64"])
    assert args.func is cli._cmd_tune_attention and args.budget == 8
    args = build_parser().parse_args(["tune", "--shapes", "f.json", "--budget", "5", "--gpus", "0", "--workers", "3",
                                      "--address", "ray://h:10001", "--no-resume", "--quiet", "--out", "d"])
    assert args.func is cli._cmd_tune_shapes and args.kernel is None
    assert (args.shapes, args.shapes_budget, args.gpus, args.shapes_workers, args.address, args.no_resume,
            args.quiet, args.shapes_out) == ("f.json", 5, 0, 3, "ray://h:10001", True, True, "d")


def _patched(tmp_path, monkeypatch, measure=None):
    real = tune_many.tune_shapes
    seen = {}

    def fake(shapes, **kw):
        seen.update(kw, shapes=list(shapes))
        kw.update(measure=measure or Recorder(), compile=fake_compile, candidates=fake_candidates, backend="local",
                  store=ExperienceStore(tmp_path / "store.json"))
        return real(shapes, **kw)

    monkeypatch.setattr(tune_many, "tune_shapes", fake)
    return seen


def test_cli_tunes_a_shapes_file(tmp_path, monkeypatch, capsys):
    seen = _patched(tmp_path, monkeypatch)
    path = tmp_path / "shapes.csv"
    path.write_text("m,n,k\n128,256,512\n8,4096,4096\n")
    rc = main(["tune", "--shapes", str(path), "--budget", "3", "--workers", "2", "--out", str(tmp_path / "o")])
    out, err = capsys.readouterr()
    assert rc == 0, out + err
    assert seen["budget"] == 3 and seen["workers"] == 2 and seen["resume"] and not seen["quiet"]
    assert [s.label for s in seen["shapes"]] == ["128x256x512_bf16_bf16_tn", "8x4096x4096_bf16_bf16_tn"]
    assert out.count("best      ") == 2 and "backend   local" in out
    assert (tmp_path / "o" / JOURNAL).is_file() and (tmp_path / "o" / tune_many.SUMMARY).is_file()


def test_cli_warns_of_duplicate_rows_and_tunes_them_once(tmp_path, monkeypatch, capsys):
    """Rows of a shapes file listing the same GEMM (whatever the spelling) are merged, with a warning on stderr
    naming the rows (red team, session 35: merged silently)."""
    seen = _patched(tmp_path, monkeypatch)
    path = tmp_path / "shapes.csv"
    path.write_text("m,n,k,dtype,layout\n128,256,512,bf16,tn\n8,4096,4096,bf16,tn\n128,256,512,bfloat16,TN\n")
    rc = main(["tune", "--shapes", str(path), "--budget", "2", "--out", str(tmp_path / "o")])
    out, err = capsys.readouterr()
    assert rc == 0, out + err
    assert (f"argus-cutlass: warning: [shapes.duplicate] {path}: lines 2 and 4 list the same GEMM "
            "128x256x512_bf16_bf16_tn; it is tuned once") in err
    assert f"shapes    3 from {path} (2 distinct GEMMs)" in out and out.count("best      ") == 2
    assert len(seen["shapes"]) == 3


def test_cli_tunes_a_model_config(tmp_path, monkeypatch, capsys):
    seen = _patched(tmp_path, monkeypatch)
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"hidden_size": 1024, "intermediate_size": 4096, "num_attention_heads": 8,
                               "num_key_value_heads": 2}))
    rc = main(["tune", "--model", str(cfg), "--m-values", "1,64", "--budget", "2", "--gpus", "0", "--quiet",
               "--out", str(tmp_path / "o")])
    out, err = capsys.readouterr()
    assert rc == 0, out + err
    assert {s.m for s in seen["shapes"]} == {1, 64} and seen["gpus"] == 0 and seen["quiet"]
    assert "stopped   no GPU" in out and "best      " not in out
    assert not (tmp_path / "store.json").exists()


def test_cli_exit_1_when_a_shape_has_no_passing_candidate(tmp_path, monkeypatch, capsys):
    _patched(tmp_path, monkeypatch, measure=lambda p, c, b: Measurement("check_failed", None, "wrong"))
    path = tmp_path / "shapes.json"
    path.write_text(json.dumps([{"m": 128, "n": 256, "k": 512}]))
    assert main(["tune", "--shapes", str(path), "--budget", "2", "--out", str(tmp_path / "o")]) == 1
    assert "no best   128x256x512_bf16_bf16_tn" in capsys.readouterr().out


# ---- Ray (only when installed) ---------------------------------------------------------------


def test_ray_backend_spreads_measurements_over_gpu_actors(tmp_path):
    ray = pytest.importorskip("ray")
    # a local cluster declaring 2 GPUs: the two measuring actors each hold one (the fakes never touch CUDA)
    ray.init(num_cpus=2, num_gpus=2, include_dashboard=False, log_to_driver=False)
    try:
        def candidates(problem, budget):  # closures travel by value to the Ray workers
            return [GemmConfig(dtype=problem.dtype, out_dtype=problem.out_dtype, layout=problem.layout, stages=s)
                    for s in (3, 4, 5)][:budget]

        def compile_(problem, cfg):  # the .so travels as bytes: the GPU node may not see the compile node's disk
            return Built("compiled", kernel=f"fake_s{cfg.stages}_{problem.m}", path="/nonexistent.so",
                         binary=f"ELF {cfg.stages}".encode())

        pids = tmp_path / "pids"

        def measure(problem, cfg, built):
            import os

            assert tune_many._artifact(built).path.read_bytes() == f"ELF {cfg.stages}".encode()
            with open(pids, "a") as f:
                f.write(f"{os.getpid()} {os.environ.get('CUDA_VISIBLE_DEVICES')}\n")
            return 1.0 + cfg.stages / 10 + problem.m / 1e6

        lines: list[str] = []
        result = tune_shapes(SHAPES[:2], budget=3, out_dir=tmp_path / "o", gpus=2, measure=measure, compile=compile_,
                             candidates=candidates, backend="ray", store=ExperienceStore(tmp_path / "s.json"),
                             quiet=True, say=lines.append)
        assert lines[0].startswith("backend   ray (local cluster") and "2 measuring actors" in lines[0]
        assert [s.best.stages for s in result.shapes] == [3, 3] and result.measured_now == 6
        workers = set(pids.read_text().splitlines())
        assert len(workers) == 2 and {w.split()[1] for w in workers} == {"0", "1"}  # one actor per GPU
        again = tune_shapes(SHAPES[:2], budget=3, out_dir=tmp_path / "o", gpus=2, measure=measure, compile=compile_,
                            candidates=candidates, backend="ray", store=ExperienceStore(tmp_path / "s.json"),
                            quiet=True, say=lines.append)
        assert again.measured_now == 0 and again.reused == 6
    finally:
        ray.shutdown()


def test_auto_backend_is_local_without_ray(monkeypatch):
    monkeypatch.setattr(tune_many, "ray_available", lambda: False)
    assert isinstance(tune_many.make_backend("auto"), LocalBackend)
    from argus_cutlass.errors import ProblemError

    with pytest.raises(ProblemError, match="tune.backend"):
        tune_many.make_backend("auto", address="ray://head:10001")



def test_an_address_that_does_not_answer_is_a_clear_error_and_the_local_run_still_works(monkeypatch):
    """--address to a Ray head that does not answer: ProblemError tune.address naming it (not Ray's
    traceback); a local backend afterwards is unaffected (fuzz, session 21)."""
    import types

    from argus_cutlass.errors import ProblemError

    calls = []

    def init(address=None, **kwargs):
        calls.append(address)
        raise ConnectionError("Could not read 'session_name' from GCS. Did GCS start successfully?")

    fake = types.SimpleNamespace(is_initialized=lambda: False, init=init)
    monkeypatch.setitem(__import__("sys").modules, "ray", fake)
    monkeypatch.setattr(tune_many, "probe_address", lambda address: None)   # the port answers; Ray then refuses
    with pytest.raises(ProblemError) as info:
        tune_many.RayBackend("ray://10.0.0.9:10001")
    assert info.value.rule == "tune.address" and "ray://10.0.0.9:10001" in str(info.value)
    assert "ConnectionError" in str(info.value) and calls == ["ray://10.0.0.9:10001"]
    monkeypatch.setattr(tune_many, "ray_available", lambda: False)
    assert isinstance(tune_many.make_backend("auto"), LocalBackend)


def _closed_port() -> int:
    """A local TCP port nothing listens on (bound, then closed)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.parametrize("scheme", ["", "ray://"])
def test_an_address_nothing_listens_on_is_refused_in_seconds_before_ray_is_asked(scheme, monkeypatch):
    """Review (adversarial user): ``ray.init`` retried a dead ``--address`` for ~12 minutes (20 GCS attempts of
    ~35 s, warnings on stderr); the port is probed first, so the error comes at once and names the address."""
    import time
    import types

    from argus_cutlass.errors import ProblemError

    fake = types.SimpleNamespace(is_initialized=lambda: False,
                                 init=lambda **kw: pytest.fail("ray.init reached for a dead address"))
    monkeypatch.setitem(sys.modules, "ray", fake)
    address = f"{scheme}127.0.0.1:{_closed_port()}"
    t0 = time.monotonic()
    with pytest.raises(ProblemError) as info:
        tune_many.RayBackend(address)
    assert time.monotonic() - t0 < 10
    assert info.value.rule == "tune.address" and repr(address) in str(info.value) and "nothing answers" in str(info.value)
    assert "leave --address out" in str(info.value)


@pytest.mark.parametrize("address", ["", "  "])
def test_a_blank_address_is_refused_not_read_as_a_local_cluster(address, tmp_path, capsys):
    """``--address ""`` (an unset shell variable) was silently a local cluster; it is refused before the shapes
    are read and before any folder is made."""
    shapes = tmp_path / "s.csv"
    shapes.write_text("m,n,k\n128,256,512\n")
    out = tmp_path / "out"
    assert main(["tune", "--shapes", str(shapes), "--address", address, "--gpus", "0", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "[tune.address]" in err and "empty or blank" in err and "Traceback" not in err
    assert not out.exists()


def test_probe_address_leaves_what_ray_parses_itself_to_ray():
    for address in ("auto", "local", "headnode", "ray://h:notaport"):
        tune_many.probe_address(address)


def test_journal_key_of_a_line_written_before_a_field_existed():
    """Session 45 review: a journal line dumped before GemmConfig grew ``pdl`` keys the same configuration (resumed
    tunes do not re-measure what they had measured)."""
    from argus_cutlass.agent.tune_many import config_key
    from argus_cutlass.kernels.gemm.config import GemmConfig

    cfg = GemmConfig()
    old = {k: v for k, v in cfg.model_dump().items() if k != "pdl"}
    assert config_key(old) == config_key(cfg) != config_key(cfg.replace(pdl=True))
