"""Frames on a real socketpair: round trips, slicing, and every way a frame can be bad."""

from __future__ import annotations

import itertools
import socket
import struct
import threading
import time
import tracemalloc
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shelldon.contracts import (
    MAX_BLOB_BYTES,
    Completion,
    Job,
    Message,
    Role,
    ToolCall,
    ToolDefinition,
    encode,
)
from shelldon.worker.channel import (
    HEADER,
    FrameError,
    FrameReader,
    pack_frame,
    recv_frame,
    send_frame,
)

JOB = Job(
    "t1",
    (Message(Role.USER, "hi"),),
    (ToolDefinition("get_time", "now", {"type": "object"}),),
    123.5,
)
DONE = Completion(text="done", tool_calls=(ToolCall("1", "get_time", {"tz": "UTC"}),))


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    a, b = socket.socketpair()
    yield a, b
    a.close()
    b.close()


def soon(seconds: float = 2.0) -> float:
    return time.monotonic() + seconds


def test_frame_round_trips_over_a_socketpair(pair: tuple[socket.socket, socket.socket]) -> None:
    a, b = pair
    send_frame(a, JOB, soon())
    send_frame(a, DONE, soon())
    assert recv_frame(b, soon()) == JOB
    assert recv_frame(b, soon()) == DONE


def test_frame_is_a_big_endian_length_then_the_contract_blob() -> None:
    body = encode(DONE)
    assert pack_frame(DONE) == struct.pack(">I", len(body)) + body


def test_a_frame_near_the_cap_crosses_a_non_blocking_socket(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    a, b = pair
    a.setblocking(False)
    big = Completion(text="x" * (MAX_BLOB_BYTES - 100))
    received: list[object] = []
    reader = threading.Thread(target=lambda: received.append(recv_frame(b, soon(5))))
    reader.start()
    send_frame(a, big, soon(5))
    reader.join(5)
    assert received == [big]


def test_frame_that_cannot_be_encoded_is_a_frame_error(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    with pytest.raises(FrameError, match="cannot frame dict"):
        send_frame(pair[0], {"not": "a contract"}, soon())


def test_reader_rebuilds_frames_fed_one_byte_at_a_time() -> None:
    data = pack_frame(JOB) + pack_frame(DONE)
    reader = FrameReader()
    out: list[object] = []
    for i in range(len(data)):
        out.extend(reader.feed(data[i : i + 1]))
    assert out == [JOB, DONE]
    assert reader.pending == 0


def test_reader_returns_every_whole_frame_of_one_feed_and_keeps_the_rest() -> None:
    data = pack_frame(JOB) + pack_frame(DONE) + pack_frame(JOB)[:7]
    reader = FrameReader()
    assert reader.feed(data) == [JOB, DONE]
    assert reader.pending == 7


def test_oversize_length_prefix_is_refused_before_any_allocation() -> None:
    reader = FrameReader()
    tracemalloc.start()
    try:
        with pytest.raises(FrameError, match="over the 1048576-byte cap"):
            reader.feed(b"\xff\xff\xff\xff")
        _current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 * 1024


def test_length_one_past_the_cap_is_refused() -> None:
    with pytest.raises(FrameError):
        FrameReader().feed(HEADER.pack(MAX_BLOB_BYTES + 1))


def test_oversize_length_prefix_on_a_socket_fails_at_once(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    a, b = pair
    a.sendall(b"\xff\xff\xff\xff")
    started = time.monotonic()
    with pytest.raises(FrameError, match="cap"):
        recv_frame(b, soon(5))
    assert time.monotonic() - started < 0.5


@pytest.mark.parametrize(
    "body",
    [
        b"",  # zero-length frame
        b"hello",  # not msgpack of a contract
        b"\xc1",  # a byte msgpack never uses
        b"\x92\xa3abc\x01",  # a plain msgpack list, not a contract
    ],
)
def test_garbage_body_is_a_frame_error(body: bytes) -> None:
    with pytest.raises(FrameError, match="bad frame"):
        FrameReader().feed(HEADER.pack(len(body)) + body)


def test_garbage_body_on_a_socket_is_a_frame_error(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    a, b = pair
    a.sendall(HEADER.pack(5) + b"hello")
    with pytest.raises(FrameError, match="bad frame"):
        recv_frame(b, soon())


def test_eof_between_frames_is_a_frame_error(pair: tuple[socket.socket, socket.socket]) -> None:
    a, b = pair
    a.close()
    with pytest.raises(FrameError, match="closed the channel \\(between frames\\)"):
        recv_frame(b, soon())


def test_eof_inside_a_frame_is_a_frame_error(pair: tuple[socket.socket, socket.socket]) -> None:
    a, b = pair
    a.sendall(pack_frame(JOB)[:10])
    a.close()
    with pytest.raises(FrameError, match="inside a frame"):
        recv_frame(b, soon())


def test_silent_peer_times_out_at_the_deadline(pair: tuple[socket.socket, socket.socket]) -> None:
    _a, b = pair
    started = time.monotonic()
    with pytest.raises(FrameError, match="timed out"):
        recv_frame(b, soon(0.1))
    assert 0.09 <= time.monotonic() - started < 1.0


def test_half_a_frame_then_silence_times_out(pair: tuple[socket.socket, socket.socket]) -> None:
    a, b = pair
    a.sendall(pack_frame(JOB)[:6])
    with pytest.raises(FrameError, match="timed out"):
        recv_frame(b, soon(0.1))


def test_a_deadline_already_past_fails_without_waiting(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    with pytest.raises(FrameError, match="timed out"):
        recv_frame(pair[1], time.monotonic() - 1)


def test_sending_to_a_closed_peer_is_a_frame_error(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    a, b = pair
    b.close()
    with pytest.raises(FrameError, match="cannot send"):
        for _ in range(3):
            send_frame(a, JOB, soon())


def test_sender_stuck_on_a_full_buffer_gives_up_at_the_deadline(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    a, _b = pair
    a.setblocking(False)
    big = Completion(text="y" * (MAX_BLOB_BYTES - 100))
    started = time.monotonic()
    with pytest.raises(FrameError, match="timed out sending"):
        send_frame(a, big, soon(0.1))
    assert time.monotonic() - started < 1.0


@settings(max_examples=50, deadline=None)
@given(cuts=st.lists(st.integers(min_value=0, max_value=4000), max_size=12))
def test_reader_yields_the_same_frames_however_the_stream_is_cut(cuts: list[int]) -> None:
    data = pack_frame(JOB) + pack_frame(DONE) + pack_frame(JOB)
    points = sorted({min(c, len(data)) for c in cuts} | {0, len(data)})
    reader = FrameReader()
    out: list[object] = []
    for start, end in itertools.pairwise(points):
        out.extend(reader.feed(data[start:end]))
    assert out == [JOB, DONE, JOB] and reader.pending == 0


@settings(max_examples=120, deadline=None)
@given(noise=st.binary(max_size=256))
def test_random_bytes_only_ever_raise_frame_error(noise: bytes) -> None:
    # A hostile worker or parent can send anything: the reader either waits for more bytes,
    # yields contracts, or raises FrameError — never another exception, never a big allocation.
    try:
        frames = FrameReader().feed(noise)
    except FrameError:
        return
    assert all(type(f).__module__ == "shelldon.contracts" for f in frames)
