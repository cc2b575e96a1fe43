"""Engine over the fastest peer per run, from a file of compare.py speed tables.

python table.py speed_settled.txt
"""

from __future__ import annotations

import re
import sys
from pathlib import Path


def main(path: str) -> None:
    rows: dict[str, dict[str, dict[str, float]]] = {}
    side = name = None
    for line in Path(path).read_text().splitlines():
        if m := re.match(r"== (old|new) round (\d)", line):
            side = m.group(1) + m.group(2)
        elif m := re.match(r"=== (\S+)", line):
            name = m.group(1)
        elif (m := re.match(r"(rbfkm-hard|sklearn-n1|faiss)\s+\d+\s+\S+\s+(\S+)", line)) and side:
            rows.setdefault(name, {}).setdefault(side, {})[m.group(1)] = float(m.group(2))
    for name, sides in rows.items():
        cells = []
        for s in ("old1", "new1", "old2", "new2"):
            r = sides.get(s)
            if r and "sklearn-n1" in r and "faiss" in r:
                peer = min(r["sklearn-n1"], r["faiss"])
                cells.append(f"{s} {r['rbfkm-hard']:.2f}/{peer:.2f}={r['rbfkm-hard'] / peer:.2f}")
        print(f"{name:34s} " + "  ".join(cells))


if __name__ == "__main__":
    main(sys.argv[1])
