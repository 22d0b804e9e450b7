"""The msgpack codec for contracts: ``encode(obj) -> bytes`` and ``decode(data) -> obj``.

Every contract travels as a msgpack extension (code 1) holding ``[tag, {field: value}]``; JSON
payloads (tool arguments, schemas) stay plain msgpack maps, so nothing a model writes can pose
as a contract. Validation happens here, once, where bytes become a contract: ``decode`` either
returns a whole, well-typed object or raises ``ContractError``.
"""

from __future__ import annotations

import dataclasses
import enum
import types
import typing
from collections.abc import Callable
from typing import Any, TypeVar

import msgpack

MAX_BLOB_BYTES = 1 << 20
"""Largest blob ``decode`` accepts (and ``encode`` produces): 1 MiB."""

_EXT_CONTRACT = 1
_MAX_JSON_DEPTH = 64

T = TypeVar("T")


class ContractError(ValueError):
    """A blob is not a valid contract: unknown tag, missing/extra field, wrong type, too big."""


_BY_TAG: dict[str, type[Any]] = {}
_TAG_OF: dict[type[Any], str] = {}
_CHECKERS: dict[type[Any], dict[str, Callable[[Any, str], Any]]] = {}


def contract(tag: str) -> Callable[[type[T]], type[T]]:
    """Register a frozen dataclass under ``tag`` so the codec can carry it."""

    def register(cls: type[T]) -> type[T]:
        if not dataclasses.is_dataclass(cls):
            raise TypeError(f"{cls.__name__} must be a dataclass to be a contract")
        if tag in _BY_TAG:
            raise TypeError(f"contract tag {tag!r} is already used by {_BY_TAG[tag].__name__}")
        _BY_TAG[tag] = cls
        _TAG_OF[cls] = tag
        return cls

    return register


def registered_contracts() -> dict[str, type[Any]]:
    """Every registered contract class by tag (tests round-trip each one)."""
    return dict(_BY_TAG)


# ---------------------------------------------------------------- encode


_FIELD_NAMES: dict[type[Any], tuple[str, ...]] = {}
_PLAIN = (type(None), bool, int, float, str, bytes)


def _field_names(cls: type[Any]) -> tuple[str, ...]:
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = tuple(f.name for f in dataclasses.fields(cls))
    return names


def _to_wire(value: Any) -> Any:
    cls = type(value)
    if cls in _PLAIN:
        return value
    if cls in _TAG_OF:
        fields = {name: _to_wire(getattr(value, name)) for name in _field_names(cls)}
        body = msgpack.packb([_TAG_OF[cls], fields], use_bin_type=True)
        return msgpack.ExtType(_EXT_CONTRACT, body)
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, tuple | list):
        return [_to_wire(v) for v in value]
    if isinstance(value, dict):
        return {k: _to_wire(v) for k, v in value.items()}
    return value


def encode(obj: Any) -> bytes:
    """Serialize a contract to bytes; raises ``ContractError`` for non-contracts or oversize."""
    if type(obj) not in _TAG_OF:
        raise ContractError(f"cannot encode {type(obj).__name__}: not a registered contract")
    try:
        data: bytes = msgpack.packb(_to_wire(obj), use_bin_type=True)
    except (TypeError, ValueError, OverflowError) as exc:
        raise ContractError(f"cannot encode {type(obj).__name__}: {exc}") from exc
    if len(data) > MAX_BLOB_BYTES:
        raise ContractError(
            f"{type(obj).__name__} encodes to {len(data)} bytes, over the {MAX_BLOB_BYTES}-byte cap"
        )
    return data


# ---------------------------------------------------------------- decode


_JSON_SCALARS = (type(None), bool, int, float, str)


def _check_json(value: Any, where: str, depth: int = 0) -> Any:
    """``value`` itself once it is known to be plain JSON (msgpack built it fresh: no copy)."""
    if depth > _MAX_JSON_DEPTH:
        raise ContractError(f"{where}: JSON value nested deeper than {_MAX_JSON_DEPTH}")
    if type(value) in _JSON_SCALARS:
        return value
    if isinstance(value, list):
        for v in value:
            if type(v) not in _JSON_SCALARS:
                _check_json(v, where, depth + 1)
        return value
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                raise ContractError(f"{where}: JSON object key {k!r} is not a string")
            if type(v) not in _JSON_SCALARS:
                _check_json(v, where, depth + 1)
        return value
    raise ContractError(f"{where}: {type(value).__name__} is not a JSON value")


