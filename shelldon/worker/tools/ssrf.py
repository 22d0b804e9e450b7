"""The SSRF guard for http_get: which addresses a fetch may connect to, decided as plain values.

Addresses are classified against an explicit table of special-purpose ranges (the IANA IPv4 and
IPv6 Special-Purpose Address Registries: RFC 6890 and its successors) rather than Python's
``ipaddress`` flags, which differ between versions and miss ranges such as 100.64.0.0/10.
IPv6 forms that carry an IPv4 address (IPv4-mapped, IPv4-compatible, IPv4-translated, NAT64,
6to4, Teredo) are unwrapped and the carried address is judged too; the strictest verdict wins.

Host strings are normalized the way ``inet_aton`` reads them (decimal ``2130706433``, octal
``0177.0.0.1``, hex ``0x7f.1``, short ``127.1``), so a numeric host never reaches a resolver and
never slips past the table. A host whose last label is numeric but not a valid address is
refused as ambiguous rather than guessed at.
"""

from __future__ import annotations

import enum
import ipaddress
import re
from dataclasses import dataclass

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


class Reach(enum.IntEnum):
    """How far a range is allowed; higher is stricter."""

    PUBLIC = 0
    # Private and reserved space: allowed only on the URL the owner approved, never on redirects.
    INTERNAL = 1
    # Loopback, link-local, unspecified, multicast, broadcast: never allowed.
    NEVER = 2
    # Not a destination of its own: the IPv4 address it carries decides.
    CARRIER = 3


@dataclass(frozen=True, slots=True)
class SpecialRange:
    """One row of the special-purpose table: the network, what it is, how far it may be reached."""

    network: IPNetwork
    name: str
    reach: Reach


def _row(cidr: str, name: str, reach: Reach) -> SpecialRange:
    return SpecialRange(ipaddress.ip_network(cidr), name, reach)


N, INT, C = Reach.NEVER, Reach.INTERNAL, Reach.CARRIER

# IANA IPv4 Special-Purpose Address Registry (RFC 6890, 7335, 7526, 8190, 8880) plus multicast
# (RFC 5771) and class E (RFC 1112). Globally reachable anycast rows (AS112, AMT, 192.0.0.9/10)
# are left out: they are public destinations.
SPECIAL_RANGES_V4: tuple[SpecialRange, ...] = (
    _row("0.0.0.0/8", "this network (unspecified)", N),
    _row("10.0.0.0/8", "private-use", INT),
    _row("100.64.0.0/10", "shared address space (carrier-grade NAT)", INT),
    _row("127.0.0.0/8", "loopback", N),
    _row("169.254.0.0/16", "link-local (cloud metadata lives here)", N),
    _row("172.16.0.0/12", "private-use", INT),
    _row("192.0.0.0/24", "IETF protocol assignments", INT),
    _row("192.0.2.0/24", "documentation (TEST-NET-1)", INT),
    _row("192.88.99.0/24", "deprecated 6to4 relay anycast", INT),
    _row("192.168.0.0/16", "private-use", INT),
    _row("198.18.0.0/15", "benchmarking", INT),
    _row("198.51.100.0/24", "documentation (TEST-NET-2)", INT),
    _row("203.0.113.0/24", "documentation (TEST-NET-3)", INT),
    _row("224.0.0.0/4", "multicast", N),
    _row("240.0.0.0/4", "reserved (class E)", INT),
    _row("255.255.255.255/32", "limited broadcast", N),
)

# IANA IPv6 Special-Purpose Address Registry (RFC 6890, 6052, 8215, 9602, 9637) plus multicast
# and the deprecated site-local block. Anything outside 2000::/3 is reserved by the IETF and is
# treated as internal (see ``classify``).
SPECIAL_RANGES_V6: tuple[SpecialRange, ...] = (
    _row("::/128", "unspecified", N),
    _row("::1/128", "loopback", N),
    _row("::ffff:0:0/96", "IPv4-mapped", C),
    _row("::/96", "IPv4-compatible (deprecated)", C),
    _row("::ffff:0:0:0/96", "IPv4-translated (SIIT)", C),
    _row("64:ff9b::/96", "NAT64 well-known prefix", C),
    _row("64:ff9b:1::/48", "NAT64 local-use prefix", INT),
    _row("100::/64", "discard-only", INT),
    _row("2001::/23", "IETF protocol assignments", INT),
    _row("2001::/32", "Teredo", C),
    _row("2001:2::/48", "benchmarking", INT),
    _row("2001:db8::/32", "documentation", INT),
    _row("2001:10::/28", "ORCHID (deprecated)", INT),
    _row("2001:20::/28", "ORCHIDv2", INT),
    _row("2002::/16", "6to4", C),
    _row("3fff::/20", "documentation", INT),
    _row("5f00::/16", "SRv6 segment identifiers", INT),
    _row("fc00::/7", "unique-local (private)", INT),
    _row("fe80::/10", "link-local", N),
    _row("fec0::/10", "site-local (deprecated)", INT),
    _row("ff00::/8", "multicast", N),
)

del N, INT, C

_GLOBAL_UNICAST_V6 = ipaddress.IPv6Network("2000::/3")
_NAT64_LOCAL = ipaddress.IPv6Network("64:ff9b:1::/48")


@dataclass(frozen=True, slots=True)
class Verdict:
    """What the table says about one address: how far it may be reached, and why."""

    address: IPAddress
    reach: Reach
    reason: str


class HostRefused(ValueError):
    """A URL host or address that policy refuses; the message says which rule and why."""


def _most_specific(address: IPAddress) -> SpecialRange | None:
    table = SPECIAL_RANGES_V4 if address.version == 4 else SPECIAL_RANGES_V6
    rows = [row for row in table if address in row.network]
    return max(rows, key=lambda row: row.network.prefixlen, default=None)


