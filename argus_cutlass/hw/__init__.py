"""Hardware semantics written once, for numpy (enumeration) and z3 (SMT): TMA box placement,
swizzles, GMMA operand reads and descriptors, mbarrier pipeline state, the accumulator and
stmatrix fragments, the CUTLASS tile-scheduler walk. ``dsl`` and ``verify`` sit above it."""
