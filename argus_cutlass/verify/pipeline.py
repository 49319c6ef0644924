"""G6, the mainloop mbarrier pipeline: closed-form checks and exhaustive interleavings.

The pipeline node (:class:`~argus_cutlass.dsl.ir.Pipeline`) gives the stage count S, each
side's ``PipelineState`` (start phase, wrap, carried across persistent tiles or not), the
``expect_tx`` bytes and the barrier arrival counts. This module checks

* ``pipeline.tx_bytes`` (G6c, arith): ``tx_bytes`` == the bytes of the TMA boxes every CTA
  receives per stage (all boxes of the pipeline's loads, whoever issues them);
* ``pipeline.arrivals`` (arith): the *full* barrier expects the producer's 1 arrival; the
  *empty* barrier (``consumer_arrivals``) and the node's ``consumer_arrivers`` both equal the
  arrivals one release makes in the generated kernel: one per consumer warpgroup reading the
  stage (``mma.atoms_m``) on every CTA whose loads write the stage (``cluster_m + cluster_n - 1``,
  ``release_stage`` in ``templates/gemm/mainloop.j2``);
* ``pipeline.protocol`` (enum): every interleaving of the producer and the consumers over
  ``tiles`` persistent tiles of ``k_tiles`` k-tiles, for every ``k_tiles`` in [1, 2S+1], with the
  consumer's state moved as the kernel moves it per schedule (cooperative: both warpgroups run
  every tile; ping-pong: warpgroup ``t mod 2`` runs tile ``t`` and skips the other's,
  :func:`~argus_cutlass.hw.semantics.consumer_counter`): the consumer of iteration i reads the data
  of iteration i, completely landed, and nobody deadlocks. Breadth-first, so the first violation
  has the shortest trace.

The symbolic counterparts (all i < 2^24, all k-tile counts) are in
:func:`argus_cutlass.verify.smt.check_pipeline_smt`. Both use
:mod:`argus_cutlass.hw.semantics` for the state update and the wait rule.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass
from typing import Any

from argus_cutlass.verify.explore import path_to
from argus_cutlass.dsl.ir import Pipeline, Program
from argus_cutlass.hw.semantics import (
    INT_OPS,
    consumer_counter,
    pipeline_state,
    side_counter,
    tma_boxes_per_stage,
    wait_passes,
)
from argus_cutlass.verify.report import Counterexample, Proof, Violation

Outcome = tuple[list[Proof], list[Violation]]

#: producer: the TMA-issuing thread (warp 0, lane 0 of the producer warpgroup)
PRODUCER_THREAD = {"cta": 0, "threadIdx": 0, "warpgroup": 0, "warp": 0, "lane": 0, "role": "producer"}
#: consumer: the first thread of consumer warpgroup 0 (every consumer thread waits the same way)
CONSUMER_THREAD = {"cta": 0, "threadIdx": 128, "warpgroup": 0, "warp": 4, "lane": 0, "role": "consumer"}


def stage_box_bytes(program: Program, pipe: Pipeline) -> list[tuple[str, int, int]]:
    """(load, boxes per stage, bytes per box) of every TMA load that fills a stage: the boxes a
    CTA *receives* (every slice of a multicast load, from itself and its peers)."""
    out = []
    for load in program.loads:
        if load.name in pipe.loads or load.pipeline == pipe.name:
            out.append((load.name, tma_boxes_per_stage(load), load.copy.box_bytes))
    return out


@dataclass(frozen=True)
class Schedule:
    """How the consumer warpgroups take the pipeline's iterations (from the program's nodes):
    ``stride`` (``schedule.consumer_stride``: 1 cooperative, 2 ping-pong), ``turn_skip`` (a turn
    order makes a ping-pong group advance past the other group's tile), ``readers`` (consumer
    warpgroups reading each stage, ``mma.atoms_m``) and ``writers`` (CTAs whose loads write a
    CTA's stage: ``cluster_m + cluster_n - 1``)."""

    stride: int = 1
    turn_skip: bool = False
    readers: int = 1
    writers: int = 1

    @property
    def arrivers(self) -> int:
        """Arrivals one release makes on a CTA's empty barrier in the generated kernel."""
        return self.readers * self.writers


def schedule_of(program: Program) -> Schedule:
    """The :class:`Schedule` of ``program`` (defaults for a node that is missing)."""
    sch = program.schedule
    stride = sch.consumer_stride if sch is not None else 1
    turn = any("mainloop" in o.points for o in program.orders)
    mma = program.mma
    readers = mma.atoms_m if mma is not None else 1
    launch = program.launch
    writers = launch.cluster_m + launch.cluster_n - 1 if launch is not None else 1
    return Schedule(stride, turn, readers, writers)


def _side_state(side: Any, g: int, k_tiles: int, sched: Schedule | None = None) -> tuple[int, int]:
    if sched is None:
        n = side_counter(INT_OPS, g // k_tiles, g % k_tiles, k_tiles, side.carry_across_tiles)
    else:
        n = consumer_counter(INT_OPS, g // k_tiles, g % k_tiles, k_tiles, side.carry_across_tiles, sched.stride,
                             sched.turn_skip)
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


def check_tx_bytes(program: Program) -> Outcome:
    """pipeline.tx_bytes: the producer's ``expect_tx`` equals the bytes the stage's TMA boxes
    write (VERIFIER.md G6; PTX ISA 9.7.13.15 ``mbarrier.expect_tx``: the phase completes when
    the transaction count reaches zero)."""
    rule = "pipeline.tx_bytes"
    pipe = program.pipeline
    assert pipe is not None
    t0 = time.perf_counter()
    boxes = stage_box_bytes(program, pipe)
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


def check_arrivals(program: Program) -> Outcome:
    """pipeline.arrivals: the full barrier counts 1 producer arrival (one thread arrives with
    ``arrive.expect_tx`` per fill); the empty barrier's count (``consumer_arrivals``) and the node's
    ``consumer_arrivers`` equal the arrivals one release makes in the kernel: one per consumer
    warpgroup reading the stage (``mma.atoms_m``: 2 cooperative, 1 ping-pong) on every CTA whose
    loads write the stage (``cluster_m + cluster_n - 1``; ``release_stage`` arrives on the CTAs of
    its cluster row and column). PTX ISA 9.7.13.15 (``mbarrier.init`` count: the phase completes
    when that many arrivals are made)."""
    rule = "pipeline.arrivals"
    pipe = program.pipeline
    assert pipe is not None
    t0 = time.perf_counter()
    sched = schedule_of(program)
    real = sched.arrivers
    why = (f"{sched.readers} consumer warpgroup(s) reading a stage x {sched.writers} CTA(s) whose loads write it")
    bad = []
    if pipe.producer_arrivals != 1:
        bad.append(f"full barrier initialised with {pipe.producer_arrivals} arrivals, but one producer "
                   f"thread arrives (arrive.expect_tx) per fill")
    if pipe.consumer_arrivals != real:
        effect = ("never completes: the producer waits forever" if pipe.consumer_arrivals > real else
                  "completes before every reader released the stage: the producer overwrites it while "
                  "it is read")
        bad.append(f"empty barrier initialised with {pipe.consumer_arrivals} arrivals, but a release makes "
                   f"{real} ({why}): the empty barrier {effect}")
    if pipe.consumer_arrivers != real:
        bad.append(f"consumer_arrivers {pipe.consumer_arrivers} != the {real} arrivals the release code makes "
                   f"({why})")
    if bad:
        out = []
        for m in bad:
            cex = _cex(pipe, rule, where=str(pipe.loc), iteration=0, k_tiles=1, stage=0,
                       thread=PRODUCER_THREAD if m.startswith("full") else CONSUMER_THREAD,
                       expected=f"full barrier 1 arrival; empty barrier {real} arrivals ({why})", actual=m,
                       params={"producer_arrivals": pipe.producer_arrivals,
                               "consumer_arrivals": pipe.consumer_arrivals,
                               "consumer_arrivers": pipe.consumer_arrivers, "readers": sched.readers,
                               "writers": sched.writers}, engine="arith")
            out.append(Violation(rule, "G6", m, "barrier arrival counts must match the arrivers", str(pipe.loc), cex))
        return [], out
    return [Proof(rule, "G6", "arith", f"full barrier 1 arrival, empty barrier {pipe.consumer_arrivals} "
                  f"arrivals per phase = {why}", 1, time.perf_counter() - t0)], []


def check_release(program: Program) -> Outcome:
    """pipeline.release: a stage is released only after the wgmma batch that read it retired.

    After issuing iteration ``i``'s batch the consumer waits until at most ``mma_in_flight``
    batches are outstanding (``warpgroup_wait<N>``, PTX ISA 9.7.15.7): batches
    ``i - N + 1 .. i`` may still read shared memory. It then releases the stage of iteration
    ``i - release_lag``, which is safe for every ``i`` iff ``release_lag >= N``. Otherwise the
    first unsafe release is at iteration ``release_lag``, of the stage iteration 0 filled, and
    the producer may overwrite it while the MMA reads it."""
    rule = "pipeline.release"
    pipe = program.pipeline
    assert pipe is not None
    t0 = time.perf_counter()
    lag, n = pipe.release_lag, pipe.mma_in_flight
    if n < 0 or lag < 0:
        return [], [Violation(rule, "G6", f"warpgroup_wait<{n}> / release lag {lag}: both count wgmma batches and must "
                              "be >= 0", "mma_in_flight 1 and release_lag 1 (CUTLASS K_PIPE_MMAS)", str(pipe.loc))]
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


def _explore(pipe: Pipeline, real_bytes: int, k_tiles: int, tiles: int,
             sched: Schedule | None = None) -> tuple[int, tuple | None]:
    """BFS over producer/consumer interleavings; returns (states, first violation or None).

    The consumers take the iterations in order (cooperative warpgroups together, ping-pong
    groups by turns). As the kernel does (``consumer_mainloop``), after reading k-tile ``kt`` of a
    tile the consumer releases the stage of the tile's iteration ``kt - release_lag`` (when ``kt >=
    release_lag``) and, after the tile's last k-tile, every stage of the tile it has not released;
    each release adds ``sched.arrivers`` arrivals to the stage's empty barrier.
    A violation is ``(kind, g, stage, detail, trace)``; kind is ``read``, ``deadlock`` or ``range``.
    """
    sched = sched if sched is not None else Schedule(readers=1, writers=pipe.consumer_arrivers)
    S = pipe.stages
    N = k_tiles * tiles
    lag = max(0, pipe.release_lag)
    init = (0, 0, 0, (0,) * S, (0,) * S, (0,) * S, (None,) * S)
    parent: dict[tuple, tuple[tuple, str] | None] = {init: None}
    queue = deque([init])

    def trace_of(state: tuple) -> tuple[str, ...]:
        return path_to(parent, state)

    while queue:
        st = queue.popleft()
        p, c, r, full_done, empty_done, empty_pending, buf = st
        moves = []
        if p < N:
            s, ph = _side_state(pipe.producer, p, k_tiles)
            if not 0 <= s < S:
                return len(parent), ("range", p, s, f"producer stage index {s} outside the {S} stages", trace_of(st))
            if wait_passes(INT_OPS, empty_done[s], ph):
                fd, nb = list(full_done), list(buf)
                if pipe.tx_bytes <= real_bytes:
                    fd[s] += 1  # the transaction count reaches 0
                nb[s] = (p, "complete" if pipe.tx_bytes >= real_bytes else "partial")
                moves.append(((p + 1, c, r, tuple(fd), empty_done, empty_pending, tuple(nb)),
                              f"P{p}:wait empty[{s}] parity {ph}, fill stage {s}"))
        if c < N:
            s, ph = _side_state(pipe.consumer, c, k_tiles, sched)
            if not 0 <= s < S:
                return len(parent), ("range", c, s, f"consumer stage index {s} outside the {S} stages", trace_of(st))
            if wait_passes(INT_OPS, full_done[s], ph):
                if buf[s] != (c, "complete"):
                    got = ("never written" if buf[s] is None else
                           f"iteration {buf[s][0]}'s data ({buf[s][1]})")
                    step = f"C{c}:wait full[{s}] parity {ph}, read stage {s}"
                    return len(parent), ("read", c, s, got, trace_of(st) + (step,))
                ed, ep = list(empty_done), list(empty_pending)
                kt = c % k_tiles
                todo = []
                if kt >= lag:
                    todo.append(r)
                    r2 = r + 1
                else:
                    r2 = r
                if kt == k_tiles - 1:
                    todo += list(range(r2, c + 1))
                    r2 = c + 1
                released = []
                for it in todo:
                    sr, _ = _side_state(pipe.consumer, it, k_tiles, sched)
                    if not 0 <= sr < S:
                        return len(parent), ("range", it, sr, f"consumer releases stage index {sr} outside the {S} "
                                             "stages", trace_of(st))
                    released.append(sr)
                    ep[sr] += sched.arrivers
                    while ep[sr] >= pipe.consumer_arrivals > 0:
                        ep[sr] -= pipe.consumer_arrivals
                        ed[sr] += 1
                rel = f", release stage(s) {released}" if released else ""
                moves.append(((p, c + 1, r2, full_done, tuple(ed), tuple(ep), buf),
                              f"C{c}:wait full[{s}] parity {ph}, read stage {s}{rel}"))
        if not moves and (p < N or c < N):
            return len(parent), ("deadlock", c if c < N else p, -1,
                                 f"producer at iteration {p}, consumer at iteration {c}: both wait forever",
                                 trace_of(st))
        for nxt, step in moves:
            if nxt not in parent:
                parent[nxt] = (st, step)
                queue.append(nxt)
    return len(parent), None


def check_protocol(program: Program, tiles: int | None = None) -> Outcome:
    """pipeline.protocol: exhaustive interleavings of producer and consumer for ``tiles``
    persistent tiles of every k-tile count in [1, 2S+1] (VERIFIER.md G6; pitfall 4: data is
    tagged with the producer iteration, so stale reads that pass the parity check are caught).

    Barrier model (PTX ISA 9.7.13.15): a wait on parity P passes iff the barrier's completed
    phase count has parity != P; the full barrier completes a phase when the expected
    transaction bytes arrived; the empty barrier when its arrival count is reached.
    """
    rule = "pipeline.protocol"
    pipe = program.pipeline
    assert pipe is not None
    t0 = time.perf_counter()
    sched = schedule_of(program)
    if tiles is None:
        # cooperative: 2 tiles (the state carried into the second); ping-pong: 3 (group 1 starts
        # advanced past tile 0, group 0 skips tile 1 before its second tile)
        tiles = sched.stride + 1
    real = sum(n * b for _, n, b in stage_box_bytes(program, pipe))
    states = 0
    S = pipe.stages
    for k_tiles in range(1, 2 * S + 2):
        n, bad = _explore(pipe, real, k_tiles, tiles, sched)
        states += n
        if bad is None:
            continue
        kind, g, s, detail, trace = bad
        if kind == "read":
            cs, cph = _side_state(pipe.consumer, g, k_tiles, sched)
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
    how = ("ping-pong: warpgroup t mod 2 runs tile t" if sched.stride == 2 else
           f"{sched.readers} cooperative warpgroup(s) per tile")
    return [Proof(rule, "G6", "enum",
                  f"all interleavings of {tiles} tiles x k_tiles in [1, {2 * S + 1}] ({how}; {states} states): "
                  f"every read sees its own iteration's complete data, no deadlock", states,
                  time.perf_counter() - t0)], []
