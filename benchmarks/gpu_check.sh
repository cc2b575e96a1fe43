#!/usr/bin/env bash
# One-call GPU check for a lent CUDA machine (fresh, repo copied, no venv carried):
#   1. find a python whose torch sees CUDA (the image's python3), or make a venv and
#      pip install -e '.[test,bench]' (needs a registry: the H200 image has none);
#   2. add the pure-python packages that image lacks (entmax, fast-pytorch-kmeans, redis)
#      from wheels carried in .whl/ (fetch them here first: `bash benchmarks/gpu_check.sh
#      --fetch-wheels`), else from a registry if one answers, else go on without them;
#   3. pytest -m gpu on the engine's tests (gating), then on the whole suite (informational);
#   4. benchmarks/gpu_compare.py with a time budget.
# Everything is written to $OUT (default ./gpu-check-out): at most 7 files, no sub-folders.
# Each step has its own `timeout`; the whole script ends within about 7.5 minutes.
#
# On the device tool:  run(command="bash benchmarks/gpu_check.sh", carry=[".whl"], timeout_s=540)
set -u
cd "$(dirname "$0")/.." || exit 2
REPO=$PWD
WHEELS="$REPO/.whl"

if [ "${1:-}" = "--fetch-wheels" ]; then
    # Run on a machine with a registry. Pure-python wheels only; torch comes with the image.
    mkdir -p "$WHEELS" .git/info
    grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >>.git/info/exclude
    exec python3 -m pip download --no-deps --only-binary=:all: -d "$WHEELS" \
        "entmax==1.3" "fast-pytorch-kmeans==0.2.2" "redis>=5"
fi

OUT="${OUT:-$REPO/gpu-check-out}"
mkdir -p "$OUT"
LOG="$OUT/gpu_check.log"
START=$(date +%s)
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
log() { echo "[gpu_check +$(($(date +%s) - START))s] $*" | tee -a "$LOG"; }
left() { echo $((450 - ($(date +%s) - START))); } # seconds left of a 7.5-minute plan
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

# ---------------------------------------------------------------- 2. missing packages
SITE=/tmp/rbfkm-site
mkdir -p "$SITE"
export PYTHONPATH="$REPO:$SITE${PYTHONPATH:+:$PYTHONPATH}"
missing() {
    "$PY" - <<'EOF'
import importlib.util
need = {"entmax": "entmax", "fast_pytorch_kmeans": "fast-pytorch-kmeans", "redis": "redis",
        "sklearn": "scikit-learn", "scipy": "scipy", "hypothesis": "hypothesis",
        "pytest": "pytest", "pytest_timeout": "pytest-timeout", "psutil": "psutil",
        "threadpoolctl": "threadpoolctl"}
print(" ".join(pkg for mod, pkg in need.items() if importlib.util.find_spec(mod) is None))
EOF
}
MISSING=$(missing)
if [ -n "$MISSING" ] && ls "$WHEELS"/*.whl >/dev/null 2>&1; then
    log "missing: $MISSING; installing the carried wheels into $SITE"
    timeout 60 "$PY" -m pip install -q --no-index --no-deps --no-compile --upgrade \
        --target "$SITE" "$WHEELS"/*.whl >>"$LOG" 2>&1 || log "wheel install failed"
    MISSING=$(missing)
fi
if [ -n "$MISSING" ]; then
    log "still missing: $MISSING; trying a registry (no dependencies, 60 s)"
    # shellcheck disable=SC2086
    timeout 60 "$PY" -m pip install -q --no-deps --target "$SITE" $MISSING >>"$LOG" 2>&1 ||
        log "no registry reachable; going on without: $MISSING"
    MISSING=$(missing)
fi
{
    echo "python: $PY"
    "$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda,
        "available", torch.cuda.is_available())' 2>&1
    echo "still missing: ${MISSING:-nothing}"
    nvidia-smi 2>&1 | head -20
    "$PY" -m pip list 2>/dev/null | grep -i -E \
        '^(torch|numpy|scipy|scikit-learn|entmax|fast-pytorch-kmeans|faiss|redis|hypothesis|pytest) '
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
[ "$T" -gt 130 ] && T=130
run_step pytest_engine_gpu "$T" "$PY" -m pytest -m gpu -p no:cacheprovider -q \
    tests/rbfkm_engine || STATUS=1
T=$(($(left) - 260))
[ "$T" -gt 45 ] && T=45
run_step pytest_all_gpu "$T" "$PY" -m pytest -m gpu -p no:cacheprovider -q \
    --continue-on-collection-errors tests || true # informational: service deps may be absent

# ---------------------------------------------------------------- 4. GPU benchmark
T=$(($(left) - 10))
[ "$T" -gt 300 ] && T=300
BUDGET=$((T - 60)) # gpu_compare stops starting new parts after this many seconds
[ "$BUDGET" -lt 30 ] && BUDGET=30
run_step gpu_compare "$T" "$PY" benchmarks/gpu_compare.py --time-budget "$BUDGET" \
    --json "$OUT/gpu_compare.json" || STATUS=1

log "done in $(($(date +%s) - START))s, status $STATUS; files: $(ls "$OUT" | tr '\n' ' ')"
exit $STATUS
