"""Checks shared by the kernel configuration models (:class:`~argus_cutlass.kernels.gemm.config.GemmConfig`,
:class:`~argus_cutlass.kernels.attention.config.AttentionConfig`, :class:`~argus_cutlass.kernels.moe.config.MoEConfig`),
and the ``FIELD=VALUE`` parsing typed by their field declarations (the CLI's ``--set``, the bench scripts'
``--also`` / ``--vary``).
"""

from __future__ import annotations

import json
from typing import Annotated, Any, get_args


def not_a_bool(value: object) -> object:
    """``value`` unchanged unless it is a bool: pydantic reads ``True`` as the int 1 (and JSON ``true`` with it),
    so ``{"tile_n": true}`` would build a 1-wide tile. Used as a ``mode="before"`` validator of every integer
    field (sizes, counts, stage depths).

    Raises:
        ValueError: ``value`` is ``True`` or ``False`` (pydantic reports it naming the field).

    >>> not_a_bool(128)
    128
    """
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is a boolean, not an integer")
    return value


def field_value(model: Any, field: str, raw: str) -> Any:
    """``raw`` as a value of the configuration model ``model``'s field ``field``: parsed as JSON when it is JSON
    (``64``, ``true``), else taken as the string (``pingpong``), then validated against the field's type and
    constraints alone (the model's cross-field rules run when the configuration is built).

    Raises:
        ValueError: ``field`` is not a field of ``model``, or ``raw`` is not a valid value of it (the message
            names the field and pydantic's rule).

    >>> from argus_cutlass.kernels.moe.config import MoEConfig
    >>> field_value(MoEConfig, "tile_m", "64"), field_value(MoEConfig, "pdl", "1"), field_value(MoEConfig, "dtype", "fp16")
    (64, True, 'fp16')
    """
    from pydantic import TypeAdapter, ValidationError

    info = model.model_fields.get(field)
    if info is None:
        raise ValueError(f"{field!r} is not a {model.__name__} field ({', '.join(model.model_fields)})")
    text = raw.strip()
    try:
        value: Any = json.loads(text)
    except ValueError:
        value = text
    if isinstance(value, bool) and bool not in (info.annotation, *get_args(info.annotation)):
        # lax pydantic reads true as 1 (stages=true: 1 stage); a bool field, also ``bool | None``, takes it
        raise ValueError(f"{field}={text!r}: a boolean ({field} takes {_expected(info.annotation)})")
    try:
        return TypeAdapter(Annotated[info.annotation, info]).validate_python(value)   # the FieldInfo: its constraints too
    except ValidationError as exc:
        rule = exc.errors()[0]["msg"] if exc.errors() else str(exc)
        raise ValueError(f"{field}={text!r}: {rule} ({field} takes {_expected(info.annotation)})") from None


def _expected(annotation: Any) -> str:
    """What a field of type ``annotation`` takes, in words (an error message's tail).

    >>> from typing import Literal
    >>> _expected(bool), _expected(int), _expected(Literal["a", "b"])
    ('true or false', 'an integer', "one of 'a', 'b'")
    """
    from typing import Literal, get_args, get_origin

    if annotation is bool:
        return "true or false"
    if annotation is int:
        return "an integer"
    if annotation is float:
        return "a number"
    if get_origin(annotation) is Literal:
        return "one of " + ", ".join(repr(a) for a in get_args(annotation))
    return f"a {getattr(annotation, '__name__', annotation)}"


def assignments(model: Any, spec: str, given: dict[str, Any] | None = None) -> dict[str, Any]:
    """``FIELD=VALUE[,FIELD=VALUE...]`` as ``{field: typed value}`` (:func:`field_value`); ``given``: the
    assignments of earlier specs (``--set`` repeated), which a field of ``spec`` may repeat but not change.

    Raises:
        ValueError: a pair without ``=`` or a value, a field given two different values (``stages=4,stages=5``
            took the last one silently), or a value :func:`field_value` refuses.

    >>> from argus_cutlass.kernels.gemm.config import GemmConfig
    >>> assignments(GemmConfig, "stages=22,schedule=pingpong")
    {'stages': 22, 'schedule': 'pingpong'}
    """
    out: dict[str, Any] = {}
    for pair in spec.split(","):
        field, eq, raw = pair.partition("=")
        field = field.strip()
        if not eq or not raw.strip():
            raise ValueError(f"{pair!r}: expected FIELD=VALUE")
        value = field_value(model, field, raw)
        before = out.get(field, (given or {}).get(field, value))
        if before != value:
            raise ValueError(f"{field} is set twice, to {before!r} and to {value!r}")
        out[field] = value
    return out
