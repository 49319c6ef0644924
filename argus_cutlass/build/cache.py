"""Content-addressed store of built kernels.

Layout under ``settings().cache_dir / "kernels"``::

    <key>/<name>.<ext>     the artifact (.so, .ptx or .cubin)
    <key>/<name>.log       the full nvcc/ptxas log
    <key>/<name>.cu        the source that was compiled
    <key>/meta.json        name, kind, flags, versions, resource report; written last
    failed/<key>/...       log and source of a failed build (never read back as a hit)

The key is the sha256 of everything that can change the result: the source text, the
nvcc flags, the full ``nvcc --version`` text, the CUTLASS version and header path, and
the artifact kind (see :func:`cache_key`). Every file is written to a temporary name in
its final directory and moved into place with :func:`os.replace`, so a reader sees either
nothing or a complete file; ``meta.json`` goes last and marks the entry complete, so a
crash mid-store leaves no false hit.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

from argus_cutlass.settings import settings

KIND_SUFFIX: dict[str, str] = {"shared": ".so", "ptx": ".ptx", "cubin": ".cubin"}
_META = "meta.json"
_SCHEMA = 1


def cache_root() -> Path:
    """``settings().cache_dir / "kernels"`` (created on first use).

    Raises:
        ToolchainError: ``cache.dir`` when the folder cannot be created (``ARGUS_CACHE_DIR`` names a file, or a
            folder that is not writable), naming the variable it came from and the path.
    """
    root = settings().cache_dir / "kernels"
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        import os

        from argus_cutlass.errors import ToolchainError

        source = next((f"{v}={os.environ[v]!r}" for v in ("ARGUS_CACHE_DIR", "XDG_CACHE_HOME") if os.environ.get(v)),
                      "the default, ~/.cache/argus_cutlass")
        raise ToolchainError("cache.dir", f"the kernel cache {root} cannot be created ({exc.strerror or exc}); "
                             f"its folder comes from {source}",
                             "set ARGUS_CACHE_DIR to a writable folder (it is created when missing)") from None
    return root


def cache_key(
    source: str,
    flags: tuple[str, ...] | list[str],
    nvcc_version: str,
    cutlass_version: str,
    kind: str,
) -> str:
    """Hex sha256 over every input that can change the built artifact.

    ``flags`` must not contain output paths (they differ per build); include paths may
    be present (different header trees give different keys).
    """
    h = hashlib.sha256()
    for part in (f"schema={_SCHEMA}", kind, nvcc_version, cutlass_version, *flags, source):
        data = part.encode()
        h.update(len(data).to_bytes(8, "little"))  # length-prefixed: no ambiguous concatenation
        h.update(data)
    return h.hexdigest()


def atomic_write(path: Path, data: bytes | str) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same directory and
    :func:`os.replace`; a concurrent reader never sees a partial file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    raw = data.encode() if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def atomic_move(src: Path, dst: Path) -> None:
    """Copy ``src`` next to ``dst`` under a temporary name, then :func:`os.replace` it.

    (``src`` usually lives in a build directory that may be on another filesystem.)
    """
    atomic_write(dst, Path(src).read_bytes())


def entry_dir(key: str) -> Path:
    return cache_root() / key


def lookup(key: str) -> dict | None:
    """The stored ``meta.json`` of ``key`` (with ``path``/``log_path`` made absolute), or
    ``None`` when there is no complete entry."""
    d = entry_dir(key)
    meta_path = d / _META
    try:
        meta = json.loads(meta_path.read_text())
    except (OSError, ValueError):
        return None
    artifact = d / meta.get("artifact", "")
    if meta.get("schema") != _SCHEMA or not artifact.is_file():
        return None
    meta["path"] = str(artifact)
    meta["log_path"] = str(d / meta["log"])
    return meta


def store(key: str, name: str, kind: str, artifact: Path, log: str, source: str, meta: dict) -> dict:
    """Move a freshly built ``artifact`` into the cache; returns what :func:`lookup` will.

    ``meta`` holds any JSON-serialisable extras (flags, versions, resource report).
    """
    d = entry_dir(key)
    art_name = f"{name}{KIND_SUFFIX[kind]}"
    atomic_write(d / f"{name}.cu", source)
    atomic_write(d / f"{name}.log", log)
    atomic_move(artifact, d / art_name)
    record = {**meta, "schema": _SCHEMA, "key": key, "name": name, "kind": kind,
              "artifact": art_name, "log": f"{name}.log"}
    atomic_write(d / _META, json.dumps(record, indent=1, sort_keys=True))
    return {**record, "path": str(d / art_name), "log_path": str(d / f"{name}.log")}


def store_failure(key: str, name: str, log: str, source: str) -> Path:
    """Keep the log and source of a failed build under ``failed/<key>/``; returns the log path."""
    d = cache_root() / "failed" / key
    atomic_write(d / f"{name}.cu", source)
    atomic_write(d / f"{name}.log", log)
    return d / f"{name}.log"
