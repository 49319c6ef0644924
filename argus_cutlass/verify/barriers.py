"""Named barriers and turn orders: ``barrier.named`` (B1) and ``turn.order`` (B2).

Hardware semantics (PTX ISA 9.7.13.1, ``bar``/``barrier``): a CTA has 16 named barriers, ids
0..15 (id 0 is ``__syncthreads``); ``bar.sync id, n`` and ``bar.arrive id, n`` count the
executing warp's threads towards the barrier's ``n`` (a multiple of 32); ``bar.sync`` waits
until ``n`` threads arrived, ``bar.arrive`` does not wait. "When a barrier completes, the waiting
threads are restarted without delay, and the barrier is reinitialized"; every warp using one
barrier must pass the same thread count, and a warp must not execute another barrier instruction
on a barrier it arrived at before that barrier resets ("Care must be taken to keep a warp from
executing more barrier instructions than intended (barrier.arrive followed by any other barrier
instruction to the same barrier) prior to the reset of the barrier").

* :func:`check_named_barriers` (``barrier.named``, arith): ids in 1..15 and distinct, clear of
  CUTLASS's stream-K fixup barriers (``ReservedNamedBarriers::StreamkBarrier0/1`` = 4, 5; used by
  ``PersistentTileSchedulerSm90StreamK::fixup``) when the schedule is stream-K or split-K, thread
  counts positive multiples of 32 and at most the launch's threads, every barrier a
  :class:`~argus_cutlass.dsl.ir.TurnOrder` or the epilogue's
  :class:`~argus_cutlass.dsl.ir.SmemStage` names exists, and the epilogue barrier counts the
  threads that reach it (``128 * atoms_m``: the consumer warpgroups of one tile).
* :func:`check_turn_orders` (``turn.order``, enum): the barriers of a turn order are distinct
  from each other and from the epilogue barriers, each counts exactly its participants (one
  syncing and one arriving warpgroup: 2 x 128 threads), and every interleaving of the groups for
  small tile counts is explored with the named-barrier semantics above: no deadlock, mutual
  exclusion of each point, and strict alternation in tile order.

Both return ``(proofs, violations)`` and never raise on a program they are given.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any

from argus_cutlass.verify.explore import path_to
from argus_cutlass.verify.report import Counterexample, Proof, Violation

Outcome = tuple[list[Proof], list[Violation]]

RULE_NAMED = "barrier.named"
RULE_TURN = "turn.order"
#: catalogue ids (invariants/common.toml)
INV_NAMED = "B1"
INV_TURN = "B2"

#: hardware named barriers per CTA (PTX ISA 9.7.13.1)
NUM_BARRIERS = 16
#: ids CUTLASS's stream-K / split-K fixup syncs on (cutlass/arch/barrier.h ReservedNamedBarriers::
#: StreamkBarrier0 = 4, StreamkBarrier1 = 5; sm90_tile_scheduler_stream_k.hpp ``fixup``:
#: NamedBarrierManager<128, StreamkBarrier0, 2>)
STREAMK_RESERVED = (4, 5)
#: threads of one group of a turn order (a consumer warpgroup)
GROUP_THREADS = 128
#: the turn-order enumeration covers per-group tile counts dealt from 0 .. groups * MAX_TILES + 1
#: units ((n, n) and (n + 1, n) for n <= MAX_TILES with two groups)
MAX_TILES = 3


def _int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _cex(inv: str, rule: str, engine: str, point: str, where: str, expected: str, actual: str, *,
         thread: dict | None = None, params: dict | None = None, trace: tuple[str, ...] = (),
         provenance: str = "", iteration: int = -1, chain: tuple[str, ...] = ()) -> Counterexample:
    return Counterexample(
        invariant=inv, rule=rule, engine=engine, program_point=point, where=where, iteration=iteration,
        stage=-1, k_block=-1, slot={}, thread=dict(thread or {}), register="", smem_offset={},
        expected=expected, actual=actual, provenance=provenance, params=dict(params or {}), trace=trace,
        chain=chain)


def _safe(rule: str, inv: str, fn: Any, program: Any) -> Outcome:
    """Run a check; an internal error on a malformed program becomes a violation, never a raise."""
    try:
        return fn(program)
    except Exception as exc:  # noqa: BLE001 - the verifier never raises on a program it is given
        return [], [Violation(rule, inv, f"malformed program: {type(exc).__name__}: {exc}",
                              "every node field must have the type its docstring gives")]


# ------------------------------------------------------------------------------------------------ B1


def epilogue_barrier_names(program: Any) -> list[str]:
    """Names of the epilogue's barriers: the staging node's ``barrier`` and, when consumer groups
    run their epilogues separately (a turn order), ``<barrier>.<g>`` for groups ``g >= 1`` (the
    template syncs group ``g`` on that barrier)."""
    st = program.staging
    if st is None:
        return []
    names = [st.barrier]
    for order in program.orders:
        if _int(order.groups):
            names += [f"{st.barrier}.{g}" for g in range(1, order.groups)]
    return list(dict.fromkeys(names))


def _epilogue_mma(program: Any) -> Any:
    st = program.staging
    hit = [m for m in program.mmas if st is not None and m.acc == st.src]
    return hit[0] if hit else program.mma


def check_named_barriers(program: Any) -> Outcome:
    """``barrier.named`` (B1): see the module docstring. One proof for the whole program, or
    one violation per broken fact (each with an ``arith`` counterexample record)."""
    return _safe(RULE_NAMED, INV_NAMED, _check_named, program)


def _check_named(program: Any) -> Outcome:
    t0 = time.perf_counter()
    bars = list(program.barriers)
    epi_names = epilogue_barrier_names(program)
    if not bars and not program.orders and not epi_names:
        return [], []
    out: list[Violation] = []
    launch = program.launch
    cta_threads = launch.threads if launch is not None and _int(launch.threads) else None
    sched = program.schedule
    decomposition = getattr(sched, "decomposition", "persistent")

    def bad(b: Any, expected: str, actual: str, msg: str, hint: str, params: dict | None = None) -> None:
        name = getattr(b, "name", "?")
        where = str(getattr(b, "loc", ""))
        out.append(Violation(RULE_NAMED, INV_NAMED, f"named barrier {name!r}: {msg}", hint, where,
                             _cex(INV_NAMED, RULE_NAMED, "arith", f"named_barrier[{name}]", where, expected, actual,
                                  params=params)))

    for b in bars:
        if not _int(b.id) or not 0 <= b.id < NUM_BARRIERS:
            bad(b, f"an id in 1..{NUM_BARRIERS - 1}", f"id {b.id!r}",
                f"id {b.id!r} is not a hardware barrier (a CTA has {NUM_BARRIERS}, ids 0..{NUM_BARRIERS - 1})",
                "PTX ISA 9.7.13.1: bar.sync/bar.arrive take a barrier id 0..15")
        elif b.id == 0:
            bad(b, f"an id in 1..{NUM_BARRIERS - 1}", "id 0",
                "id 0 is the barrier of __syncthreads (bar.sync 0): a partial sync on it interferes with every "
                "CTA-wide sync", "use an id in 1..15 (the GEMM program starts at 8)")
        elif decomposition in ("streamk", "splitk") and b.id in STREAMK_RESERVED:
            bad(b, f"an id outside {STREAMK_RESERVED}", f"id {b.id}",
                f"id {b.id} is one of CUTLASS's stream-K fixup barriers {STREAMK_RESERVED} "
                f"(ReservedNamedBarriers::StreamkBarrier0/1), which a {decomposition} schedule syncs on",
                "start the program's ids at 8 (CUTLASS's FirstUserBarrier)")
        if not _int(b.threads) or b.threads <= 0 or b.threads % 32:
            bad(b, "a positive multiple of 32 threads", f"{b.threads!r} threads",
                f"thread count {b.threads!r} is not a positive multiple of the warp size",
                "PTX ISA 9.7.13.1: the thread count must be a multiple of the warp size")
        elif cta_threads is not None and b.threads > cta_threads:
            bad(b, f"<= {cta_threads} threads (the launch)", f"{b.threads} threads",
                f"counts {b.threads} threads but the CTA launches {cta_threads}: bar.sync never completes",
                "a barrier can count at most the CTA's threads", {"launch_threads": cta_threads})
    by_id: dict[int, list[Any]] = {}
    for b in bars:
        if _int(b.id):
            by_id.setdefault(b.id, []).append(b)
    for i, group in sorted(by_id.items()):
        if len(group) > 1:
            names = [g.name for g in group]
            bad(group[1], "one node per hardware id", f"id {i} used by {names}",
                f"id {i} is also used by {names[0]!r}: two barriers on one hardware id count each other's "
                f"threads ({' + '.join(str(g.threads) for g in group)} arrivals against one count)",
                "give every named barrier its own id")
    have = {b.name: b for b in bars}
    refs: list[tuple[str, str, Any]] = []
    for order in program.orders:
        for row in (order.barriers if isinstance(order.barriers, tuple) else ()):
            for name in (row if isinstance(row, tuple) else (row,)):
                refs.append((name, f"turn order {order.name!r}", order))
    for name in epi_names:
        refs.append((name, "the epilogue", program.staging))
    for name, who, node in refs:
        if name not in have:
            where = str(getattr(node, "loc", ""))
            out.append(Violation(RULE_NAMED, INV_NAMED, f"{who} syncs on named barrier {name!r}, which is not "
                                 f"declared (have {sorted(have)})", "declare it with named_barrier()", where,
                                 _cex(INV_NAMED, RULE_NAMED, "arith", f"named_barrier[{name}]", where,
                                      f"a NamedBarrier node {name!r}", "none")))
    mma = _epilogue_mma(program)
    epi_checked = []
    if mma is not None and _int(mma.atoms_m):
        want = 128 * mma.atoms_m
        for name in epi_names:
            b = have.get(name)
            if b is None or not _int(b.threads):
                continue
            epi_checked.append(f"{name} {b.threads}")
            if b.threads != want:
                verdict = ("completes before every consumer thread arrived (the staging buffer is read while "
                           "other warps still write it)" if b.threads < want else "never completes (deadlock)")
                bad(b, f"{want} threads (128 x {mma.atoms_m} consumer warpgroup(s) of MMA {mma.name!r} reach it)",
                    f"{b.threads} threads", f"the epilogue barrier counts {b.threads} threads but {want} reach it "
                    f"(128 x atoms_m={mma.atoms_m}): its bar.sync {verdict}",
                    "the epilogue barrier counts the threads of the consumer warpgroups that share a tile",
                    {"atoms_m": mma.atoms_m})
    if out:
        return [], out
    ids = sorted(b.id for b in bars)
    parts = [f"{len(bars)} named barrier(s), ids {ids} in 1..15 and distinct"]
    if decomposition in ("streamk", "splitk"):
        parts.append(f"clear of the stream-K fixup ids {STREAMK_RESERVED}")
    parts.append("thread counts multiples of 32" + (f" <= {cta_threads}" if cta_threads else ""))
    if epi_checked:
        parts.append(f"epilogue {', '.join(epi_checked)} threads == 128 x atoms_m")
    return [Proof(RULE_NAMED, INV_NAMED, "arith", "; ".join(parts), len(bars), time.perf_counter() - t0)], []


# ------------------------------------------------------------------------------------------------ B2


def check_turn_orders(program: Any) -> Outcome:
    """``turn.order`` (B2), for every :class:`~argus_cutlass.dsl.ir.TurnOrder` of the program.

    Structure (arith): one barrier per (point, group); every barrier declared, distinct by name
    and hardware id from the order's other barriers and from the epilogue's; each counts its
    participants exactly: per phase one group ``bar.sync``-s and one ``bar.arrive``-s, 2 x 128
    threads (a count that differs is undefined behaviour by PTX ISA 9.7.13.1).

    Interleavings (enum): the groups run the protocol the template prints: the group before
    ``first`` in the cycle (``(first - 1) % groups``) ``bar.arrive``-s on ``barriers[p][first]`` of
    every point ``p``; then per turn and
    point ``p`` in order: ``bar.sync barriers[p][g]``, the point, ``bar.arrive
    barriers[p][(g + 1) % groups]``. The tile scheduler deals a CTA's units to the groups in turn
    (group ``g`` takes units ``g, g + groups, ...``), so for every unit count ``0 ..
    groups * MAX_TILES + 1`` (two groups: tile counts (n, n) and (n + 1, n), n <= 3) every
    interleaving is explored breadth-first, a warpgroup's 128 threads issuing each barrier
    instruction as one step, barriers keyed by hardware id (the count carries over when a phase
    completes). Proved: no deadlock, no warp re-arriving at a barrier before it resets, at most one
    group inside each point, and the groups enter each point in unit order (group ``k % groups``'s
    tile ``k // groups`` is the ``k``-th entry). The first violation comes with the shortest
    schedule prefix that reaches it.
    """
    proofs: list[Proof] = []
    violations: list[Violation] = []
    for order in program.orders:
        p, v = _safe(RULE_TURN, INV_TURN, lambda prog, o=order: _check_order(prog, o), program)
        proofs += p
        violations += v
    return proofs, violations


def _group_thread(program: Any, g: int) -> dict[str, int]:
    """The first thread of consumer group ``g`` (its warpgroup from the consumer role)."""
    wgs: tuple = ()
    for r in program.roles:
        if r.kind == "consumer":
            wgs = tuple(r.warpgroups)
    wg = wgs[g] if g < len(wgs) and _int(wgs[g]) else g + 1
    return {"cta": 0, "threadIdx": 128 * wg, "warpgroup": g, "warp": 4 * wg, "lane": 0, "role": "consumer"}


def _check_order(program: Any, order: Any) -> Outcome:
    t0 = time.perf_counter()
    where = str(order.loc)
    name = order.name
    out: list[Violation] = []

    def struct(msg: str, expected: str, actual: str, hint: str, point: str = "") -> None:
        out.append(Violation(RULE_TURN, INV_TURN, f"turn order {name!r}: {msg}", hint, where,
                             _cex(INV_TURN, RULE_TURN, "arith", f"turn_order[{name}]{'.' + point if point else ''}",
                                  where, expected, actual)))

    G = order.groups
    points = tuple(order.points) if isinstance(order.points, tuple) else ()
    rows = order.barriers if isinstance(order.barriers, tuple) else ()
    if not _int(G) or G < 1:
        struct(f"groups {G!r} must be an int >= 1", "groups >= 1", f"groups {G!r}", "one group per consumer warpgroup")
        return [], out
    if not _int(order.first) or not 0 <= order.first < G:
        struct(f"first group {order.first!r} is not one of the {G} groups", f"first in 0..{G - 1}",
               f"first {order.first!r}", "the group that takes the first unit goes first")
        return [], out
    if len(rows) != len(points) or any(not isinstance(r, tuple) or len(r) != G for r in rows):
        struct(f"needs {len(points)} rows of {G} barriers (one per point and group), got {rows!r}",
               f"{len(points)} x {G} barriers", repr(rows), "barriers[point][group]")
        return [], out
    have = {b.name: b for b in program.barriers}
    missing = sorted({n for r in rows for n in r if n not in have})
    if missing:
        struct(f"barriers {missing} are not declared", "declared NamedBarrier nodes", f"missing {missing}",
               "declare them with named_barrier()")
        return [], out
    cons = [r for r in program.roles if r.kind == "consumer"]
    if cons and G > len(cons[0].warpgroups):
        struct(f"{G} groups but the consumer role has {len(cons[0].warpgroups)} warpgroups",
               f"<= {len(cons[0].warpgroups)} groups", f"{G} groups", "one group per consumer warpgroup")
    sched = program.schedule
    # GEMM ping-pong: a turn is a scheduler unit (each group owns every G-th tile). Attention: every
    # group runs every tile and a turn is one GEMM issue of it, so the scheduler's stride is 1.
    units_are_tiles = getattr(program, "family", "gemm") == "gemm"
    if (units_are_tiles and sched is not None and _int(sched.consumer_stride) and G > 1
            and sched.consumer_stride != G):
        struct(f"{G} groups take turns, but the tile scheduler deals units to {sched.consumer_stride} consumer "
               "group(s)", f"schedule consumer_stride == {G}", f"consumer_stride {sched.consumer_stride}",
               "ping-pong: each consumer warpgroup takes every second unit")

    # ---- distinctness (names and hardware ids), from each other and from the epilogue barriers
    flat = [(p, g, rows[p][g]) for p in range(len(points)) for g in range(G)]
    seen_name: dict[str, tuple[int, int]] = {}
    seen_id: dict[int, tuple[int, int, str]] = {}
    for p, g, n in flat:
        bid = have[n].id
        if n in seen_name:
            q, h = seen_name[n]
            struct(f"barrier {n!r} serves (point {points[p]!r}, group {g}) and (point {points[q]!r}, group {h})",
                   "one barrier per (point, group)", f"{n!r} at ({points[q]}, {h}) and ({points[p]}, {g})",
                   "each point is its own chain: give it its own barriers", points[p])
        elif bid in seen_id:
            q, h, other = seen_id[bid]
            struct(f"barriers {other!r} ({points[q]}, group {h}) and {n!r} ({points[p]}, group {g}) share "
                   f"hardware id {bid}", "distinct ids", f"id {bid} twice", "give every barrier its own id", points[p])
        seen_name.setdefault(n, (p, g))
        if _int(bid):
            seen_id.setdefault(bid, (p, g, n))
    epi = epilogue_barrier_names(program)
    epi_ids = {have[e].id: e for e in epi if e in have}
    for p, g, n in flat:
        if n in epi or have[n].id in epi_ids:
            other = n if n in epi else epi_ids[have[n].id]
            struct(f"barrier {n!r} (point {points[p]!r}, group {g}) is the epilogue's barrier {other!r} "
                   f"(id {have[n].id}): the epilogue's bar.sync of {have[other].threads} threads and the turn's "
                   "arrivals count against one barrier", "a barrier apart from the epilogue's",
                   f"{n!r} == epilogue {other!r}", "give the turn order its own barriers", points[p])

    # ---- counts: one syncing + one arriving group per phase
    want = 2 * GROUP_THREADS if G > 1 else GROUP_THREADS
    for p, g, n in flat:
        b = have[n]
        if b.threads != want:
            verdict = ("completes on the syncing group alone: the turn is not waited for" if _int(b.threads)
                       and b.threads < want else "never completes: the syncing group waits forever")
            struct(f"barrier {n!r} (point {points[p]!r}, group {g}) counts {b.threads} threads, but each phase "
                   f"has {want} participants (group {g} bar.sync, group {(g - 1) % G} bar.arrive, 128 threads "
                   f"each): it {verdict} (PTX ISA 9.7.13.1: all participants use the same count)",
                   f"{want} threads", f"{b.threads} threads", "count = the syncing and the arriving warpgroup",
                   points[p])

    # ---- interleavings
    states_total = 0
    counts_seen = []
    first_bad = None
    for units in range(G * MAX_TILES + 2):
        tiles = tuple(len(range(g, units, G)) for g in range(G))
        counts_seen.append(tiles)
        n_states, found = _explore(program, order, points, rows, have, tiles)
        states_total += n_states
        if found is not None:
            first_bad = (tiles, found)
            break
    if first_bad is not None:
        tiles, (kind, g, point, expected, actual, trace, tile) = first_bad
        params = {f"tiles_group{i}": n for i, n in enumerate(tiles)}
        prov = "; ".join(f"{r}=id {have[r].id}/{have[r].threads} threads" for r in dict.fromkeys(x for x in
                                                                                                   sum(rows, ())))
        cex = _cex(INV_TURN, RULE_TURN, "enum", f"turn_order[{name}].{point}", where, expected, actual,
                   thread=_group_thread(program, g), params=params, trace=trace,
                   provenance=f"{G} groups of {GROUP_THREADS} threads, first {order.first}; {prov}", iteration=tile)
        msg = {"deadlock": "deadlock", "exclusion": "two groups inside one point",
               "alternation": "the groups do not alternate in tile order",
               "rearrive": "a warp re-arrives at a barrier before it resets (PTX: unpredictable)"}[kind]
        out.append(Violation(RULE_TURN, INV_TURN, f"turn order {name!r}: {msg} at point {point!r} with tile counts "
                             f"{tiles}: {actual}", "group (first - 1) % groups pre-arrives on barriers[p][first]; before point p "
                             "group g syncs barriers[p][g], after it arrives on barriers[p][(g + 1) % groups]",
                             where, cex))
    elif out:
        # a structural fault the interleavings did not turn into a failing run: keep it (it is UB or a
        # template mismatch by itself)
        pass
    if out:
        return [], out
    summary = (f"{name}: {G} groups x points {list(points)} (barriers "
               f"{', '.join(f'{p}: ' + '/'.join(str(have[n].id) for n in r) for p, r in zip(points, rows))}, "
               f"{want} threads each): every interleaving for tile counts {counts_seen[0]}..{counts_seen[-1]} "
               f"({states_total} states): no deadlock, mutual exclusion, strict alternation from group "
               f"{order.first}")
    return [Proof(RULE_TURN, INV_TURN, "enum", summary, states_total, time.perf_counter() - t0)], []


def _explore(program: Any, order: Any, points: tuple, rows: tuple, have: dict, tiles: tuple) -> tuple[int, Any]:
    """BFS over the interleavings of the groups' barrier programs for per-group ``tiles``.

    Returns ``(states, None)`` or ``(states, (kind, group, point, expected, actual, trace, tile))``.
    """
    G = order.groups
    first = order.first
    P = len(points)
    ids = sorted({have[n].id for r in rows for n in r})
    slot = {i: k for k, i in enumerate(ids)}

    def bar(p: int, g: int) -> tuple[int, int, str]:
        b = have[rows[p][g]]
        return slot[b.id], b.threads, b.name

    progs: list[list[tuple]] = []
    for g in range(G):
        ops: list[tuple] = []
        if g == (first - 1) % G:  # the group before ``first`` in the cycle hands it the first turn
            for p in range(P):
                ops.append(("arrive", p, first, -1))
        for j in range(tiles[g]):
            for p in range(P):
                ops += [("sync", p, g, j), ("enter", p, -1, j), ("exit", p, -1, j), ("arrive", p, (g + 1) % G, j)]
        progs.append(ops)

    # state: (pcs, counts, waiting (frozenset per barrier), pending (frozenset per barrier), inside, entries)
    nb = len(ids)
    init = ((0,) * G, (0,) * nb, (frozenset(),) * nb, (frozenset(),) * nb, (-1,) * P, (0,) * P)
    parent: dict[tuple, tuple[tuple, str] | None] = {init: None}
    queue = deque([init])

    def trace_of(state: tuple) -> tuple[str, ...]:
        return path_to(parent, state)

    while queue:
        st = queue.popleft()
        pcs, counts, waiting, pending, inside, entries = st
        blocked = {g for w in waiting for g in w}
        moves = []
        for g in range(G):
            if g in blocked or pcs[g] >= len(progs[g]):
                continue
            kind, p, idx, j = progs[g][pcs[g]]
            npcs = pcs[:g] + (pcs[g] + 1,) + pcs[g + 1:]
            tag = f"WG{g}" + (f" tile {j}" if j >= 0 else " (start)")
            if kind in ("sync", "arrive"):
                b, need, bname = bar(p, idx)
                op = "bar.sync" if kind == "sync" else "bar.arrive"
                step = f"{tag}: {op} {bname} (id {ids[b]}) [{points[p]}]"
                if g in pending[b]:
                    actual = (f"WG{g} executes {op} on {bname} (id {ids[b]}) while its earlier arrival is "
                              f"still pending ({counts[b]} of {need} threads arrived)")
                    expected = f"barrier {bname} resets before WG{g} uses it again"
                    return len(parent), ("rearrive", g, points[p], expected, actual, trace_of(st) + (step,), j)
                total = counts[b] + GROUP_THREADS
                nc, nw, npd = list(counts), list(waiting), list(pending)
                if total < need:
                    nc[b] = total
                    npd[b] = pending[b] | {g}
                    if kind == "sync":
                        nw[b] = waiting[b] | {g}
                    step += f" {total}/{need}"
                else:
                    rem = total % need
                    released = sorted(waiting[b])
                    nc[b] = rem
                    npd[b] = frozenset({g}) if rem else frozenset()
                    nw[b] = frozenset({g}) if rem and kind == "sync" else frozenset()
                    step += f" {total}/{need}: completes" + (f", releases WG{released}" if released else "")
                    if rem:
                        step += f", {rem} threads carried into the next phase"
                moves.append(((npcs, tuple(nc), tuple(nw), tuple(npd), inside, entries), step))
            elif kind == "enter":
                step = f"{tag}: enters {points[p]}"
                if inside[p] != -1:
                    return len(parent), ("exclusion", g, points[p], f"one group inside {points[p]} at a time",
                                         f"WG{g} enters {points[p]} (tile {j}) while WG{inside[p]} is inside it",
                                         trace_of(st) + (step,), j)
                k = entries[p]
                if (k % G, k // G) != (g, j):
                    return len(parent), ("alternation", g, points[p],
                                         f"entry {k} of {points[p]} is WG{k % G}'s tile {k // G} (unit {k})",
                                         f"WG{g}'s tile {j} (unit {j * G + g}) enters {points[p]} as entry {k}",
                                         trace_of(st) + (step,), j)
                ni = inside[:p] + (g,) + inside[p + 1:]
                ne = entries[:p] + (k + 1,) + entries[p + 1:]
                moves.append(((npcs, counts, waiting, pending, ni, ne), step))
            else:
                ni = inside[:p] + (-1,) + inside[p + 1:]
                moves.append(((npcs, counts, waiting, pending, ni, entries), f"{tag}: leaves {points[p]}"))
        if not moves:
            stuck = [g for g in range(G) if g in blocked or pcs[g] < len(progs[g])]
            if stuck:
                g = stuck[0]
                b = next(i for i, w in enumerate(waiting) if g in w)
                kind, p, idx, j = progs[g][pcs[g] - 1]
                bname = bar(p, idx)[2]
                others = ", ".join(f"WG{h} {'done' if pcs[h] >= len(progs[h]) and h not in blocked else 'waiting'}"
                                   for h in range(G) if h != g)
                actual = (f"WG{g} waits forever at bar.sync {bname} (id {ids[b]}) before {points[p]} tile {j}: "
                          f"{counts[b]} of {have[bname].threads} threads arrived; {others}")
                return len(parent), ("deadlock", g, points[p], "every group finishes its tiles", actual,
                                     trace_of(st), j)
        for nxt, step in moves:
            if nxt not in parent:
                parent[nxt] = (st, step)
                queue.append(nxt)
    return len(parent), None


# ------------------------------------------------------------------------------ unit-slot handoff

RULE_SLOT = "scheduler.slot_release"


def check_slot_release(program: Any) -> Outcome:
    """``scheduler.slot_release`` (attention FA8): the dynamic scheduler's unit slot is read by every
    consumer thread and the Q stage holding it is released by one thread per warpgroup; the producer
    writes the next unit into the slot once every warpgroup released. So every thread of a warpgroup
    must have read the slot before its warpgroup's release: the schedule's ``slot_sync`` names a
    128-thread named barrier per consumer warpgroup (``<slot_sync>.<g>``, ``bar.sync``) between the read
    and the release. Without it nothing orders the other warps' reads (nor the other lanes of the
    releasing warp: CUDA C++ Programming Guide, independent thread scheduling; PTX ISA 8.5 memory
    consistency model: ``mbarrier.arrive`` releases only its own thread's prior accesses) before the
    release, and a lagging warp can read the next unit: it computes, or stores, another tile.
    compute-sanitizer racecheck reported exactly that WAR hazard on the kernel without the sync
    (bench/RESULTS.md session 36). A static schedule has no slot: proved trivially."""
    return _safe(RULE_SLOT, "FA8", _check_slot_release, program)


def _check_slot_release(program: Any) -> Outcome:
    sch = program.schedule
    if sch is None or sch.decomposition != "dynamic":
        return [Proof(RULE_SLOT, "FA8", "arith", "no unit slots (static schedule)", 0)], []
    consumers = [r for r in program.roles if r.kind == "consumer"]
    wgs = len(tuple(consumers[0].warpgroups)) if consumers else 0
    have = {b.name: b for b in program.barriers}
    msgs = []
    if not sch.slot_sync:
        msgs.append((0, "no barrier between the consumers' read of the unit slot and the stage's one-thread release "
                        "(slot_sync empty)"))
    else:
        for g in range(wgs):
            b = have.get(f"{sch.slot_sync}.{g}")
            if b is None:
                msgs.append((g, f"slot_sync {sch.slot_sync!r}: consumer warpgroup {g} has no barrier "
                                f"'{sch.slot_sync}.{g}'"))
            elif b.threads != GROUP_THREADS:
                msgs.append((g, f"slot_sync barrier '{b.name}' counts {b.threads} threads, not warpgroup {g}'s "
                                f"{GROUP_THREADS}: {'its bar.sync never completes' if b.threads > GROUP_THREADS else 'the sync does not wait for every warp of the warpgroup'}"))
    if not msgs:
        return [Proof(RULE_SLOT, "FA8", "arith", f"unit slot read by all {GROUP_THREADS} threads of each of {wgs} "
                      f"consumer warpgroups before its release (bar.sync on '{sch.slot_sync}.<g>')", wgs)], []
    out = []
    for g, m in msgs:
        first = _group_thread(program, g)
        late = dict(first, threadIdx=first["threadIdx"] + GROUP_THREADS - 1, warp=first["warp"] + 3, lane=31)
        trace = (f"thread {first['threadIdx']} (warpgroup {g}, warp {first['warp']}, lane 0) reads unit slot 0 = u",
                 f"thread {first['threadIdx']} arrives on Q's empty barrier of stage 0 (the warpgroup's release)",
                 "the other warpgroups release; the producer's wait on stage 0's empty barrier completes",
                 "producer thread 0 writes unit slot 0 = u' (the next unit, or -1) and signals stage 0 full",
                 f"thread {late['threadIdx']} (warp {late['warp']}, lane 31) reads unit slot 0 = u': it works on unit "
                 "u' while its warpgroup works on u")
        cex = _cex("FA8", RULE_SLOT, "arith", "consumer: unit_slot[stage] read -> release(q_empty[stage])",
                   str(sch.loc), "every consumer thread reads unit u before its warpgroup releases the stage",
                   f"thread {late['threadIdx']} may read the producer's next unit u' (no barrier orders its read "
                   "before the release)", thread=late, params={"stage": 0, "slot_bytes": sch.slot_bytes}, trace=trace)
        out.append(Violation(RULE_SLOT, "FA8", m, "tile_schedule(slot_sync='wg'): each consumer warpgroup bar.syncs "
                             "on its own 128-thread barrier after reading the slot", str(sch.loc), cex))
    return [], out
