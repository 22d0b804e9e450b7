"""Which image in a message is taken, at which size, and what its bytes really are.

Attack inspiration: a document that claims image/jpeg but is an ELF; truncated headers; sizes
a hostile server reports as bools or negative numbers.
"""

from __future__ import annotations

import struct
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shelldon.config import ConfigError, load_settings
from shelldon.contracts import Photo
from shelldon.transport.approvals import callback_key
from shelldon.transport.photos import (
    PhotoCaps,
    WantedPhoto,
    dimensions,
    pick_size,
    placeholder,
    sniff,
    wanted_photo,
)
from shelldon.transport.updates import Rejected, UpdateRules, parse_update
from tests.fakes.fake_telegram import FakeTelegram
from tests.fakes.images import tiny_jpeg, tiny_png

OWNER = 7
CAPS = PhotoCaps(max_px=1280, max_bytes=5_000_000, fetch_timeout_s=20)
SIZES = FakeTelegram.photo_sizes(
    "big", (90, 68, 1_500), (320, 240, 20_000), (800, 600, 80_000), (1280, 960, 184_000)
)


def update(**fields: Any) -> dict[str, Any]:
    message = {
        "message_id": 1,
        "from": {"id": OWNER, "is_bot": False},
        "chat": {"id": OWNER, "type": "private"},
        **fields,
    }
    return {"update_id": 5, "message": message}


def test_the_largest_telegram_size_within_both_caps_is_picked() -> None:
    assert pick_size(SIZES, CAPS)["width"] == 1280  # type: ignore[index]
    assert pick_size(SIZES, PhotoCaps(1000, 5_000_000, 20))["width"] == 800  # type: ignore[index]
    assert pick_size(SIZES, PhotoCaps(1280, 50_000, 20))["width"] == 320  # type: ignore[index]
    huge = FakeTelegram.photo_sizes("h", (2560, 1920, 9_000_000))
    # Nothing fits: the smallest goes on, for the fetch to refuse by its size.
    assert pick_size(huge, CAPS)["file_id"] == "h"  # type: ignore[index]
    assert pick_size([{"width": True}, "x"], CAPS) is None


def test_a_photo_with_a_caption_is_wanted_at_its_picked_size() -> None:
    wanted = wanted_photo(
        update(photo=SIZES, caption="what is this?")["message"], CAPS, OWNER, OWNER, 5
    )
    assert wanted == WantedPhoto(OWNER, OWNER, 5, "what is this?", "big", "photo", 184_000)


@pytest.mark.parametrize("mime", ["image/jpeg", "image/png", "image/webp", "image/gif"])
def test_a_document_of_an_image_type_is_taken_as_a_photo(mime: str) -> None:
    doc = {"file_id": "d1", "mime_type": mime, "file_size": 2_000}
    wanted = wanted_photo(update(document=doc)["message"], CAPS, OWNER, OWNER, 5)
    assert wanted is not None and (wanted.kind, wanted.size) == ("image file", 2_000)


@pytest.mark.parametrize(
    "fields",
    [
        {"document": {"file_id": "d1", "mime_type": "application/pdf"}},
        {"document": {"file_id": "d1", "mime_type": "image/svg+xml"}},  # scripts inside
        {"animation": {"file_id": "a"}, "document": {"file_id": "a", "mime_type": "image/gif"}},
        {"voice": {"file_id": "v", "duration": 2}},
        {"sticker": {"file_id": "s"}},
    ],
)
def test_voice_stickers_and_other_files_keep_the_text_only_reply(fields: dict[str, Any]) -> None:
    rules = UpdateRules.of([OWNER], callback_key("1:a"), CAPS)
    parsed = parse_update(update(**fields), rules)
    assert isinstance(parsed, Rejected)
    assert parsed.notice.startswith("I can only read text for now")


def test_without_vision_a_photo_keeps_the_honest_text_only_reply() -> None:
    rules = UpdateRules.of([OWNER], callback_key("1:a"))
    parsed = parse_update(update(photo=SIZES, caption="look"), rules)
    assert isinstance(parsed, Rejected)
    assert parsed.notice.startswith("I can only read text for now, so I can't take in that photo")


def test_with_vision_a_photo_is_wanted_and_a_strangers_is_still_dropped() -> None:
    rules = UpdateRules.of([OWNER], callback_key("1:a"), CAPS)
    assert isinstance(parse_update(update(photo=SIZES), rules), WantedPhoto)
    stranger = update(photo=SIZES)
    stranger["message"]["from"]["id"] = 666
    parsed = parse_update(stranger, rules)
    assert isinstance(parsed, Rejected) and not parsed.from_owner


