"""The broker's photos: lent to one turn, gone when it closes, and on the wire in each
provider's real format (base64 only there)."""

from __future__ import annotations

import base64

from shelldon.broker.anthropic_provider import to_anthropic
from shelldon.broker.openai_provider import to_openai
from shelldon.broker.photos import GONE_NOTE, PhotoShelf
from shelldon.contracts import Message, Photo, Role
from tests.fakes.fake_anthropic import check_messages_request
from tests.fakes.fake_openai import check_chat_request
from tests.fakes.images import tiny_jpeg

JPEG = tiny_jpeg(64, 48)
PHOTO = Photo("k1", "image/jpeg", 64, 48, len(JPEG))
ASKED = (Message(Role.SYSTEM, "be kind"), Message(Role.USER, "[photo 64×48, 1 KB] hi", photo=PHOTO))


def test_a_photo_is_lent_to_the_first_turn_that_names_it_and_dropped_when_it_closes() -> None:
    shelf = PhotoShelf(10_000)
    shelf.put(PHOTO, JPEG)
    sent = shelf.attach("t1", ASKED)
    assert sent[1].photo is not None and base64.b64decode(sent[1].photo.base64) == JPEG
    again = shelf.attach("t1", ASKED)[1].photo
    assert again is not None and again.base64 is sent[1].photo.base64  # encoded once a turn
    other = shelf.attach("t2", ASKED)[1]
    assert other.photo is None and other.content.endswith(GONE_NOTE)
    shelf.close("t1")
    assert shelf.held_bytes == 0
    gone = shelf.attach("t1", ASKED)[1]
    assert gone.photo is None and gone.content == "[photo 64×48, 1 KB] hi" + GONE_NOTE


def test_bytes_a_worker_put_in_a_photo_are_never_the_ones_sent() -> None:
    shelf = PhotoShelf(10_000)
    forged = (Message(Role.USER, "x", photo=Photo("nokey", "image/jpeg", 1, 1, 3, "/9j/ZXZpbA==")),)
    assert shelf.attach("t1", forged)[0].photo is None


def test_the_shelf_holds_at_most_its_bytes_dropping_the_oldest() -> None:
    shelf = PhotoShelf(2 * len(JPEG))
    for key in ("a", "b", "c"):
        shelf.put(Photo(key, "image/jpeg", 64, 48, len(JPEG)), JPEG)
    assert shelf.held_bytes == 2 * len(JPEG)
    shelf.attach("t", (Message(Role.USER, "", photo=Photo("c", "image/jpeg", 1, 1, 1)),))
    assert shelf.held_bytes == len(JPEG) + len(base64.b64encode(JPEG))
    first = Message(Role.USER, "", photo=Photo("a", "image/jpeg", 64, 48, len(JPEG)))
    assert shelf.attach("t", (first,))[0].photo is None


def test_anthropic_gets_an_image_block_before_the_text() -> None:
    sent = PhotoShelf(10_000)
    sent.put(PHOTO, JPEG)
    system, turns, _ = to_anthropic(sent.attach("t", ASKED), ())
    image, text = turns[0]["content"]
    assert image == {
        "type": "image",
        "source": {
            "type": "base64",
            "media_type": "image/jpeg",
            "data": base64.b64encode(JPEG).decode(),
        },
    }
    assert text == {"type": "text", "text": "[photo 64×48, 1 KB] hi"}
    body = {"model": "m", "max_tokens": 5, "system": system, "messages": turns}
    assert check_messages_request(body) is None


def test_openai_gets_a_text_part_and_an_image_url_data_url() -> None:
    sent = PhotoShelf(10_000)
    sent.put(PHOTO, JPEG)
    wire, _ = to_openai(sent.attach("t", ASKED), ())
    assert wire[1]["content"] == [
        {"type": "text", "text": "[photo 64×48, 1 KB] hi"},
        {
            "type": "image_url",
            "image_url": {"url": "data:image/jpeg;base64," + base64.b64encode(JPEG).decode()},
        },
    ]
    assert check_chat_request({"model": "m", "messages": wire}) is None


def test_a_photo_without_bytes_is_plain_text_on_both_wires() -> None:
    _, turns, _ = to_anthropic(ASKED, ())
    assert turns[0]["content"] == [{"type": "text", "text": "[photo 64×48, 1 KB] hi"}]
    wire, _ = to_openai(ASKED, ())
    assert wire[1]["content"] == "[photo 64×48, 1 KB] hi"
