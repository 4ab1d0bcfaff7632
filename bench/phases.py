#!/usr/bin/python3
"""Where a strategy's regret lies: its excess over the oracle, stay by stay.

Usage: bench/phases.py [--viper PATH] [--tiers gpu,host,pfs] [--windows train,req]
                       [--clock wall|producer] [--strategy online] [--json FILE] LOG...

Each LOG needs its staleness table beside it (NAME.staleness.csv.gz). For
each tier and window (train: while training; req: as many requests as that
window serves without checkpoints, as `viper evaluate` takes them) it runs
`viper simulate --warmup 20% --staleness auto` twice, tracing every request
of the strategy and of the oracle (--trace-strategy, --requests-csv), and
sums each one's loss by the traffic's position. The table says where the
traffic switched: between two of its traffic points where the latest model
at the first loses more than half again at the second (a step of the
traffic; the model is the same, so training has no part in it). A gradual
drift shows no switch.

The excess (the strategy's loss minus the oracle's, in % of the oracle's
CIL) is split into phases: before the first switch; the stay after the
first switch (from a quarter of a measurement grid step before it, as the
traffic blends there); after the second (where the traffic recurs, the
first return); after any later one; and the run's end (requests at the
traffic's last iteration N, where under the wall clock a producer the
traffic leads serves its last stretch, often a third of all requests).
Prints one line per case and the mean over cases, then the mean by tier
and by window where the cases span more than one; --json writes them.

Under each case, how far from each switch the strategy served the wrong
domain's model, in traffic iterations, averaged over the switches of each
phase (first, return1, later): "late" counts the traffic after the switch
(up to halfway to the next one, or the run's end) and "early" the traffic
before it (back to halfway to the one before) where the strategy's loss
exceeds the oracle's by more than half the switch's step (the latest
model's rise across it in the table). A return published ahead of its
switch shows as early or late by how far it missed; a reactive re-publish
as late by its measurement gap and delivery.
Exit status: 0; 1 when a simulation failed or a log has no table; 2 on bad usage.
"""
import argparse
import collections
import csv
import gzip
import json
import os
import statistics
import subprocess
import sys
import tempfile

PHASES = ("before", "first", "return1", "later", "end")


def switches(table):
    """Traffic iterations where the traffic switched, from a staleness table."""
    loss = collections.defaultdict(dict)
    with gzip.open(table, "rt") as f:
        for row in csv.DictReader(f):
            loss[int(row["traffic_iteration"])][int(row["version_iteration"])] = float(row["test_loss"])
    points = sorted(loss)
    found = []
    for a, b in zip(points, points[1:]):
        common = [v for v in loss[a] if v in loss[b]]
        if not common:
            continue
        v = max(common)  # the latest model at a, on the traffic at a and at b
        if loss[a][v] > 0 and loss[b][v] > 1.5 * loss[a][v]:
            found.append((a, b, loss[b][v] - loss[a][v]))
    grid = statistics.median(b - a for a, b in zip(points, points[1:])) if len(points) > 1 else 0
    return [0.5 * (a + b) for a, b, _ in found], grid, [step for _, _, step in found]


def by_traffic(rows):
    """Mean loss at each whole traffic iteration of a request trace."""
    total, count = collections.defaultdict(float), collections.defaultdict(int)
    for t, l in rows:
        total[int(t)] += l
        count[int(t)] += 1
    return {t: total[t] / count[t] for t in total}


def landing(mine, best, sw, steps, end):
    """Per phase, the mean over its switches of the traffic iterations
    before ("early") and after ("late") each switch where `mine` pays more
    than half the switch's step over `best`: the wrong domain's model."""
    a, b = by_traffic(mine), by_traffic(best)
    common = sorted(set(a) & set(b))
    # Traffic iterations per request bucket: the mean spacing (a median
    # would read requests 1.25 iterations apart as one apart).
    spacing = (common[-1] - common[0]) / (len(common) - 1) if len(common) > 1 else 1
    sums = {p: [0.0, 0.0, 0] for p in PHASES[1:4]}
    for k, (s, step) in enumerate(zip(sw, steps)):
        lo = 0.5 * (sw[k - 1] + s) if k > 0 else 0.0
        hi = 0.5 * (s + sw[k + 1]) if k + 1 < len(sw) else end
        wrong = [t for t in common if lo <= t < hi and a[t] - b[t] > 0.5 * step]
        phase = PHASES[1 + min(k, 2)]
        sums[phase][0] += spacing * sum(1 for t in wrong if t < s)
        sums[phase][1] += spacing * sum(1 for t in wrong if t >= s)
        sums[phase][2] += 1
    return {p: {"early": e / n, "late": l / n, "switches": n} for p, (e, l, n) in sums.items() if n}


def trace(viper, log, tier, clock, extra, strategy, traced, tmp):
    out = os.path.join(tmp, "requests.csv")
    cmd = [viper, "simulate", "--log", log, "--staleness", "auto", "--warmup", "20%", "--transport", tier,
           "--traffic-clock", clock, "--strategies", f"{strategy},oracle", "--trace-strategy", traced,
           "--requests-csv", out, "--json", os.path.join(tmp, "run.json"), "--quiet"] + extra
    r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {r.returncode}: {r.stderr.strip()[-400:]}")
    with open(out) as f:
        rows = [(float(x["traffic_iteration"]), float(x["loss"])) for x in csv.DictReader(f)]
    with open(os.path.join(tmp, "run.json")) as f:
        return rows, json.load(f)


