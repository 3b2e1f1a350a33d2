"""One cattrs converter for every TOML section accelkit reads, and its errors as ConfigErrors.

Schemas are frozen attrs classes whose field names are the TOML keys in snake case
(``memory_align_size`` reads ``memory-align-size``). Unknown keys are refused. A field whose value
needs more than a type check is annotated with a :class:`Rule`: ``Annotated[int, BYTE_SIZE]``.
Every problem of a document is reported, each as a :class:`ConfigError` with its key path
(``agents[0].resource.cpu``). A field whose key was renamed is annotated with :class:`Renamed`:
the old key is still read, and :func:`renamed_keys` says where a document uses it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from pathlib import Path
from typing import Annotated, Any, TypeVar, get_args, get_origin

import attrs
import cattrs
from cattrs.cols import (
    is_mapping,
    is_sequence,
    list_structure_factory,
    mapping_structure_factory,
)
from cattrs.errors import (
    ClassValidationError,
    ForbiddenExtraKeysError,
    IterableValidationError,
)
from cattrs.gen import make_dict_structure_fn, override

from accelkit.errors import ConfigError
from accelkit.reprs import attrs_eq, attrs_hash, attrs_repr

__all__ = [
    "KeyPath",
    "Renamed",
    "Rule",
    "ValueProblems",
    "attrs_repr",
    "renamed_keys",
    "structure",
    "toml_key",
]

T = TypeVar("T")
#: a key path as parts: table keys and array indexes
KeyPath = tuple[str | int, ...]


@attrs.frozen(repr=False)
class Rule:
    """How to read one value: ``parse`` returns it or raises ``ValueError`` with the message."""

    __repr__ = attrs_repr
    __eq__ = attrs_eq
    __hash__ = attrs_hash

    parse: Callable[[Any], Any]


@attrs.frozen(repr=False)
class Renamed:
    """The field's key used to be spelt ``old`` (as written in TOML: ``overcommit``).

    ``Annotated[int, Renamed("overcommit")]``: a document that still uses the old key is read as
    if it used the new one, and the loader warns the operator; one that gives both is an error.
    """

    __repr__ = attrs_repr
    __eq__ = attrs_eq
    __hash__ = attrs_hash

    old: str


#: (old, new) of every renamed key met by the structuring in progress, when someone listens
_RENAMED_SEEN: ContextVar[list[tuple[str, str]] | None] = ContextVar("_RENAMED_SEEN", default=None)


class ValueProblems(ValueError):
    """Raised by a rule that checks a whole table: one message per key path below the value."""

    def __init__(self, problems: list[tuple[KeyPath, str]]) -> None:
        self.problems = problems
        super().__init__("; ".join(message for _path, message in problems))


#: the message for a key that must be present, in a field's attrs metadata
MISSING = "missing"


def toml_key(name: str) -> str:
    """The TOML spelling of a schema field name."""
    return name.replace("_", "-")


def _rule_of(type_: Any) -> Rule | None:
    if get_origin(type_) is Annotated:
        return next((m for m in get_args(type_)[1:] if isinstance(m, Rule)), None)
    return None


def _old_keys(fields: Sequence[attrs.Attribute[Any]]) -> dict[str, str]:
    """Old key -> current key, for the ``fields`` annotated with :class:`Renamed`."""
    return {
        marker.old: toml_key(field.name)
        for field in fields
        if get_origin(field.type) is Annotated
        for marker in get_args(field.type)[1:]
        if isinstance(marker, Renamed)
    }


def _with_current_keys(value: Mapping[str, Any], old_keys: Mapping[str, str]) -> dict[str, Any]:
    table = dict(value)
    problems: list[tuple[KeyPath, str]] = []
    for old, new in old_keys.items():
        if old not in table:
            continue
        if new in table:
            problems.append(((old,), f"renamed {new!r}, which is given too: remove {old!r}"))
            continue
        table[new] = table.pop(old)
        if (seen := _RENAMED_SEEN.get()) is not None:
            seen.append((old, new))
    if problems:
        raise ValueProblems(problems)
    return table


def _table_hook_factory(cls: type[Any], converter: cattrs.Converter) -> Callable[[Any, Any], Any]:
    # the annotations evaluated once, extras kept: cattrs finds them evaluated (each string
    # annotation is compiled where it is evaluated)
    fields = attrs.fields(attrs.resolve_types(cls, include_extras=True))
    old_keys = _old_keys(fields)
    keys = {toml_key(a.name): (a.alias, a.type) for a in fields}
    hooks: dict[str, Callable[[Any, Any], Any]] = {}
    built: list[Callable[[Any, Any], Any]] = []

    def cattrs_structure(value: Any, type_: Any) -> Any:
        if not built:  # generated code: compiled on a first problem only
            renames = {a.name: override(rename=toml_key(a.name)) for a in fields}
            make: Any = make_dict_structure_fn  # its overrides are keyword arguments by field
            built.append(make(cls, converter, _cattrs_forbid_extra_keys=True, **renames))
        return built[0](value, type_)

    def hook(key: str) -> Callable[[Any, Any], Any]:
        if (found := hooks.get(key)) is None:
            found = hooks[key] = converter.get_structure_hook(keys[key][1])
        return found

    def structure_table(value: Any, type_: Any) -> Any:
        if not isinstance(value, Mapping):
            msg = f"expected a table, got {_toml_type(value)}"
            raise ValueError(msg)
        if old_keys and not old_keys.keys().isdisjoint(value):
            value = _with_current_keys(value, old_keys)
        if keys.keys() >= value.keys():  # each key through its hook, as cattrs's code does
            with contextlib.suppress(Exception):  # cattrs's structuring says what and where
                return cls(**{keys[k][0]: hook(k)(v, keys[k][1]) for k, v in value.items()})
        return cattrs_structure(value, type_)

    return structure_table


def _is_homogeneous_sequence(type_: Any) -> bool:
    args = get_args(type_)
    return is_sequence(type_) and (len(args) == 1 or (len(args) == 2 and args[1] is Ellipsis))


def _array_hook_factory(type_: Any, converter: cattrs.Converter) -> Callable[[Any, Any], Any]:
    element: Any = get_args(type_)[0]
    list_type: Any = list[element]
    build = list_structure_factory(list_type, converter)
    what = "an array of tables" if attrs.has(element) else "an array"

    def structure_array(value: Any, _type: Any) -> tuple[Any, ...]:
        if not isinstance(value, list):
            msg = f"expected {what}, got {_toml_type(value)}"
            raise ValueError(msg)
        return tuple(build(value, list_type))

    return structure_array


def _table_of_hook_factory(type_: Any, converter: cattrs.Converter) -> Callable[[Any, Any], Any]:
    build = mapping_structure_factory(type_, converter)

    def structure_mapping(value: Any, type_: Any) -> Any:
        if not isinstance(value, Mapping):
            msg = f"expected a table, got {_toml_type(value)}"
            raise ValueError(msg)
        return build(value, type_)

    return structure_mapping


def _strict(kind: type[Any], what: str) -> Callable[[Any, Any], Any]:
    """TOML values are already typed: no coercion of ``"yes"`` to ``True`` or ``"1"`` to 1."""

    def structure_exact(value: Any, _type: Any) -> Any:
        if type(value) is not kind:
            msg = f"expected {what}, got {value!r}"
            raise ValueError(msg)
        return value

    return structure_exact


def _structure_path(value: Any, _type: Any) -> Path:
    """A path is a non-empty string in TOML (resolved against the file's folder later)."""
    if type(value) is not str or not value:
        msg = f"expected a path (a non-empty string), got {value!r}"
        raise ValueError(msg)
    return Path(value)


def _make_converter() -> cattrs.Converter:
    converter = cattrs.Converter(forbid_extra_keys=True, detailed_validation=True)
    converter.register_structure_hook(bool, _strict(bool, "true or false"))
    converter.register_structure_hook(str, _strict(str, "a string"))
    converter.register_structure_hook(int, _strict(int, "a whole number"))
    converter.register_structure_hook(Path, _structure_path)
    converter.register_structure_hook_factory(attrs.has, _table_hook_factory)
    converter.register_structure_hook_factory(_is_homogeneous_sequence, _array_hook_factory)
    converter.register_structure_hook_factory(is_mapping, _table_of_hook_factory)
    # registered last, so a rule wins over the hooks of the type it annotates
    converter.register_structure_hook_factory(lambda t: _rule_of(t) is not None, _rule_hook)
    return converter


def _rule_hook(type_: Any) -> Callable[[Any, Any], Any]:
    """The hook of a type annotated with a rule: the rule's own parse, found once per type
    (a device file of hundreds of devices has a value of the type for each)."""
    rule = _rule_of(type_)
    assert rule is not None  # the factory is registered for annotated types only
    parse = rule.parse

    def apply_rule(value: Any, _type: Any) -> Any:
        return parse(value)

    return apply_rule


CONVERTER = _make_converter()


def structure(
    data: Any, schema: type[T], *, file: str | None, prefix: KeyPath = ()
) -> tuple[T | None, list[ConfigError]]:
    """Structure ``data`` as ``schema``: the value, or ``None`` and every problem found.

    ``prefix`` is the key path of ``data`` inside its file (``("plugins", "config", "cpu")``).
    """
    try:
        return CONVERTER.structure(data, schema), []
    except Exception as exc:  # every failure of a value is a problem of the file
        return None, [
            ConfigError(message, file=file, key=format_key((*prefix, *path)) or None)
            for path, message in problems_of(exc)
        ]


def renamed_keys(data: Any, schema: type[Any]) -> list[tuple[str, str]]:
    """``(old, new)`` for each renamed key (:class:`Renamed`) that ``data`` still uses."""
    seen: list[tuple[str, str]] = []
    token = _RENAMED_SEEN.set(seen)
    try:
        with contextlib.suppress(Exception):  # problems are structure()'s to report
            CONVERTER.structure(data, schema)
    finally:
        _RENAMED_SEEN.reset(token)
    return list(dict.fromkeys(seen))


def format_key(path: KeyPath) -> str:
    """``("agents", 0, "resource")`` → ``agents[0].resource``."""
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
    return text


def problems_of(exc: BaseException, path: KeyPath = ()) -> Iterator[tuple[KeyPath, str]]:
    """Walk a cattrs validation error: the key path and the message of each problem."""
    if isinstance(exc, ClassValidationError):
        yield from _class_problems(exc, path)
    elif isinstance(exc, IterableValidationError):
        items, without = exc.group_exceptions()
        for sub, item in items:
            index = item.index
            yield from problems_of(sub, (*path, index if isinstance(index, int) else str(index)))
        for sub in without:
            yield from problems_of(sub, path)
    elif isinstance(exc, ForbiddenExtraKeysError):
        allowed = ", ".join(toml_key(a.name) for a in attrs.fields(exc.cl))
        for extra in sorted(exc.extra_fields):
            yield (*path, extra), f"unknown key (allowed: {allowed})"
    elif isinstance(exc, ValueProblems):
        for sub_path, message in exc.problems:
            yield (*path, *sub_path), message
    elif isinstance(exc, ValueError | TypeError) and str(exc):
        yield path, str(exc)
    else:
        yield path, f"invalid value ({type(exc).__name__}: {exc})"


def _class_problems(exc: ClassValidationError, path: KeyPath) -> Iterator[tuple[KeyPath, str]]:
    fields, without = exc.group_exceptions()
    for sub, field in fields:
        here = (*path, toml_key(field.name))
        if isinstance(sub, KeyError):
            yield here, _missing_message(exc.cl, field.name)
        else:
            yield from problems_of(sub, here)
    for sub in without:
        yield from problems_of(sub, path)


def _missing_message(cls: type[Any], name: str) -> str:
    field = attrs.fields_dict(cls).get(name)
    message = field.metadata.get(MISSING) if field is not None else None
    return str(message) if message else "missing (required)"


def _toml_type(value: Any) -> str:
    names = {bool: "a boolean", int: "an integer", float: "a float", str: "a string"}
    if isinstance(value, list):
        return "an array"
    return names.get(type(value), type(value).__name__)
