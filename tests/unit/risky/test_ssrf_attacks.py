"""SSRF attacks on http_get: numeric and IPv6 host forms, redirect chains, DNS rebinding.

Sources of inspiration: PayloadsAllTheThings "Server Side Request Forgery" (decimal, octal, hex,
short and IPv6-wrapped loopback; 169.254.169.254 metadata; redirect bypasses; rebinding),
Orange Tsai's "A New Era of SSRF" (URL-parser confusion, userinfo tricks), the IANA IPv4 and
IPv6 Special-Purpose Address Registries (RFC 6890, 6052, 7526, 8215), CVE-2021-28918
(netmask's octal parsing), CVE-2024-29415 (node-ip's isPublic misses), and CPython bpo-42937 /
gh-113171 (ipaddress flags that were wrong for IPv4-mapped and shared space).

Attack tests use the real policy and a stub resolver; a canary server on 127.0.0.1 proves that
a refused request never arrived. Anything that could reach a real network runs in a network
namespace of its own (``unshare -rn``) with only loopback up.
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
import shutil
import socket
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from yarl import URL

from shelldon.worker.tools.http import FetchRefused, check_target, fetch
from shelldon.worker.tools.ssrf import (
    DEFAULT_POLICY,
    AddressPolicy,
    HostRefused,
    Reach,
    classify,
    normalize_host,
    parse_inet_aton,
)
from tests.unit.risky.servers import StubResolver, serve

NEVER_RESOLVE = StubResolver({})


def _check(url: str, resolver: StubResolver = NEVER_RESOLVE, *, redirect: bool = False) -> None:
    asyncio.run(check_target(URL(url), DEFAULT_POLICY, resolver, redirect=redirect))


# --- numeric and IPv6 host forms: refused without any DNS lookup ------------------------------

ALWAYS_REFUSED_HOSTS = [
    "127.0.0.1", "127.1", "127.0.1", "0177.0.0.1", "0177.1", "00000177.0.0.1", "0x7f.0.0.1",
    "0x7f.1", "0X7F.0X0.0X0.0X1", "2130706433", "017700000001", "0x7f000001", "127.000.000.001",
    "127.255.255.254", "0", "0.0.0.0", "0x0", "00", "[::]", "[::1]", "[0:0:0:0:0:0:0:1]",
    "[::ffff:127.0.0.1]", "[::ffff:7f00:1]", "[0:0:0:0:0:ffff:127.0.0.1]", "[::127.0.0.1]",
    "[::ffff:0:127.0.0.1]", "[64:ff9b::127.0.0.1]", "[64:ff9b::a9fe:a9fe]", "[2002:7f00:1::]",
    "[2002:a9fe:a9fe::1]", "[2001:0:4136:e378:8000:63bf:80ff:fffe]", "[fe80::1]",
    "[fe80::a9fe:a9fe%25eth0]", "169.254.169.254", "0xa9fea9fe", "2852039166",
    "0251.0376.0251.0376", "0xa9.0xfe.0xa9.0xfe", "169.254.43518", "[::ffff:169.254.169.254]",
    "[::ffff:a9fe:a9fe]", "224.0.0.1", "239.255.255.250", "[ff02::1]", "[ff05::1:3]",
    "255.255.255.255", "127.0.0.1.",
]  # fmt: skip


def _fullwidth(text: str) -> str:
    """Digits and dots in their fullwidth forms, which IDNA folds back to ASCII."""
    return "".join(chr(ord(c) + 0xFEE0) for c in text)


ALWAYS_REFUSED_HOSTS += [_fullwidth("4294967295"), _fullwidth("127.0.0.1")]


@pytest.mark.parametrize("host", ALWAYS_REFUSED_HOSTS)
def test_loopback_linklocal_unspecified_multicast_in_any_form_are_refused(host: str) -> None:
    with pytest.raises(HostRefused, match="never fetched"):
        _check(f"http://{host}:8080/")
    assert NEVER_RESOLVE.calls == []


AMBIGUOUS_HOSTS = [
    "256.0.0.1", "1.2.3.4.5", "08.0.0.1", "0x100.0.0.1", "1.2.3.256", "1.2.0x10000",
    "4294967296", "0x1.0x2.0x3.0x4.0x5", "1.2.3.09", "a.1", "example.123",
]  # fmt: skip


@pytest.mark.parametrize("host", AMBIGUOUS_HOSTS)
def test_hosts_that_look_numeric_but_are_not_addresses_are_refused(host: str) -> None:
    with pytest.raises(HostRefused, match="numeric"):
        _check(f"http://{host}/")


INTERNAL_HOSTS = [
    "10.0.0.1", "012.0.0.1", "172.16.0.1", "172.31.255.255", "192.168.1.1", "0xc0a80101",
    "3232235777", "100.64.0.1", "100.127.255.254", "198.18.0.1", "192.0.2.1", "198.51.100.7",
    "203.0.113.9", "240.0.0.1", "192.0.0.8", "[fd00::1]", "[fc00::1]", "[fec0::1]",
    "[::ffff:10.0.0.1]", "[64:ff9b::192.168.0.1]", "[64:ff9b:1::a00:1]", "[2002:c0a8:101::]",
    "[2001:db8::1]", "[100::1]", "[2001:2::1]", "[5f00::1]", "[3fff::1]", "[1::]",
]  # fmt: skip


@pytest.mark.parametrize("host", INTERNAL_HOSTS)
def test_private_and_reserved_space_is_refused_on_a_redirect_hop(host: str) -> None:
    with pytest.raises(HostRefused, match="redirect may not lead into"):
        _check(f"http://{host}/", redirect=True)


@pytest.mark.parametrize("host", INTERNAL_HOSTS)
def test_private_space_is_allowed_on_the_url_the_owner_approved(host: str) -> None:
    _check(f"http://{host}/", redirect=False)


PUBLIC_HOSTS = ["93.184.215.14", "8.8.8.8", "[2606:4700::1111]", "[::ffff:8.8.8.8]",
                "[2002:808:808::1]", "[64:ff9b::1.1.1.1]", "192.31.196.1", "1.1"]  # fmt: skip


@pytest.mark.parametrize("host", PUBLIC_HOSTS)
def test_public_addresses_pass_on_every_hop(host: str) -> None:
    _check(f"http://{host}/", redirect=True)


@pytest.mark.parametrize(
    "url",
    [
        "file:///etc/passwd", "ftp://example.com/", "gopher://127.0.0.1:25/_HELO", "dict://x:11211/",
        "ldap://x/", "jar:http://x/!/", "ws://example.com/", "data:text/plain,hi", "//example.com/",
        "http://user:pass@example.com/", "http://user@example.com/", "https://:pw@example.com/",
        "http:///path-only", "http://[::1/",
    ],
)  # fmt: skip
def test_other_schemes_credentials_and_broken_urls_are_refused(url: str) -> None:
    with pytest.raises((HostRefused, ValueError)):
        _check(url)


@pytest.mark.parametrize(
    ("name", "answer"),
    [
        ("localhost", ["127.0.0.1"]),
        ("localtest.me", ["127.0.0.1"]),
        ("127.0.0.1.nip.io", ["127.0.0.1"]),
        ("metadata.google.internal", ["169.254.169.254"]),
        ("ip6-localhost", ["::1"]),
        ("mapped.example", ["::ffff:127.0.0.1"]),
        ("mixed.example", ["93.184.215.14", "127.0.0.1"]),  # one bad answer refuses the name
        ("mixed6.example", ["2606:4700::1", "fe80::1"]),
    ],
)
def test_names_resolving_to_forbidden_addresses_are_refused(name: str, answer: list[str]) -> None:
    with pytest.raises(HostRefused, match="never fetched"):
        _check(f"https://{name}/", StubResolver({name: answer}))


def test_a_name_resolving_into_private_space_is_refused_on_a_redirect() -> None:
    resolver = StubResolver({"intranet.example": ["10.1.2.3"]})
    with pytest.raises(HostRefused, match="redirect"):
        _check("http://intranet.example/", resolver, redirect=True)


def test_an_unresolvable_host_fails_closed() -> None:
    with pytest.raises(HostRefused, match="cannot resolve"):
        _check("http://nowhere.example/", StubResolver({}))
    with pytest.raises(HostRefused, match="no address"):
        _check("http://empty.example/", StubResolver({"empty.example": []}))


def test_the_table_knows_the_ranges_ipaddress_flags_miss() -> None:
    assert classify(ipaddress.ip_address("100.64.0.1")).reach is Reach.INTERNAL
    assert classify(ipaddress.ip_address("::ffff:127.0.0.1")).reach is Reach.NEVER
    assert classify(ipaddress.ip_address("::ffff:169.254.169.254")).reach is Reach.NEVER
    assert classify(ipaddress.ip_address("64:ff9b::7f00:1")).reach is Reach.NEVER


IPV4 = st.integers(min_value=0, max_value=2**32 - 1).map(ipaddress.IPv4Address)


@given(IPV4)
def test_ipv6_wrappers_never_judge_an_address_more_kindly_than_itself(
    v4: ipaddress.IPv4Address,
) -> None:
    value = int(v4)
    plain = classify(v4).reach
    wrapped = [
        ipaddress.IPv6Address(0xFFFF << 32 | value),  # IPv4-mapped
        ipaddress.IPv6Address(0x64FF9B << 96 | value),  # NAT64
        ipaddress.IPv6Address(0x2002 << 112 | value << 80),  # 6to4
        ipaddress.IPv6Address(0xFFFF << 48 | value),  # IPv4-translated
    ]
    for form in wrapped:
        assert classify(form).reach >= plain, form


def _inet_aton_part(kind: str, value: int) -> str:
    return {"dec": str(value), "oct": "0" + format(value, "o"), "hex": hex(value)}[kind]


@st.composite
def numeric_hosts(draw: st.DrawFn) -> str:
    count = draw(st.integers(min_value=1, max_value=4))
    head = [draw(st.integers(0, 255)) for _ in range(count - 1)]
    last = draw(st.integers(0, 256 ** (5 - count) - 1))  # may overflow: both must refuse
    kinds = st.sampled_from(["dec", "oct", "hex"])
    return ".".join(_inet_aton_part(draw(kinds), v) for v in [*head, last])


@given(numeric_hosts())
def test_numeric_hosts_are_read_exactly_as_inet_aton_reads_them(host: str) -> None:
    try:
        expected: str | None = socket.inet_ntoa(socket.inet_aton(host))
    except OSError:
        expected = None
    try:
        got = parse_inet_aton(host)
    except HostRefused:
        got = None
    assert (str(got) if got else None) == expected


def test_normalize_host_lowercases_names_and_drops_trailing_dots() -> None:
    assert normalize_host("Example.COM..") == "example.com"
    assert normalize_host("[::FFFF:7F00:1]") == ipaddress.ip_address("::ffff:127.0.0.1")


# --- the full fetch: a canary proves refused requests never arrive ----------------------------


def _exempt(port: int) -> AddressPolicy:
    return AddressPolicy(exempt=frozenset({(ipaddress.ip_address("127.0.0.1"), port)}))


@pytest.mark.parametrize(
    "host",
    ["127.0.0.1", "localhost", "0177.0.0.1", "2130706433", "0x7f.1", "127.1", "[::ffff:127.0.0.1]"],
)
def test_a_refused_first_hop_never_reaches_the_canary(host: str) -> None:
    async def scenario() -> list[str]:
        async with serve() as canary:
            resolver = StubResolver({"localhost": ["127.0.0.1"]})
            with pytest.raises(FetchRefused):
                await fetch(f"http://{host}:{canary.port}/secret", resolve=resolver)
            return canary.hits

    assert asyncio.run(scenario()) == []


def test_the_registered_tool_uses_the_real_policy(tmp_path: Path) -> None:
    from shelldon.contracts import ToolCall
    from shelldon.worker.tools.http import specs
    from shelldon.worker.tools.registry import Registry, ToolContext, execute_tool

    registry = Registry(ToolContext(workspace=tmp_path, vault=tmp_path / "vault"))
    registry.add_all(specs())

    async def scenario() -> tuple[list[Any], list[str]]:
        async with serve() as canary:
            results = []
            for host in ("127.0.0.1", "localhost", "[::1]", "0x7f.1"):
                call = ToolCall("c", "http_get", {"url": f"http://{host}:{canary.port}/"})
                results.append(await asyncio.to_thread(execute_tool, registry, call, approved=True))
            return results, canary.hits

    results, hits = asyncio.run(scenario())
    assert [r.ok for r in results] == [False] * 4
    assert all("refused" in r.content for r in results)
    assert hits == []


REDIRECT_TARGETS = [
    "http://127.0.0.1:{c}/secret",
    "http://localhost:{c}/secret",
    "http://0177.0.0.1:{c}/secret",
    "http://2130706433:{c}/secret",
    "http://0x7f.1:{c}/secret",
    "http://[::ffff:127.0.0.1]:{c}/secret",
    "http://[::1]:{c}/secret",
    "//127.0.0.1:{c}/secret",
    "http://rebind.example:{c}/secret",
    "http://10.0.0.1/",
    "http://192.168.0.1/admin",
    "http://169.254.169.254/latest/meta-data/",
    "http://[fd00::1]/",
    "http://100.64.0.1/",
    "file:///etc/passwd",
    "gopher://127.0.0.1:{c}/_SLAVEOF",
    "http://user:pw@example.com/",
]


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
@pytest.mark.parametrize("target", REDIRECT_TARGETS)
def test_a_redirect_into_internal_space_is_refused_and_never_arrives(
    target: str, status: int
) -> None:
    async def scenario() -> tuple[list[str], list[str]]:
        async with serve() as site, serve() as canary:
            to = target.format(c=canary.port)
            resolver = StubResolver({"localhost": ["127.0.0.1"], "rebind.example": ["127.0.0.1"]})
            url = str(URL(f"{site.base}/redirect").with_query(to=to, status=str(status)))
            with pytest.raises(FetchRefused, match="redirect 1"):
                await fetch(url, policy=_exempt(site.port), resolve=resolver)
            return site.hits, canary.hits

    site_hits, canary_hits = asyncio.run(scenario())
    assert len(site_hits) == 1
    assert canary_hits == []


def test_more_than_five_redirects_are_refused() -> None:
    async def scenario() -> list[str]:
        async with serve() as site:
            with pytest.raises(FetchRefused, match="more than 5 redirects"):
                await fetch(f"{site.base}/loop", policy=_exempt(site.port))
            return site.hits

    assert len(asyncio.run(scenario())) == 6


def test_a_dns_answer_that_changes_after_the_check_cannot_swap_the_target() -> None:
    # A rebinding server: first answer passes the check, every later answer points elsewhere.
    async def scenario() -> tuple[list[str], list[str], list[str]]:
        async with serve("127.0.0.1") as good, serve("127.0.0.2", good.port) as evil:
            resolver = StubResolver({"rebind.example": [["127.0.0.1"], ["127.0.0.2"]]})
            result = await fetch(
                f"http://rebind.example:{good.port}/",
                policy=_exempt(good.port),
                resolve=resolver,
            )
            assert result.body == b"hello from 127.0.0.1"
            return good.hits, evil.hits, resolver.calls

    good_hits, evil_hits, calls = asyncio.run(scenario())
    assert good_hits == ["/"]
    assert evil_hits == []
    assert calls == ["rebind.example"]  # resolved once; the connection used that answer


def test_a_rebinding_name_on_a_redirect_hop_is_checked_with_its_own_answer() -> None:
    async def scenario() -> tuple[list[str], list[str]]:
        async with serve() as site, serve() as canary:
            resolver = StubResolver({"rebind.example": [["127.0.0.1"]]})
            to = f"http://rebind.example:{canary.port}/"
            url = str(URL(f"{site.base}/redirect").with_query(to=to))
            with pytest.raises(FetchRefused, match="loopback"):
                await fetch(url, policy=_exempt(site.port), resolve=resolver)
            return resolver.calls, canary.hits

    calls, canary_hits = asyncio.run(scenario())
    assert calls == ["rebind.example"]
    assert canary_hits == []


# --- inside a network namespace: the real resolver and real addresses -------------------------

NETNS_SCRIPT = textwrap.dedent(
    """
    import asyncio, subprocess, sys
    sys.path.insert(0, {root!r})
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    for addr in ("192.168.1.10/32", "10.0.0.7/32"):
        subprocess.run(["ip", "addr", "add", addr, "dev", "lo"], check=True)
    from yarl import URL
    from shelldon.worker.tools.http import FetchRefused, fetch
    from tests.unit.risky.servers import serve

    async def main():
        out = {{}}
        for name, url in [
            ("localhost", "http://localhost:9/"),
            ("unresolvable", "http://no-such-host.invalid/"),
            ("public", "http://93.184.215.14/"),
        ]:
            try:
                await fetch(url, timeout_s=3)
                out[name] = "fetched"
            except FetchRefused as exc:
                out[name] = str(exc)
        async with serve("192.168.1.10") as lan, serve("10.0.0.7") as canary:
            result = await fetch(lan.base + "/")
            out["lan"] = result.body.decode()
            to = canary.base + "/secret"
            try:
                await fetch(str(URL(lan.base + "/redirect").with_query(to=to)))
                out["lan_redirect"] = "fetched"
            except FetchRefused as exc:
                out["lan_redirect"] = str(exc)
            out["canary_hits"] = len(canary.hits)
        print(repr(out))

    asyncio.run(main())
    """
)


def _unshare_works() -> bool:
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return False
    return subprocess.run(["unshare", "-rn", "true"], capture_output=True).returncode == 0


@pytest.mark.slow
@pytest.mark.skipif(not _unshare_works(), reason="unshare -rn (user+network namespace) unavailable")
def test_in_a_network_namespace_the_real_resolver_and_a_lan_url_behave() -> None:
    root = str(Path(__file__).resolve().parents[3])
    script = NETNS_SCRIPT.format(root=root)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/nonexistent"}
    proc = subprocess.run(
        ["unshare", "-rn", sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=30,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    out = eval(proc.stdout.strip().splitlines()[-1])  # our own repr of a dict of strings
    assert "loopback is never fetched" in out["localhost"]
    assert "cannot resolve" in out["unresolvable"]
    # A public address passes the guard; the namespace has no route, so the connect fails.
    assert "could not fetch" in out["public"]
    assert out["lan"] == "hello from 192.168.1.10"
    assert "redirect may not lead into private-use space" in out["lan_redirect"]
    assert out["canary_hits"] == 0
