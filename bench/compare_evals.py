#!/usr/bin/python3
"""Compares one strategy between two `bench/devsets.sh` output directories.

Usage: bench/compare_evals.py A_DIR B_DIR [--strategy online] [--cases POINTS]

For every set and traffic clock that both directories hold, each case's
regret vs the oracle is averaged over the paces both evaluated ({set}-{clock}
.json is pace 1, {set}-{clock}-paceP.json pace P; bench/devsets.sh --paces).
Prints A -> B: the median, p90 and worst of those per-case means, their mean
and its change, the cases whose mean CIL is more than 1% above epoch's, and
(with two paces or more) the median and largest spread of A's regret across
paces, the noise a single pace would carry. With --cases, every case whose
mean regret moved by more than POINTS percentage points. Exit 1 when no set
is common to both, 2 on bad usage.
"""
import argparse
import glob
import json
import os
import re
import statistics
import sys


def load(directory, stem):
    """{pace: {case: case dict}} for directory/stem.json and stem-paceP.json."""
    runs = {}
    for path in glob.glob(os.path.join(directory, stem + "*.json")):
        m = re.fullmatch(re.escape(stem) + r"(?:-pace([0-9.]+))?\.json", os.path.basename(path))
        if not m:
            continue
        with open(path) as f:
            runs[m.group(1) or "1"] = {c["case"]: c for c in json.load(f)["cases"]}
    return runs


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--strategy", default="online")
    ap.add_argument("--cases", type=float, default=None, metavar="POINTS")
    args = ap.parse_args()
    for d in (args.a, args.b):
        if not os.path.isdir(d):
            ap.error(f"{d}: not a directory")
    common = 0
    for name in ("shipped", "set1", "set3", "set4", "set5"):
        for clock in ("wall", "producer"):
            a, b = load(args.a, f"{name}-{clock}"), load(args.b, f"{name}-{clock}")
            paces = sorted(set(a) & set(b), key=float)
            if not paces:
                continue
            common += 1
            cases = sorted(set.intersection(*(set(a[p]) & set(b[p]) for p in paces)))

            def regret(run, case, strategy):
                return 100 * run[case]["strategies"][strategy]["regret_vs_oracle"]

            def cil(run, case, strategy):
                return run[case]["strategies"][strategy]["cil"]

            def figures(runs):
                means = {c: statistics.fmean(regret(runs[p], c, args.strategy) for p in paces) for c in cases}
                r = sorted(means.values())
                worse = sum(
                    1 for c in cases
                    if statistics.fmean(cil(runs[p], c, args.strategy) for p in paces)
                    > 1.01 * statistics.fmean(cil(runs[p], c, "epoch") for p in paces))
                return means, r, worse

            ma, ra, wa = figures(a)
            mb, rb, wb = figures(b)
            p90 = lambda r: r[int(0.9 * (len(r) - 1))]
            line = (f"{name:8s} {clock:8s} x{len(paces)} paces  median {statistics.median(ra):6.2f} -> "
                    f"{statistics.median(rb):6.2f}  p90 {p90(ra):6.1f} -> {p90(rb):6.1f}  worst {ra[-1]:6.1f} -> "
                    f"{rb[-1]:6.1f}  mean {statistics.fmean(ra):6.2f} -> {statistics.fmean(rb):6.2f} "
                    f"({statistics.fmean(rb) - statistics.fmean(ra):+.2f})  >1% worse than epoch {wa} -> {wb}")
            if len(paces) >= 2:
                spread = sorted(max(regret(a[p], c, args.strategy) for p in paces)
                                - min(regret(a[p], c, args.strategy) for p in paces) for c in cases)
                line += f"  (A across paces: median spread {statistics.median(spread):.2f}, largest {spread[-1]:.1f})"
            print(line)
            if args.cases is not None:
                for c in cases:
                    if abs(mb[c] - ma[c]) > args.cases:
                        print(f"    {c:44s} {ma[c]:8.2f} -> {mb[c]:8.2f} ({mb[c] - ma[c]:+.1f})")
    if common == 0:
        print(f"compare_evals.py: no set and clock evaluated in both {args.a} and {args.b}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
