"""RISKY ``http_get``: fetch one http(s) URL through the SSRF guard, streaming a capped body.

Every hop (the owner-approved URL and each redirect, at most five) is checked before anything
connects: no control characters (refused, never repaired the way URL parsers do), scheme, no
credentials, the host normalized, every address it resolves to judged by ``AddressPolicy``.
The connection is then pinned to exactly those checked addresses through a resolver that
knows nothing else, so a second DNS answer (rebinding) cannot swap the target. The body is read
in chunks up to a byte cap and never decompressed (no zip bombs).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import ipaddress
import re
import socket
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import structlog

from shelldon.contracts import Tier, ToolDefinition
from shelldon.worker.tools.registry import (
    ToolContext,
    ToolError,
    ToolFn,
    ToolSpec,
    string_params,
)
from shelldon.worker.tools.ssrf import (
    DEFAULT_POLICY,
    AddressPolicy,
    HostRefused,
    IPAddress,
    normalize_host,
)

if TYPE_CHECKING:  # aiohttp and yarl load at the first fetch, not with the tool registry
    import aiohttp
    from aiohttp.abc import AbstractResolver
    from yarl import URL

log = structlog.get_logger(__name__)

MAX_REDIRECTS = 5
# getaddrinfo has its own retries and can stall for many seconds; the fetch's deadline still
# rules the connection, this bounds the lookup.
RESOLVE_TIMEOUT_S = 5.0
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
_CHUNK = 16 * 1024

# Turns a host name and port into the addresses a connection may use; tests pass a stub.
Resolve = Callable[[str, int], Awaitable[list[IPAddress]]]


class FetchRefused(Exception):
    """A fetch the guard or the network refused; the message says which hop and why."""


# URL parsers silently drop TAB, CR and LF (WHATWG) and percent-encode NUL, so a URL that
# splits differently in the owner's approval text and in the request would be repaired and
# fetched; it is refused instead, as are the other C0 and C1 controls and DEL.
_CONTROL_NAMES = {"\t": "TAB", "\n": "LF", "\r": "CR", "\x00": "NUL"}
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def refuse_control_characters(url: str, what: str = "the URL") -> None:
    """Raise ``FetchRefused`` naming the first control character in ``url`` and where it is."""
    found = _CONTROL.search(url)
    if found is None:
        return
    char = found.group()
    name = _CONTROL_NAMES.get(char, f"U+{ord(char):04X}")
    raise FetchRefused(
        f"{what} contains a control character ({name} at position {found.start()}); URLs with "
        "CR, LF, TAB, NUL or other control characters are refused, not repaired: send the URL "
        "without it"
    )


async def system_resolve(host: str, port: int) -> list[IPAddress]:
    """Every address ``getaddrinfo`` gives for ``host`` (TCP); an empty list if none."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    return [
        ipaddress.ip_address(str(sockaddr[0]).split("%", 1)[0])
        for family, _type, _proto, _name, sockaddr in infos
        if family in (socket.AF_INET, socket.AF_INET6)
    ]


@dataclass(frozen=True, slots=True)
class Target:
    """One checked hop: the URL to request and the only addresses it may connect to."""

    url: URL
    name: str | None  # the DNS name pinned to ``addresses``; None for an IP literal
    addresses: tuple[IPAddress, ...]


