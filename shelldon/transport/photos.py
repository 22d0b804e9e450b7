"""Photos the owner sends: which Telegram size to fetch, the fetch itself (into memory,
bounded by bytes and by time), and the check that the bytes really are an image. Nothing here
writes a file; the bytes go from here to the broker and nowhere else.
"""

from __future__ import annotations

import asyncio
import secrets
import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from shelldon.contracts import Photo
from shelldon.transport.telegram_errors import FileTooBig, TelegramError

if TYPE_CHECKING:
    from shelldon.transport.telegram import BotApi

IMAGE_TYPES = frozenset({"image/jpeg", "image/png", "image/webp", "image/gif"})
"""Document MIME types taken as a photo (what Anthropic and OpenAI accept)."""


@dataclass(frozen=True, slots=True)
class PhotoCaps:
    """The caps on one photo (``[photos]`` settings)."""

    max_px: int
    max_bytes: int
    fetch_timeout_s: float


@dataclass(frozen=True, slots=True)
class WantedPhoto:
    """An owner's message holding an image, before its bytes are fetched. ``size`` is
    Telegram's word for it (0: unknown); the width and height are read from the image's header."""

    chat_id: int
    user_id: int
    update_id: int
    caption: str
    file_id: str
    kind: str  # "photo" or "image file": the owner's word for it
    size: int = 0


@dataclass(frozen=True, slots=True)
class Refused:
    """Why an image was left out, in one line for the owner."""

    line: str


@dataclass(frozen=True, slots=True)
class Fetched:
    """A checked image: its ``Photo`` (the placeholder's facts) and its bytes."""

    photo: Photo
    data: bytes = b""


def _int(value: Any) -> int:
    return value if type(value) is int and 0 <= value < 2**53 else 0


def pick_size(sizes: list[Any], caps: PhotoCaps) -> dict[str, Any] | None:
    """The largest PhotoSize whose longest side is within ``max_px`` and whose known size is
    within ``max_bytes``; else the smallest one (which the fetch then refuses, by its size)."""
    usable = [s for s in sizes if isinstance(s, dict) and isinstance(s.get("file_id"), str)]
    if not usable:
        return None
    fits = [
        s
        for s in usable
        if max(_int(s.get("width")), _int(s.get("height"))) <= caps.max_px
        and _int(s.get("file_size")) <= caps.max_bytes
    ]
    return max(fits, key=_area) if fits else min(usable, key=_area)


def _area(size: dict[str, Any]) -> int:
    return _int(size.get("width")) * _int(size.get("height"))


def wanted_photo(
    message: dict[str, Any], caps: PhotoCaps, chat_id: int, user_id: int, update_id: int
) -> WantedPhoto | None:
    """The image ``message`` holds, or None when it holds none (voice, sticker, other files)."""
    caption = message.get("caption")
    caption = caption.encode("utf-8", "replace").decode("utf-8") if isinstance(caption, str) else ""
    if isinstance(message.get("photo"), list):
        size = pick_size(message["photo"], caps)
        if size is None:
            return None
        declared = _int(size.get("file_size"))
        return WantedPhoto(chat_id, user_id, update_id, caption, size["file_id"], "photo", declared)
    document = message.get("document")
    # An animation (a GIF Telegram made a video of) carries a document too: not a photo.
    if "animation" in message or not isinstance(document, dict):
        return None
    mime, file_id = document.get("mime_type"), document.get("file_id")
    if not isinstance(mime, str) or mime not in IMAGE_TYPES or not isinstance(file_id, str):
        return None
    declared = _int(document.get("file_size"))
    return WantedPhoto(chat_id, user_id, update_id, caption, file_id, "image file", size=declared)


def sniff(data: bytes) -> str:
    """The image type ``data`` starts like, by its magic bytes ("" for anything else: the
    MIME type a sender claims is never believed)."""
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    if data.startswith((b"GIF87a", b"GIF89a")):
        return "image/gif"
    return ""


