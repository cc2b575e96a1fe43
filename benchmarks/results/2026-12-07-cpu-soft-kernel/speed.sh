#!/bin/bash
# Default entmax15 fits, ab840be (before) and HEAD (after), alternately.
R=/work/main/benchmarks/results/2026-12-07-cpu-soft-kernel
PY=/work/main/.venv/bin/python
cd $R
uptime > load.txt
for round in 1 2; do
  for tree in before after; do
    src=/work/main; [ $tree = before ] && src=/tmp/mid
    mkdir -p $tree
    $PY $src/benchmarks/compare.py --only colours,colours256,patches,unitpatches,patches1024,hard,digits,rbfkm-entmax15 --seeds 3 --iters 1 --repeats 1 --memory none --json $tree/real-$round.json > $tree/real-$round.txt 2>&1
    $PY $src/benchmarks/compare.py --only colours4096,rbfkm-entmax15 --seeds 1 --iters 1 --repeats 1 --memory none --json $tree/colours4096-$round.json > $tree/colours4096-$round.txt 2>&1
  done
done
uptime >> load.txt