def phase_of(t, sw, grid, end):
    if t >= end - 0.5:
        return "end"
    k = sum(1 for s in sw if t >= s - 0.25 * grid)
    return ("before", "first", "return1")[k] if k < 3 else "later"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("logs", nargs="+", metavar="LOG")
    ap.add_argument("--viper", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build",
                                                    "apps", "viper"))
    ap.add_argument("--tiers", default="gpu,host,pfs")
    ap.add_argument("--windows", default="train")
    ap.add_argument("--clock", default="wall", choices=("wall", "producer"))
    ap.add_argument("--strategy", default="online")
    ap.add_argument("--json", metavar="FILE")
    args = ap.parse_args()
    tiers = [t for t in args.tiers.split(",") if t]
    windows = [w for w in args.windows.split(",") if w]
    for t in tiers:
        if t not in ("gpu", "host", "pfs"):
            ap.error(f"--tiers {t}: expected gpu, host or pfs")
    for w in windows:
        if w not in ("train", "req"):
            ap.error(f"--windows {w}: expected train or req")
    if not os.access(args.viper, os.X_OK):
        ap.error(f"--viper {args.viper}: not an executable")
    cases = []
    status = 0
    with tempfile.TemporaryDirectory() as tmp:
        for log in args.logs:
            table = log[:-len(".csv.gz")] + ".staleness.csv.gz" if log.endswith(".csv.gz") else None
            if not table or not os.path.exists(table):
                print(f"phases.py: {log}: no staleness table beside it (NAME.staleness.csv.gz)", file=sys.stderr)
                status = 1
                continue
            sw, grid, steps = switches(table)
            name = os.path.basename(log)[:-len(".csv.gz")]
            for tier in tiers:
                run_json = None  # the while-training run's report, which sizes the request window
                for window in windows:
                    try:
                        extra = []
                        if window == "req":
                            j = run_json or trace(args.viper, log, tier, args.clock, [], args.strategy, "oracle", tmp)[1]
                            n = (j["total_iterations"] - j["warmup_iterations"]) * j["seconds_per_iteration"]
                            extra = ["--requests", str(max(1, int(n / j["requests"]["interval_s"])))]
                        mine, j = trace(args.viper, log, tier, args.clock, extra, args.strategy, args.strategy, tmp)
                        best, _ = trace(args.viper, log, tier, args.clock, extra, args.strategy, "oracle", tmp)
                        if window == "train":
                            run_json = j
                    except (RuntimeError, OSError, KeyError, ValueError) as e:
                        print(f"phases.py: {name} {tier} {window}: {e}", file=sys.stderr)
                        status = 1
                        continue
                    end = j["total_iterations"]
                    excess = dict.fromkeys(PHASES, 0.0)
                    for t, l in mine:
                        excess[phase_of(t, sw, grid, end)] += l
                    for t, l in best:
                        excess[phase_of(t, sw, grid, end)] -= l
                    oracle_cil = sum(l for _, l in best)
                    share = {p: 100.0 * excess[p] / oracle_cil if oracle_cil > 0 else 0.0 for p in PHASES}
                    case = {"case": f"{name}/{tier}/{window}", "switches": sw, "excess_percent": share,
                            "regret_percent": sum(share.values()),
                            "wrong_model_iterations": landing(mine, best, sw, steps, end)}
                    cases.append(case)
                    print(f"{case['case']:34s} regret {case['regret_percent']:7.1f}%  " +
                          "  ".join(f"{p} {share[p]:6.1f}" for p in PHASES) +
                          f"  switches {','.join('%.0f' % s for s in sw) or 'none'}", flush=True)
                    if case["wrong_model_iterations"]:
                        print(f"{'':34s} wrong model  " + "  ".join(
                            f"{p}: early {w['early']:.0f} late {w['late']:.0f}"
                            for p, w in case["wrong_model_iterations"].items()), flush=True)
    if cases:
        def mean_line(label, group):
            mean = {p: statistics.fmean(c["excess_percent"][p] for c in group) for p in PHASES}
            print(f"{label:34s} regret {sum(mean.values()):7.1f}%  " + "  ".join(f"{p} {mean[p]:6.1f}" for p in PHASES))
            return mean
        mean = mean_line("mean over %d cases" % len(cases), cases)
        # The wrong model's traffic iterations per switch, over every switch of
        # each phase in every case (not a mean of the cases' means).
        wrong = {}
        for p in PHASES[1:4]:
            ws = [c["wrong_model_iterations"][p] for c in cases if p in c["wrong_model_iterations"]]
            n = sum(w["switches"] for w in ws)
            if n:
                wrong[p] = {k: sum(w[k] * w["switches"] for w in ws) / n for k in ("early", "late")}
                wrong[p]["switches"] = n
        if wrong:
            print(f"{'':34s} wrong model, per switch  " + "  ".join(
                f"{p} ({w['switches']}): early {w['early']:.0f} late {w['late']:.0f}" for p, w in wrong.items()))
        # The same mean by tier and by window (the case's name ends .../TIER/WINDOW),
        # where the cases span more than one: the tiers' delivery lags differ
        # by ten times, and so does where their regret falls.
        by_group = {}
        for axis, pos in (("tier", -2), ("window", -1)):
            values = sorted({c["case"].split("/")[pos] for c in cases})
            if len(values) < 2:
                continue
            for value in values:
                group = [c for c in cases if c["case"].split("/")[pos] == value]
                by_group[f"{axis} {value}"] = mean_line(f"  {axis} {value} ({len(group)} cases)", group)
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"strategy": args.strategy, "clock": args.clock, "cases": cases, "mean_excess_percent": mean,
                           "wrong_model_iterations_per_switch": wrong,
                           "mean_excess_percent_by": by_group}, f, indent=1)
    return status


if __name__ == "__main__":
    sys.exit(main())
