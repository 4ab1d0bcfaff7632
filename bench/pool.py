#!/usr/bin/python3
"""Pools `viper evaluate` reports and compares two builds on them.

Usage: bench/pool.py A [B] [--strategy online|val-oracle|...] [--by kind,tier,...] [--cases POINTS]
                     [--clock wall|producer] [--judge table|diagonal] [--blind] [--json FILE]

A, B: a directory of viper.evaluate/1 reports (every *.json in it, as
bench/pool.sh, bench/devsets.sh or bench/heldout.sh write them) or one report.
A case is a report's name (its file name less .json) and the case's own name
(log/tier/warm-up/window), so two directories compare case by case.

Prints, for the strategy (default online): the number of cases, the mean,
median, p90 and worst regret against the oracle (in %), how many are over 10%,
and how many are more than 1% worse than epoch (their CIL above 1.01 x
epoch's; never where epoch served a diverged model), the issue's three
goals. --strategy val-oracle pools the val-oracle instead (the exact optimum
on the producer's own val_loss, judged on the truth: what the val/test
samples' noise alone costs); a case whose report has none (reports before
the fortieth session's build on the diagonal) is left out and counted on
stderr. A case where the strategy itself served a diverged model (no CIL)
is left out, with a line on stderr. With B: A's and B's figures on the cases
both hold, how many cases moved, better and worse, with the two-sided sign
test's p-value for that split (each case as likely to move either way), and
the mean of B's regret less A's over the cases with its 95% paired bootstrap
interval (2000 resamples of the cases, a fixed seed): an interval that
holds zero, or a large p, is a change the pool cannot tell from its
cases' chance moves (a recurring run's schedule moves by tens of points
with a small change to its decisions); --cases lists each
case that moved by more than POINTS percentage points. --by splits the
figures by kind (the log's name: h-recur60 -> recur, b-swaps450 -> swaps,
recur-sgd-h256 -> recur), traffic (drifting or calm, from the case's
staleness table: its traffic_change, or for reports before the
forty-first session's build its after-drift bound; "no table" on the
diagonal), tier, window, clock, judge or report; two or more joined by +
(kind+tier) split by each combination that has cases ("kind+tier
rotate/host"). --clock and
--judge keep only the cases under that traffic clock or judge (staleness
table or diagonal). --blind (online only) adds, under each line, where
online's regret lies on the drifting cases that carry an after-drift bound
(`viper evaluate`'s after_drift_bound: the exact optimum made to begin with
the checkpoints online took before the traffic's first change): the blind
checkpoints' cost (the bound's regret against the oracle, which no causal
planner can tell from a calm run's choice) and what online lost after the
change (its regret against the bound), mean and median in points. The two
do not add exactly: they are ratios to different CILs. --json writes the
same figures as JSON.
Exit status: 0; 1 when there is no case (or none in common); 2 on bad usage.
"""
import argparse
import glob
import json
import math
import os
import random
import re
import statistics
import sys

GROUPS = ("kind", "traffic", "tier", "window", "clock", "judge", "report")


def kind_of(log):
    """The drift kind a log's file name says: its first word, less a one-letter set prefix."""
    name = os.path.basename(log)
    name = re.sub(r"\.csv(\.gz)?$", "", name)
    name = re.sub(r"^[a-z]-", "", name)
    m = re.match(r"[a-z]+", name)
    return m.group(0) if m else name


def traffic_of(c, case_judge):
    """drifting or calm, from the table (viper evaluate's traffic_change), or no table."""
    if case_judge == "diagonal":
        return "no table"
    if "traffic_change" in c:
        return "calm" if c["traffic_change"] is None else "drifting"
    return "drifting" if "after_drift_bound" in c else "calm"


def split_of(bound):
    """{blind, after} in points from a case's after_drift_bound, or Nones."""
    if not isinstance(bound, dict) or bound.get("regret_vs_oracle") is None \
            or bound.get("online_regret_vs_bound") is None:
        return {"blind": None, "after": None}
    return {"blind": 100.0 * bound["regret_vs_oracle"], "after": 100.0 * bound["online_regret_vs_bound"]}


