"""bench/device_pending.sh: the device steps its header documents are the steps it runs.

Session 46 found ``gemm-pdl`` and ``gemm-cv-confirm`` (added in session 45) refused as "unknown step": the
script checked the step against a hand-kept list that the new case labels never joined. The check now reads the
script's own case labels; these tests keep the header, the labels and the check in agreement.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "device_pending.sh"
TEXT = SCRIPT.read_text()


def _labels() -> set[str]:
    return {step for group in re.findall(r"^  ([a-z0-9|-]+)\)", TEXT, flags=re.M) for step in group.split("|")}


def _documented() -> set[str]:
    return set(re.findall(r"^#.*bash bench/device_pending\.sh (?:OUTDIR|\$OUT) ([a-z0-9-]+)", TEXT, flags=re.M))


def test_every_documented_step_has_a_case_label_and_back():
    labels, documented = _labels(), _documented()
    assert "gemm-pdl" in labels and "gemm-cv-confirm" in labels
    assert documented - labels == set(), "documented in the header, no case label"
    assert labels - documented == set(), "a case label the header does not document"


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
@pytest.mark.parametrize("step,known", [("nosuch", False), ("gemm", False), ("gemm-pdl-x", False),
                                        ("gemm-pdl", True), ("gemm-refine", True), ("moe-pdl", True)])
def test_the_script_accepts_exactly_its_case_labels(step, known, tmp_path):
    """An unknown step exits 2 with the script's message; a known one passes the check. The script's own check
    line runs alone (the steps themselves need a GPU), against the script's text."""
    check = re.search(r"^grep -qE .*\"\$0\" \|\| \{.*\}$", TEXT, flags=re.M)
    assert check, "the step check line moved: update this test"
    probe = tmp_path / "probe.sh"
    probe.write_text(f'STEP="$1"\nset -- x\n{check.group(0).replace(chr(36) + "0", str(SCRIPT))}\necho passed-the-check\n')
    out = subprocess.run(["bash", str(probe), step], capture_output=True, text=True, timeout=30)
    assert (out.returncode, "passed-the-check" in out.stdout) == ((0, True) if known else (2, False)), out.stdout + out.stderr
