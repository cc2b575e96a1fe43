"""The web page, `/ui/`: a tenant's datasets and jobs, uploads, a job form, live progress
and a fit's result drawn as charts (docs/ui.md).

The page is static files shipped in this package (`service/static/ui/`: HTML, CSS, plain
ES modules and the vendored Vega-Lite, see its `vendor/README.md`), mounted at `/ui/`; it
talks to the API like any other client, with the key the user enters kept in the browser
tab's `sessionStorage`. Like `/docs`, the files themselves need no key: they hold no data.
`GET /` sends a browser to the page.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import RedirectResponse
from fastapi.staticfiles import StaticFiles

from service.routes.docs import AssetMount

#: Where the page's files are on disk (package data) and where they are served.
STATIC_DIR = Path(__file__).resolve().parent.parent / "static" / "ui"
UI_PATH = "/ui"

router = APIRouter(include_in_schema=False)


@router.get("/")
def home(request: Request) -> RedirectResponse:
    """The page, under the prefix a proxy serves the app at (its `root_path`)."""
    root = str(request.scope.get("root_path", "")).rstrip("/")
    return RedirectResponse(f"{root}{UI_PATH}/", status_code=307)


def install_ui(app: FastAPI) -> None:
    """Add `GET /` and the page's files at `/ui/` to `app`; raises if the files are missing
    (an install without its package data)."""
    app.include_router(router)
    page = StaticFiles(directory=STATIC_DIR, html=True, check_dir=True)
    app.router.routes.append(AssetMount(UI_PATH, app=page, name="ui"))
