"""Compile rendered ``.cu`` sources with nvcc, through a content-addressed cache.

:mod:`~argus_cutlass.build.toolchain` finds nvcc and the CUTLASS headers,
:mod:`~argus_cutlass.build.nvcc` runs nvcc (``compile_cu``, ``compile_many``),
:mod:`~argus_cutlass.build.cache` stores the artifacts. Importing runs nothing.
"""

from __future__ import annotations