def _checker(tp: Any) -> Callable[[Any, str], Any]:
    """Build a function that validates one wire value against a type hint and rebuilds it."""
    origin = typing.get_origin(tp)
    if tp is Any:
        return _check_json
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(tp)
        checkers = [_checker(o) for o in options]
        names = " | ".join(getattr(o, "__name__", str(o)) for o in options)

        def check_union(v: Any, where: str) -> Any:
            for check in checkers:
                try:
                    return check(v, where)
                except ContractError:
                    continue
            raise ContractError(f"{where}: expected {names}, got {type(v).__name__}")

        return check_union
    if origin is tuple:
        (item_tp, _ellipsis) = typing.get_args(tp)
        item = _checker(item_tp)

        def check_tuple(v: Any, where: str) -> Any:
            if not isinstance(v, list):
                raise ContractError(f"{where}: expected a list, got {type(v).__name__}")
            try:
                return tuple([item(x, where) for x in v])
            except ContractError:
                # The error path only: check again, naming the item that is wrong.
                for i, x in enumerate(v):
                    item(x, f"{where}[{i}]")
                raise

        return check_tuple
    if origin is dict or tp is dict:

        def check_object(v: Any, where: str) -> Any:
            if not isinstance(v, dict):
                raise ContractError(f"{where}: expected a JSON object, got {type(v).__name__}")
            return _check_json(v, where)

        return check_object
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        enum_tp = tp

        def check_enum(v: Any, where: str) -> Any:
            try:
                return enum_tp(v)
            except (ValueError, TypeError):
                raise ContractError(f"{where}: {v!r} is not a {enum_tp.__name__}") from None

        return check_enum
    if tp is float:

        def check_float(v: Any, where: str) -> float:
            if isinstance(v, bool) or not isinstance(v, int | float):
                raise ContractError(f"{where}: expected float, got {type(v).__name__}")
            return float(v)

        return check_float
    if tp in (str, int, bool, bytes, type(None)) or dataclasses.is_dataclass(tp):
        want = tp

        def check_exact(v: Any, where: str) -> Any:
            # bool is an int subclass: an int field must not accept True. A nested contract
            # is already one (``_from_ext`` built it).
            if type(v) is not want:
                raise ContractError(f"{where}: expected {want.__name__}, got {type(v).__name__}")
            return v

        return check_exact
    raise TypeError(f"the codec cannot carry fields of type {tp!r}")


def _checkers_for(cls: type[Any]) -> dict[str, Callable[[Any, str], Any]]:
    checkers = _CHECKERS.get(cls)
    if checkers is None:
        hints = typing.get_type_hints(cls)
        checkers = {f.name: _checker(hints[f.name]) for f in dataclasses.fields(cls)}
        _CHECKERS[cls] = checkers
    return checkers


_DEFAULTS: dict[type[Any], dict[str, Any]] = {}


def _defaults_for(cls: type[Any]) -> dict[str, Any]:
    """The wire form of each field's default: only immutable scalars and empty tuples (a
    nested contract such as ``Completion.usage`` stays required on the wire)."""
    defaults = _DEFAULTS.get(cls)
    if defaults is None:
        defaults = {}
        for f in dataclasses.fields(cls):
            if type(f.default) in _PLAIN:
                defaults[f.name] = f.default
            elif f.default == ():
                defaults[f.name] = []
        _DEFAULTS[cls] = defaults
    return defaults


def _from_ext(code: int, body: bytes) -> Any:
    if code != _EXT_CONTRACT:
        raise ContractError(f"unknown msgpack extension code {code}")
    head = msgpack.unpackb(body, raw=False, strict_map_key=True, ext_hook=_from_ext)
    if not (isinstance(head, list) and len(head) == 2 and isinstance(head[0], str)):
        raise ContractError("a contract must be [tag, fields]")
    tag, fields = head
    cls = _BY_TAG.get(tag)
    if cls is None:
        raise ContractError(f"unknown contract tag {tag!r}")
    if not isinstance(fields, dict):
        raise ContractError(f"{tag}: fields must be a map, got {type(fields).__name__}")
    checkers = _checkers_for(cls)
    # A field added later with a default (``Message.photo``) may be absent from a blob an
    # older version parked in sqlite: it takes the default, so an upgrade loses no approval.
    fields = {**_defaults_for(cls), **fields}
    missing = sorted(set(checkers) - set(fields))
    extra = sorted(str(k) for k in set(fields) - set(checkers))
    if missing:
        raise ContractError(f"{tag}: missing field(s) {', '.join(missing)}")
    if extra:
        raise ContractError(f"{tag}: unexpected field(s) {', '.join(extra)}")
    try:
        values = {name: check(fields[name], tag) for name, check in checkers.items()}
    except ContractError:
        # The error path only: check again, naming the field that is wrong.
        for name, check in checkers.items():
            check(fields[name], f"{tag}.{name}")
        raise
    try:
        return cls(**values)
    except (TypeError, ValueError) as exc:
        raise ContractError(f"{tag}: {exc}") from exc


def decode(data: bytes) -> Any:
    """Rebuild a contract from ``encode``'s bytes, or raise ``ContractError`` saying why."""
    if not isinstance(data, bytes | bytearray | memoryview):
        raise ContractError(f"decode needs bytes, got {type(data).__name__}")
    if len(data) > MAX_BLOB_BYTES:
        raise ContractError(f"blob of {len(data)} bytes is over the {MAX_BLOB_BYTES}-byte cap")
    try:
        obj = msgpack.unpackb(bytes(data), raw=False, strict_map_key=True, ext_hook=_from_ext)
    except ContractError:
        raise
    except Exception as exc:  # msgpack raises a zoo of types on garbage; all mean "malformed"
        raise ContractError(f"malformed blob: {type(exc).__name__}: {exc}") from None
    if type(obj) not in _TAG_OF:
        raise ContractError(f"blob holds {type(obj).__name__}, not a contract")
    return obj
