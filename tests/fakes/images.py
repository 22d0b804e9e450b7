"""Small real images, written byte by byte, for the photo tests (no imaging library needed).

``tiny_jpeg`` is a whole baseline JPEG: a uniform grey picture of any size whose every 8x8
block is coded as "no change, end of block" with one-code Huffman tables, so a 1280x960 image
is about 5 KB and any decoder reads it. ``comment`` goes in a COM segment: a marker a test can
look for wherever the bytes might have leaked.
"""

from __future__ import annotations

import struct
import zlib


def _segment(marker: int, body: bytes) -> bytes:
    return struct.pack(">BBH", 0xFF, marker, len(body) + 2) + body


def tiny_jpeg(width: int = 16, height: int = 8, comment: bytes = b"", pad_to: int = 0) -> bytes:
    """A valid greyscale baseline JPEG of ``width`` x ``height`` pixels, made at least
    ``pad_to`` bytes long with comment segments (the weight of a real photo, for benches)."""
    blocks = -(-width // 8) * -(-height // 8)
    # Two bits per block ("0" for DC diff 0, "0" for EOB), padded with 1s to a whole byte.
    bits = "00" * blocks
    bits += "1" * (-len(bits) % 8)
    scan = int(bits, 2).to_bytes(len(bits) // 8, "big") if bits else b""
    one_code = bytes([1] + [0] * 15) + b"\x00"  # one code of length 1, for symbol 0
    filler = b""
    while len(filler) < pad_to - 5000:
        filler += _segment(0xFE, (bytes(range(256)) * 256)[: min(65000, pad_to - len(filler))])
    parts = [
        b"\xff\xd8",
        _segment(0xE0, b"JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00"),
        _segment(0xFE, comment) if comment else b"",
        filler,
        _segment(0xDB, b"\x00" + bytes([1] * 64)),
        _segment(0xC0, struct.pack(">BHHB", 8, height, width, 1) + b"\x01\x11\x00"),
        _segment(0xC4, b"\x00" + one_code),
        _segment(0xC4, b"\x10" + one_code),
        _segment(0xDA, b"\x01\x01\x00\x00\x3f\x00"),
        scan,
        b"\xff\xd9",
    ]
    return b"".join(parts)


def tiny_png(width: int = 2, height: int = 2) -> bytes:
    """A valid greyscale PNG of ``width`` x ``height`` pixels."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        crc = zlib.crc32(kind + body) & 0xFFFFFFFF
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", crc)

    rows = b"".join(b"\x00" + b"\x80" * width for _ in range(height))
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )
