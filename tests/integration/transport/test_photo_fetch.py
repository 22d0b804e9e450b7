"""An owner's photo fetched from the fake Bot API: getFile, then the download into memory, each
bad input refused with one line for the owner and nothing left behind.

Attack inspiration: a getFile reply whose file_path climbs out of /file/bot<token>/ (path
traversal puts the token in front of another URL); a server that declares a huge
Content-Length, streams without end, or never finishes (memory and time exhaustion); a gzip
body (a decompression bomb passes a byte cap in one chunk); an ELF that calls itself
image/jpeg; a 20 MB document (Telegram's own getFile limit); a redirect (the token would go
along to wherever it points).
"""

from __future__ import annotations

import time

import pytest

from shelldon.transport.photos import Fetched, PhotoCaps, Refused, WantedPhoto, fetch_photo
from shelldon.transport.telegram import BotApi, RetryPolicy
from shelldon.transport.telegram_errors import FileTooBig
from tests.fakes.fake_telegram import FakeTelegram
from tests.fakes.images import tiny_jpeg
from tests.integration.transport.support import run

OWNER = 7
CAPS = PhotoCaps(max_px=1280, max_bytes=200_000, fetch_timeout_s=5.0)
QUICK = RetryPolicy(attempts=2, base_delay=0.01, max_delay=0.02)
JPEG = tiny_jpeg(1280, 960, comment=b"photo-fetch-test")


def wanted(file_id: str = "f1", kind: str = "photo", size: int = 0) -> WantedPhoto:
    return WantedPhoto(OWNER, OWNER, 5, "what is this?", file_id, kind, size)


async def fetch(tg: FakeTelegram, want: WantedPhoto, caps: PhotoCaps = CAPS) -> Fetched | Refused:
    async with BotApi(tg.token, api_base=tg.api_base, retry=QUICK) as api:
        return await fetch_photo(api, want, caps)


def test_a_real_jpeg_is_fetched_into_memory_with_its_true_type_and_size() -> None:
    async def scenario() -> None:
        async with FakeTelegram() as tg:
            path = tg.serve_file("f1", JPEG)
            got = await fetch(tg, wanted())
            assert isinstance(got, Fetched)
            assert got.data == JPEG
            assert (got.photo.media_type, got.photo.width, got.photo.height) == (
                "image/jpeg",
                1280,
                960,
            )
            assert got.photo.size == len(JPEG) and got.photo.base64 == ""
            assert tg.calls == ["getFile"] and tg.downloads == [path]

    run(scenario())


def test_a_getfile_error_is_one_line_and_never_a_crash() -> None:
    async def scenario() -> None:
        async with FakeTelegram() as tg:
            tg.fail_next("getFile", 400, "Bad Request: file is too big")
            got = await fetch(tg, wanted())
            assert isinstance(got, Refused)
            assert got.line.startswith("I couldn't get that photo from Telegram")
            assert "file is too big" in got.line and tg.token not in got.line
            assert "\n" not in got.line

    run(scenario())


@pytest.mark.parametrize(
    "path",
    ["../../bot123/getMe", "photos/../../secret", "/etc/passwd", "photos/a.jpg?x=1", "a\\b.jpg"],
)
def test_a_file_path_that_climbs_out_is_never_downloaded(path: str) -> None:
    async def scenario() -> None:
        async with FakeTelegram() as tg:
            tg.serve_file("f1", JPEG, path=path)
            got = await fetch(tg, wanted())
            assert isinstance(got, Refused) and "couldn't get" in got.line
            assert tg.downloads == []

    run(scenario())


def test_a_huge_declared_length_is_refused_before_any_body_is_read() -> None:
    async def scenario() -> None:
        async with FakeTelegram() as tg:
            tg.serve_file("f1", JPEG, declared=10**9, hang=True)
            started = time.monotonic()
            got = await fetch(tg, wanted())
            assert isinstance(got, Refused) and "over 200 KB" in got.line
            assert time.monotonic() - started < 2.0

    run(scenario())


def test_an_endless_download_stops_at_the_cap_plus_one() -> None:
    async def scenario() -> None:
        async with FakeTelegram() as tg:
            tg.serve_file("f1", b"", path="photos/endless.jpg", endless=True)
            async with BotApi(tg.token, api_base=tg.api_base, retry=QUICK) as api:
                with pytest.raises(FileTooBig) as caught:
                    await api.download("photos/endless.jpg", 200_000, 5.0)
            assert 200_000 < caught.value.size <= 200_000 + 64 * 1024
            got = await fetch(tg, wanted())
            assert isinstance(got, Refused) and "over 200 KB" in got.line

    run(scenario())


def test_a_download_that_never_ends_is_cut_at_the_time_cap() -> None:
    async def scenario() -> None:
        async with FakeTelegram() as tg:
            tg.serve_file("f1", JPEG, hang=True)
            started = time.monotonic()
            got = await fetch(tg, wanted(), PhotoCaps(1280, 200_000, 0.5))
            assert isinstance(got, Refused)
            assert got.line == "Telegram took too long to give me that photo. Try sending it again?"
            assert time.monotonic() - started < 2.0

    run(scenario())


def test_a_compressed_body_is_refused_unread() -> None:
    async def scenario() -> None:
        async with FakeTelegram() as tg:
            tg.serve_file("f1", JPEG, gzip=True)
            got = await fetch(tg, wanted())
            assert isinstance(got, Refused) and "compressed" in got.line

    run(scenario())


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (b"\x7fELF\x02\x01\x01" + b"\x00" * 200, "an ELF that calls itself image/jpeg"),
        (JPEG[:40], "a JPEG cut off before its size"),
        (b"\x89PNG\r\n\x1a\n" + b"\x00" * 8, "a PNG without its header"),
    ],
)
def test_bytes_that_are_not_a_whole_image_are_refused(content: bytes, why: str) -> None:
    async def scenario() -> None:
        async with FakeTelegram() as tg:
            tg.serve_file("f1", content)
            got = await fetch(tg, wanted("f1", "image file"))
            assert isinstance(got, Refused), why
            assert got.line == (
                "That image file is not a JPEG, PNG, WebP or GIF I can read, so I left it out."
            )

    run(scenario())


def test_a_20_mb_document_is_refused_without_a_fetch() -> None:
    async def scenario() -> None:
        async with FakeTelegram() as tg:
            got = await fetch(tg, wanted("big", "image file", size=20_000_000))
            assert isinstance(got, Refused)
            assert got.line.startswith("That image file is 20.0 MB; I take images up to 200 KB.")
            assert "Send it as a photo" in got.line
            assert tg.calls == []

    run(scenario())


def test_an_image_file_wider_than_the_cap_is_refused_with_how_to_send_it() -> None:
    async def scenario() -> None:
        async with FakeTelegram() as tg:
            tg.serve_file("f1", tiny_jpeg(4032, 3024))
            got = await fetch(tg, wanted("f1", "image file"))
            assert isinstance(got, Refused)
            assert got.line.startswith("That image file is 4032×3024; I take images up to 1280 px")

    run(scenario())


def test_a_redirect_is_not_followed() -> None:
    async def scenario() -> None:
        async with FakeTelegram() as tg:
            tg.serve_file("f1", JPEG, redirect=f"{tg.api_base}/file/bot{tg.token}/photos/x.jpg")
            tg.serve_file("f2", JPEG, path="photos/x.jpg")
            got = await fetch(tg, wanted())
            assert isinstance(got, Refused) and "HTTP 302" in got.line
            assert tg.downloads == ["photos/file_0.jpg"]

    run(scenario())
