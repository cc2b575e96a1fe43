"""The interactive docs, `/docs` (Swagger UI) and `/redoc` (ReDoc), served offline.

FastAPI's built-in pages load Swagger UI's and ReDoc's JavaScript and CSS from a CDN (and
ReDoc's fonts from Google), so on a machine without internet they stay blank. Here the
pages are FastAPI's own (`get_swagger_ui_html`, `get_redoc_html`) pointed at copies of the
assets shipped in this package under `service/static/docs/` and mounted at
`/static/docs/`: Swagger UI from `swagger-ui-dist` 5.35.0 and ReDoc from `redoc` 2.5.4 (npm;
versions, licenses and hashes in `service/static/docs/README.md`). The app factory turns the
CDN pages off (`docs_url=None, redoc_url=None`) and calls `install_docs`.

Like `/openapi.json`, the pages need no API key: they describe the API, and Swagger UI's
"Authorize" button takes the key for the calls it makes.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, FastAPI, Request
from fastapi.openapi.docs import (
    get_redoc_html,
    get_swagger_ui_html,
    get_swagger_ui_oauth2_redirect_html,
)
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles
from starlette.routing import Match, Mount
from starlette.types import Scope

SWAGGER_UI_VERSION = "5.35.0"
REDOC_VERSION = "2.5.4"
#: Where the assets are on disk (package data) and where they are served.
STATIC_DIR = Path(__file__).resolve().parent.parent / "static" / "docs"
STATIC_PATH = "/static/docs"
DOCS_PATH = "/docs"
OAUTH2_REDIRECT_PATH = "/docs/oauth2-redirect"
REDOC_PATH = "/redoc"
SWAGGER_JS = "swagger-ui/swagger-ui-bundle.js"
SWAGGER_CSS = "swagger-ui/swagger-ui.css"
FAVICON = "swagger-ui/favicon-32x32.png"
REDOC_JS = "redoc/redoc.standalone.js"
#: The assets the pages load, relative to `STATIC_DIR`.
ASSETS = (SWAGGER_JS, SWAGGER_CSS, FAVICON, REDOC_JS)

router = APIRouter(include_in_schema=False)


def _root(request: Request) -> str:
    """The prefix the app is served under (a proxy's `root_path`), as FastAPI's pages use it."""
    return str(request.scope.get("root_path", "")).rstrip("/")


def _asset(request: Request, name: str) -> str:
    return f"{_root(request)}{STATIC_PATH}/{name}"


def _openapi_url(request: Request) -> str:
    return f"{_root(request)}{request.app.openapi_url}"


@router.get(DOCS_PATH, response_class=HTMLResponse)
def swagger_ui(request: Request) -> HTMLResponse:
    app: FastAPI = request.app
    return get_swagger_ui_html(
        openapi_url=_openapi_url(request),
        title=f"{app.title} - Swagger UI",
        swagger_js_url=_asset(request, SWAGGER_JS),
        swagger_css_url=_asset(request, SWAGGER_CSS),
        swagger_favicon_url=_asset(request, FAVICON),
        oauth2_redirect_url=f"{_root(request)}{OAUTH2_REDIRECT_PATH}",
        init_oauth=app.swagger_ui_init_oauth,
        # No "valid" badge: it is an image from validator.swagger.io.
        swagger_ui_parameters={"validatorUrl": None, **(app.swagger_ui_parameters or {})},
    )


@router.get(OAUTH2_REDIRECT_PATH, response_class=HTMLResponse)
def swagger_ui_oauth2_redirect() -> HTMLResponse:
    return get_swagger_ui_oauth2_redirect_html()


@router.get(REDOC_PATH, response_class=HTMLResponse)
def redoc(request: Request) -> HTMLResponse:
    return get_redoc_html(
        openapi_url=_openapi_url(request),
        title=f"{request.app.title} - ReDoc",
        redoc_js_url=_asset(request, REDOC_JS),
        redoc_favicon_url=_asset(request, FAVICON),
        with_google_fonts=False,  # a missing font is fine, a request that hangs offline is not
    )


class AssetMount(Mount):
    """A mount that names itself as the request's route, as FastAPI's routes do, so the HTTP
    metrics count asset requests under `/static/docs` rather than as unmatched paths."""

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        match, child_scope = super().matches(scope)
        if match is not Match.NONE:
            child_scope["route"] = self
        return match, child_scope


def mount_static(app: FastAPI) -> None:
    """Serve `STATIC_DIR` at `STATIC_PATH`; raises if the directory is missing (an install
    without its package data)."""
    assets = StaticFiles(directory=STATIC_DIR, check_dir=True)
    app.router.routes.append(AssetMount(STATIC_PATH, app=assets, name="docs-static"))


def install_docs(app: FastAPI) -> None:
    """Add `/docs`, `/docs/oauth2-redirect`, `/redoc` and their assets to `app` (built with
    `docs_url=None, redoc_url=None`)."""
    if app.openapi_url is None:
        return  # no document, nothing to show
    app.include_router(router)
    mount_static(app)
