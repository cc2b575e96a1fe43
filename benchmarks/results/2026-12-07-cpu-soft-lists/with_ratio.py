"""Run a benchmark script with ``temperature.SIGMA_MIN_RATIO`` from ``$RATIO`` (scratch: the
floor's ratio to the critical temperature, for the comparisons of this folder).

    cd /tmp && RATIO=1e-6 PYTHONPATH=<tree> python <this file> <script> [args...]
"""

from __future__ import annotations

import os
import runpy
import sys

from rbfkm_engine import temperature

if os.environ.get("RATIO"):
    temperature.SIGMA_MIN_RATIO = float(os.environ["RATIO"])
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
