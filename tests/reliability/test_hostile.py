"""Hostile input through the running service: hypothesis-generated Telegram updates (missing
fields, wrong types, huge and non-UTF-8 texts, unknown kinds), forged callback_data (other turn
ids, bad MACs, oversized, non-UTF-8, not text), random bytes as parked approval blobs, and
random bytes as worker frames. Each is refused with a clear log line; nothing crashes, nothing
executes, and the owner is still served afterwards.

Inspired by: Telegram's Bot API update schema (fields that are optional in practice), the
OWASP "forged client-side state" pattern for callback data, and protocol fuzzing of framed
IPC (length prefix lies, truncated bodies, unknown type tags).
"""

from __future__ import annotations

import json
import os
import random
import stat
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from shelldon.contracts import InboundMessage, encode
from shelldon.rules.replies import UNREADABLE
from shelldon.store import Store
from shelldon.transport.approvals import approval_callback_data, callback_key
from shelldon.worker import spawn
from tests.fakes.fake_telegram import TEST_TOKEN
from tests.integration.runtime.harness import Service, ThreadedFakeTelegram

from .rig import OWNER, STRANGER, ShelldonRun, keyboards, texts, wait_until

pytestmark = pytest.mark.slow

SCRIPT: list[dict[str, Any]] = [
    {
        "when": "note",
        "tool_calls": [{"name": "run_shell", "args": {"command": "echo ran >> ran.log"}}],
    },
    {"when": "note", "text": "Noted."},
    *[{"when": "ping", "text": "pong"}] * 3,
]
KEY = callback_key(TEST_TOKEN)


@pytest.fixture
def tg() -> Iterator[ThreadedFakeTelegram]:
    fake = ThreadedFakeTelegram()
    try:
        yield fake
    finally:
        fake.close()


@pytest.fixture
def run(tmp_path: Path, tg: ThreadedFakeTelegram) -> Iterator[ShelldonRun]:
    service = ShelldonRun(tmp_path / "home", tg, SCRIPT)
    service.start()
    try:
        yield service
    finally:
        service.stop()


def log_events(run: ShelldonRun) -> list[dict[str, Any]]:
    events = []
    for line in run.output().splitlines():
        try:
            events.append(json.loads(line))
        except ValueError:
            events.append({"event": "unparsed", "line": line})
    return events


def assert_healthy(run: ShelldonRun, tg: ThreadedFakeTelegram) -> None:
    """The service still answers its owner, no actor died, no traceback was printed."""
    # New messages only: a settled tap may have edited an earlier "pong" into its outcome.
    sent = len(tg.fake.sent)
    tg.do(tg.fake.queue_message, OWNER, "ping")
    wait_until(
        lambda: any(m.visible == "pong" for m in tg.fake.sent[sent:]),
        15,
        "the owner's ping to be answered",
    )
    assert run.proc is not None and run.proc.poll() is None
    events = log_events(run)
    assert not [e for e in events if e.get("event") in ("actor_died", "service_fatal")]
    assert "Traceback" not in run.output()


def assert_nothing_ran(run: ShelldonRun) -> None:
    assert not (run.home / "workspace" / "ran.log").exists()
    with Store(run.home / "shelldon.db") as store:
        assert "approved" not in [e.action for e in store.audit.log()]


