# rbfkm: the API (`rbfkm api`, the default command) and the worker (`rbfkm worker`).
# CPU by default. For CUDA, install the CUDA build of torch (its wheels bundle the CUDA
# runtime; the host needs only the NVIDIA driver and container toolkit):
#   docker build --build-arg TORCH_INDEX=https://download.pytorch.org/whl/cu124 -t rbfkm:cuda .
# BASE_IMAGE may be any image with Python 3.10+ and pip on PATH.
ARG BASE_IMAGE=python:3.11-slim
FROM ${BASE_IMAGE}

ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu
ARG TORCH_VERSION=2.13.0

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    RBFKM_DATA_DIR=/data \
    RBFKM_HOST=0.0.0.0 \
    RBFKM_PORT=8000

WORKDIR /app

# torch first, from the chosen index (the version the tests ran with), so `pip install .`
# finds it satisfied and this heavy layer is cached across code changes.
RUN pip install --no-cache-dir --index-url "${TORCH_INDEX}" "torch==${TORCH_VERSION}"

# A C compiler: the fused Lloyd kernel (rbfkm_engine/native.py) is built on first use, for
# the CPU the container runs on, into the user's cache; without it the passes run in torch.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*

COPY pyproject.toml README.md ./
COPY rbfkm_engine ./rbfkm_engine
COPY service ./service
COPY client ./client
# `s3`: datasets read from and results written to S3-compatible stores (MinIO in compose).
# DL3013 takes the local project's extra for an unpinned package; pyproject.toml bounds it.
# hadolint ignore=DL3013
RUN pip install --no-cache-dir ".[s3]" \
    && useradd --create-home --uid 10001 rbfkm \
    && mkdir -p /data \
    && chown rbfkm /data

USER 10001
VOLUME ["/data"]
EXPOSE 8000

HEALTHCHECK --interval=10s --timeout=3s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=2)"]

CMD ["rbfkm", "api"]
