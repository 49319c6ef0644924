"""Verifier records: obligations, proofs, violations with counterexamples, and the report.

The report is plain data: ``format()`` is the human text, ``to_json()`` the machine form,
``proved`` the short lines the renderer writes into the ``.cu`` header.
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


@dataclass(frozen=True)
class Counterexample:
    """A concrete failing point of a tag assertion (the first one in enumeration order).

    Fields follow VERIFIER.md "Counterexample report": invariant and engine, program point
    and loop indices, thread and register, smem offsets, expected vs actual tags, provenance.
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

    def format(self) -> str:
        t = self.thread
        slot = " ".join(f"{k}={v}" for k, v in self.slot.items())
        offs = ", ".join(f"{k} smem elem {v}" for k, v in self.smem_offset.items())
        return (
            f"{self.invariant} {self.rule} at {self.program_point} ({self.where}) "
            f"iter={self.iteration} stage={self.stage} k_block={self.k_block} {slot}: "
            f"threadIdx.x={t['threadIdx']} (consumer WG{t['warpgroup']}, warp {t['warp']}, "
            f"lane {t['lane']}) {self.register}; {offs}; expected {self.expected}, "
            f"actual {self.actual}; {self.provenance} [engine: {self.engine}]"
        )


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
    """

    kernel: str
    obligations: tuple[Obligation, ...] = ()
    proofs: tuple[Proof, ...] = ()
    violations: tuple[Violation, ...] = ()
    elapsed_s: float = 0.0
    notes: tuple[str, ...] = field(default=())

    @property
    def ok(self) -> bool:
        return not self.violations

    @property
    def proved(self) -> list[str]:
        """Short lines for the ``.cu`` header, one per proof: ``"<inv> <rule>: <summary>"``."""
        return [f"{p.invariant} {p.rule}: {p.summary}" for p in self.proofs]

    def rules_violated(self) -> list[str]:
        return [v.rule for v in self.violations]

    def format(self) -> str:
        head = (
            f"{self.kernel}: {'verified' if self.ok else 'REJECTED'} "
            f"({len(self.proofs)} proved, {len(self.violations)} violated, "
            f"{self.elapsed_s * 1e3:.1f} ms)"
        )
        lines = [head]
        for v in self.violations:
            lines.append(v.format())
            if v.counterexample is not None:
                lines.append("  counterexample: " + v.counterexample.format())
        for p in self.proofs:
            lines.append(f"  ok {p.invariant} {p.rule}: {p.summary}")
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
            },
            indent=2,
            sort_keys=True,
        )
