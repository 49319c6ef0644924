"""Verifier records: obligations, proofs, violations with counterexamples, unknowns, skips, and the report.

Every obligation ends with at least one outcome record: a :class:`Proof`, a :class:`Violation`, an
:class:`Unknown` (the verifier tried and could not decide) or a :class:`Skipped` (a check deliberately
not run: the SMT tier off, or in a rejected program a check another violation leaves without a
domain). An obligation with none of them is *undecided* (``VerificationReport.undecided``): a
verifier defect, never a pass -- the report is then not ``complete``. A skipped obligation is not
proved either, but it is said: ``format()``, ``to_json()`` and the ``.cu`` header
(``argus_cutlass.generate.proof_lines``) list it with its reason.

The report is plain data: ``format()`` is the human text, ``to_json()`` the machine form,
``proved`` the short lines the renderer writes into the ``.cu`` header (``skipped_lines`` the lines
of what was not checked).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class Obligation:
    """One thing the verifier must establish.

    ``rule`` is the stable rule name (``smem.capacity``), ``invariant`` the catalogue id
    (``G1``, ``R1``...), ``where`` the program point or DSL ``file:line``.
    """

    rule: str
    invariant: str
    description: str
    where: str = ""


@dataclass(frozen=True)
class Proof:
    """An obligation that holds. ``engine`` is ``arith`` (closed-form) or ``enum`` (exhaustive
    numpy enumeration over ``points`` cases); ``summary`` is a one-line statement with numbers."""

    rule: str
    invariant: str
    engine: str
    summary: str
    points: int = 0
    #: wall time of this obligation, seconds (0 when not measured)
    seconds: float = 0.0


@dataclass(frozen=True)
class Unknown:
    """An obligation the verifier could not decide: an SMT query that timed out or that z3 gave up
    on, or a case outside what a model covers (e.g. a non-power-of-two cluster). Never a proof.

    ``query`` names the z3 query (``G6 pipeline.parity: consumer wait parity``), ``reason``
    is z3's reason (``timeout``, ``canceled``...), ``timeout_ms`` the per-query limit."""

    rule: str
    invariant: str
    query: str
    reason: str
    timeout_ms: int
    seconds: float = 0.0


@dataclass(frozen=True)
class Skipped:
    """An obligation, or one tier's part of it, that the verifier deliberately did not check: the SMT
    tier turned off (``smt=False``, CLI ``--no-smt``) or unavailable (z3-solver not installed), or, in a
    rejected report, a check another rule's violation leaves without a domain (a program that breaks
    ``smem.capacity`` or the shape rules cannot launch). Never a proof; the obligation is accounted for
    (the report can be ``complete``), and the record is listed in ``format()``, ``to_json()`` and the
    ``.cu`` header.

    ``check`` says what was not checked (``PipelineState closed form == operator++, for all iteration
    counts (SMT)``), ``reason`` why (``SMT tier off (smt=False, --no-smt)``)."""

    rule: str
    invariant: str
    check: str
    reason: str


@dataclass(frozen=True)
class Counterexample:
    """A concrete failing point (the smallest one found: first in enumeration order, or the
    SMT model after searching small scopes first).

    Fields follow VERIFIER.md "Counterexample report": invariant and engine (``enum`` /
    ``smt``), program point (DSL source line and loop indices), thread (CTA, threadIdx.x,
    warpgroup, warp, lane) and register, element (tensor and global coordinate), smem
    offsets, expected vs actual tag, provenance chain (gmem -> TMA box -> smem byte ->
    descriptor -> MMA slot), and the values of the symbolic parameters (``K``, ``k_tiles``...).
    Fields that do not apply to a check are empty (``-1`` for loop indices).
    """

    invariant: str
    rule: str
    engine: str
    program_point: str
    where: str
    iteration: int
    stage: int
    k_block: int
    slot: dict[str, int]
    thread: dict[str, int]
    register: str
    smem_offset: dict[str, int]
    expected: str
    actual: str
    provenance: str
    k_tile: int = -1
    element: dict[str, Any] = field(default_factory=dict)
    chain: tuple[str, ...] = ()
    params: dict[str, int] = field(default_factory=dict)
    trace: tuple[str, ...] = ()

    def _thread_text(self) -> str:
        t = self.thread
        if not t:
            return ""
        if "threadIdx" not in t:  # a CTA-level point (e.g. a multicast receiver)
            where = f" (cluster coordinate ({t['cluster_m']}, {t['cluster_n']}))" if "cluster_m" in t else ""
            return f"CTA {t.get('cta', '?')}{where}, all threads"
        role = t.get("role", "consumer")
        who = f"{role} WG{t['warpgroup']}" if "warpgroup" in t else role
        text = f"threadIdx.x={t['threadIdx']} ({who}, warp {t.get('warp', '?')}, lane {t.get('lane', '?')})"
        if "cta" in t:
            text = f"CTA {t['cta']} " + text
        return text

    def format(self) -> str:
        """Readable text: a head line, then one labelled line per field."""
        loops = [f"iter={self.iteration}"] if self.iteration >= 0 else []
        if self.k_tile >= 0:
            loops.append(f"k_tile={self.k_tile}")
        if self.stage >= 0:
            loops.append(f"stage={self.stage}")
        if self.k_block >= 0:
            loops.append(f"k_block={self.k_block}")
        loops += [f"{k}={v}" for k, v in self.slot.items()]
        lines = [f"{self.invariant} {self.rule} [engine: {self.engine}] at {self.program_point} "
                 f"({self.where}) {' '.join(loops)}"]
        thread = self._thread_text()
        if thread:
            lines.append(f"thread:     {thread}" + (f" {self.register}" if self.register else ""))
        if self.element:
            lines.append("element:    " + ", ".join(f"{k}={v}" for k, v in self.element.items()))
        if self.smem_offset:
            lines.append("smem:       " + ", ".join(f"{k} smem elem {v}" for k, v in self.smem_offset.items()))
        lines.append(f"expected:   {self.expected}")
        lines.append(f"actual:     {self.actual}")
        if self.chain:
            lines.append("provenance: " + " -> ".join(self.chain))
        if self.provenance:
            lines.append(f"model:      {self.provenance}")
        if self.params:
            lines.append("params:     " + ", ".join(f"{k}={v}" for k, v in self.params.items()))
        if self.trace:
            lines.append("trace:      " + "; ".join(self.trace))
        return "\n    ".join(lines)


