"""Rewrite the z3-solver wheel without what the verifier never loads, so the device carry fits 64 MiB.

    python3 bench/slim_z3_wheel.py .whl/z3_solver-*.whl      # in place (download the full one again to undo)

The manylinux z3-solver wheel (~29 MB) holds ``libz3.so`` twice (``libz3.so`` and ``libz3.so.<version>``, the
same bytes), the ``z3`` command-line binary (``*.data/data/bin/z3``) and the C headers. The Python bindings load
``z3/lib/libz3.so`` by that name (``z3core.py``), so the rest can go: ~9.7 MB remain. With the repository at
~28.5 MB (session 46) the six other wheels plus the full z3 wheel broke the run tool's 64 MiB carry limit. The
``RECORD`` file loses the removed entries (pip checks the hashes of what is listed). Not a dependency of the
package: device tooling only.
"""

from __future__ import annotations

import re
import sys
import zipfile
from pathlib import Path

#: what the slim wheel leaves out (regular expressions on the archive's member names)
DROP = (r"^z3/lib/libz3\.so\.[0-9.]+$", r"^[^/]+\.data/data/bin/z3$", r"^z3/include/")


def slim(path: Path) -> tuple[int, int]:
    """Rewrite the wheel ``path`` in place without :data:`DROP` (nothing is kept beside it: the carry takes the
    whole folder); returns (bytes before, bytes after).

    Raises:
        SystemExit: ``path`` is not a z3-solver wheel, or it has no ``z3/lib/libz3.so`` to keep.
    """
    if not path.name.startswith("z3_solver-") or path.suffix != ".whl":
        raise SystemExit(f"slim_z3_wheel: {path}: not a z3_solver-*.whl")
    drop = re.compile("|".join(DROP))
    before = path.stat().st_size
    with zipfile.ZipFile(path) as src:
        names = src.namelist()
        if "z3/lib/libz3.so" not in names:
            raise SystemExit(f"slim_z3_wheel: {path}: no z3/lib/libz3.so (the library the bindings load)")
        tmp = path.with_name(path.name + ".tmp")
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as out:
            for info in src.infolist():
                if drop.search(info.filename):
                    continue
                data = src.read(info)
                if info.filename.endswith(".dist-info/RECORD"):
                    data = b"".join(line for line in data.splitlines(keepends=True)
                                    if not drop.search(line.split(b",", 1)[0].decode()))
                out.writestr(info, data)
    tmp.replace(path)
    return before, path.stat().st_size


if __name__ == "__main__":
    if len(sys.argv) < 2:
        raise SystemExit(__doc__.split("\n\n")[1])
    for arg in sys.argv[1:]:
        before, after = slim(Path(arg))
        print(f"{arg}: {before / 2**20:.1f} MiB -> {after / 2**20:.1f} MiB")
