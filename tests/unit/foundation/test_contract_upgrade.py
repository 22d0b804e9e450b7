"""A blob an older version wrote (a parked approval, an inbox row) still decodes after a field
with a default joined its contract: ``Message.photo``, ``InboundMessage.photo``."""

from __future__ import annotations

import msgpack
import pytest

from shelldon.contracts import (
    ContractError,
    InboundMessage,
    Message,
    RequestToolApproval,
    Role,
    ToolCall,
    decode,
    encode,
)


def without(blob: bytes, field: str) -> bytes:
    """``blob`` as the version before ``field`` existed wrote it (at every depth)."""

    def strip(code: int, data: bytes) -> msgpack.ExtType:
        tag, fields = msgpack.unpackb(data, raw=False, ext_hook=strip)
        fields.pop(field, None)
        return msgpack.ExtType(code, msgpack.packb([tag, fields], use_bin_type=True))

    return msgpack.packb(msgpack.unpackb(blob, raw=False, ext_hook=strip), use_bin_type=True)


def test_a_parked_approval_from_before_photos_still_decodes() -> None:
    parked = RequestToolApproval(
        ToolCall("c1", "write_file", {"path": "a"}),
        "write a",
        (
            Message(Role.USER, "write a"),
            Message(Role.ASSISTANT, "", (ToolCall("c1", "write_file", {"path": "a"}),)),
        ),
    )
    old = without(encode(parked), "photo")
    assert b"photo" not in old
    assert decode(old) == parked


def test_an_inbox_row_from_before_photos_still_decodes() -> None:
    event = InboundMessage(7, 7, "hi", 5)
    assert decode(without(encode(event), "photo")) == event


def test_a_missing_field_without_a_default_is_still_refused() -> None:
    with pytest.raises(ContractError, match=r"missing field\(s\) text"):
        decode(without(encode(InboundMessage(7, 7, "hi", 5)), "text"))
