"""`/docs` and `/redoc`: Swagger UI and ReDoc from assets shipped in the package, no CDN.

The pages must work on a machine without internet: they reference only the service's own
URLs, the assets answer, they are package data (a built wheel carries them), the docs stay
open when API keys are set (as `/openapi.json` does), and, where Chromium is installed, both
pages render in a browser that cannot reach any other host.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from fnmatch import fnmatch
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from fastapi.testclient import TestClient

from service.app import create_app
from service.embedded import free_port
from service.routes import docs, ui
from tests.service.conftest import assert_problem, chromium, live_server, make_settings

ROOT = Path(__file__).resolve().parents[3]
README = docs.STATIC_DIR / "README.md"
PAGES = (docs.DOCS_PATH, docs.REDOC_PATH)
#: The only remote resource a page may try: ReDoc's side-menu logo, which the bundle drops
#: when it fails to load (service/static/docs/README.md).
REDOC_LOGO = "https://cdn.redoc.ly/redoc/logo-mini.svg"


class _References(HTMLParser):
    """Every URL a page's tags load: `src` and `href` attributes."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[tuple[str, str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if name in ("src", "href") and value is not None:
                self.urls.append((tag, value))


def references(html: str) -> list[tuple[str, str]]:
    parser = _References()
    parser.feed(html)
    return parser.urls


def is_local(url: str) -> bool:
    """A path on this server: no scheme, no host (`//host/...` is another host)."""
    parts = urlsplit(url)
    return not parts.scheme and not parts.netloc and url.startswith("/")


def manifest() -> dict[str, str]:
    """The files and sha256 hashes listed in the assets' README."""
    lines = re.findall(r"^([0-9a-f]{64})  (\S+)$", README.read_text(), re.M)
    return {path: digest for digest, path in lines}


# --- The pages and their assets ----------------------------------------------------------


@pytest.mark.parametrize("page", PAGES)
def test_pages_reference_only_local_urls(client: TestClient, page: str) -> None:
    response = client.get(page)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    urls = references(response.text)
    assert {tag for tag, _ in urls} >= {"script", "link"}, urls
    assert all(is_local(url) for _, url in urls), urls
    assert "fonts.googleapis.com" not in response.text and "cdn.jsdelivr" not in response.text
    spec = re.findall(r"""(?:url: |spec-url=)['"]([^'"]+)['"]""", response.text)
    assert spec == ["/openapi.json"], "the page reads the service's own document"


def test_swagger_ui_has_no_online_validator(client: TestClient) -> None:
    # Swagger UI would otherwise show a badge image from validator.swagger.io.
    assert '"validatorUrl": null' in client.get(docs.DOCS_PATH).text


@pytest.mark.parametrize("page", PAGES)
def test_every_asset_a_page_loads_is_served(client: TestClient, page: str) -> None:
    urls = [url for _, url in references(client.get(page).text)]
    assert urls
    for url in urls:
        response = client.get(url)
        assert response.status_code == 200, url
        kind = response.headers["content-type"]
        if url.endswith(".js"):
            assert kind.startswith(("text/javascript", "application/javascript")), (url, kind)
            assert len(response.content) > 500_000, url
        elif url.endswith(".css"):
            assert kind.startswith("text/css"), (url, kind)
            assert len(response.content) > 100_000, url
        else:
            assert kind == "image/png" and response.content[:8] == b"\x89PNG\r\n\x1a\n", url
        assert response.headers["etag"], "cacheable: a revisit answers 304"


def test_the_pages_load_swagger_ui_and_redoc_from_the_package(client: TestClient) -> None:
    swagger = [url for _, url in references(client.get(docs.DOCS_PATH).text)]
    redoc = [url for _, url in references(client.get(docs.REDOC_PATH).text)]
    base = docs.STATIC_PATH
    assert f"{base}/{docs.SWAGGER_JS}" in swagger and f"{base}/{docs.SWAGGER_CSS}" in swagger
    assert f"{base}/{docs.FAVICON}" in swagger and f"{base}/{docs.REDOC_JS}" in redoc
    served = client.get(f"{base}/{docs.REDOC_JS}").content
    assert served == (docs.STATIC_DIR / docs.REDOC_JS).read_bytes()


def test_a_revisit_is_not_modified(client: TestClient) -> None:
    url = f"{docs.STATIC_PATH}/{docs.SWAGGER_JS}"
    etag = client.get(url).headers["etag"]
    again = client.get(url, headers={"If-None-Match": etag})
    assert again.status_code == 304 and not again.content


def test_oauth2_redirect_page(client: TestClient) -> None:
    response = client.get(docs.OAUTH2_REDIRECT_PATH)
    assert response.status_code == 200 and "swaggerUIRedirectOauth2" in response.text
    assert f"oauth2RedirectUrl: window.location.origin + '{docs.OAUTH2_REDIRECT_PATH}'" in (
        client.get(docs.DOCS_PATH).text
    )


