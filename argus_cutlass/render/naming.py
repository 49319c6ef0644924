"""Kernel names: the program's own (:meth:`argus_cutlass.dsl.ir.Program.kernel_name`).

A name is a readable label of the configuration (cutlass_library ``procedural_name`` style) and a
hash of every node of the program, so two programs that print different kernels never share a
name. :func:`kernel_name` is a convenience for callers that hold a configuration.
"""

from __future__ import annotations

from typing import Any


def kernel_name(cfg: Any, problem: Any = None) -> str:
    """The kernel name of ``cfg``'s program for ``problem``: ``build_program(cfg, problem).kernel_name()``
    (:func:`argus_cutlass.generate.kernel_name`)."""
    from argus_cutlass.generate import kernel_name as program_kernel_name

    return program_kernel_name(cfg, problem)