def load(path, strategy, clock, judge):
    """{key: case figures} for one directory of reports, or one report."""
    files = sorted(glob.glob(os.path.join(path, "*.json"))) if os.path.isdir(path) else [path]
    cases = {}
    for f in files:
        try:
            with open(f) as fh:
                report = json.load(fh)
        except (OSError, ValueError) as e:
            raise SystemExit(f"pool.py: {f}: not a readable JSON report ({e})")
        if not isinstance(report, dict) or "cases" not in report:
            continue  # not a viper.evaluate report (e.g. a heldout.sh train.json)
        name = os.path.basename(f)[:-5] if f.endswith(".json") else os.path.basename(f)
        without = 0  # cases without a val-oracle (--strategy val-oracle)
        for c in report["cases"]:
            st = c.get("strategies", {})
            if (strategy != "val-oracle" and strategy not in st) or "epoch" not in st:
                raise SystemExit(f"pool.py: {f}: case {c.get('case')} has no '{strategy}' or no 'epoch'")
            case_judge = "diagonal" if c.get("judge", "diagonal") == "diagonal" else "table"
            if clock and c.get("traffic_clock") != clock:
                continue
            if judge and case_judge != judge:
                continue
            if strategy == "val-oracle" and "val_oracle" not in c:
                without += 1
                continue
            mine, epoch = (c["val_oracle"] if strategy == "val-oracle" else st[strategy]), st["epoch"]
            if mine.get("regret_vs_oracle") is None or mine.get("cil") is None:
                # It served a diverged model (CIL infinite): no regret to pool.
                print(f"pool.py: {f}: {c['case']}: {strategy} served a diverged model; left out", file=sys.stderr)
                continue
            cases[f"{name}:{c['case']}"] = {
                "regret": 100.0 * mine["regret_vs_oracle"],
                # Epoch's CIL is null where it served a diverged model: never better.
                "worse_than_epoch": epoch.get("cil") is not None and mine["cil"] > 1.01 * epoch["cil"],
                "kind": kind_of(c.get("log", c["case"].split("/")[0])),
                "traffic": traffic_of(c, case_judge),
                "tier": c.get("tier", "?"),
                "window": c.get("window", "?"),
                "clock": c.get("traffic_clock", "?"),
                "judge": case_judge,
                "report": name,
                # The after-drift bound's split (--blind): None without one.
                **split_of(c.get("after_drift_bound") if strategy == "online" else None),
            }
        if without:
            print(f"pool.py: {f}: {without} cases without a val-oracle; left out", file=sys.stderr)
    return cases


def figures(cases, keys):
    r = sorted(cases[k]["regret"] for k in keys)
    if not r:
        return None
    return {
        "cases": len(r),
        "mean": statistics.fmean(r),
        "median": statistics.median(r),
        "p90": r[int(0.9 * (len(r) - 1))],
        "worst": r[-1],
        "over_10": sum(1 for x in r if x > 10.0),
        "worse_than_epoch": sum(1 for k in keys if cases[k]["worse_than_epoch"]),
    }


def split_figures(cases, keys):
    """The blind / after split over the cases of `keys` that have a bound, or None."""
    ks = [k for k in keys if cases[k]["blind"] is not None]
    if not ks:
        return None
    blind = [cases[k]["blind"] for k in ks]
    after = [cases[k]["after"] for k in ks]
    return {"cases": len(ks), "blind_mean": statistics.fmean(blind), "blind_median": statistics.median(blind),
            "after_mean": statistics.fmean(after), "after_median": statistics.median(after)}


def split_line(f):
    if f is None:
        return "no case with an after-drift bound"
    return (f"{f['cases']:4d} with a bound: blind checkpoints mean {f['blind_mean']:6.2f} median "
            f"{f['blind_median']:5.2f}; after the change mean {f['after_mean']:6.2f} median {f['after_median']:5.2f}")


def sign_test(better, worse):
    """Two-sided exact sign test: the chance of a split at least this uneven
    among the cases that moved if each moved either way with probability 1/2."""
    n, k = better + worse, min(better, worse)
    if n == 0:
        return 1.0
    return min(1.0, 2 * sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n)


def paired_interval(diffs, resamples=2000, seed=1):
    """The mean of the paired differences and its 95% percentile bootstrap
    interval (resampling cases; a fixed seed, so a comparison reads the same
    every time)."""
    n = len(diffs)
    mean = statistics.fmean(diffs)
    if n < 2:
        return mean, mean, mean
    rng = random.Random(seed)
    means = sorted(statistics.fmean(rng.choices(diffs, k=n)) for _ in range(resamples))
    return mean, means[int(0.025 * resamples)], means[int(0.975 * resamples) - 1]