async def check_target(
    raw: URL, policy: AddressPolicy, resolve: Resolve, *, redirect: bool
) -> Target:
    """Check one hop and pin its addresses; raise ``HostRefused`` saying why it may not run."""
    if raw.scheme not in ("http", "https"):
        raise HostRefused(f"only http and https URLs are fetched, not {raw.scheme or 'none'!r}")
    if raw.user is not None or raw.password is not None:
        raise HostRefused("credentials in the URL are refused; the pet holds no web credentials")
    if not raw.raw_host:
        raise HostRefused(f"URL {raw} has no host")
    port = raw.port if raw.port is not None else (443 if raw.scheme == "https" else 80)
    host = normalize_host(raw.raw_host)
    if not isinstance(host, str):
        policy.check(host, port, redirect=redirect)
        # Canonical form, so the client connects to exactly the address that was checked.
        return Target(raw.with_host(str(host)), None, (host,))
    try:
        addresses = await asyncio.wait_for(resolve(host, port), RESOLVE_TIMEOUT_S)
    except TimeoutError:
        raise HostRefused(f"resolving {host!r} timed out; refusing to guess") from None
    except (OSError, UnicodeError) as exc:
        raise HostRefused(f"cannot resolve {host!r} ({exc}); refusing to guess") from None
    if not addresses:
        raise HostRefused(f"{host!r} resolves to no address; refusing to guess")
    for address in addresses:
        policy.check(address, port, redirect=redirect)
    return Target(raw, host, tuple(dict.fromkeys(addresses)))


def pinned_resolver(name: str, addresses: tuple[IPAddress, ...]) -> AbstractResolver:
    """An aiohttp resolver that answers ``name`` with the pre-checked addresses, nothing else."""
    return _pinned_resolver_class()(name, addresses)


@functools.cache
def _pinned_resolver_class() -> Callable[[str, tuple[IPAddress, ...]], AbstractResolver]:
    from aiohttp.abc import AbstractResolver, ResolveResult

    class PinnedResolver(AbstractResolver):
        """Answers one name with the pre-checked addresses; any other name fails."""

        def __init__(self, name: str, addresses: tuple[IPAddress, ...]) -> None:
            self._name = name
            self._addresses = addresses

        async def resolve(
            self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
        ) -> list[ResolveResult]:
            if normalize_host(host) != self._name:
                raise OSError(f"resolver is pinned to {self._name!r}, refused {host!r}")
            return [
                ResolveResult(
                    hostname=host,
                    host=str(address),
                    port=port,
                    family=socket.AF_INET if address.version == 4 else socket.AF_INET6,
                    proto=0,
                    flags=socket.AI_NUMERICHOST,
                )
                for address in self._addresses
            ]

        async def close(self) -> None:
            """Nothing to release."""

    return PinnedResolver


@dataclass(frozen=True, slots=True)
class Fetched:
    """What a fetch returned: final status and URL, content type, the body up to the cap."""

    status: int
    url: str
    content_type: str
    body: bytes
    truncated: bool
    hops: int


async def _read_capped(response: aiohttp.ClientResponse, max_bytes: int) -> tuple[bytes, bool]:
    """Read the body chunk by chunk and stop at ``max_bytes``; never buffer more."""
    parts: list[bytes] = []
    size = 0
    async for chunk in response.content.iter_chunked(_CHUNK):
        room = max_bytes - size
        if len(chunk) > room:
            parts.append(chunk[:room])
            return b"".join(parts), True
        parts.append(chunk)
        size += len(chunk)
    return b"".join(parts), False


async def fetch(
    url: str,
    *,
    policy: AddressPolicy = DEFAULT_POLICY,
    resolve: Resolve = system_resolve,
    max_bytes: int = 16000,
    timeout_s: float = 20.0,
) -> Fetched:
    """GET ``url`` following at most ``MAX_REDIRECTS`` redirects by hand, each one re-checked."""
    from yarl import URL

    deadline = time.monotonic() + timeout_s
    refuse_control_characters(url)
    try:
        current = URL(url)
    except (ValueError, TypeError) as exc:
        raise FetchRefused(f"not a valid URL {url!r}: {exc}") from None
    for hop in range(MAX_REDIRECTS + 1):
        try:
            target = await check_target(current, policy, resolve, redirect=hop > 0)
        except HostRefused as exc:
            where = f"redirect {hop} to {current}" if hop else str(current)
            # Scheme and host only: a refused URL may carry credentials or tokens.
            log.info("http_get_refused", hop=hop, scheme=current.scheme, host=current.host)
            raise FetchRefused(f"{where}: {exc}") from None
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise FetchRefused(f"timed out after {timeout_s:g}s")
        location, result = await _one_hop(target, hop, max_bytes, remaining)
        if result is not None:
            return result
        refuse_control_characters(location, f"redirect {hop + 1}'s Location")
        try:
            current = current.join(URL(location))
        except (ValueError, TypeError) as exc:
            raise FetchRefused(f"redirect {hop + 1} has an invalid Location: {exc}") from None
    raise FetchRefused(f"more than {MAX_REDIRECTS} redirects; stopped at {current}")


