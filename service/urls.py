"""URL safety: the hosts the service may reach on a client's behalf (SSRF rules).

A client names URLs the service then opens itself: a job's ``callback_url`` (its webhook)
and a dataset's ``source``; an operator names the object store's endpoint. A service that
opens any URL it is given is a proxy into its own network (cloud metadata at
169.254.169.254, Redis on loopback, the private network behind it), so every such URL goes
through :func:`check_url` first:

- the scheme must be one the caller accepts (``http``/``https`` for webhooks and sources);
- the host is resolved and *every* address it resolves to must be public: private
  (RFC 1918, unique local), loopback, link-local, multicast, reserved, unspecified, shared
  address space (100.64.0.0/10) and IPv4-mapped forms of those are refused;
- unless the host, or a network holding the address, is on the allow-list
  (``RBFKM_URL_ALLOWLIST``: host names and CIDRs, e.g. ``minio,10.0.0.0/8,127.0.0.1``).

:func:`pinned_request` then connects to an address that was checked (not to a second
resolution an attacker's DNS could answer differently), with the original host name in
``Host`` and for TLS (SNI and certificate check), and never follows a redirect by itself:
:func:`open_http` follows a few, checking each hop as the first.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit

import httpx

from service.errors import UnsafeUrl

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

HTTP_SCHEMES: tuple[str, ...] = ("http", "https")
#: Redirects followed by :func:`open_http` (each hop checked like the first URL).
MAX_REDIRECTS = 5
_DEFAULT_PORTS = {"http": 80, "https": 443}
#: Shared address space (carrier-grade NAT): not "private" to ``ipaddress``, not public.
_SHARED = ipaddress.ip_network("100.64.0.0/10")


@dataclass(frozen=True)
class Allowlist:
    """Hosts and networks exempt from the address rules (an operator's own services)."""

    hosts: frozenset[str] = frozenset()
    networks: tuple[IPNetwork, ...] = ()

    @classmethod
    def parse(cls, entries: Iterable[str]) -> Allowlist:
        """Host names (compared case-insensitively) and CIDRs or bare addresses."""
        hosts, networks = set(), []
        for entry in (e.strip() for e in entries):
            if not entry:
                continue
            try:
                networks.append(ipaddress.ip_network(entry, strict=False))
            except ValueError:
                hosts.add(entry.lower().rstrip("."))
        return cls(frozenset(hosts), tuple(networks))

    def admits_host(self, host: str) -> bool:
        return host.lower().rstrip(".") in self.hosts

    def admits_address(self, address: IPAddress) -> bool:
        return any(address in network for network in self.networks)


@dataclass(frozen=True)
class Target:
    """A checked URL: where to connect (``address``) and what to call the host."""

    url: str
    scheme: str
    host: str
    port: int
    address: str


def blocked_because(address: IPAddress) -> str | None:
    """Why an address is not public (None: it is)."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return blocked_because(address.ipv4_mapped)
    checks = (
        ("loopback", address.is_loopback),
        ("link-local", address.is_link_local),
        ("multicast", address.is_multicast),
        ("unspecified", address.is_unspecified),
        ("private", address.is_private),
        ("reserved", address.is_reserved),
        ("shared (100.64.0.0/10)", address in _SHARED),
    )
    return next((name for name, hit in checks if hit), None)


def _resolve(host: str, port: int, field: str) -> list[IPAddress]:
    """Every address ``host`` resolves to (a literal address: itself)."""
    try:
        return [ipaddress.ip_address(host)]
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise UnsafeUrl(
            f"the host {host!r} does not resolve ({exc})", "does not resolve", field
        ) from None
    return list(dict.fromkeys(ipaddress.ip_address(info[4][0].split("%")[0]) for info in infos))


def check_url(
    url: str,
    allowlist: Allowlist,
    schemes: tuple[str, ...] = HTTP_SCHEMES,
    field: str = "body",
) -> Target:
    """The URL's target if the service may reach it; :class:`UnsafeUrl` saying why not
    (``field``: where the URL came from, for the problem's ``errors``)."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise UnsafeUrl(f"{url!r} is not a valid URL ({exc})", "not a valid URL", field) from None
    scheme = parts.scheme.lower()
    if scheme not in schemes:
        raise UnsafeUrl(
            f"{url!r}: the scheme must be one of {', '.join(schemes)}", "unsupported scheme", field
        )
    host = parts.hostname
    if not host:
        raise UnsafeUrl(f"{url!r} names no host", "no host", field)
    if parts.username or parts.password:
        raise UnsafeUrl(
            f"{url!r}: credentials in a URL are not accepted", "credentials in URL", field
        )
    port = port or _DEFAULT_PORTS.get(scheme, 443)
    addresses = _resolve(host, port, field)
    if not addresses:
        raise UnsafeUrl(f"the host {host!r} does not resolve", "does not resolve", field)
    if not allowlist.admits_host(host):
        for address in addresses:
            reason = blocked_because(address)
            if reason is not None and not allowlist.admits_address(address):
                raise UnsafeUrl(
                    f"{url!r}: the host {host!r} resolves to {address}, a {reason} address, "
                    "which the service does not connect to; use a public host (an operator "
                    "can allow this one in RBFKM_URL_ALLOWLIST)",
                    f"{reason} address",
                    field,
                )
    return Target(url, scheme, host, port, str(addresses[0]))


def _pinned(target: Target, url: str) -> tuple[str, dict[str, str], dict[str, str]]:
    """The URL with the checked address in place of the host, its Host header and the
    TLS server name (so the certificate is checked against the host name)."""
    parts = urlsplit(url)
    address = f"[{target.address}]" if ":" in target.address else target.address
    netloc = f"{address}:{target.port}"
    host_header = parts.netloc.rsplit("@", 1)[-1]
    extensions = {"sni_hostname": target.host} if target.scheme == "https" else {}
    return parts._replace(netloc=netloc).geturl(), {"Host": host_header}, extensions


def pinned_request(
    http: httpx.Client,
    method: str,
    target: Target,
    *,
    headers: dict[str, str] | None = None,
    content: bytes | None = None,
    stream: bool = False,
) -> httpx.Response:
    """One request to a checked target's address; redirects are the caller's to follow.

    With ``stream`` the body is left unread (close the response)."""
    url, host, extensions = _pinned(target, target.url)
    request = http.build_request(
        method, url, headers={**(headers or {}), **host}, content=content, extensions=extensions
    )
    return http.send(request, stream=stream, follow_redirects=False)


@contextmanager
def open_http(
    http: httpx.Client,
    url: str,
    allowlist: Allowlist,
    field: str = "body",
    max_redirects: int = MAX_REDIRECTS,
) -> Iterator[httpx.Response]:
    """A streaming GET of ``url``, following up to ``max_redirects`` redirects, each hop
    checked as the first; the response (status unchecked) is closed on exit."""
    for _ in range(max_redirects + 1):
        target = check_url(url, allowlist, field=field)
        response = pinned_request(http, "GET", target, stream=True)
        if not response.is_redirect:
            try:
                yield response
            finally:
                response.close()
            return
        response.close()
        url = urljoin(url, response.headers["location"])
    raise UnsafeUrl(
        f"more than {max_redirects} redirects from {url!r}", "too many redirects", field
    )
