"""http_get: the benign fetches that must keep working, and the caps that bound every fetch.

The fake "public" site is an aiohttp server on 127.0.0.1; the policy used here exempts exactly
that one (address, port) pair, standing in for a public address. Every other test of the guard
runs with the real policy (test_ssrf_attacks.py). Sources of inspiration: httpx's and aiohttp's
own redirect and streaming tests; the "zip bomb" and slowloris-style response attacks.
"""

from __future__ import annotations

import asyncio
import gzip
import ipaddress
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from yarl import URL

from shelldon.contracts import Tier, ToolCall, ToolResult
from shelldon.worker.tools.http import FetchRefused, fetch, make_http_get, pinned_resolver, specs
from shelldon.worker.tools.registry import Registry, ToolContext, ToolSpec, execute_tool
from shelldon.worker.tools.ssrf import AddressPolicy
from tests.unit.risky.servers import Site, StubResolver, serve


def _exempt(port: int) -> AddressPolicy:
    return AddressPolicy(exempt=frozenset({(ipaddress.ip_address("127.0.0.1"), port)}))


def _with_site(body: Callable[[Site], Any]) -> Any:
    """Run ``body(site)`` in a worker thread while the site serves on this event loop."""

    async def scenario() -> Any:
        async with serve() as site:
            return await asyncio.to_thread(body, site)

    return asyncio.run(scenario())


def _call_tool(ctx: ToolContext, site: Site, url: str, *, approved: bool = True) -> ToolResult:
    resolver = StubResolver({"public.example": ["127.0.0.1"]})
    (spec,) = specs()
    registry = Registry(ctx)
    registry.add(ToolSpec(spec.definition, make_http_get(_exempt(site.port), resolver)))
    return execute_tool(registry, ToolCall("c1", "http_get", {"url": url}), approved=approved)


@pytest.fixture
def ctx(home: Path) -> ToolContext:
    return ToolContext(workspace=home / "workspace", vault=home / "vault", shell_timeout_s=5)


def test_http_get_is_risky_with_a_closed_schema() -> None:
    (spec,) = specs()
    assert spec.definition.tier is Tier.RISKY
    assert spec.definition.params_schema["additionalProperties"] is False


def test_a_public_url_returns_status_type_and_body(ctx: ToolContext) -> None:
    def body(site: Site) -> tuple[ToolResult, list[str]]:
        return _call_tool(ctx, site, f"http://public.example:{site.port}/"), site.hosts

    result, hosts = _with_site(body)
    assert result.ok, result.content
    lines = result.content.splitlines()
    assert lines[0].startswith("HTTP 200 http://public.example:")
    assert lines[1] == "content-type: text/plain; charset=utf-8"
    assert lines[-1] == "hello from 127.0.0.1"
    assert hosts[0].startswith("public.example:")  # the name is kept; only the address is pinned


def test_unapproved_http_get_is_refused_before_any_request(ctx: ToolContext) -> None:
    def body(site: Site) -> tuple[ToolResult, list[str]]:
        result = _call_tool(ctx, site, f"http://public.example:{site.port}/", approved=False)
        return result, site.hits

    result, hits = _with_site(body)
    assert not result.ok and "RISKY" in result.content
    assert hits == []


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_a_redirect_to_an_allowed_place_is_followed(status: int) -> None:
    async def scenario() -> tuple[Any, list[str]]:
        async with serve() as site:
            url = URL(f"{site.base}/redirect").with_query(to="/final", status=str(status))
            result = await fetch(str(url), policy=_exempt(site.port))
            return result, site.hits

    result, hits = asyncio.run(scenario())
    assert result.status == 200
    assert result.hops == 1
    assert result.url.endswith("/final")
    assert hits[-1] == "/final"


def test_the_body_is_cut_at_the_cap_while_streaming() -> None:
    async def scenario() -> Any:
        async with serve() as site:
            # 80 chunks of 64 KiB = 5 MiB offered; only the cap is read.
            return await fetch(f"{site.base}/big", policy=_exempt(site.port), max_bytes=10_000)

    result = asyncio.run(scenario())
    assert result.truncated
    assert result.body == b"z" * 10_000


