"""Kernel families (peers): each is a config, a problem with its C ABI, a search space, a heuristic,
a program builder (``build_program(config, problem) -> Program``), an invariant catalogue, templates,
a reference and a vendor baseline."""
