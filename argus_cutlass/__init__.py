"""argus_cutlass: verified CuTe/CUTLASS kernel generation for NVIDIA Hopper (sm_90a).

Importing the package has no side effects: no GPU, compiler or solver is touched
until a function that needs one is called.
"""

from __future__ import annotations

__version__ = "0.1.0"
