"""Summarise Nsight Compute warp-stall samples per SASS instruction (CPU).

Reads the CSV that ``ncu --section WarpStateStats --section SourceCounters --page source
--print-source sass --csv`` writes (scripts/device_profile_delta.sh with ``SOURCE=1``) and
prints the instructions holding the most samples, each with its share of all samples and the
instructions just before it (a stall is charged to the instruction that waits, whose operand
usually comes from one of those):

    python benchmarks/ncu_stalls.py benchmarks/results/ncu_src_kda_256_bf16.csv --top 20
"""

from __future__ import annotations

import argparse
import csv
import gzip
import io
from dataclasses import dataclass
from typing import List, Sequence

SAMPLES_COLUMN = "Warp Stall Sampling (All Samples)"


@dataclass(frozen=True)
class Instruction:
    index: int  # position in the listing
    address: str
    source: str  # the SASS text
    samples: int


def parse_source_csv(text: str) -> List[Instruction]:
    """The instructions of an ncu ``--page source --csv`` listing, in order. Lines before the
    header (the profiler's own ``==PROF==`` lines, the program's output) are skipped. Raises
    ValueError when no header with ``Address``, ``Source`` and :data:`SAMPLES_COLUMN` is found."""
    lines = text.splitlines()
    heads = [n for n, line in enumerate(lines) if line.startswith('"Address"') or line.startswith("Address,")]
    if not heads:
        raise ValueError("ncu_stalls: no header row starting with 'Address' in the listing")
    start = heads[0]
    rows = list(csv.reader(io.StringIO("\n".join(lines[start:]))))
    header = rows[0]
    for name in ("Address", "Source", SAMPLES_COLUMN):
        if name not in header:
            raise ValueError(f"ncu_stalls: column {name!r} missing; got {header}")
    a, s, n = header.index("Address"), header.index("Source"), header.index(SAMPLES_COLUMN)
    out = []
    for row in rows[1:]:
        if len(row) <= max(a, s, n) or not row[a].strip():
            continue
        count = row[n].replace(",", "").strip()
        out.append(Instruction(len(out), row[a].strip(), row[s].strip(), int(float(count)) if count else 0))
    return out


def top_stalls(instructions: Sequence[Instruction], top: int) -> List[Instruction]:
    """The ``top`` instructions by samples, most first (ties in listing order)."""
    return sorted(instructions, key=lambda i: (-i.samples, i.index))[:top]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv", help="an ncu --page source --csv listing (gzipped if it ends in .gz)")
    ap.add_argument("--top", type=int, default=20)
    ap.add_argument("--context", type=int, default=2, help="instructions shown before each")
    a = ap.parse_args(argv)
    opener = gzip.open if a.csv.endswith(".gz") else open
    with opener(a.csv, "rt", encoding="utf-8", errors="replace") as f:
        instructions = parse_source_csv(f.read())
    total = sum(i.samples for i in instructions) or 1
    print(f"{len(instructions)} instructions, {total} samples")
    for ins in top_stalls(instructions, a.top):
        print(f"\n{ins.samples:7d} {100.0 * ins.samples / total:5.1f}%  {ins.address}  {ins.source}")
        for prev in instructions[max(0, ins.index - a.context) : ins.index]:
            print(f"{'':15}{prev.address}  {prev.source}")


if __name__ == "__main__":
    main()