def test_unknown_assets_are_problems(client: TestClient) -> None:
    for path in ("nothing.js", "../app.py", "..%2Fapp.py", "swagger-ui/"):
        assert_problem(client.get(f"{docs.STATIC_PATH}/{path}"), 404)


def test_asset_requests_are_counted_under_their_mount(client: TestClient) -> None:
    client.get(f"{docs.STATIC_PATH}/{docs.SWAGGER_CSS}")
    client.get(docs.DOCS_PATH)
    text = client.get("/metrics").text
    assert f'route="{docs.STATIC_PATH}",status="200"' in text
    assert f'route="{docs.DOCS_PATH}",status="200"' in text


def test_the_cdn_pages_are_off_and_the_docs_are_not_operations(client: TestClient) -> None:
    app = client.app
    # FastAPI's own pages (CDN URLs) are not added; ours answer at the same paths.
    assert app.docs_url is None and app.redoc_url is None  # type: ignore[attr-defined]
    documented = client.get("/openapi.json").json()["paths"]
    assert not [p for p in documented if p.startswith(("/docs", "/redoc", "/static"))]


def test_pages_follow_the_root_path_of_a_proxy(settings: object) -> None:
    with TestClient(create_app(settings), root_path="/api") as client:  # type: ignore[arg-type]
        html = client.get("/api/docs").text
        urls = [url for _, url in references(html)]
        assert urls and all(url.startswith("/api/static/docs/") for url in urls), urls
        assert "url: '/api/openapi.json'" in html
        assert 'spec-url="/api/openapi.json"' in client.get("/api/redoc").text
        assert all(client.get(url).status_code == 200 for url in urls)


# --- API keys: the docs stay open, like /openapi.json ------------------------------------


def test_docs_stay_open_with_api_keys(secured: TestClient) -> None:
    assert secured.get("/openapi.json").status_code == 200  # what the docs pages read
    for page in PAGES:
        response = secured.get(page)
        assert response.status_code == 200, page
        for _, url in references(response.text):
            assert secured.get(url).status_code == 200, url
    assert secured.get(docs.OAUTH2_REDIRECT_PATH).status_code == 200
    assert_problem(secured.get("/v1/jobs"), 401)  # the API itself still needs a key


def test_swagger_ui_can_send_a_key(secured: TestClient) -> None:
    # The document declares both ways of sending a key, so "Authorize" offers them.
    schemes = secured.get("/openapi.json").json()["components"]["securitySchemes"]
    assert {scheme["type"] for scheme in schemes.values()} == {"http", "apiKey"}


# --- The shipped files -------------------------------------------------------------------


def test_the_assets_are_the_pinned_npm_files() -> None:
    listed = manifest()
    assert set(docs.ASSETS) <= set(listed)
    for path, digest in listed.items():
        data = (docs.STATIC_DIR / path).read_bytes()
        assert hashlib.sha256(data).hexdigest() == digest, f"{path} differs from the README"
    shipped = {
        str(p.relative_to(docs.STATIC_DIR)) for p in docs.STATIC_DIR.rglob("*") if p.is_file()
    }
    assert shipped == set(listed) | {"README.md"}, "every shipped file is accounted for"


def test_each_asset_has_its_license_and_version_next_to_it() -> None:
    for folder in ("swagger-ui", "redoc"):
        assert (docs.STATIC_DIR / folder / "LICENSE").stat().st_size > 500, folder
    assert "Apache License" in (docs.STATIC_DIR / "swagger-ui" / "LICENSE").read_text()
    assert "MIT" in (docs.STATIC_DIR / "redoc" / "LICENSE").read_text()
    text = README.read_text()
    assert f"| `swagger-ui-dist` | {docs.SWAGGER_UI_VERSION} |" in text
    assert f"| `redoc` | {docs.REDOC_VERSION} |" in text
    assert (
        f'Version: "{docs.REDOC_VERSION}"'
        in (docs.STATIC_DIR / "redoc" / "redoc.standalone.js.LICENSE.txt").read_text()
    )
    assert f"swagger-ui-dist@{docs.SWAGGER_UI_VERSION}" in text
    assert f"redoc@{docs.REDOC_VERSION}" in text


def test_the_docker_image_gets_the_assets() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert re.search(r"^COPY service \./service$", dockerfile, re.M)
    ignored = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    for path in [f"service/static/docs/{p}" for p in manifest()]:
        parts = path.split("/")
        prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        for pattern in ignored:
            bare = pattern.removeprefix("**/")
            hit = any(fnmatch(p, pattern) or fnmatch(p.rsplit("/", 1)[-1], bare) for p in prefixes)
            assert not hit, f".dockerignore's {pattern!r} drops {path}"