# ------------------------------------------------------------------ generated updates

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=12),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=6,
)
IDS = st.sampled_from([OWNER, STRANGER]) | JSON
# Lone surrogates (text no UTF-8 can carry) are left out here: they crash the poller today,
# see test_an_owner_text_with_lone_surrogates_is_refused_without_harm.
TEXTS = st.text(max_size=40) | st.just("x" * 100_000) | JSON
USER = st.fixed_dictionaries(
    {}, optional={"id": IDS, "is_bot": JSON | st.booleans(), "first_name": TEXTS}
)
CHAT = st.fixed_dictionaries(
    {}, optional={"id": IDS, "type": st.sampled_from(["private", "group", "channel"]) | JSON}
)
MESSAGE = st.fixed_dictionaries(
    {},
    optional={
        "message_id": st.integers() | JSON,
        "date": st.integers() | JSON,
        "from": USER | JSON,
        "chat": CHAT | JSON,
        "text": TEXTS,
    },
)
CALLBACK = st.fixed_dictionaries(
    {},
    optional={
        "id": st.text(max_size=8) | JSON,
        "from": USER | JSON,
        "message": MESSAGE | JSON,
        "data": TEXTS,
    },
)
OWNER_MESSAGE = st.fixed_dictionaries(
    {
        "message_id": st.integers(1, 2**31),
        "date": st.integers(0, 2**31),
        "from": st.just({"id": OWNER, "is_bot": False, "first_name": "owner"}),
        "chat": st.just({"id": OWNER, "type": "private"}),
        "text": TEXTS,
    }
)
UPDATES = st.one_of(
    st.fixed_dictionaries({"message": OWNER_MESSAGE}),
    st.fixed_dictionaries({"message": MESSAGE | JSON}),
    st.fixed_dictionaries({"edited_message": MESSAGE}),
    st.fixed_dictionaries({"callback_query": CALLBACK | JSON}),
    st.fixed_dictionaries({"channel_post": MESSAGE}),
    st.dictionaries(
        st.text(min_size=1, max_size=12).filter(lambda k: k != "update_id"),
        JSON,
        min_size=1,
        max_size=2,
    ),
)