_JPEG_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    i = 2
    while i + 9 <= len(data):
        if data[i] != 0xFF:
            return None
        marker = data[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
            continue
        if marker in _JPEG_SOF:
            height, width = struct.unpack(">HH", data[i + 5 : i + 9])
            return width, height
        if marker == 0x01 or 0xD0 <= marker <= 0xD8:  # markers without a length
            i += 2
            continue
        (length,) = struct.unpack(">H", data[i + 2 : i + 4])
        if length < 2:
            return None
        i += 2 + length
    return None


def _webp_size(data: bytes) -> tuple[int, int] | None:
    chunk = data[12:16]
    if chunk == b"VP8 " and data[23:26] == b"\x9d\x01\x2a" and len(data) >= 30:
        width, height = struct.unpack("<HH", data[26:30])
        return width & 0x3FFF, height & 0x3FFF
    if chunk == b"VP8L" and len(data) >= 25 and data[20] == 0x2F:
        (bits,) = struct.unpack("<I", data[21:25])
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if chunk == b"VP8X" and len(data) >= 30:
        width = int.from_bytes(data[24:27], "little") + 1
        height = int.from_bytes(data[27:30], "little") + 1
        return width, height
    return None


def dimensions(data: bytes, media_type: str) -> tuple[int, int] | None:
    """Width and height from the image's own header (no decoding, no dependency), or None
    when the header is not whole: a corrupt or truncated image."""
    size: tuple[int, int] | None = None
    if media_type == "image/jpeg":
        size = _jpeg_size(data)
    elif media_type == "image/png" and data[12:16] == b"IHDR" and len(data) >= 24:
        size = struct.unpack(">II", data[16:24])
    elif media_type == "image/gif" and len(data) >= 10:
        size = struct.unpack("<HH", data[6:10])
    elif media_type == "image/webp":
        size = _webp_size(data)
    if size is None or min(size) <= 0:
        return None
    return size


def amount(size: int) -> str:
    """A byte count as the owner reads it: "184 KB", "2.1 MB"."""
    if size >= 1_000_000:
        return f"{size / 1_000_000:.1f} MB"
    return f"{max(1, round(size / 1000))} KB"


def placeholder(photo: Photo, kind: str = "photo") -> str:
    """What history keeps instead of the bytes: "[photo 1280×960, 184 KB]"."""  # noqa: RUF002
    return f"[{kind} {photo.width}×{photo.height}, {amount(photo.size)}]"


def _resend_hint(kind: str) -> str:
    hint = " Send it as a photo, not as a file, and Telegram makes it smaller."
    return hint if kind == "image file" else ""


def _too_big(kind: str, caps: PhotoCaps, seen: int = 0) -> Refused:
    size = amount(seen) if seen else f"over {amount(caps.max_bytes)}"
    return Refused(
        f"That {kind} is {size}; I take images up to {amount(caps.max_bytes)}." + _resend_hint(kind)
    )


def check_image(data: bytes, wanted: WantedPhoto, caps: PhotoCaps) -> Fetched | Refused:
    """``data`` as a ``Photo`` if it is a whole image of a kind the model takes, within the
    caps; else why not."""
    kind = wanted.kind
    if len(data) > caps.max_bytes:
        return _too_big(kind, caps)
    media_type = sniff(data)
    size = dimensions(data, media_type) if media_type else None
    if size is None:
        return Refused(f"That {kind} is not a JPEG, PNG, WebP or GIF I can read, so I left it out.")
    if max(size) > caps.max_px:
        return Refused(
            f"That {kind} is {size[0]}×{size[1]}; I take images up to {caps.max_px} px on the "
            f"longest side.{_resend_hint(kind)}"
        )
    key = secrets.token_hex(16)
    return Fetched(Photo(key, media_type, size[0], size[1], len(data)), data)


async def fetch_photo(api: BotApi, wanted: WantedPhoto, caps: PhotoCaps) -> Fetched | Refused:
    """getFile and the download, into memory, within ``fetch_timeout_s`` and ``max_bytes``,
    then ``check_image``. A fatal Bot API error (a refused token) is raised for the poller."""
    kind = wanted.kind
    if wanted.size > caps.max_bytes:
        return _too_big(kind, caps, wanted.size)
    try:
        async with asyncio.timeout(caps.fetch_timeout_s):
            path = await api.get_file(wanted.file_id)
            data = await api.download(path, caps.max_bytes, caps.fetch_timeout_s)
    except FileTooBig:
        return _too_big(kind, caps)
    except TimeoutError:
        return Refused(f"Telegram took too long to give me that {kind}. Try sending it again?")
    except TelegramError as exc:
        if exc.fatal:
            raise
        return Refused(f"I couldn't get that {kind} from Telegram ({exc}). Try sending it again?")
    return check_image(data, wanted, caps)