async def _one_hop(
    target: Target, hop: int, max_bytes: int, timeout_s: float
) -> tuple[str, Fetched | None]:
    """Request one checked target; return (Location, None) for a redirect, else ("", result)."""
    import aiohttp

    resolver = pinned_resolver(target.name or "", target.addresses)
    connector = aiohttp.TCPConnector(
        resolver=resolver, use_dns_cache=False, force_close=True, limit=1
    )
    headers = {"User-Agent": "shelldon/http_get", "Accept-Encoding": "identity"}
    session = aiohttp.ClientSession(
        connector=connector,
        trust_env=False,  # no proxy from the environment: the connection goes where we checked
        cookie_jar=aiohttp.DummyCookieJar(),
        auto_decompress=False,
        timeout=aiohttp.ClientTimeout(total=timeout_s),
    )
    try:
        async with (
            session,
            session.get(target.url, allow_redirects=False, headers=headers) as resp,
        ):
            location = resp.headers.get("Location")
            if resp.status in REDIRECT_STATUSES and location:
                return location, None
            body, truncated = await _read_capped(resp, max_bytes)
            content_type = resp.headers.get("Content-Type", "")
            return "", Fetched(resp.status, str(target.url), content_type, body, truncated, hop)
    except TimeoutError:
        raise FetchRefused(f"timed out fetching {target.url}") from None
    except aiohttp.ClientError as exc:
        raise FetchRefused(f"could not fetch {target.url}: {exc}") from None


def _render(result: Fetched, cap: int) -> str:
    """Status line, content type and body text, at most ``cap`` characters in all."""
    head = f"HTTP {result.status} {result.url}\ncontent-type: {result.content_type}\n\n"
    text = head + result.body.decode("utf-8", errors="replace")
    if result.truncated or len(text) > cap:
        note = f"\n…[body cut; http_get keeps the first {cap} characters]"
        text = text[: max(cap - len(note), 0)] + note
    return text


def make_http_get(
    policy: AddressPolicy = DEFAULT_POLICY, resolve: Resolve = system_resolve
) -> ToolFn:
    """The ``http_get`` tool function bound to a policy and a resolver (tests inject both)."""

    def http_get(ctx: ToolContext, url: str) -> str:
        """Fetch ``url`` (GET); text of the body, capped, or ToolError saying why not."""
        coro = fetch(
            url,
            policy=policy,
            resolve=resolve,
            max_bytes=ctx.max_output_chars,
            timeout_s=ctx.shell_timeout_s,  # one wall-clock ceiling for RISKY tools
        )
        try:
            result = _run(coro)
        except FetchRefused as exc:
            raise ToolError(f"http_get refused or failed: {exc}") from None
        return _render(result, ctx.max_output_chars)

    return http_get


def _run(coro: Coroutine[Any, Any, Fetched]) -> Fetched:
    """Run the fetch to completion from synchronous tool code, on a fresh event loop (in a
    helper thread if the calling thread already runs one)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()


def specs() -> list[ToolSpec]:
    """The http family: ``http_get`` (RISKY)."""
    definition = ToolDefinition(
        name="http_get",
        description=(
            "GET an http(s) URL and return the status and the start of the body. Redirects are "
            "followed (at most 5) but never into private, loopback or link-local addresses."
        ),
        params_schema=string_params(url="http:// or https:// URL to GET"),
        tier=Tier.RISKY,
    )
    return [ToolSpec(definition, make_http_get(), network=lambda _args: True)]