def test_generated_updates_are_refused_without_harm(
    run: ShelldonRun, tg: ThreadedFakeTelegram
) -> None:
    @settings(
        max_examples=30,
        # No shrinking: each example costs a poll round trip, and the log names what broke.
        phases=[Phase.explicit, Phase.reuse, Phase.generate],
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(batch=st.lists(UPDATES, min_size=1, max_size=6))
    def feed(batch: list[dict[str, Any]]) -> None:
        last = 0
        assert run.proc is not None and run.proc.poll() is None, run.output()[-2000:]
        for update in batch:
            last = tg.do(tg.fake.queue_update, update)
        # The poller confirms an update (asks for offset past it) only once it is handled.
        wait_until(
            lambda: any((p["offset"] or 0) > last for p in list(tg.fake.polls)),
            10,
            "the poller to move past the batch",
        )

    feed()
    assert_healthy(run, tg)
    assert_nothing_ran(run)
    dropped = [e for e in log_events(run) if e.get("event") == "telegram.update_dropped"]
    assert dropped and all(e.get("reason") for e in dropped)


def test_an_owner_text_with_lone_surrogates_is_refused_without_harm(
    run: ShelldonRun, tg: ThreadedFakeTelegram
) -> None:
    uid = tg.do(tg.fake.queue_message, OWNER, "\udcff a lone surrogate")
    time.sleep(2.0)
    assert not [e for e in log_events(run) if e.get("event") == "service_fatal"]
    assert any((p["offset"] or 0) > uid for p in list(tg.fake.polls))
    assert_healthy(run, tg)


# ------------------------------------------------------------------ forged callback data


def test_forged_callback_data_decides_nothing(run: ShelldonRun, tg: ThreadedFakeTelegram) -> None:
    tg.do(tg.fake.queue_message, OWNER, "note this")
    wait_until(lambda: keyboards(tg), what="the approval keyboard")
    (ask,) = keyboards(tg)
    real = ask.buttons()[0]["callback_data"]
    _verdict, turn_id, mac = real.split(":")
    other = approval_callback_data("t0000000000000000", True, KEY)
    forged: list[Any] = [
        f"a:t0000000000000000:{mac}",  # another turn id under this turn's MAC
        f"a:{turn_id}:{other.split(':')[2]}",  # this turn under another turn's MAC
        f"a:{turn_id}:AAAAAAAAAAAAAAAA",  # a guessed MAC
        other,  # a well-signed button for a turn that was never parked
        real + "x" * 100,  # oversized
        "a:" + "\udcff" * 20,  # not UTF-8
        "\x00" * 64,
        12345,
        None,
        {"a": 1},
    ]
    answers = len(tg.fake.answers)
    for data in forged:
        tg.do(tg.fake.queue_callback, OWNER, data, ask.message_id, OWNER)
    tg.do(tg.fake.queue_callback, STRANGER, real, ask.message_id, STRANGER)
    wait_until(lambda: len(tg.fake.answers) >= answers + len(forged) + 1, 15, "every tap answered")
    time.sleep(0.5)
    assert_nothing_ran(run)
    with Store(run.home / "shelldon.db") as store:
        assert store.parked.parked_approval(turn_id)
    # The real button still works, once.
    tg.do(tg.fake.queue_callback, OWNER, real, ask.message_id, OWNER)
    wait_until(lambda: "Noted." in texts(tg), 15, "the real tap to run the call")
    assert (run.home / "workspace" / "ran.log").read_text() == "ran\n"
    assert_healthy(run, tg)


# ------------------------------------------------------------------ corrupt parked blobs


def corrupt_blobs() -> list[bytes]:
    rng = random.Random(11)
    blobs = [rng.randbytes(rng.randint(0, 300)) for _ in range(4)]
    blobs += [
        b"",
        msgpack.packb(["no_such_contract", {}]),
        encode(InboundMessage(OWNER, OWNER, "not a parked call")),
        b"\xc1" * 16,  # msgpack's never-used byte
    ]
    return blobs


def test_random_bytes_parked_as_approvals_are_refused_on_tap(
    run: ShelldonRun, tg: ThreadedFakeTelegram
) -> None:
    tg.do(tg.fake.queue_message, OWNER, "ping")
    wait_until(lambda: "pong" in texts(tg), 15, "a message to hang the taps on")
    (pong,) = [m for m in tg.fake.sent if m.visible == "pong"]
    blobs = corrupt_blobs()
    turn_ids = [f"tcorrupt{i:08d}" for i in range(len(blobs))]
    with Store(run.home / "shelldon.db") as store:
        for turn_id, blob in zip(turn_ids, blobs, strict=True):
            store.parked.park_approval(turn_id, OWNER, blob, "run_shell(...)", time.time(), 3600)
    with Store(run.home / "shelldon.db") as store:
        for turn_id in turn_ids:
            # One at a time, so each outcome is counted for its own tap.
            told = texts(tg).count(UNREADABLE)
            data = approval_callback_data(turn_id, True, KEY)
            tg.do(tg.fake.queue_callback, OWNER, data, pong.message_id, OWNER)
            wait_until(
                lambda: texts(tg).count(UNREADABLE) > told,  # noqa: B023 - used now
                10,
                f"the outcome of the tap on {turn_id}",
            )
            assert not store.parked.parked_approval(turn_id)
        wait_until(
            lambda: [e.action for e in store.audit.log()].count("corrupt") == len(blobs),
            10,
            "every corrupt blob audited",
        )
    # The tapped message is no card of ours: it keeps its text, the outcome comes on its own.
    assert tg.fake.message(OWNER, pong.message_id).visible == "pong"
    corrupt = [e for e in log_events(run) if e.get("event") == "parked_approval_corrupt"]
    assert len(corrupt) == len(blobs) and all(e.get("error") for e in corrupt)
    assert_nothing_ran(run)
    assert_healthy(run, tg)


HOSTILE_PROMOTIONS: list[tuple[Any, Any]] = [
    ("../../outside", "0" * 64),
    ("", ""),
    ("name\0with_nul", "f" * 64),
    ("tools/../x", "not a hash"),
    (random.Random(7).randbytes(40), random.Random(8).randbytes(32)),  # stored as sqlite BLOBs
    ("never_staged", "a" * 64),
]


def test_hostile_parked_promotions_promote_nothing(
    run: ShelldonRun, tg: ThreadedFakeTelegram
) -> None:
    tg.do(tg.fake.queue_message, OWNER, "ping")
    wait_until(lambda: "pong" in texts(tg), 15, "a message to hang the taps on")
    (pong,) = [m for m in tg.fake.sent if m.visible == "pong"]
    with Store(run.home / "shelldon.db") as store:
        for i, (name, digest) in enumerate(HOSTILE_PROMOTIONS):
            store.parked.park_promotion(
                f"phostile{i:08d}", OWNER, name, digest, "x", time.time(), 3600
            )
        for i in range(len(HOSTILE_PROMOTIONS)):
            turn_id = f"phostile{i:08d}"
            calls = len(tg.fake.calls)
            tg.do(
                tg.fake.queue_callback,
                OWNER,
                approval_callback_data(turn_id, True, KEY),
                pong.message_id,
                OWNER,
            )
            wait_until(
                lambda: store.parked.parked_promotion(turn_id) is None,  # noqa: B023
                10,
                f"{turn_id} decided",
            )
            wait_until(lambda: len(tg.fake.calls) > calls + 1, 10, "the outcome")  # noqa: B023
    assert not list((run.home / "toolbox" / "live").glob("*.py"))
    assert not (run.home / "outside.py").exists()
    assert_healthy(run, tg)


# ------------------------------------------------------------------ garbage worker frames

GARBAGE = {
    "junk0": b"\xff\xff\xff\xff" + b"x" * 32,  # a length prefix far over the cap
    "junk1": (64).to_bytes(4, "big") + random.Random(3).randbytes(64),
    "junk2": (9).to_bytes(4, "big") + msgpack.packb(["nope", {}])[:9].ljust(9, b"\0"),
    "junk3": (100).to_bytes(4, "big") + b"short",  # a body that never completes
    "junk4": (len(b := encode(InboundMessage(0, 0, "x")))).to_bytes(4, "big") + b,
    "junk5": random.Random(5).randbytes(4096),
}


def _channel_fd() -> int:
    for fd in range(3, 1024):
        try:
            if stat.S_ISSOCK(os.fstat(fd).st_mode):
                return fd
        except OSError:
            continue
    raise RuntimeError("no channel")


def garbage_run_turn(real: Any) -> Any:
    """A worker loop that, for the junk messages, writes raw bytes to its channel instead."""

    def run_turn(request, registry, ask, settings, deadline):  # type: ignore[no-untyped-def]
        payload = GARBAGE.get(request.text)
        if payload is None:
            return real(request, registry, ask, settings, deadline)
        os.write(_channel_fd(), payload)
        time.sleep(1000)

    return run_turn


@pytest.fixture
def tampered(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Service]:
    # Actor processes fork from this one, so the patched loop is what their workers run.
    monkeypatch.setattr(spawn, "run_turn", garbage_run_turn(getattr(spawn, "run_turn")))  # noqa: B009
    svc = Service(
        tmp_path / "home",
        SCRIPT,
        SHELLDON_LIMITS_TURN_TIMEOUT_S="1.5",
        SHELLDON_LIMITS_BAIL_MARGIN_S="0.3",
        SHELLDON_LIMITS_KILL_GRACE_S="0.3",
    )
    try:
        yield svc
    finally:
        svc.stop()


def test_garbage_worker_frames_end_the_turn_with_an_apology(tampered: Service) -> None:
    for text in GARBAGE:
        before = time.monotonic()
        tampered.say(text)
        chunk = tampered.expect("shelldon › Sorry", timeout=6)
        assert time.monotonic() - before < 1.5 + 0.3 + 1.5, (text, chunk)
        assert "pong" not in chunk
    tampered.say("ping")
    tampered.expect("pong")
    assert tampered.status().restarts == 0
    # The last turn's worker is reaped from a wake-up just after its reply: allow it that.
    deadline = time.monotonic() + 2
    while tampered.turn_workers() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not tampered.turn_workers()
