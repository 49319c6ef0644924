"""``argus-cutlass verify``: output, exit codes, and clean errors on bad input (no traceback)."""

from __future__ import annotations

import json
import re

import pytest

from argus_cutlass.cli import main


def _run(capsys, *argv):
    rc = main(["verify", *map(str, argv)])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return rc, out, err


def _write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_verify_default_config_prints_tiers(tmp_path, capsys):
    rc, out, err = _run(capsys, _write(tmp_path, "cfg.json", "{}"))
    assert rc == 0 and err == ""
    # the kernel name: the program's readable label, then 8 hex digits of its fingerprint
    assert re.match(r"argus_gemm_sm90_bf16_bf16_tn_128x256x64_c2x1_s4_coop_e128x32_rn1_[0-9a-f]{8}: verified \(", out)
    assert "tiers:\n  algebraic " in out
    for tier in ("algebraic", "enumeration", "SMT"):
        line = next(ln for ln in out.splitlines() if ln.strip().startswith(tier))
        assert "proved, median" in line and "ms/obligation" in line
    # proofs only with --verbose (issue 12): by default a count
    assert "ok G6 pipeline.parity" not in out and "proofs; --verbose lists them)" in out
    rc, out, err = _run(capsys, _write(tmp_path, "cfg.json", "{}"), "--verbose")
    assert rc == 0 and "ok G6 pipeline.parity [smt]" in out and "ok G3 k.coverage [smt]" in out


def test_verify_gemm_record_and_json(tmp_path, capsys):
    record = {"kernel": "x", "config": {"stages": 3, "cluster_m": 1}, "verification": {}}
    rc, out, _ = _run(capsys, _write(tmp_path, "rec.json", json.dumps(record)), "--json")
    assert rc == 0
    data = json.loads(out)
    assert data["ok"] is True and data["complete"] is True and "_s3_coop_" in data["kernel"]
    assert {p["engine"] for p in data["proofs"]} == {"arith", "enum", "smt"}


def test_verify_violation_exit_1(tmp_path, capsys):
    rc, out, _ = _run(capsys, _write(tmp_path, "cfg.json", '{"stages": 5}'))
    assert rc == 1
    assert "REJECTED" in out and "[smem.capacity]" in out and "= 263248 bytes > 232448 bytes" in out


def test_verify_no_smt(tmp_path, capsys):
    rc, out, _ = _run(capsys, _write(tmp_path, "cfg.json", "{}"), "--no-smt")
    assert rc == 0 and "[smt]" not in out and "SMT " not in out.split("tiers:")[1]
    # what the SMT tier would have checked is listed as skipped, not proved; the report is still complete
    assert ": verified, 6 skipped (not checked) (" in out.splitlines()[0]
    assert "  SKIPPED G6 pipeline.parity: " in out and "not checked (SMT tier off (smt=False, --no-smt))" in out
    rc, out, _ = _run(capsys, _write(tmp_path, "cfg.json", "{}"), "--no-smt", "--json")
    data = json.loads(out)
    assert rc == 0 and data["complete"] is True and data["fully_proved"] is False and data["undecided"] == []
    assert {s["rule"] for s in data["skipped"]} >= {"pipeline.state", "pipeline.stage", "pipeline.parity",
                                                     "pipeline.carry"}


@pytest.mark.parametrize("text, expected", [
    ('{"tile_m": 128,\n "bogus": 3}', ":2: unknown field 'bogus' (known: dtype, out_dtype, layout, tile_m"),
    ('{"tile_m": 128,,}', ":1:16: not JSON (Expecting property name enclosed in double quotes)"),
    ('{\n"stages": 4,\n"tile_m": "big"}', ":3: field 'tile_m': Input should be a valid integer"),
    ('[1, 2]', ":1: expected a JSON object (a GemmConfig or a gemm record), got list"),
    ('{"config": {"layout": "xx"}}', ":1: field 'layout': Input should be 'tn', 'nt', 'nn' or 'tt'"),
])
def test_verify_malformed_input(tmp_path, capsys, text, expected):
    path = _write(tmp_path, "bad.json", text)
    rc, out, err = _run(capsys, path)
    assert rc == 2 and out == ""
    assert err.startswith("argus-cutlass: error: [config.")
    assert f"{path}{expected}" in err


def test_verify_missing_file(tmp_path, capsys):
    rc, _out, err = _run(capsys, tmp_path / "nope.json")
    assert rc == 2 and "[config.read]" in err and "nope.json: cannot read (No such file or directory)" in err


@pytest.mark.parametrize("ms", [0, -5])
def test_verify_refuses_a_timeout_that_is_not_positive(tmp_path, capsys, ms):
    """Red team, session 34: --smt-timeout-ms -5 and 0 were accepted and handed to z3."""
    path = _write(tmp_path, "c.json", "{}")
    rc, out, err = _run(capsys, path, "--smt-timeout-ms", ms)
    assert rc == 2 and out == "" and "[config.smt_timeout]" in err and f"--smt-timeout-ms {ms}" in err


@pytest.mark.parametrize("value", ["0", "-5", "abc"])
def test_a_bad_smt_timeout_in_the_environment_is_named(tmp_path, capsys, monkeypatch, value):
    """ARGUS_SMT_TIMEOUT_MS is read in one place (settings()): a value that is not a positive integer is named there
    (int('abc') was a ValueError traceback; 0 / -5 were handed to z3)."""
    monkeypatch.setenv("ARGUS_SMT_TIMEOUT_MS", value)
    rc, out, err = _run(capsys, _write(tmp_path, "c.json", "{}"))
    assert rc == 2 and "[settings.smt_timeout]" in err and f"ARGUS_SMT_TIMEOUT_MS={value!r}" in err


def test_verify_json_bad_input_still_prints_json(tmp_path, capsys):
    path = _write(tmp_path, "bad.json", '{"swizzle": 3}')
    rc, out, err = _run(capsys, path, "--json")
    data = json.loads(out)
    assert rc == 2 and data["ok"] is False and data["error"]["rule"] == "config.schema"
    assert "field 'swizzle'" in data["error"]["message"] and "[config.schema]" in err


def test_verify_names_the_scheduler(tmp_path, capsys):
    path = _write(tmp_path, "sk.json", '{"tile_n": 128, "cluster_m": 1, "stages": 6, "scheduler": "streamk"}')
    rc, out, _ = _run(capsys, path, "--no-smt")
    assert rc == 0 and re.match(r"\S+_streamk_[0-9a-f]{8}$", out.split(":")[0])
