"""The mixture-of-experts (MoE) family with SwiGLU experts (issue 11).

========================  ===================================================================
``problem``               :class:`~.problem.MoEProblem` (sizes, rules, flops, the weight-traffic
                          floor, router-output checks) and the ``ANCHORS.md`` model shapes
(routing)                 the routing semantics live one layer down, in
                          :mod:`argus_cutlass.hw.routing` (the verifier reads them too):
                          ``RoutingPlan`` (counts, offsets, the permuted row map and its inverse,
                          the invariants with counterexamples, group tiles) and ``make_routing``
                          (uniform, skewed, zero_experts, all_to_one, explicit sizes)
``reference``             the float64 numpy and fp32 torch references of the layer
``baseline``              the torch baseline (sort + two ``torch._grouped_mm``)
========================  ===================================================================

``config`` / ``program``   :class:`~.config.MoEConfig` and :func:`~.program.build_layer` (the layer's
                          DSL programs: routing, two grouped GEMMs on the GEMM mainloop nodes,
                          combine); verified by :mod:`argus_cutlass.verify.moe`, printed by
                          :mod:`argus_cutlass.render.moe`
``library`` / ``check``   the built ``.so`` and the input rules; numerics and timing on a GPU
``heuristics`` / ``space``  the default configuration (by T bucket; the large-T GEMMs walk their tiles
                          in bands of m-tiles derived from L2 traffic) and the knob grid

On the H200 (``bench/RESULTS.md``, issue 11): both T buckets pass their GPU tests and are benchmarked
against torch's ``_grouped_mm`` layer; the small-T bucket (``heuristics.small_t_config``, T <= 256) runs
64-row ping-pong tiles, or 128-row ones where an expert's group outgrows 64 rows
(``heuristics.small_t_tile_m``); tuned entries of the bench cells are shipped in ``agent/tuned_h200.json``.
Not built: a swap-AB / split-K small-T path.
"""
