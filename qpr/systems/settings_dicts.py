"""Settings dataclasses built from plain dicts: the train command's options, a manifest's records.

A dict of settings holds more than one dataclass reads (the command line's options of every
system, a manifest written by a newer version), so ``dataclass_from`` keeps the fields of the
dataclass asked for and leaves the rest; a kept value of the wrong type (``"3"`` for an int) is a
QPRError naming the field, not a failure deep inside training.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from typing import Any, TypeVar

from qpr.errors import QPRError, one_line

T = TypeVar("T")


def dataclass_from(kind: type[T], values: Mapping[str, Any], where: str) -> T:
    """``kind`` (a dataclass) built from the entries of ``values`` that are its fields; the others
    are left out, and a missing field takes its default. ``where`` names ``values`` in the
    QPRError raised when ``values`` is not a dict or a kept value does not have its field's type
    (an int passes for a float, a list for a tuple; None only where the field allows it). The
    dataclass's own checks (``__post_init__``) raise as they do."""
    kept, problem = _kept(kind, values)
    if problem:
        raise QPRError(f"{where}: {problem}")
    return kind(**kept)


def recorded_settings(kind: type[T], values: Mapping[str, Any], where: str, fix: str) -> T:
    """``dataclass_from`` for settings a bundle recorded: whatever is wrong with them (a wrong
    type, a value the dataclass refuses) is one QPRError saying that ``where`` is not a record
    this version reads, and how to ``fix`` the bundle."""
    kept, problem = _kept(kind, values)
    if not problem:
        try:
            return kind(**kept)
        except (TypeError, ValueError) as err:  # QPRError is a ValueError
            problem = one_line(err)
    raise QPRError(f"{where} is not one this version reads ({problem}); {fix}")


def _kept(kind: type, values: Mapping[str, Any]) -> tuple[dict, str]:
    """The entries of ``values`` that are fields of ``kind``, and what is wrong with them ("" if nothing)."""
    if not isinstance(values, Mapping):
        return {}, f"a {type(values).__name__}, not an object of settings"
    types_of = typing.get_type_hints(kind)
    kept = {f.name: values[f.name] for f in dataclasses.fields(kind) if f.init and f.name in values}
    for name, value in kept.items():
        expected = _accepted(types_of[name])
        if expected and not _is_a(value, expected):
            shown = " or ".join("None" if t is type(None) else t.__name__ for t in expected)
            return kept, f"{name} is {value!r}, not {shown}"
    return kept, ""


def _accepted(annotation) -> tuple[type, ...]:
    """The runtime types a field annotated ``annotation`` accepts; () when it is not checked."""
    if isinstance(annotation, type) and annotation is not Any:
        return {float: (int, float), tuple: (tuple, list)}.get(annotation, (annotation,))
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        parts = [_accepted(a) for a in typing.get_args(annotation)]
        return () if not all(parts) else tuple(t for part in parts for t in part)
    if origin in (tuple, list):  # JSON has lists only: a recorded tuple comes back as one
        return (tuple, list)
    return ()


def _is_a(value, expected: tuple[type, ...]) -> bool:
    # bool is an int to isinstance; a setting that wants a number never means True
    if isinstance(value, bool):
        return bool in expected
    return isinstance(value, expected)
