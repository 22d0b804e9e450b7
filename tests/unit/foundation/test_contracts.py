"""Contracts and codec: every contract round-trips; garbage only ever raises ContractError."""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import types
import typing
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shelldon import contracts as c
from shelldon.contracts import ContractError, decode, encode, registered_contracts

json_scalars = st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=20)
json_values = st.recursive(
    json_scalars | st.floats(allow_nan=False),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


def strategy_for(tp: Any) -> st.SearchStrategy[Any]:
    origin = typing.get_origin(tp)
    if tp is Any:
        return json_values
    if origin in (typing.Union, types.UnionType):
        return st.one_of([strategy_for(a) for a in typing.get_args(tp)])
    if origin is tuple:
        return st.lists(strategy_for(typing.get_args(tp)[0]), max_size=3).map(tuple)
    if origin is dict or tp is dict:
        return st.dictionaries(st.text(max_size=8), json_values, max_size=4)
    if tp is type(None):
        return st.none()
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return st.sampled_from(list(tp))
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        hints = typing.get_type_hints(tp)
        return st.builds(
            tp, **{f.name: strategy_for(hints[f.name]) for f in dataclasses.fields(tp)}
        )
    return {
        str: st.text(max_size=30),
        int: st.integers(-(2**63), 2**63 - 1),
        bool: st.booleans(),
        float: st.floats(allow_nan=False),
        bytes: st.binary(max_size=20),
    }[tp]


ALL = sorted(registered_contracts().items())


@pytest.mark.parametrize(("tag", "cls"), ALL, ids=[t for t, _ in ALL])
@settings(max_examples=40, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_every_contract_round_trips(tag: str, cls: type, data: st.DataObject) -> None:
    obj = data.draw(strategy_for(cls))
    assert decode(encode(obj)) == obj


def test_every_contract_is_frozen_and_slotted() -> None:
    for _tag, cls in ALL:
        assert cls.__dataclass_params__.frozen, cls
        assert hasattr(cls, "__slots__"), cls


@settings(max_examples=500)
@given(st.binary(max_size=300))
def test_random_bytes_only_ever_raise_contract_error(blob: bytes) -> None:
    try:
        obj = decode(blob)
    except ContractError:
        return
    assert type(obj) in registered_contracts().values()


VALID = encode(
    c.Result(
        "t1",
        "hi",
        ops=(c.RequestToolApproval(c.ToolCall("1", "run_shell", {"command": "ls"}), "ls", ()),),
    )
)


@settings(max_examples=500)
@given(st.data())
def test_mutated_valid_blobs_only_ever_raise_contract_error(data: st.DataObject) -> None:
    blob = bytearray(VALID)
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(blob) - 1))
        blob[i] = data.draw(st.integers(0, 255))
    with contextlib.suppress(ContractError):
        decode(bytes(blob))


def _blob(tag: str, fields: dict[str, Any]) -> bytes:
    body = msgpack.packb([tag, fields], use_bin_type=True)
    return msgpack.packb(msgpack.ExtType(1, body), use_bin_type=True)


def test_unknown_tag_is_refused_by_name() -> None:
    with pytest.raises(ContractError, match="unknown contract tag 'nope'"):
        decode(_blob("nope", {}))


def test_missing_field_is_named() -> None:
    with pytest.raises(ContractError, match=r"tool_result: missing field\(s\) content"):
        decode(_blob("tool_result", {"id": "1", "ok": True}))


def test_extra_field_is_named() -> None:
    with pytest.raises(ContractError, match=r"unexpected field\(s\) evil"):
        decode(_blob("tool_result", {"id": "1", "ok": True, "content": "", "evil": 1}))


def test_wrong_type_is_named() -> None:
    with pytest.raises(ContractError, match=r"tool_result.ok: expected bool, got int"):
        decode(_blob("tool_result", {"id": "1", "ok": 1, "content": ""}))


def test_bool_is_not_an_int() -> None:
    with pytest.raises(ContractError, match="expected int, got bool"):
        decode(
            _blob("inbound_message", {"chat_id": True, "user_id": 1, "text": "", "update_id": 0})
        )


def test_a_contract_smuggled_into_json_args_is_refused() -> None:
    inner = msgpack.ExtType(1, msgpack.packb(["remember", {"fact": "x"}]))
    fields = {"id": "1", "name": "t", "args": {"a": inner}, "args_error": ""}
    with pytest.raises(ContractError, match="not a JSON value"):
        decode(_blob("tool_call", fields))


def test_a_nested_contract_of_the_wrong_kind_is_refused() -> None:
    wrong = msgpack.ExtType(1, msgpack.packb(["remember", {"fact": "x"}]))
    fields = {"turn_id": "t", "chat_id": 1, "parked": wrong, "approved": True}
    with pytest.raises(ContractError, match="expected RequestToolApproval"):
        decode(_blob("resume_request", fields))


def test_an_op_that_is_not_an_op_is_refused() -> None:
    usage = msgpack.ExtType(1, msgpack.packb(["usage", {"input_tokens": 1, "output_tokens": 1}]))
    fields = {
        "turn_id": "t",
        "reply": "",
        "ops": [usage],
        "tool_failures": [],
        "model_calls": 0,
        "tool_executions": 0,
        "usage": usage,
    }
    with pytest.raises(ContractError, match=r"Result.ops\[0\]|result.ops\[0\]"):
        decode(_blob("result", fields))


def test_oversize_blob_is_refused_before_parsing() -> None:
    with pytest.raises(ContractError, match="over the 1048576-byte cap"):
        decode(b"\x00" * (c.MAX_BLOB_BYTES + 1))


def test_encode_refuses_oversize_and_non_contracts() -> None:
    with pytest.raises(ContractError, match="over the"):
        encode(c.Remember("x" * (c.MAX_BLOB_BYTES + 10)))
    with pytest.raises(ContractError, match="not a registered contract"):
        encode({"op": "remember"})


def test_a_bare_msgpack_value_is_not_a_contract() -> None:
    with pytest.raises(ContractError, match="not a contract"):
        decode(msgpack.packb({"op": "remember"}))


def test_unknown_enum_value_is_refused() -> None:
    fields = {"name": "x", "description": "", "params_schema": {}, "tier": "godmode"}
    with pytest.raises(ContractError, match="not a Tier"):
        decode(_blob("tool_definition", fields))


def test_deeply_nested_json_is_refused_not_crashing() -> None:
    deep: Any = "x"
    for _ in range(100):
        deep = [deep]
    fields = {"id": "1", "name": "t", "args": {"a": deep}, "args_error": ""}
    with pytest.raises(ContractError):
        decode(_blob("tool_call", fields))
