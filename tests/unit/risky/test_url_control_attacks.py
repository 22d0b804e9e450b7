"""http_get refuses URLs with control characters instead of repairing them, on every hop.

Sources of inspiration: the WHATWG URL standard (parsers strip ASCII TAB and newlines from
anywhere in the input, so ``http://exa<TAB>mple.com`` becomes ``example.com``), CPython
gh-102153 / CVE-2023-24329 (urlsplit and leading control characters), CVE-2019-9740 and
CVE-2019-9947 (CRLF injection through the URL in urllib), Orange Tsai's "A New Era of SSRF"
(parser disagreements), and HTTP response splitting (CWE-113) through a redirect's Location.

The fake public site is a server on 127.0.0.1 that the policy here exempts, as in test_http.py;
its hit list proves a refused URL was never requested.
"""

from __future__ import annotations

import asyncio
import ipaddress
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from shelldon.contracts import ToolCall, ToolResult
from shelldon.worker.tools.http import make_http_get, specs
from shelldon.worker.tools.registry import Registry, ToolContext, ToolSpec, execute_tool
from shelldon.worker.tools.ssrf import AddressPolicy
from tests.unit.risky.servers import StubResolver, serve


@pytest.fixture
def ctx(home: Path) -> ToolContext:
    return ToolContext(workspace=home / "workspace", vault=home / "vault", shell_timeout_s=5)


def _fetch(ctx: ToolContext, url_of: Any) -> tuple[ToolResult, list[str], list[str]]:
    """http_get ``url_of(port)`` through execute_tool against the exempted local site."""

    async def scenario() -> tuple[ToolResult, list[str], list[str]]:
        async with serve() as site:
            policy = AddressPolicy(
                exempt=frozenset({(ipaddress.ip_address("127.0.0.1"), site.port)})
            )
            resolver = StubResolver({"public.example": ["127.0.0.1"]})
            (spec,) = specs()
            registry = Registry(ctx)
            registry.add(ToolSpec(spec.definition, make_http_get(policy, resolver)))
            call = ToolCall("c", "http_get", {"url": url_of(site.port)})
            result = await asyncio.to_thread(execute_tool, registry, call, approved=True)
            return result, site.hits, resolver.calls

    return asyncio.run(scenario())


CONTROLLED = [
    ("http://public.example:{port}/a\r\nHost: evil.example", "CR"),
    ("http://public.example:{port}/a\nX-Injected: 1", "LF"),
    ("http://public.example:{port}/\r\n\r\nGET /admin HTTP/1.1", "CR"),
    ("http://pub\tlic.example:{port}/", "TAB"),
    ("http://public.example:{port}/pa\tth", "TAB"),
    ("http://public.example:{port}/\x00.txt", "NUL"),
    ("http://public.exa\x00mple:{port}/", "NUL"),
    ("\thttp://public.example:{port}/", "TAB"),
    ("http://public.example:{port}/\n", "LF"),
    ("http://public.example:{port}/\x7f", "U+007F"),
    ("http://public.example:{port}/\x1b[2J", "U+001B"),
    ("http://public.example:{port}/\x85", "U+0085"),
    ("http://169.254.169.254\t.public.example:{port}/", "TAB"),
]


@pytest.mark.parametrize(("template", "name"), CONTROLLED, ids=[n for _, n in CONTROLLED])
def test_a_url_with_a_control_character_is_refused_and_never_requested(
    ctx: ToolContext, template: str, name: str
) -> None:
    result, hits, resolved = _fetch(ctx, lambda port: template.format(port=port))
    assert not result.ok
    assert "control character" in result.content
    assert f"({name} at position" in result.content
    assert hits == [] and resolved == []


def test_a_redirect_whose_location_has_a_control_character_is_refused(ctx: ToolContext) -> None:
    location = quote("/next\tpage", safe="")
    result, hits, _ = _fetch(
        ctx, lambda port: f"http://public.example:{port}/redirect?to={location}"
    )
    assert not result.ok
    assert "redirect 1's Location contains a control character (TAB" in result.content
    assert len(hits) == 1 and hits[0].startswith("/redirect")  # the repaired hop never ran


@pytest.mark.parametrize(
    "path",
    [
        "/search?q=line%0D%0Abreak",
        "/tab%09in-a-query?q=%00",
        "/caf\u00e9",
        "/a b",
        "/emoji-\U0001f600",
    ],
)
def test_encoded_controls_and_ordinary_unicode_are_fetched(ctx: ToolContext, path: str) -> None:
    result, hits, _ = _fetch(ctx, lambda port: f"http://public.example:{port}{path}")
    assert result.ok, result.content
    assert len(hits) == 1
