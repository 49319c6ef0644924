"""How kernels are timed: the names of the timing methods and the default, constants only (no import), so that
the command line can offer them without loading the kernel stack.

* ``"graph"``: calls replayed from a CUDA graph over operands rotated past the L2
  (:func:`argus_cutlass.runtime.check.time_graph`; the GEMM's :func:`argus_cutlass.kernels.gemm.check.time_gemm`
  and cuBLAS's :func:`argus_cutlass.kernels.gemm.baseline.cublas_time`): how a serving engine replays a layer, and
  the usual way to time many short launches (back-to-back replays without the host's per-launch path, inputs
  rotated past the cache);
* ``"launch"``: one launch between its own CUDA events on one operand set
  (:func:`argus_cutlass.runtime.check.time_kernel`); a ~25 us kernel then also times the host's per-call path, which
  moved per-launch times by 15 % between machines (``bench/RESULTS.md``, session 27).
"""

from __future__ import annotations

#: the timing methods
TIMINGS = ("graph", "launch")
#: the default of every GEMM timing (``time_gemm``, ``cublas_time``, ``generate.Options``, ``argus-cutlass gemm
#: --timing``, the tuners): from CUDA graphs since session 28, when the graph path's GPU tests passed on an H200
DEFAULT_TIMING = "graph"
#: what a record without a ``timing`` field was timed by (everything measured before session 28)
LEGACY_TIMING = "launch"
