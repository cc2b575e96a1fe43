"""The web page at `/ui/`: its files, the redirect to it, and, in a real browser, the page
at work against a live service.

The plain tests check what the service serves: `GET /` sends a browser to the page, every
file the page loads answers with its type, the page's modules and the vendored Vega-Lite
are package data and the pinned npm files, and nothing in them names another host.

The `browser` tests drive headless Chromium (Playwright, with the system's Chromium) on a
real uvicorn server with the embedded Redis and a spawned worker: enter the API key, drop
a CSV on the page, start a job from the generated form, follow it to the end and read its
charts and downloads. They skip where Chromium or Playwright is missing. Each writes
screenshots (1280x800 and 390x844) to `$RBFKM_SCREENSHOTS`, or to a temporary directory;
docs/ui/ holds a set of them.
"""

from __future__ import annotations

import csv
import hashlib
import io
import math
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pyarrow.parquet as pq
import pytest
from fastapi.testclient import TestClient

from service.app import create_app
from service.routes import ui
from tests.service.conftest import (
    assert_problem,
    blobs,
    chromium,
    live_server,
    make_settings,
    private_db,
    wait_for,
)

VENDOR = ui.STATIC_DIR / "vendor"
README = VENDOR / "README.md"
#: What StaticFiles answers for each kind of file the page loads.
TYPES = {
    ".html": "text/html",
    ".js": ("text/javascript", "application/javascript"),
    ".css": "text/css",
}