def test_a_built_wheel_carries_the_assets(tmp_path: Path) -> None:
    pytest.importorskip("setuptools", reason="the build backend, installed with pip")
    # Build from a copy holding only what the Dockerfile copies: no egg-info left by an
    # editable install (its SOURCES.txt would add the files whatever pyproject.toml says).
    source = tmp_path / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    skip = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    for name in ("rbfkm_engine", "service"):
        shutil.copytree(ROOT / name, source / name, ignore=skip)
    out = tmp_path / "wheel"
    pip_wheel = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-cache-dir", "-q"]
    build = subprocess.run(
        # The venv's setuptools, no isolation: builds offline, in about a second.
        [*pip_wheel, "--no-build-isolation", "-w", str(out), str(source)],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert build.returncode == 0, build.stdout + build.stderr
    (wheel,) = out.glob("rbfkm-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        for path in [*manifest(), "README.md"]:
            assert f"service/static/docs/{path}" in names, path
        # The web page's files (service/routes/ui.py) are package data the same way.
        for path in ui.STATIC_DIR.rglob("*"):
            if path.is_file():
                assert f"service/static/ui/{path.relative_to(ui.STATIC_DIR)}" in names, path
        installed = tmp_path / "site"
        archive.extractall(installed)
    # Installed (not editable), the module finds the assets inside the installed package.
    probe = subprocess.run(
        [sys.executable, "-c", "import service.routes.docs as d; print(d.STATIC_DIR)"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(installed)},
        cwd=tmp_path,
        timeout=60,
    )
    assert probe.returncode == 0, probe.stderr
    static = Path(probe.stdout.strip())
    assert static == installed / "service" / "static" / "docs"
    for asset in docs.ASSETS:
        assert (static / asset).read_bytes() == (docs.STATIC_DIR / asset).read_bytes()


# --- In a browser that cannot reach other hosts ------------------------------------------


@pytest.fixture(scope="module")
def live_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The app under uvicorn on loopback, with API keys set. No Redis: the docs need none."""
    settings = make_settings(
        f"redis://127.0.0.1:{free_port()}/0",
        tmp_path_factory.mktemp("docs"),
        api_keys=["alpha"],
    )
    with live_server(settings, tmp_path_factory.mktemp("tmp"), workers=0) as url:
        yield url


def render_offline(url: str, workdir: Path) -> tuple[str, list[str]]:
    """The DOM of `url` after its scripts ran in headless Chromium with every host but
    127.0.0.1 unresolvable, and the URLs the page itself asked for (from the net log; the
    browser's own background requests have no initiator)."""
    net_log = workdir / "net-log.json"
    command = [
        chromium(),
        "--headless",
        "--no-sandbox",  # containers (and root) have no user namespaces for the sandbox
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-extensions",
        f"--user-data-dir={workdir / 'profile'}",
        "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
        f"--log-net-log={net_log}",
        "--virtual-time-budget=20000",
        "--dump-dom",
        url,
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    log = json.loads(net_log.read_text())
    start_job = log["constants"]["logEventTypes"]["URL_REQUEST_START_JOB"]
    origin = "{0.scheme}://{0.netloc}".format(urlsplit(url))
    asked = [
        event["params"]["url"]
        for event in log["events"]
        if event["type"] == start_job and event.get("params", {}).get("initiator") == origin
    ]
    return result.stdout, asked


@pytest.mark.browser
def test_swagger_ui_renders_without_internet(live_url: str, tmp_path: Path) -> None:
    dom, asked = render_offline(f"{live_url}/docs", tmp_path)
    assert 'class="swagger-ui' in dom, dom[-2000:]
    for operation in ("operations-jobs-create_job_v1_jobs_post", "operations-operations-healthz"):
        assert operation in dom, operation
    assert "rbfkm" in dom and "Authorize" in dom  # the title and the API-key button
    assert f"{live_url}/openapi.json" in asked
    assert f"{live_url}{docs.STATIC_PATH}/{docs.SWAGGER_JS}" in asked
    assert [url for url in asked if not url.startswith(f"{live_url}/")] == []


@pytest.mark.browser
def test_redoc_renders_without_internet(live_url: str, tmp_path: Path) -> None:
    dom, asked = render_offline(f"{live_url}/redoc", tmp_path)
    assert "operation/create_job_v1_jobs_post" in dom, dom[-2000:]
    assert "Liveness: the process answers" in dom
    assert f"{live_url}{docs.STATIC_PATH}/{docs.REDOC_JS}" in asked
    # No fonts from Google; the logo the bundle asks for is dropped when it fails to load.
    assert [url for url in asked if not url.startswith(f"{live_url}/")] in ([], [REDOC_LOGO])
    assert "redocly logo" not in dom
