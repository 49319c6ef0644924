"""Planted-mistake suites and probes used by the tests and the benchmarks (not by the flow).

* :mod:`argus_cutlass.testing.mutants`: the mutant catalogue (``mutants.toml``, data): each
  mutant is an edit of a GEMM :class:`~argus_cutlass.dsl.ir.Program`, so it changes the
  emitted ``.cu``; the verifier must reject it with its owning rule.
* :mod:`argus_cutlass.testing.gpu`: builds every mutant's ``.cu`` **without** the verifier,
  runs it on a Hopper GPU in a child process with a timeout, and classifies the outcome
  (wrong, hung, crashed, benign, compile_fail).

Nothing here is imported by the package itself; importing it touches no GPU or compiler.
"""

from __future__ import annotations
