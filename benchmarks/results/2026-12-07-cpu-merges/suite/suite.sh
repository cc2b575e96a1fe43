#!/bin/bash
# Every fit the changes were checked on, by the engine of the tree given, into a folder:
#   bash suite.sh <tree> <out>    (two trees side by side; then python ../../2026-12-07-cpu-soft-lists/pairs.py)
set -e
HERE=$(cd "$(dirname "$0")/.." && pwd)
RESULTS=$(dirname "$HERE")
TREE=$(cd "$1" && pwd); mkdir -p "$2"; OUT=$(cd "$2" && pwd)
cd /tmp
export PYTHONPATH=$TREE
python "$RESULTS/2026-12-07-cpu-halves-kernel/fits.py" iris5,iris12,wine5,wine12,cancer5,cancer12,diabetes5,diabetes12 13 > "$OUT/tables.jsonl"
python "$RESULTS/2026-12-07-cpu-halves-kernel/fits.py" digits,colours,patches,unitpatches,colours256,patches1024,colours4096 3 > "$OUT/real.jsonl"
python "$RESULTS/2026-12-07-cpu-soft-lists/large_k_shapes.py" > "$OUT/largek.jsonl"
python "$RESULTS/2026-12-07-cpu-soft-lists/large_k_shapes.py" --later > "$OUT/largek-later.jsonl"
python "$RESULTS/2026-12-07-cpu-search-budget/heldout/heldout.py" engine > "$OUT/heldout.jsonl"
python "$RESULTS/2026-12-07-cpu-search-budget/heldout/heldout.py" engine --new > "$OUT/heldout-new.jsonl"
