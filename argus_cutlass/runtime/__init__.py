"""Load and run built kernels without torch (cuda-python + ctypes).

:mod:`~argus_cutlass.runtime.cuda` (device query, buffers, streams, events),
:mod:`~argus_cutlass.kernels.gemm.problem` (``GemmProblem`` and its TMA rules),
:mod:`~argus_cutlass.runtime.launch` (``GemmKernelLibrary``),
:mod:`~argus_cutlass.kernels.gemm.reference` (fp32 reference GEMM kernel),
:mod:`~argus_cutlass.runtime.check` (``run_and_check``, ``time_kernel``, ``time_gemm``).
cuda-python is imported only when a CUDA call is made.
"""

from __future__ import annotations