def test_magic_bytes_decide_the_type_never_the_claimed_mime() -> None:
    assert sniff(tiny_jpeg()) == "image/jpeg"
    assert sniff(tiny_png()) == "image/png"
    assert sniff(b"GIF89a\x02\x00\x03\x00") == "image/gif"
    assert sniff(b"RIFF\x00\x00\x00\x00WEBPVP8X") == "image/webp"
    assert sniff(b"\x7fELF\x02\x01\x01\x00") == ""
    assert sniff(b"<svg xmlns='http://www.w3.org/2000/svg'/>") == ""


def test_width_and_height_come_from_the_images_own_header() -> None:
    assert dimensions(tiny_jpeg(1280, 960), "image/jpeg") == (1280, 960)
    assert dimensions(tiny_png(3, 2), "image/png") == (3, 2)
    assert dimensions(b"GIF89a" + struct.pack("<HH", 40, 30), "image/gif") == (40, 30)
    vp8x = b"RIFF\x00\x00\x00\x00WEBPVP8X" + b"\x00" * 8 + (639).to_bytes(3, "little")
    assert dimensions(vp8x + (479).to_bytes(3, "little"), "image/webp") == (640, 480)


@pytest.mark.parametrize(
    ("data", "media_type"),
    [
        (tiny_jpeg(64, 64)[:30], "image/jpeg"),
        (b"\xff\xd8\xff\xe0\x00\x01", "image/jpeg"),  # a segment length below 2
        (tiny_png()[:20], "image/png"),
        (b"GIF89a\x00\x00\x00\x00", "image/gif"),  # zero by zero
        (b"RIFF\x00\x00\x00\x00WEBPVP8 ", "image/webp"),
    ],
)
def test_a_truncated_or_empty_header_is_no_image(data: bytes, media_type: str) -> None:
    assert dimensions(data, media_type) is None


def test_history_keeps_a_short_placeholder_not_the_bytes() -> None:
    photo = Photo("k", "image/jpeg", 1280, 960, 184_000)
    assert placeholder(photo) == "[photo 1280×960, 184 KB]"
    big = Photo("k", "image/png", 2000, 1000, 2_100_000)
    assert placeholder(big, "image file") == "[image file 2000×1000, 2.1 MB]"


@pytest.mark.parametrize(
    ("env", "sees"),
    [
        ({"SHELLDON_BRAIN_PROVIDER": "anthropic"}, True),
        (
            {
                "SHELLDON_BRAIN_PROVIDER": "anthropic",
                "SHELLDON_BRAIN_BASE_URL": "https://api.anthropic.com/",
            },
            True,
        ),
        # GLM through Z.ai's Anthropic-compatible endpoint: whether it sees is the owner's word.
        (
            {
                "SHELLDON_BRAIN_PROVIDER": "anthropic",
                "SHELLDON_BRAIN_BASE_URL": "https://api.z.ai/api/anthropic",
            },
            False,
        ),
        ({"SHELLDON_BRAIN_PROVIDER": "openai"}, False),
        ({"SHELLDON_BRAIN_PROVIDER": "openai", "SHELLDON_PHOTOS_VISION": "on"}, True),
        ({"SHELLDON_BRAIN_PROVIDER": "anthropic", "SHELLDON_PHOTOS_VISION": "off"}, False),
        ({}, False),  # the scripted brain
    ],
)
def test_vision_auto_is_on_only_for_anthropics_own_api(env: dict[str, str], sees: bool) -> None:
    settings = load_settings(environ={"SHELLDON_HOME": "/nonexistent", **env})
    assert settings.photos.enabled(settings.brain) is sees


def test_a_vision_setting_that_is_no_mode_is_refused_by_name() -> None:
    with pytest.raises(ConfigError, match=r"photos.vision: 'yes' is not one of auto, on, off"):
        load_settings(environ={"SHELLDON_HOME": "/nonexistent", "SHELLDON_PHOTOS_VISION": "yes"})


JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=12,
)
PHOTO_FIELDS = st.fixed_dictionaries(
    {},
    optional={
        "photo": st.lists(
            st.fixed_dictionaries(
                {},
                optional={k: JSONISH for k in ("file_id", "width", "height", "file_size")},
            )
            | JSONISH,
            max_size=4,
        )
        | JSONISH,
        "document": st.fixed_dictionaries(
            {}, optional={k: JSONISH for k in ("file_id", "mime_type", "file_size")}
        )
        | JSONISH,
        "caption": JSONISH,
        "animation": JSONISH,
    },
)


@settings(max_examples=300, deadline=None)
@given(PHOTO_FIELDS)
def test_no_shape_of_photo_or_document_makes_parsing_raise(fields: dict[str, Any]) -> None:
    rules = UpdateRules.of([OWNER], callback_key("1:a"), CAPS)
    parsed = parse_update(update(**fields), rules)
    if isinstance(parsed, WantedPhoto):
        assert isinstance(parsed.file_id, str) and isinstance(parsed.caption, str)
        assert parsed.size >= 0
