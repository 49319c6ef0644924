"""Every exception argus_cutlass raises for a user mistake or an environment problem.

Each class carries a ``rule`` (a stable, greppable name such as ``tma.box_extent``),
a message that names the input and the numbers, and an optional ``hint``.
``user_error`` tells the CLI to print the message alone, without a traceback.
"""

from __future__ import annotations


class ArgusError(Exception):
    """Base class. ``str(err)`` is the full user-facing message."""

    user_error: bool = True

    def __init__(self, rule: str, message: str, hint: str | None = None) -> None:
        self.rule = rule
        self.message = message
        self.hint = hint
        text = f"[{rule}] {message}"
        if hint:
            text += f"\n  hint: {hint}"
        super().__init__(text)


class ConfigError(ArgusError):
    """A kernel configuration cannot be instantiated (bad tile, cluster, stages...)."""


class DslError(ArgusError):
    """A malformed DSL program (an unknown tag field, an assertion over a value that carries no
    tag, a layout whose size disagrees with its tensor...). The message starts with the
    ``file:line`` of the offending DSL statement."""


class ProblemError(ArgusError):
    """A problem description is invalid: sizes, dtypes, layouts, leading dimensions, pointers."""


class VerificationError(ArgusError):
    """The verifier rejected a program; ``.report`` holds every violation."""

    def __init__(self, report) -> None:  # noqa: ANN001 - VerificationReport
        self.report = report
        first = report.violations[0]
        more = len(report.violations) - 1
        msg = report.format()
        super().__init__(first.rule, msg if more else first.message)


class ToolchainError(ArgusError):
    """nvcc, the CUTLASS headers or the CUDA driver are missing or unusable."""


class CompileError(ArgusError):
    """nvcc or ptxas failed (or warned C7510); the message holds the log's relevant lines."""

    def __init__(self, rule: str, message: str, log: str = "", hint: str | None = None) -> None:
        self.log = log
        super().__init__(rule, message, hint)


class DeviceError(ArgusError):
    """No usable GPU, the wrong architecture, or a CUDA runtime call failed."""


class LaunchError(ArgusError):
    """A built kernel refused the arguments (can_implement) or its launch failed."""
