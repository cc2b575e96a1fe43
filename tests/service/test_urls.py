"""URL safety: which hosts the service reaches, against real resolution and a real server."""

from __future__ import annotations

import http.server
import ipaddress
import threading
from collections.abc import Iterator

import httpx
import pytest

from service.errors import UnsafeUrl
from service.urls import Allowlist, blocked_because, check_url, open_http, pinned_request

NOBODY = Allowlist()
LOOPBACK = Allowlist.parse(["127.0.0.1"])


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("127.0.0.1", "loopback"),
        ("::1", "loopback"),
        ("10.1.2.3", "private"),
        ("172.16.0.1", "private"),
        ("192.168.1.1", "private"),
        ("fd00::1", "private"),
        ("169.254.169.254", "link-local"),
        ("fe80::1", "link-local"),
        ("0.0.0.0", "unspecified"),
        ("224.0.0.1", "multicast"),
        ("240.0.0.1", "private"),
        ("100.64.0.1", "shared (100.64.0.0/10)"),
        ("::ffff:127.0.0.1", "loopback"),
    ],
)
def test_addresses_that_are_not_public_are_named(address: str, reason: str) -> None:
    assert blocked_because(ipaddress.ip_address(address)) == reason


@pytest.mark.parametrize("address", ["93.184.215.14", "8.8.8.8", "2606:4700::1111"])
def test_public_addresses_pass(address: str) -> None:
    assert blocked_because(ipaddress.ip_address(address)) is None


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("http://127.0.0.1:8080/hook", "loopback address"),
        ("http://localhost/hook", "loopback address"),
        ("http://169.254.169.254/latest/meta-data", "link-local address"),
        ("http://[::1]/", "loopback address"),
        ("http://10.0.0.5/", "private address"),
        ("ftp://8.8.8.8/x", "unsupported scheme"),
        ("file:///etc/passwd", "unsupported scheme"),
        ("http:///nohost", "no host"),
        ("http://user:pw@8.8.8.8/", "credentials in URL"),
        ("http://no-such-host.invalid/", "does not resolve"),
    ],
)
def test_unsafe_urls_are_refused_saying_why(url: str, message: str) -> None:
    with pytest.raises(UnsafeUrl) as caught:
        check_url(url, NOBODY, field="body.callback_url")
    assert caught.value.message == message
    assert caught.value.field == "body.callback_url"


def test_the_allowlist_admits_hosts_and_networks() -> None:
    assert check_url("http://localhost:9/x", Allowlist.parse(["LOCALHOST"])).host == "localhost"
    target = check_url("http://127.0.0.1:9/x", Allowlist.parse(["127.0.0.0/8"]))
    assert (target.address, target.port) == ("127.0.0.1", 9)
    with pytest.raises(UnsafeUrl):
        check_url("http://10.0.0.1/", Allowlist.parse(["127.0.0.0/8", "minio"]))


class _Handler(http.server.BaseHTTPRequestHandler):
    """Redirects /to-private to a loopback alias, /hop to /data, serves /data."""

    def do_GET(self) -> None:
        port = self.server.server_address[1]
        if self.path == "/to-private":
            self._redirect(f"http://127.0.0.2:{port}/data")
        elif self.path == "/hop":
            self._redirect("/data")
        else:
            body = f"host={self.headers['Host']}".encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    def _redirect(self, location: str) -> None:
        self.send_response(302)
        self.send_header("Location", location)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"localhost:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def test_requests_go_to_the_checked_address_with_the_host_name(server: str) -> None:
    allow = Allowlist.parse(["localhost"])
    with httpx.Client() as http:
        response = pinned_request(http, "GET", check_url(f"http://{server}/data", allow))
    assert response.text == f"host={server}"


def test_redirects_are_followed_and_each_hop_checked(server: str) -> None:
    allow = Allowlist.parse(["localhost"])
    with httpx.Client() as http:
        with open_http(http, f"http://{server}/hop", allow) as response:
            assert response.read() == f"host={server}".encode()
        with (
            pytest.raises(UnsafeUrl, match=r"127\.0\.0\.2.*loopback"),
            open_http(http, f"http://{server}/to-private", allow),
        ):
            pass