def test_the_tool_output_stays_within_the_output_cap(ctx: ToolContext) -> None:
    small = ToolContext(ctx.workspace, ctx.vault, max_output_chars=2000, shell_timeout_s=5)

    def body(site: Site) -> ToolResult:
        return _call_tool(small, site, f"http://public.example:{site.port}/big")

    result = _with_site(body)
    assert result.ok
    assert len(result.content) <= 2000
    assert result.content.endswith("keeps the first 2000 characters]")


def test_a_compressed_body_is_never_inflated() -> None:
    bomb = gzip.compress(b"\0" * 5_000_000, mtime=0)

    async def scenario() -> Any:
        async with serve() as site:
            url = f"{site.base}/bomb?size=5000000"
            return await fetch(url, policy=_exempt(site.port), max_bytes=100_000)

    result = asyncio.run(scenario())
    assert result.body == bomb  # the raw bytes, a few KiB, not 5 MB of zeros


def test_a_slow_server_times_out_as_a_failed_result(ctx: ToolContext) -> None:
    quick = ToolContext(ctx.workspace, ctx.vault, shell_timeout_s=0.3)

    def body(site: Site) -> ToolResult:
        return _call_tool(quick, site, f"http://public.example:{site.port}/slow?s=3")

    result = _with_site(body)
    assert not result.ok
    assert "timed out" in result.content


def test_proxy_variables_in_the_environment_are_ignored(monkeypatch: pytest.MonkeyPatch) -> None:
    async def scenario() -> tuple[list[str], list[str]]:
        async with serve() as site, serve() as proxy:
            monkeypatch.setenv("HTTP_PROXY", proxy.base)
            monkeypatch.setenv("http_proxy", proxy.base)
            monkeypatch.setenv("ALL_PROXY", proxy.base)
            await fetch(f"{site.base}/", policy=_exempt(site.port))
            return site.hits, proxy.hits

    site_hits, proxy_hits = asyncio.run(scenario())
    assert site_hits == ["/"]
    assert proxy_hits == []


def test_a_lan_address_the_owner_typed_passes_the_guard() -> None:
    # Connecting to 192.168.x would leave loopback; the full LAN fetch runs in a network
    # namespace in test_ssrf_attacks.py. Here: the first-hop decision and the pinning.
    from shelldon.worker.tools.http import check_target

    resolver = StubResolver({"nas.lan": ["192.168.1.20"]})
    target = asyncio.run(
        check_target(URL("http://nas.lan:8080/status"), AddressPolicy(), resolver, redirect=False)
    )
    assert target.addresses == (ipaddress.ip_address("192.168.1.20"),)
    literal = asyncio.run(
        check_target(URL("http://0xc0a80114/"), AddressPolicy(), resolver, redirect=False)
    )
    assert str(literal.url) == "http://192.168.1.20/"


def test_the_pinned_resolver_answers_only_its_own_name() -> None:
    resolver = pinned_resolver("public.example", (ipaddress.ip_address("93.184.215.14"),))
    answers = asyncio.run(resolver.resolve("PUBLIC.example.", 443))
    assert [a["host"] for a in answers] == ["93.184.215.14"]
    with pytest.raises(OSError, match="pinned"):
        asyncio.run(resolver.resolve("other.example", 443))


def test_an_invalid_url_is_a_refusal_not_a_crash() -> None:
    with pytest.raises(FetchRefused):
        asyncio.run(fetch("http://[::1/"))


def test_the_tool_works_when_called_from_inside_a_running_event_loop(ctx: ToolContext) -> None:
    async def scenario() -> ToolResult:
        async with serve() as site:
            # Called synchronously on the loop's own thread, as a careless caller might.
            return await asyncio.to_thread(_inner_loop_call, ctx, site)

    result = asyncio.run(scenario())
    assert result.ok, result.content


def _inner_loop_call(ctx: ToolContext, site: Site) -> ToolResult:
    async def nested() -> ToolResult:
        return _call_tool(ctx, site, f"http://public.example:{site.port}/")

    return asyncio.run(nested())
