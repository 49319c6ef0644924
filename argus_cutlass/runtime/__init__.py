"""Generic CUDA glue, without torch (cuda-python + ctypes): the layers above build on it.

:mod:`~argus_cutlass.runtime.cuda` (device query, buffers, streams, events),
:mod:`~argus_cutlass.runtime.launch` (device pointers, ``dlopen``-ed ``extern "C"`` functions),
:mod:`~argus_cutlass.runtime.check` (dtype bit conversions, CUDA-event timing).
A family's library, check and time harness live with the family (the GEMM's:
:mod:`argus_cutlass.kernels.gemm.library`, :mod:`argus_cutlass.kernels.gemm.check`).
cuda-python is imported only when a CUDA call is made.
"""

from __future__ import annotations
