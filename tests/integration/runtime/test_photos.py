"""Issue 32, part 1, as the owner tries it: a photo sent over the fake Bot API reaches the
model as an image block in the provider's real wire format; history keeps a placeholder, so
the next turn's request carries no bytes; the bytes never land in the workspace or sqlite; bad
input gets one line and the conversation goes on. Real service: actors, zygote, workers,
sqlite, the Telegram transport, the real provider adapters against the fake APIs."""

from __future__ import annotations

import base64
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fakes import fake_anthropic, fake_openai
from tests.fakes.fake_anthropic import FakeAnthropic
from tests.fakes.fake_openai import FakeOpenAI
from tests.fakes.fake_telegram import FakeTelegram
from tests.fakes.images import tiny_jpeg

from .harness import Service, ThreadedFakeTelegram

pytestmark = pytest.mark.slow

OWNER = 1001
MARK = b"shelldon-photo-" + os.urandom(8).hex().encode()
JPEG = tiny_jpeg(1280, 960, comment=MARK)
SIZES = FakeTelegram.photo_sizes("p1", (320, 240, 1_200), (1280, 960, len(JPEG)))
PLACEHOLDER = f"[photo 1280×960, {round(len(JPEG) / 1000)} KB]"


def start(tmp_path: Path, provider: str, vision: str = "on") -> tuple[Service, Any]:
    fake: Any = (FakeOpenAI() if provider == "openai" else FakeAnthropic()).start()
    home = tmp_path / "home"
    (home / "vault").mkdir(parents=True)
    (home / "vault" / f"{provider}_api_key").write_text(fake.api_key)
    svc = Service(
        home,
        [],
        telegram=True,
        SHELLDON_TELEGRAM_ALLOWED_USERS=str(OWNER),
        SHELLDON_BRAIN_PROVIDER=provider,
        SHELLDON_BRAIN_BASE_URL=fake.base_url,
        SHELLDON_PHOTOS_VISION=vision,
    )
    assert svc.telegram is not None
    svc.telegram.wait(lambda: bool(svc.telegram and svc.telegram.fake.commands))
    return svc, fake


@pytest.fixture(params=["openai", "anthropic"])
def pet(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Service, Any, str]]:
    svc, fake = start(tmp_path, request.param)
    try:
        yield svc, fake, request.param
    finally:
        svc.stop()
        fake.stop()


def said(tg: ThreadedFakeTelegram, before: int, expect: str) -> list[str]:
    tg.wait(lambda: any(expect in m.visible for m in tg.fake.sent[before:]))
    return [m.visible for m in tg.fake.sent[before:]]


def images(provider: str, body: Any) -> list[bytes]:
    module = fake_openai if provider == "openai" else fake_anthropic
    return module.images_in(body)


def test_a_photo_reaches_the_model_and_the_next_turn_sends_only_its_placeholder(
    pet: tuple[Service, Any, str],
) -> None:
    svc, fake, provider = pet
    tg = svc.telegram
    assert tg is not None
    fake.reply_text("A grey square.")
    fake.reply_text("Still a grey square.")
    tg.do(tg.fake.serve_file, "p1", JPEG)
    tg.do(tg.fake.queue_media, OWNER, "photo", SIZES, "what is this?")
    said(tg, 0, "A grey square.")
    first = fake.requests[0].json()
    assert images(provider, first) == [JPEG]
    assert fake.rejections == []
    assert f"{PLACEHOLDER} what is this?" in json.dumps(first, ensure_ascii=False)

    before = len(tg.fake.sent)
    tg.do(tg.fake.queue_message, OWNER, "and now?")
    said(tg, before, "Still a grey square.")
    follow_up = fake.requests[1]
    assert images(provider, follow_up.json()) == []
    assert base64.b64encode(JPEG[:300]) not in follow_up.body
    assert f"{PLACEHOLDER} what is this?" in json.dumps(follow_up.json(), ensure_ascii=False)
    history = [m.content for m in svc.store.conversation.recent(OWNER)]
    assert history[0] == f"{PLACEHOLDER} what is this?"

    # Nothing of the image on disk: not in the workspace, the database or its WAL, anywhere.
    svc.store.close()
    for path in svc.home.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            assert MARK not in data and base64.b64encode(JPEG[20:80]) not in data, path


def test_a_photo_that_cannot_be_fetched_gets_one_line_and_its_caption_is_answered(
    tmp_path: Path,
) -> None:
    svc, fake = start(tmp_path, "openai")
    try:
        tg = svc.telegram
        assert tg is not None
        fake.reply_text("Hello to you too.")
        tg.do(tg.fake.fail_next, "getFile", 400, "Bad Request: file is too big")
        tg.do(tg.fake.queue_media, OWNER, "photo", SIZES, "hello there")
        told = said(tg, 0, "Hello to you too.")
        assert told[0].startswith("I couldn't get that photo from Telegram")
        assert images("openai", fake.requests[0].json()) == []
        assert next(m.content for m in svc.store.conversation.recent(OWNER)) == "hello there"

        # A 20 MB image file with no caption: one line, no turn, nothing kept.
        before, asked = len(tg.fake.sent), len(fake.requests)
        doc = {"file_id": "d1", "mime_type": "image/jpeg", "file_size": 20_000_000}
        tg.do(tg.fake.queue_media, OWNER, "document", doc)
        told = said(tg, before, "20.0 MB")
        assert told == [
            "That image file is 20.0 MB; I take images up to 5.0 MB. Send it as a photo, not as "
            "a file, and Telegram makes it smaller."
        ]
        time.sleep(0.5)
        assert len(tg.fake.sent) == before + 1 and len(fake.requests) == asked

        # A corrupt photo, then the conversation goes on.
        tg.do(tg.fake.serve_file, "p1", b"\xff\xd8\xff" + b"\x00" * 50)
        tg.do(tg.fake.queue_media, OWNER, "photo", SIZES)
        said(tg, before, "not a JPEG, PNG, WebP or GIF I can read")
        fake.reply_text("Still here.")
        tg.do(tg.fake.queue_message, OWNER, "are you there?")
        said(tg, before, "Still here.")
    finally:
        svc.stop()
        fake.stop()


def test_a_model_without_vision_keeps_the_honest_text_only_reply(tmp_path: Path) -> None:
    svc, fake = start(tmp_path, "openai", vision="auto")  # auto: off for OpenAI-compatible
    try:
        tg = svc.telegram
        assert tg is not None
        tg.do(tg.fake.serve_file, "p1", JPEG)
        tg.do(tg.fake.queue_media, OWNER, "photo", SIZES, "look")
        (told,) = said(tg, 0, "I can only read text for now")
        assert "photo" in told
        assert "getFile" not in tg.fake.calls and fake.requests == []
    finally:
        svc.stop()
        fake.stop()
