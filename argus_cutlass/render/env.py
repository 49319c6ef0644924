"""The Jinja2 environment over the ``argus_cutlass.templates`` package (StrictUndefined).

A template variable the renderer did not supply is an error, never an empty string.
Templates are found by path inside the package (``gemm/kernel.cu.j2``, ``common/sm90.j2``).
"""

from __future__ import annotations

from functools import lru_cache
from importlib import resources

import jinja2


@lru_cache(maxsize=1)
def template_environment() -> jinja2.Environment:
    """The shared environment (``trim_blocks``, ``lstrip_blocks``, no autoescape)."""

    def load(name: str) -> str:
        node = resources.files("argus_cutlass.templates")
        for part in name.split("/"):
            node = node.joinpath(part)
        return node.read_text()

    return jinja2.Environment(
        loader=jinja2.FunctionLoader(load),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )


def render_template(template: str, ctx: dict, family: str, program_name: str) -> str:
    """``template`` rendered with ``ctx``; a template error (a node the template cannot print) is
    :class:`~argus_cutlass.errors.ConfigError` ``render.program``, never another exception.

    Raises:
        ConfigError: ``render.program``.
    """
    from argus_cutlass.errors import ConfigError

    try:
        return template_environment().get_template(template).render(**ctx)
    except (jinja2.UndefinedError, KeyError, IndexError, AttributeError, TypeError, ValueError) as exc:
        raise ConfigError("render.program", f"the {family} template cannot print program {program_name!r}: "
                          f"{type(exc).__name__}: {exc}") from None
