"""getFile and the file download (``/file/bot<token>/<file_path>``) of the fake Bot API.

``serve_file`` registers bytes under a file_id; getFile answers its ``file_path`` and the
download serves the bytes, as Telegram does. A served file can misbehave the ways a hostile or
broken server would: ``path`` any string (a traversal), ``declared`` a Content-Length that
lies, ``hang`` (headers, a few bytes, then nothing), ``endless`` (bytes until the client
hangs up), ``gzip`` (a compressed body), ``redirect`` (a 302 elsewhere). ``downloads``
records every path asked for, and ``streamed`` how many bytes an endless download got out
before the client stopped it.
"""

from __future__ import annotations

import asyncio
import gzip as gzip_module
from dataclasses import dataclass
from typing import Any

from aiohttp import web


@dataclass
class ServedFile:
    """A file the fake serves, and how it misbehaves."""

    content: bytes
    path: str
    declared: int | None = None
    hang: bool = False
    endless: bool = False
    gzip: bool = False
    redirect: str = ""


class FileServing:
    """Mixed into ``FakeTelegram``: needs its ``token``, ``files``, ``downloads``, ``_error``."""

    token: str
    files: dict[str, ServedFile]
    downloads: list[str]
    streamed: int

    def serve_file(self, file_id: str, content: bytes, **how: Any) -> str:
        """Serve ``content`` under ``file_id``; ``how`` as ``ServedFile``'s fields."""
        path = how.pop("path", f"photos/file_{len(self.files)}.jpg")
        self.files[file_id] = ServedFile(content, path, **how)
        return path

    @staticmethod
    def photo_sizes(file_id: str, *sizes: tuple[int, int, int]) -> list[dict[str, Any]]:
        """A message's ``photo`` array: ``(width, height, file_size)`` each, smallest first;
        the last size's file_id is ``file_id``, the others ``<file_id>_<n>``."""
        out = []
        for n, (width, height, size) in enumerate(sizes):
            last = n == len(sizes) - 1
            out.append(
                {
                    "file_id": file_id if last else f"{file_id}_{n}",
                    "file_unique_id": f"u{file_id}{n}",
                    "width": width,
                    "height": height,
                    "file_size": size,
                }
            )
        return out

    def _error(self, status: int, description: str, retry_after: float | None = None) -> Any:
        raise NotImplementedError  # FakeTelegram's

    async def _m_getFile(self, request: web.Request, params: dict[str, Any]) -> Any:
        file_id = params.get("file_id")
        served = self.files.get(file_id) if isinstance(file_id, str) else None
        if served is None:
            return self._error(400, "Bad Request: invalid file_id")
        return {
            "file_id": file_id,
            "file_unique_id": f"u{file_id}",
            "file_size": len(served.content),
            "file_path": served.path,
        }

    async def _download(self, request: web.Request) -> web.StreamResponse:
        if request.match_info["token"] != self.token:
            return web.Response(status=401, text="Unauthorized")
        path = request.match_info["path"]
        self.downloads.append(path)
        served = next((f for f in self.files.values() if f.path == path), None)
        if served is None:
            return web.Response(status=404, text="Not Found")
        if served.redirect:
            return web.Response(status=302, headers={"Location": served.redirect})
        body = gzip_module.compress(served.content) if served.gzip else served.content
        response = web.StreamResponse()
        if served.gzip:
            response.headers["Content-Encoding"] = "gzip"
        if not served.endless:
            response.content_length = served.declared if served.declared is not None else len(body)
        await response.prepare(request)
        if served.endless:
            chunk = b"\xff\xd8\xff" + b"\x00" * 65533
            while True:  # until the client hangs up
                await response.write(chunk)
                self.streamed += len(chunk)
        if served.hang:
            await response.write(body[:10])
            # Nothing more, until the client gives up (a handler is not cancelled then).
            while request.transport is not None and not request.transport.is_closing():
                await asyncio.sleep(0.02)
            return response
        await response.write(body[: served.declared] if served.declared else body)
        await response.write_eof()
        return response