def embedded_ipv4(address: ipaddress.IPv6Address) -> tuple[ipaddress.IPv4Address, ...]:
    """The IPv4 addresses an IPv6 address carries (mapped, compatible, NAT64, 6to4, Teredo)."""
    value = int(address)
    low32 = ipaddress.IPv4Address(value & 0xFFFFFFFF)
    row = _most_specific(address)
    if row is None or row.reach is not Reach.CARRIER:
        # Local-use NAT64 also carries an IPv4 in its low bits.
        return (low32,) if address in _NAT64_LOCAL else ()
    if row.name == "6to4":
        return (ipaddress.IPv4Address((value >> 80) & 0xFFFFFFFF),)
    if row.name == "Teredo":
        server = ipaddress.IPv4Address((value >> 64) & 0xFFFFFFFF)
        client = ipaddress.IPv4Address(~value & 0xFFFFFFFF)  # stored bit-inverted
        return (server, client)
    return (low32,)


def classify(address: IPAddress) -> Verdict:
    """Classify one address against the special-purpose table, unwrapping IPv4 carried in IPv6."""
    if isinstance(address, ipaddress.IPv6Address) and address.scope_id:
        address = ipaddress.IPv6Address(address.compressed.split("%", 1)[0])
    row = _most_specific(address)
    if isinstance(address, ipaddress.IPv6Address):
        if row is None and address not in _GLOBAL_UNICAST_V6:
            row = SpecialRange(
                ipaddress.IPv6Network("::/0"), "reserved by the IETF", Reach.INTERNAL
            )
        inner = [classify(v4) for v4 in embedded_ipv4(address)]
        if inner:
            worst = max(inner, key=lambda v: v.reach)
            outer = row.reach if row and row.reach is not Reach.CARRIER else Reach.PUBLIC
            if worst.reach >= outer:
                label = row.name if row else "embedded"
                return Verdict(
                    address, worst.reach, f"{label} form of {worst.address}: {worst.reason}"
                )
    if row is None or row.reach is Reach.CARRIER:
        return Verdict(address, Reach.PUBLIC, "public")
    return Verdict(address, row.reach, row.name)


_NUMERIC_PART = re.compile(r"^(0[xX][0-9a-fA-F]*|[0-9]+)$")


def _parse_number(part: str) -> int | None:
    """One inet_aton component: 0x hex, leading-zero octal, else decimal; None if not numeric."""
    if not _NUMERIC_PART.match(part):
        return None
    if part[:2] in ("0x", "0X"):
        return int(part[2:], 16) if len(part) > 2 else 0
    if len(part) > 1 and part[0] == "0":
        return int(part, 8) if all(c in "01234567" for c in part) else -1
    return int(part)


def parse_inet_aton(host: str) -> ipaddress.IPv4Address | None:
    """``host`` read as inet_aton reads it (1 to 4 parts, last part fills the rest), or None.

    Raises ``HostRefused`` for a host that looks numeric but is no valid address (``256.1.1.1``,
    ``08.1.1.1``): resolvers disagree on those, so they are refused rather than guessed.
    """
    parts = host.split(".")
    numbers = [_parse_number(p) for p in parts]
    if _parse_number(parts[-1]) is None:
        return None  # a name: the last label is not a number (WHATWG "ends in a number")
    if len(parts) > 4 or any(n is None or n < 0 for n in numbers):
        raise HostRefused(f"host {host!r} looks numeric but is not a valid IPv4 address")
    values = [n for n in numbers if n is not None]
    head, last = values[:-1], values[-1]
    if any(n > 255 for n in head) or last >= 256 ** (4 - len(head)):
        raise HostRefused(f"host {host!r} looks numeric but a part is out of range")
    value = 0
    for n in head:
        value = value << 8 | n
    value = value << (8 * (4 - len(head))) | last
    return ipaddress.IPv4Address(value)


def normalize_host(host: str) -> str | IPAddress:
    """The host as a resolver would read it: an IP address for any numeric form, else the name
    lowercased without trailing dots. Raises ``HostRefused`` for empty or ambiguous hosts."""
    name = host.strip().lower()
    if name.startswith("[") and name.endswith("]"):
        name = name[1:-1]
    name = name.replace("%25", "%")
    if ":" in name:
        try:
            return ipaddress.IPv6Address(name)
        except ValueError:
            raise HostRefused(f"host {host!r} is not a valid IPv6 address") from None
    name = name.rstrip(".")
    if not name:
        raise HostRefused(f"host {host!r} is empty")
    v4 = parse_inet_aton(name)
    return v4 if v4 is not None else name


@dataclass(frozen=True, slots=True)
class AddressPolicy:
    """What a fetch may reach: internal space only on the URL the owner approved. ``exempt``
    lists (address, port) pairs allowed regardless of the table: empty in production; a test
    uses it to let one loopback fake server through."""

    exempt: frozenset[tuple[IPAddress, int]] = frozenset()

    def check(self, address: IPAddress, port: int, *, redirect: bool) -> Verdict:
        """The verdict for connecting to ``address:port``; raises ``HostRefused`` if refused."""
        verdict = classify(address)
        if (verdict.address, port) in self.exempt:
            return verdict
        if verdict.reach is Reach.NEVER:
            raise HostRefused(f"{address} is refused: {verdict.reason} is never fetched")
        if verdict.reach is Reach.INTERNAL and redirect:
            raise HostRefused(
                f"{address} is refused: a redirect may not lead into {verdict.reason} space"
            )
        return verdict


DEFAULT_POLICY = AddressPolicy()