@dataclass(frozen=True)
class Violation:
    """A failed obligation: rule name, a message with the offending numbers, a hint, and
    (for tag assertions) a counterexample."""

    rule: str
    invariant: str
    message: str
    hint: str | None = None
    where: str = ""
    counterexample: Counterexample | None = None

    def format(self) -> str:
        text = f"[{self.rule}] {self.message}"
        if self.where:
            text += f"\n  at {self.where}"
        if self.hint:
            text += f"\n  hint: {self.hint}"
        return text


@dataclass(frozen=True)
class VerificationReport:
    """Everything the verifier found for one program.

    Attributes:
        kernel: the checked program's name.
        obligations: every obligation considered.
        proofs: the ones that hold.
        violations: the ones that fail (all resource violations, first tag counterexample).
        elapsed_s: wall time of the verification, seconds.
        notes: what was checked on a bounded range only, or not run, and why.
        unknowns: obligations the verifier tried and could not decide (SMT timeouts...).
        skipped: checks deliberately not run (the SMT tier off; in a rejected report, checks another
            rule's violation leaves without a domain), each with its reason.
        tier_seconds: wall seconds per tier.
    """

    kernel: str
    obligations: tuple[Obligation, ...] = ()
    proofs: tuple[Proof, ...] = ()
    violations: tuple[Violation, ...] = ()
    elapsed_s: float = 0.0
    notes: tuple[str, ...] = field(default=())
    unknowns: tuple[Unknown, ...] = field(default=())
    #: wall seconds per tier: ``arith`` (algebraic), ``enum`` (enumeration), ``smt``
    tier_seconds: dict[str, float] = field(default_factory=dict)
    skipped: tuple[Skipped, ...] = field(default=())

    @property
    def ok(self) -> bool:
        """No violation. An SMT ``unknown`` is not a violation, but not a proof either."""
        return not self.violations

    @property
    def complete(self) -> bool:
        """Every obligation accounted for: no ``unknown``, and every obligation's rule has at least one
        proof, violation or :class:`Skipped` record (``undecided`` is empty). A complete report with no
        violation proves every obligation except the ``skipped`` ones, which were deliberately not
        checked (the SMT tier off) and are listed as such wherever the proofs are (``format()``,
        ``to_json()``, the ``.cu`` header); ``ok and not complete`` must not be rendered as verified
        (``not_proved`` names what is missing)."""
        return not self.unknowns and not self.undecided

    @property
    def verified(self) -> bool:
        """No violation and ``complete``: every obligation proved or, when ``skipped`` is not empty,
        deliberately not checked (``fully_proved`` excludes that)."""
        return self.ok and self.complete

    @property
    def fully_proved(self) -> bool:
        """``verified`` with nothing skipped: every obligation proved by a tier that ran."""
        return self.verified and not self.skipped

    @property
    def undecided(self) -> list[Obligation]:
        """The obligations with no outcome at all: no proof, violation, ``unknown`` or ``skipped``
        record for their rule (one per rule, in obligation order). Any is a verifier defect (a check
        registered an obligation and never reported on it); it makes the report incomplete."""
        done = ({p.rule for p in self.proofs} | {v.rule for v in self.violations}
                | {u.rule for u in self.unknowns} | {s.rule for s in self.skipped})
        out: dict[str, Obligation] = {}
        for o in self.obligations:
            if o.rule not in done:
                out.setdefault(o.rule, o)
        return list(out.values())

    @property
    def not_proved(self) -> list[str]:
        """One line per ``unknown`` (``"<inv> <rule>: <query> (<reason>)"``), then one per undecided
        obligation (``"<inv> <rule>: <description> (undecided: ...)"``)."""
        from argus_cutlass.errors import undecided_text, unknown_text

        return [unknown_text(u) for u in self.unknowns] + [undecided_text(o) for o in self.undecided]

    @property
    def skipped_lines(self) -> list[str]:
        """One line per ``skipped`` record: ``"<inv> <rule>: <check> (not checked: <reason>)"``."""
        return [skipped_text(s) for s in self.skipped]

    def tier_summary(self) -> list[str]:
        """One line per tier: proofs, median seconds per proof, the tier's total time."""
        lines = []
        for engine, title in (("arith", "algebraic"), ("enum", "enumeration"), ("smt", "SMT")):
            ps = [p for p in self.proofs if p.engine == engine]
            unk = [u for u in self.unknowns if engine == "smt"]
            bad = [v for v in self.violations
                   if v.counterexample is not None and v.counterexample.engine == engine]
            if not ps and not unk and not bad:
                continue
            times = sorted(p.seconds for p in ps) or [0.0]
            med = times[len(times) // 2] if len(times) % 2 else (times[len(times) // 2 - 1] + times[len(times) // 2]) / 2
            line = (f"{title:<12} {len(ps)} proved, median {med * 1e3:.3f} ms/obligation, "
                    f"total {self.tier_seconds.get(engine, sum(times)) * 1e3:.1f} ms")
            if unk:
                line += f", {len(unk)} unknown"
            if bad:
                line += f", {len(bad)} counterexample(s)"
            lines.append(line)
        return lines

    @property
    def proved(self) -> list[str]:
        """Short lines for the ``.cu`` header, one per proof: ``"<inv> <rule>: <summary>"``."""
        return [f"{p.invariant} {p.rule}: {p.summary}" for p in self.proofs]

    def rules_violated(self) -> list[str]:
        return [v.rule for v in self.violations]

    def format(self) -> str:
        undecided = self.undecided
        gaps = ", ".join(x for x in (f"{len(self.unknowns)} unknown" if self.unknowns else "",
                                     f"{len(undecided)} undecided" if undecided else "") if x)
        status = ("REJECTED" if not self.ok else f"INCOMPLETE ({gaps}: not proved)" if not self.complete else
                  f"verified, {len(self.skipped)} skipped (not checked)" if self.skipped else "verified")
        head = (
            f"{self.kernel}: {status} "
            f"({len(self.proofs)} proved, {len(self.violations)} violated, "
            f"{len(self.unknowns)} unknown, {self.elapsed_s * 1e3:.1f} ms)"
        )
        lines = [head]
        for v in self.violations:
            lines.append(v.format())
            if v.counterexample is not None:
                lines.append("  counterexample: " + v.counterexample.format())
        for u in self.unknowns:
            why = f"{u.reason}, timeout {u.timeout_ms} ms" if u.timeout_ms else u.reason
            query = u.query.removeprefix(f"{u.invariant} {u.rule}: ")
            lines.append(f"  UNKNOWN {u.invariant} {u.rule}: {query}: not proved ({why})")
        for o in undecided:
            lines.append(f"  UNDECIDED {o.invariant} {o.rule}: {o.description}: no proof, violation, unknown or "
                         "skip recorded (a verifier defect): not proved")
        for sk in self.skipped:
            lines.append(f"  SKIPPED {sk.invariant} {sk.rule}: {sk.check}: not checked ({sk.reason})")
        for n in self.notes:   # what was not checked, or checked on a bounded range, and why
            lines.append(f"  note: {n}")
        for p in self.proofs:
            lines.append(f"  ok {p.invariant} {p.rule} [{p.engine}]: {p.summary}")
        return "\n".join(lines)

    def to_json(self) -> str:
        def conv(x: Any) -> Any:
            return asdict(x)

        return json.dumps(
            {
                "kernel": self.kernel,
                "ok": self.ok,
                "elapsed_s": self.elapsed_s,
                "obligations": [conv(o) for o in self.obligations],
                "proofs": [conv(p) for p in self.proofs],
                "violations": [conv(v) for v in self.violations],
                "unknowns": [conv(u) for u in self.unknowns],
                "skipped": [conv(s) for s in self.skipped],
                "undecided": [conv(o) for o in self.undecided],
                "complete": self.complete,
                "verified": self.verified,
                "fully_proved": self.fully_proved,
                "not_proved": self.not_proved,
                "tier_seconds": self.tier_seconds,
                "notes": list(self.notes),
            },
            indent=2,
            sort_keys=True,
        )


def skipped_text(s: Skipped) -> str:
    """One line naming a skipped check: ``"<invariant> <rule>: <check> (not checked: <reason>)"``."""
    return f"{s.invariant} {s.rule}: {s.check} (not checked: {s.reason})"