def line(f):
    return (f"{f['cases']:4d} cases  mean {f['mean']:7.2f}  median {f['median']:6.2f}  p90 {f['p90']:6.1f}  "
            f"worst {f['worst']:6.1f}  over 10% {f['over_10']:3d}  worse than epoch {f['worse_than_epoch']:3d}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("a")
    ap.add_argument("b", nargs="?")
    ap.add_argument("--strategy", default="online")
    ap.add_argument("--by", default="", help="comma-separated: " + ",".join(GROUPS) +
                    "; two or more joined by + split by their combinations (kind+tier)")
    ap.add_argument("--cases", type=float, default=None, metavar="POINTS")
    ap.add_argument("--clock", choices=("wall", "producer"))
    ap.add_argument("--judge", choices=("table", "diagonal"))
    ap.add_argument("--blind", action="store_true")
    ap.add_argument("--json", metavar="FILE")
    args = ap.parse_args()
    if args.blind and args.strategy != "online":
        ap.error("--blind splits online's regret (the after-drift bound is made on online's checkpoints); "
                 f"not --strategy {args.strategy}")
    by = [g for g in args.by.split(",") if g]
    for g in by:
        for part in g.split("+"):
            if part not in GROUPS:
                ap.error(f"--by {g}: expected one of {', '.join(GROUPS)}, or two or more joined by + (kind+tier)")
    for p in (args.a, args.b):
        if p is not None and not os.path.exists(p):
            ap.error(f"{p}: no such directory or file")
    a = load(args.a, args.strategy, args.clock, args.judge)
    b = load(args.b, args.strategy, args.clock, args.judge) if args.b else None
    keys = sorted(set(a) & set(b)) if b is not None else sorted(a)
    if not keys:
        print(f"pool.py: no case{' in common' if b is not None else ''} "
              f"({args.a}{', ' + args.b if args.b else ''})", file=sys.stderr)
        return 1
    out = {"strategy": args.strategy, "a": args.a, "b": args.b, "groups": []}

    def report(label, ks):
        fa = figures(a, ks)
        entry = {"group": label, "a": fa}
        if b is None:
            print(f"{label:28s} {line(fa)}")
            if args.blind:
                entry["a_split"] = split_figures(a, ks)
                print(f"{'':28s}   split {split_line(entry['a_split'])}")
        else:
            fb = figures(b, ks)
            moved = [k for k in ks if abs(b[k]["regret"] - a[k]["regret"]) > 1e-6]
            better = sum(1 for k in moved if b[k]["regret"] < a[k]["regret"])
            worse = len(moved) - better
            p = sign_test(better, worse)
            mean, lo, hi = paired_interval([b[k]["regret"] - a[k]["regret"] for k in ks])
            entry.update(b=fb, moved=len(moved), better=better, worse=worse, sign_test_p=p,
                         mean_difference=mean, difference_interval_95=[lo, hi])
            print(f"{label:28s} A {line(fa)}")
            print(f"{'':28s} B {line(fb)}")
            print(f"{'':28s}   moved {len(moved)}: {better} better, {worse} worse (sign test p {p:.3g}); "
                  f"B - A {mean:+.2f} points, 95% interval {lo:+.2f} .. {hi:+.2f}")
            if args.blind:
                entry["a_split"], entry["b_split"] = split_figures(a, ks), split_figures(b, ks)
                print(f"{'':28s} A split {split_line(entry['a_split'])}")
                print(f"{'':28s} B split {split_line(entry['b_split'])}")
        out["groups"].append(entry)

    report("all", keys)
    for g in by:
        parts = g.split("+")
        values = {k: "/".join(str(a[k][part]) for part in parts) for k in keys}
        for value in sorted(set(values.values())):
            report(f"{g} {value}", [k for k in keys if values[k] == value])
    if b is not None and args.cases is not None:
        moved = sorted((k for k in keys if abs(b[k]["regret"] - a[k]["regret"]) > args.cases),
                       key=lambda k: b[k]["regret"] - a[k]["regret"])
        print(f"cases that moved by more than {args.cases} points:")
        for k in moved:
            print(f"  {k:58s} {a[k]['regret']:8.2f} -> {b[k]['regret']:8.2f} ({b[k]['regret'] - a[k]['regret']:+.1f})")
        out["moved_cases"] = [{"case": k, "a": a[k]["regret"], "b": b[k]["regret"]} for k in moved]
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