class _References(HTMLParser):
    """The `src` and `href` URLs of a page's tags."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.urls += [value for name, value in attrs if name in ("src", "href") and value]


def page_files(html: str) -> list[str]:
    """The files `index.html` loads (relative URLs; the page's own links excluded)."""
    parser = _References()
    parser.feed(html)
    return [url for url in parser.urls if not url.startswith(("#", "../", "data:"))]


def module_graph(start: str) -> set[str]:
    """Every module the page's entry module imports, transitively (paths under js/)."""
    seen: set[str] = set()
    todo = [start]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        text = (ui.STATIC_DIR / name).read_text()
        todo += [f"js/{dep}" for dep in re.findall(r'from "\./([\w.-]+\.js)"', text)]
    return seen


def manifest() -> dict[str, str]:
    lines = re.findall(r"^([0-9a-f]{64})  (\S+)$", README.read_text(), re.M)
    return {path: digest for digest, path in lines}


# --- The files -------------------------------------------------------------------------


def test_root_redirects_to_the_page(client: TestClient) -> None:
    response = client.get("/", follow_redirects=False)
    assert response.status_code == 307 and response.headers["location"] == "/ui/"
    page = client.get("/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert '<script type="module" src="js/main.js">' in page.text


def test_the_redirect_follows_the_root_path_of_a_proxy(settings: object) -> None:
    with TestClient(create_app(settings), root_path="/api") as client:  # type: ignore[arg-type]
        response = client.get("/api/", follow_redirects=False)
        assert response.headers["location"] == "/api/ui/"
        assert client.get("/api/ui/").status_code == 200


def test_every_file_the_page_loads_is_served_with_its_type(client: TestClient) -> None:
    files = page_files(client.get("/ui/").text)
    assert {"style.css", "js/main.js", "vendor/vega.min.js"} <= set(files)
    modules = module_graph("js/main.js")
    assert {"js/api.js", "js/sse.js", "js/schemaform.js", "js/charts.js", "js/job.js"} <= modules
    for name in [*files, *modules]:
        response = client.get(f"/ui/{name}")
        assert response.status_code == 200, name
        assert response.headers["content-type"].startswith(TYPES[Path(name).suffix]), name
        assert response.content == (ui.STATIC_DIR / name).read_bytes(), name
        assert response.headers["etag"], "cacheable"


def test_the_page_names_no_other_host() -> None:
    # No CDN: the page, its styles and modules load nothing from elsewhere.
    for path in ui.STATIC_DIR.rglob("*"):
        if path.suffix in TYPES and path.parent != VENDOR:
            text = path.read_text()
            urls = re.findall(r"(?:https?:)?//[\w.-]+\.\w+", text)
            allowed = [u for u in urls if "html.spec.whatwg.org" in u]  # a comment in sse.js
            assert urls == allowed, (path, urls)
    assert all(
        not url.startswith(("http:", "https:", "//"))
        for url in page_files((ui.STATIC_DIR / "index.html").read_text())
    )


def test_the_page_needs_no_key_but_the_api_does(secured: TestClient) -> None:
    assert secured.get("/").status_code == 200
    for name in page_files(secured.get("/ui/").text):
        assert secured.get(f"/ui/{name}").status_code == 200, name
    assert_problem(secured.get("/v1/datasets"), 401)


def test_unknown_files_are_problems(client: TestClient) -> None:
    for path in ("nothing.js", "../app.py", "..%2Fapp.py", "js/../../app.py"):
        assert_problem(client.get(f"/ui/{path}"), 404)


def test_the_page_is_not_an_operation_and_its_requests_are_counted(client: TestClient) -> None:
    assert not [p for p in client.get("/openapi.json").json()["paths"] if p in ("/", "/ui")]
    client.get("/ui/js/main.js")
    assert 'route="/ui",status="200"' in client.get("/metrics").text


def test_the_vendored_charts_are_the_pinned_npm_files() -> None:
    listed = manifest()
    assert {"vega.min.js", "vega-lite.min.js", "vega-embed.min.js"} <= set(listed)
    for name, digest in listed.items():
        assert hashlib.sha256((VENDOR / name).read_bytes()).hexdigest() == digest, name
    shipped = {p.name for p in VENDOR.iterdir() if p.is_file()}
    assert shipped == set(listed) | {"README.md"}, "every vendored file is accounted for"
    text = README.read_text()
    for package, version in (("vega", "6.4.0"), ("vega-lite", "6.5.0"), ("vega-embed", "7.3.0")):
        assert f"| `{package}` | {version} |" in text and f"{package}@{version}" in text
        assert "Redistribution and use" in (VENDOR / f"{package}.LICENSE").read_text()
        assert f'"{version}"' in (VENDOR / f"{package}.min.js").read_text()  # its version


# --- In a browser -----------------------------------------------------------------------

KEY = "ui-secret"
#: A dataset larger than the projection's sample, in four blobs.
N_POINTS, N_FEATURES, K = 6000, 3, 4


@dataclass
class Live:
    base_url: str
    http: httpx.Client
    shots: Path


@pytest.fixture(scope="module")
def live(redis_server: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    chromium()  # skip before starting a server when there is no browser
    pytest.importorskip("playwright.sync_api", reason="pip install playwright")
    shots = Path(os.environ.get("RBFKM_SCREENSHOTS") or tmp_path_factory.mktemp("screenshots"))
    shots.mkdir(parents=True, exist_ok=True)
    with private_db(redis_server, 14) as url:
        settings = make_settings(
            url, tmp_path_factory.mktemp("ui"), key_prefix="ui", api_keys=[KEY]
        )
        with (
            live_server(settings, tmp_path_factory.mktemp("tmp")) as base_url,
            httpx.Client(base_url=base_url, headers={"X-API-Key": KEY}, timeout=60) as http,
        ):
            wait_for(lambda: http.get("/readyz").status_code == 200, 120, "a worker to be ready")
            yield Live(base_url, http, shots)


@pytest.fixture(scope="module")
def browser(live: Live) -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=chromium(), args=["--no-sandbox", "--disable-dev-shm-usage"]
        )
        yield launched
        launched.close()


@dataclass
class Tab:
    """A page of a fresh browser context, with what it asked for and what went wrong."""

    page: Any
    requests: list[str]
    errors: list[str]


def open_tab(browser: Any, live: Live, width: int = 1280, height: int = 800) -> Tab:
    context = browser.new_context(
        viewport={"width": width, "height": height}, accept_downloads=True
    )
    context.set_default_timeout(30_000)
    page = context.new_page()
    tab = Tab(page, [], [])
    page.on("request", lambda request: tab.requests.append(request.url))
    page.on("pageerror", lambda error: tab.errors.append(str(error)))
    page.on(
        "console",
        lambda message: (
            message.type == "error"
            and "401" not in message.text  # the page's first call, before it has the key
            and tab.errors.append(message.text)
        ),
    )
    return tab


def enter_key(tab: Tab, live: Live, key: str = KEY) -> None:
    tab.page.goto(f"{live.base_url}/")
    assert tab.page.url == f"{live.base_url}/ui/"
    tab.page.fill("#key-input", key)
    tab.page.click("#key-form button")


def signed_in(browser: Any, live: Live, width: int = 1280, height: int = 800) -> Tab:
    """A tab on the home view, the key entered."""
    tab = open_tab(browser, live, width, height)
    enter_key(tab, live)
    tab.page.wait_for_selector("#drop-zone")
    return tab


def drop_file(page: Any, selector: str, name: str, text: str) -> None:
    """Drop a file on an element, as a user dragging it from their desktop would."""
    transfer = page.evaluate_handle(
        """([name, text]) => {
            const transfer = new DataTransfer();
            transfer.items.add(new File([text], name, { type: "text/csv" }));
            return transfer;
        }""",
        [name, text],
    )
    page.dispatch_event(selector, "dragover", {"dataTransfer": transfer})
    page.dispatch_event(selector, "drop", {"dataTransfer": transfer})


def shoot(tab: Tab, live: Live, name: str) -> Path:
    path = live.shots / f"{name}.png"
    tab.page.screenshot(path=str(path), full_page=True)
    return path


def count(page: Any, selector: str) -> int:
    return page.locator(selector).count()


def blobs_csv() -> str:
    X = blobs(N_POINTS, N_FEATURES, K, seed=11)
    lines = ["a,b,c", *(",".join(f"{v:.5f}" for v in row) for row in X)]
    return "\n".join(lines) + "\n"


@pytest.mark.browser
@pytest.mark.slow
def test_upload_cluster_and_read_the_result_in_a_browser(browser: Any, live: Live) -> None:
    tab = signed_in(browser, live)
    page = tab.page
    assert page.evaluate("sessionStorage.getItem('rbfkm.apiKey')") == KEY

    # Drop a CSV: it is uploaded with a progress bar and listed.
    drop_file(page, "#drop-zone", "blobs.csv", blobs_csv())
    row = page.wait_for_selector("#datasets tbody tr:has-text('blobs.csv')")
    assert "blobs.csv" in row.inner_text() and "6,000 × 3" in row.inner_text()
    assert page.eval_on_selector(".upload progress", "bar => bar.value") == 1
    dataset_id = row.get_attribute("data-id")
    assert live.http.get(f"/v1/datasets/{dataset_id}").json()["n_samples"] == N_POINTS

    # The job form is generated from the document: every JobCreate field the form can hold.
    schema = live.http.get("/openapi.json").json()["components"]["schemas"]["JobCreate"]
    fields = set(
        page.eval_on_selector_all(".schema-form .field", "f => f.map(x => x.dataset.field)")
    )
    assert fields == set(schema["properties"])
    options = page.eval_on_selector_all("#field-assignment option", "o => o.map(x => x.value)")
    assert options == schema["properties"]["assignment"]["enum"]

    page.fill("#field-n_clusters", str(K))
    page.click(".more summary")
    page.fill("#field-random_state", "0")
    page.fill("#field-cooling", "0.95")  # more temperatures: a longer path to follow
    page.fill("#field-device", "cpu")
    page.click(".schema-form button[type=submit]")
    page.wait_for_url(re.compile(r"#/jobs/[0-9a-f]+$"))
    job_id = page.url.rsplit("/", 1)[1]
    job = live.http.get(f"/v1/jobs/{job_id}").json()
    assert job["params"]["n_clusters"] == K and job["params"]["cooling"] == 0.95
    assert job["params"]["random_state"] == 0 and job["params"]["device"] == "cpu"

    # Live progress: the panel follows the job's events until it has succeeded.
    page.wait_for_selector("#progress")
    page.wait_for_selector(
        '#progress[data-status="running"] #progress-percent, #progress[data-status="succeeded"]'
    )
    shoot(tab, live, "job-running-1280")
    page.wait_for_selector('#progress[data-status="succeeded"]', timeout=120_000)

    # The charts: every sampled point, k centroids, k bars, the annealing path.
    for chart in ("annealing", "projection", "sizes"):
        page.wait_for_selector(f"#chart-{chart}[data-rendered]", timeout=60_000)
    projection = live.http.get(f"/v1/jobs/{job_id}/projection").json()
    assert len(projection["rows"]) == 5000
    assert count(page, "#chart-projection g.points_marks path") == 5000
    assert count(page, "#chart-projection g.centroids_marks path") == K
    assert count(page, "#chart-sizes g.sizes_marks path") == K
    assert count(page, "#chart-annealing g.inertia_marks path") == 1
    history = live.http.get(f"/v1/jobs/{job_id}/result", params={"include": "history"}).json()
    temperatures = [r for r in history["history"] if r["sigma"] > 0]
    assert count(page, "#chart-annealing g.mark-symbol path") == len(temperatures)
    result = live.http.get(f"/v1/jobs/{job_id}/result").json()
    sizes = np.bincount(result["labels"], minlength=K)
    bars = page.eval_on_selector_all(
        "#chart-sizes g.sizes_marks path", "paths => paths.map(p => p.getAttribute('aria-label'))"
    )
    assert sorted(int(re.search(r"size: (\d+)", b).group(1)) for b in bars) == sorted(sizes)
    assert "inertia" in page.inner_text("#metrics")
    shoot(tab, live, "result-1280")

    # Downloads: the labels as CSV (written by the page) and as Parquet (the service's).
    with page.expect_download() as download:
        page.click("#download-labels-csv")
    text = Path(download.value.path()).read_text()
    rows = list(csv.reader(io.StringIO(text)))
    assert download.value.suggested_filename == f"{job_id}-labels.csv"
    assert rows[0] == ["row", "label"] and len(rows) == N_POINTS + 1
    assert [int(label) for _, label in rows[1:]] == result["labels"]
    with page.expect_download() as download:
        page.click("#download-labels-parquet")
    table = pq.read_table(download.value.path())
    assert table["label"].to_pylist() == result["labels"]
    with page.expect_download() as download:
        page.click("#download-centroids-csv")
    centres = list(csv.reader(io.StringIO(Path(download.value.path()).read_text())))
    assert centres[0] == ["cluster", "f0", "f1", "f2"]
    np.testing.assert_allclose(np.array(centres[1:], float)[:, 1:], result["centroids"], rtol=1e-6)

    # Back home: the job is listed as succeeded.
    page.click("a.brand")
    listed = page.wait_for_selector(f'#jobs tr[data-id="{job_id}"]')
    assert listed.get_attribute("data-status") == "succeeded"
    shoot(tab, live, "datasets-1280")
    assert all(url.startswith(live.base_url) for url in tab.requests), "no other host"
    assert tab.errors == []
    page.context.close()


@pytest.mark.browser
@pytest.mark.slow
def test_the_page_at_phone_width(browser: Any, live: Live) -> None:
    X = blobs(300, 2, 3, seed=5)
    body = {"data": X.tolist(), "name": "phone"}
    dataset = live.http.post("/v1/datasets", json=body).json()
    job = live.http.post(
        "/v1/jobs", json={"dataset_id": dataset["id"], "n_clusters": 3, "device": "cpu"}
    ).json()
    tab = signed_in(browser, live, 390, 844)
    page = tab.page
    page.wait_for_selector("#jobs")
    shoot(tab, live, "datasets-390")
    page.goto(f"{live.base_url}/ui/#/jobs/{job['id']}")
    page.wait_for_selector("#chart-projection[data-rendered]", timeout=120_000)
    page.wait_for_selector("#chart-sizes[data-rendered]")
    assert count(page, "#chart-projection g.points_marks path") == 300
    assert count(page, "#chart-sizes g.sizes_marks path") == 3
    # One column: nothing wider than the screen.
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    shoot(tab, live, "result-390")
    assert tab.errors == []
    page.context.close()


@pytest.mark.browser
def test_a_wrong_key_is_refused_and_a_right_one_kept(browser: Any, live: Live) -> None:
    tab = open_tab(browser, live)
    page = tab.page
    enter_key(tab, live, "not-the-key")
    page.wait_for_selector("#key-error:not([hidden])")
    assert "not accepted" in page.inner_text("#key-error")
    page.fill("#key-input", KEY)
    page.click("#key-form button")
    page.wait_for_selector("#drop-zone")
    assert page.evaluate("sessionStorage.getItem('rbfkm.apiKey')") == KEY
    page.reload()  # the key lives as long as the tab
    page.wait_for_selector("#drop-zone")
    assert not page.is_visible("#key-dialog")
    page.context.close()


@pytest.mark.browser
def test_the_annealing_chart_draws_a_k_path(browser: Any, live: Live) -> None:
    # A result with `k_path` (distinct centres per temperature range): a segment per k, a
    # transition where each k after the first appears.
    tab = signed_in(browser, live)
    page = tab.page
    sigmas = [8.0 * 0.8**i for i in range(12)]
    history = [{"sigma": s, "inertia": 100.0 / (1 + 10 * math.exp(-s))} for s in sigmas]
    k_path = [
        {"k": 1, "sigma_appear": 8.0, "sigma_split": 4.0, "inertia": 100.0},
        {"k": 2, "sigma_appear": 4.0, "sigma_split": 1.5, "inertia": 60.0},
        {"k": 3, "sigma_appear": 1.5, "sigma_split": None, "inertia": 20.0},
    ]
    page.evaluate(
        """async ([history, kPath]) => {
            const { drawAnnealing } = await import("./js/charts.js");
            const box = document.createElement("div");
            box.id = "k-path-chart";
            box.className = "chart";
            document.getElementById("view").append(box);
            await drawAnnealing(box, history, kPath, 15.0);
        }""",
        [history, k_path],
    )
    assert count(page, "#k-path-chart g.centres_marks line") == 3
    assert count(page, "#k-path-chart g.transitions_marks line") == 2
    assert count(page, "#k-path-chart g.final_marks line") == 1
    assert "distinct centres" in page.inner_text("#k-path-chart")
    assert tab.errors == []
    page.context.close()


@pytest.mark.browser
def test_the_page_shows_what_the_service_refuses(browser: Any, live: Live) -> None:
    tab = signed_in(browser, live)
    page = tab.page
    drop_file(page, "#drop-zone", "notes.xyz", "1,2\n")
    assert ".csv" in page.wait_for_selector(".upload-status .error").inner_text()
    drop_file(page, "#drop-zone", "bad.csv", "1,2\n3,oops\n")
    refused = page.wait_for_selector(".upload-status .error:has-text('row')").inner_text()
    assert "oops" in refused or "column 1" in refused, refused
    drop_file(page, "#drop-zone", "tiny.csv", "0,0\n1,1\n5,5\n")
    page.wait_for_selector("#datasets tbody tr:has-text('tiny.csv')")
    # Three rows cannot make ten clusters: the service's 422, the field it names marked.
    page.fill("#field-n_clusters", "10")
    page.click(".schema-form button[type=submit]")
    error = page.wait_for_selector(".form-error .error").inner_text()
    assert "n_clusters" in error and "exceeds n_samples" in error
    assert page.get_attribute('.field[data-field="n_clusters"]', "class").endswith("invalid")
    assert "#/jobs/" not in page.url
    page.context.close()


@pytest.mark.browser
def test_without_keys_the_page_asks_for_none(
    browser: Any, redis_server: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    with private_db(redis_server, 15) as url:
        settings = make_settings(url, tmp_path_factory.mktemp("open"), key_prefix="ui-open")
        with live_server(settings, tmp_path_factory.mktemp("tmp"), workers=0) as base_url:
            page = browser.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda error: errors.append(str(error)))
            page.goto(f"{base_url}/")
            page.wait_for_selector("#datasets-card .empty")  # no datasets yet, no key asked
            assert not page.is_visible("#key-dialog") and page.inner_text("#key-state") == ""
            assert page.evaluate("sessionStorage.length") == 0 and errors == []
            page.close()
