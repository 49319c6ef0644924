"""G6, the mainloop mbarrier pipeline: closed-form checks and exhaustive interleavings.

The pipeline node (:class:`~argus_cutlass.dsl.ir.Pipeline`) gives the stage count S, each
side's ``PipelineState`` (start phase, wrap, carried across persistent tiles or not), the
``expect_tx`` bytes and the barrier arrival counts. This module checks

* ``pipeline.tx_bytes`` (G6c, arith): ``tx_bytes`` == the bytes the stage's TMA boxes write;
* ``pipeline.arrivals`` (arith): the *full* barrier expects the producer's 1 arrival, the
  *empty* barrier as many arrivals as one release makes (consumer warpgroups x reader CTAs);
* ``pipeline.protocol`` (enum): every interleaving of one producer and one consumer over
  ``tiles`` persistent tiles of ``k_tiles`` k-tiles, for every ``k_tiles`` in [1, 2S+1]:
  the consumer of iteration i reads the data of iteration i, completely landed, and nobody
  deadlocks. Breadth-first, so the first violation has the shortest trace.

The symbolic counterparts (all i < 2^24, all k-tile counts) are in
:func:`argus_cutlass.verify.smt.check_pipeline_smt`. Both use
:mod:`argus_cutlass.hw.semantics` for the state update and the wait rule.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any

from argus_cutlass.dsl.ir import DslProgram, Pipeline
from argus_cutlass.verify.report import Counterexample, Proof, Violation
from argus_cutlass.hw.semantics import (
    INT_OPS,
    pipeline_state,
    side_counter,
    tma_boxes_per_stage,
    wait_passes,
)

Outcome = tuple[list[Proof], list[Violation]]

#: producer: the TMA-issuing thread (warp 0, lane 0 of the producer warpgroup)
PRODUCER_THREAD = {"cta": 0, "threadIdx": 0, "warpgroup": 0, "warp": 0, "lane": 0, "role": "producer"}
#: consumer: the first thread of consumer warpgroup 0 (every consumer thread waits the same way)
CONSUMER_THREAD = {"cta": 0, "threadIdx": 128, "warpgroup": 0, "warp": 4, "lane": 0, "role": "consumer"}


def stage_box_bytes(dsl: DslProgram, pipe: Pipeline) -> list[tuple[str, int, int]]:
    """(load, boxes per stage, bytes per box) of every TMA load that fills a stage."""
    out = []
    for load in dsl.loads:
        if load.name in pipe.loads:
            out.append((load.name, tma_boxes_per_stage(load), load.copy.box_bytes))
    return out


def _side_state(side: Any, g: int, k_tiles: int) -> tuple[int, int]:
    n = side_counter(INT_OPS, g // k_tiles, g % k_tiles, k_tiles, side.carry_across_tiles)
    return pipeline_state(INT_OPS, n, side.wrap, side.start_phase)


def _cex(pipe: Pipeline, rule: str, *, where: str, iteration: int, k_tiles: int, stage: int,
         thread: dict, expected: str, actual: str, chain: tuple[str, ...] = (),
         params: dict | None = None, trace: tuple[str, ...] = (), engine: str = "enum") -> Counterexample:
    return Counterexample(
        invariant="G6", rule=rule, engine=engine, program_point="mainloop.pipeline", where=where,
        iteration=iteration, stage=stage, k_block=-1, slot={}, thread=dict(thread),
        register="", smem_offset={}, expected=expected, actual=actual,
        provenance=(f"S={pipe.stages}; producer start phase {pipe.producer.start_phase}, wrap "
                    f"{pipe.producer.wrap}, carried {pipe.producer.carry_across_tiles}; consumer start "
                    f"phase {pipe.consumer.start_phase}, wrap {pipe.consumer.wrap}, carried "
                    f"{pipe.consumer.carry_across_tiles}; tx {pipe.tx_bytes} bytes"),
        k_tile=iteration % k_tiles if k_tiles else -1, chain=chain,
        params=params if params is not None else {"k_tiles": k_tiles, "tile": iteration // max(k_tiles, 1)},
        trace=trace,
    )


def check_tx_bytes(dsl: DslProgram) -> Outcome:
    """pipeline.tx_bytes: the producer's ``expect_tx`` equals the bytes the stage's TMA boxes
    write (VERIFIER.md G6; PTX ISA 9.7.13.15 ``mbarrier.expect_tx``: the phase completes when
    the transaction count reaches zero)."""
    rule = "pipeline.tx_bytes"
    pipe = dsl.pipeline
    assert pipe is not None
    t0 = time.perf_counter()
    boxes = stage_box_bytes(dsl, pipe)
    real = sum(n * b for _, n, b in boxes)
    terms = " + ".join(f"{name} {n} x {b}" for name, n, b in boxes)
    if pipe.tx_bytes == real:
        return [Proof(rule, "G6", "arith", f"expect_tx {pipe.tx_bytes} bytes == {terms} box bytes per stage",
                      1, time.perf_counter() - t0)], []
    # Short expect_tx: the phase can complete before the last bytes land, and the leftover complete-tx
    # bytes are counted against the barrier's next phase (a transaction-count underflow). PTX does not
    # specify the effect; the H200 hung on all three tx-count mutants (bench/data/mutants_h200.json).
    kind = ("never completes (deadlock)" if pipe.tx_bytes > real else
            "may complete before all bytes land, and the leftover bytes underflow its next phase's "
            "transaction count (effect unspecified; the H200 hangs)")
    cex = _cex(pipe, rule, where=str(pipe.loc), iteration=0, k_tiles=1, stage=0, thread=PRODUCER_THREAD,
               expected=f"expect_tx {real} bytes ({terms})",
               actual=f"expect_tx {pipe.tx_bytes} bytes: the full barrier of stage 0 {kind}",
               chain=tuple(f"TMA {name}: {n} boxes x {b} bytes -> stage 0" for name, n, b in boxes)
               + ("full barrier of stage 0",), params={}, engine="arith")
    msg = (f"expect_tx {pipe.tx_bytes} bytes != {real} bytes the TMA boxes of a stage write ({terms}); "
           f"the full barrier {kind}")
    return [], [Violation(rule, "G6", msg, "expect_tx must be the sum of the stage's TMA box bytes",
                          str(pipe.loc), cex)]


def check_arrivals(dsl: DslProgram) -> Outcome:
    """pipeline.arrivals: the full barrier counts 1 producer arrival; the empty barrier counts
    as many arrivals as one release makes (``PipelineTmaAsync::Params.num_consumers``)."""
    rule = "pipeline.arrivals"
    pipe = dsl.pipeline
    assert pipe is not None
    t0 = time.perf_counter()
    bad = []
    if pipe.producer_arrivals != 1:
        bad.append(f"full barrier initialised with {pipe.producer_arrivals} arrivals, but one producer "
                   f"thread arrives (arrive.expect_tx) per fill")
    if pipe.consumer_arrivals != pipe.consumer_arrivers:
        bad.append(f"empty barrier initialised with {pipe.consumer_arrivals} arrivals, but a release makes "
                   f"{pipe.consumer_arrivers} (consumer warpgroups x reader CTAs)")
    if bad:
        return [], [Violation(rule, "G6", m, "barrier arrival counts must match the arrivers", str(pipe.loc))
                    for m in bad]
    return [Proof(rule, "G6", "arith", f"full barrier 1 arrival, empty barrier {pipe.consumer_arrivals} "
                  f"arrivals per phase", 1, time.perf_counter() - t0)], []


def check_release(dsl: DslProgram) -> Outcome:
    """pipeline.release: a stage is released only after the wgmma batch that read it retired.

    After issuing iteration ``i``'s batch the consumer waits until at most ``mma_in_flight``
    batches are outstanding (``warpgroup_wait<N>``, PTX ISA 9.7.15.7): batches
    ``i - N + 1 .. i`` may still read shared memory. It then releases the stage of iteration
    ``i - release_lag``, which is safe for every ``i`` iff ``release_lag >= N``. Otherwise the
    first unsafe release is at iteration ``release_lag``, of the stage iteration 0 filled, and
    the producer may overwrite it while the MMA reads it."""
    rule = "pipeline.release"
    pipe = dsl.pipeline
    assert pipe is not None
    t0 = time.perf_counter()
    lag, n = pipe.release_lag, pipe.mma_in_flight
    if lag >= n:
        return [Proof(rule, "G6", "arith", f"release of iteration i - {lag} after warpgroup_wait<{n}>: the batch "
                      f"that read the stage has retired for every i", 1, time.perf_counter() - t0)], []
    i = lag
    stage = (i - lag) % pipe.stages
    cex = Counterexample(
        "G6", rule, "arith", "mainloop.pipeline", str(pipe.loc), i, stage, -1, {}, dict(CONSUMER_THREAD), "", {},
        f"stage {stage} released after the wgmma batch of iteration {i - lag} retired",
        f"released at iteration {i} with batches {max(0, i - n + 1)}..{i} still in flight (warpgroup_wait<{n}>)",
        "release iteration i - release_lag after warpgroup_wait<mma_in_flight>", params={"i": i})
    return [], [Violation(rule, "G6",
                          f"the consumer releases the stage of iteration i - {lag} while warpgroup_wait<{n}> leaves "
                          f"{n} batch(es) in flight: at iteration {i} stage {stage} is released while its wgmma may "
                          "still read it (the producer can overwrite it)",
                          "release the previous stage (lag >= the wgmma batches left in flight)", str(pipe.loc), cex)]


def _explore(pipe: Pipeline, real_bytes: int, k_tiles: int, tiles: int) -> tuple[int, tuple | None]:
    """BFS over producer/consumer interleavings; returns (states, first violation or None).

    A violation is ``(kind, g, stage, detail, trace)``; kind is ``read``, ``deadlock`` or ``range``.
    """
    S = pipe.stages
    N = k_tiles * tiles
    init = (0, 0, (0,) * S, (0,) * S, (0,) * S, (None,) * S)
    parent: dict[tuple, tuple[tuple, str] | None] = {init: None}
    queue = deque([init])

    def trace_of(state: tuple) -> tuple[str, ...]:
        out = []
        while parent[state] is not None:
            state, step = parent[state]  # type: ignore[misc]
            out.append(step)
        return tuple(reversed(out))

    while queue:
        st = queue.popleft()
        p, c, full_done, empty_done, empty_pending, buf = st
        moves = []
        if p < N:
            s, ph = _side_state(pipe.producer, p, k_tiles)
            if s >= S:
                return len(parent), ("range", p, s, f"producer stage index {s} >= {S} stages", trace_of(st))
            if wait_passes(INT_OPS, empty_done[s], ph):
                fd, nb = list(full_done), list(buf)
                if pipe.tx_bytes <= real_bytes:
                    fd[s] += 1  # the transaction count reaches 0
                nb[s] = (p, "complete" if pipe.tx_bytes >= real_bytes else "partial")
                moves.append(((p + 1, c, tuple(fd), empty_done, empty_pending, tuple(nb)),
                              f"P{p}:wait empty[{s}] parity {ph}, fill stage {s}"))
        if c < N:
            s, ph = _side_state(pipe.consumer, c, k_tiles)
            if s >= S:
                return len(parent), ("range", c, s, f"consumer stage index {s} >= {S} stages", trace_of(st))
            if wait_passes(INT_OPS, full_done[s], ph):
                if buf[s] != (c, "complete"):
                    got = ("never written" if buf[s] is None else
                           f"iteration {buf[s][0]}'s data ({buf[s][1]})")
                    step = f"C{c}:wait full[{s}] parity {ph}, read stage {s}"
                    return len(parent), ("read", c, s, got, trace_of(st) + (step,))
                ed, ep = list(empty_done), list(empty_pending)
                ep[s] += pipe.consumer_arrivers
                while ep[s] >= pipe.consumer_arrivals > 0:
                    ep[s] -= pipe.consumer_arrivals
                    ed[s] += 1
                moves.append(((p, c + 1, full_done, tuple(ed), tuple(ep), buf),
                              f"C{c}:wait full[{s}] parity {ph}, read+release stage {s}"))
        if not moves and (p < N or c < N):
            return len(parent), ("deadlock", c if c < N else p, -1,
                                 f"producer at iteration {p}, consumer at iteration {c}: both wait forever",
                                 trace_of(st))
        for nxt, step in moves:
            if nxt not in parent:
                parent[nxt] = (st, step)
                queue.append(nxt)
    return len(parent), None


def check_protocol(dsl: DslProgram, tiles: int = 2) -> Outcome:
    """pipeline.protocol: exhaustive interleavings of producer and consumer for ``tiles``
    persistent tiles of every k-tile count in [1, 2S+1] (VERIFIER.md G6; pitfall 4: data is
    tagged with the producer iteration, so stale reads that pass the parity check are caught).

    Barrier model (PTX ISA 9.7.13.15): a wait on parity P passes iff the barrier's completed
    phase count has parity != P; the full barrier completes a phase when the expected
    transaction bytes arrived; the empty barrier when its arrival count is reached.
    """
    rule = "pipeline.protocol"
    pipe = dsl.pipeline
    assert pipe is not None
    t0 = time.perf_counter()
    real = sum(n * b for _, n, b in stage_box_bytes(dsl, pipe))
    states = 0
    S = pipe.stages
    for k_tiles in range(1, 2 * S + 2):
        n, bad = _explore(pipe, real, k_tiles, tiles)
        states += n
        if bad is None:
            continue
        kind, g, s, detail, trace = bad
        if kind == "read":
            cs, cph = _side_state(pipe.consumer, g, k_tiles)
            ps, _ = _side_state(pipe.producer, g, k_tiles)
            expected = f"stage {s} holds iteration {g}'s data, all {real} bytes landed"
            actual = f"stage {s} holds {detail}"
            thread = CONSUMER_THREAD
            chain = (f"TMA of iteration {g} -> stage {ps} (producer)",
                     f"full[{cs}] wait parity {cph} (consumer)", f"GMMA reads stage {cs}")
            msg = (f"consumer iteration {g} (tile {g // k_tiles}, k_tile {g % k_tiles}, k_tiles={k_tiles}) "
                   f"reads stage {s}, which holds {detail}")
        elif kind == "deadlock":
            expected = "both sides make progress until every iteration is consumed"
            actual = detail
            thread = CONSUMER_THREAD
            chain = ()
            msg = f"deadlock with k_tiles={k_tiles}, {tiles} tiles: {detail}"
        else:
            expected = f"stage index < {S}"
            actual = detail
            thread = PRODUCER_THREAD if detail.startswith("producer") else CONSUMER_THREAD
            chain = ()
            msg = f"iteration {g}: {detail}"
        cex = _cex(pipe, rule, where=str(pipe.loc), iteration=g, k_tiles=k_tiles, stage=s, thread=thread,
                   expected=expected, actual=actual, chain=chain, trace=trace)
        return [], [Violation(rule, "G6", msg, "stage = i mod S on both sides, consumer parity (i / S) & 1, "
                              "producer parity 1 ^ that, state carried across tiles", str(pipe.loc), cex)]
    return [Proof(rule, "G6", "enum",
                  f"all interleavings of {tiles} tiles x k_tiles in [1, {2 * S + 1}] ({states} states): "
                  f"every read sees its own iteration's complete data, no deadlock", states,
                  time.perf_counter() - t0)], []
