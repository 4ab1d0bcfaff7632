#!/usr/bin/env python3
"""A PyTorch training job publishes with Viper; PyTorch servers consume.

    mpirun -np 3 python3 examples/pytorch/train_and_serve.py [--drift class-incremental]

Rank 0 trains an MLP on Fashion-MNIST (Debian's dataset-fashion-mnist) and
asks Viper's online planner after every iteration whether to publish; when it
says so, the state_dict goes to the consumers (host tier over MPI by
default). Ranks 1.. serve requests at a fixed rate from a test subset (the
t10k images, disjoint from the producer's validation subset, which comes
from the training images), each with the version they hold, computing its
real cross-entropy loss. Rank 0 prints the result as JSON in the shape of
`viper run --json`: CIL (the sum of the served losses), staleness, update
latency per version.

--drift class-incremental: training sees only the first --initial-classes
classes until --drift-at, then all ten; requests cover all ten classes from
the start, so the versions trained after the drift are worth far more than
the ones before it, and a stale server pays for every request.

--drift label-swap | rotation: the stream itself drifts from --drift-at on
(training batches, the producer's validation sample and the consumers'
requests alike): labels --swap-classes exchanged, or every image rotated by
an angle growing from 0 to --rotation-degrees over --drift-duration
iterations. The producer tells the consumers the iteration the traffic is
at (at each validation point). With these drifts the producer records a
staleness table with viper.StalenessRecorder (every kept version measured on
the current validation and traffic samples at each validation point) and
writes it next to the --json file (--staleness-table to choose); with the
online strategy it gives the planner the served version's re-measured
validation loss (Planner.observe_served) at each validation point.

--bf16: the consumers serve BF16 weights. The producer keeps FP32 master
weights in its optimizer (as mixed-precision trainers do) and publishes their
BF16 rounding; fine-tuned with a small step after the warm-up (--finetune-lr,
e.g. 1e-4) most BF16 values round back to what they were, so only a small
share of the bytes changes between versions.
--delta (--tier pfs): each version after the first is written as a delta
against the previous one when that is smaller (Publisher(pfs_delta=True));
the consumers rebuild and verify it. Each version's bytes written and its
encoding are printed and go into the JSON (written_bytes, encoding).

    mpirun -np 2 python3 examples/pytorch/train_and_serve.py --tier pfs \\
        --bf16 --finetune-lr 1e-4 --delta --iterations 400 --warmup 100
"""
import argparse
import gzip
import json
import math
import os
import shutil
import sys
import tempfile
import time

from mpi4py import MPI  # initialises MPI first (MPI_THREAD_MULTIPLE, mpi4py's default); viper uses it as is

import numpy as np
import torch
from torch.nn.utils.stateless import functional_call

import viper
from delta_bounds import base_version, bounds

TAG_END = 77  # producer -> consumer: training is over, the last version number
TAG_TRAFFIC = 78  # producer -> consumer: the iteration the traffic has drifted to
TRAFFIC_DRIFTS = ("label-swap", "rotation")  # drifts that change the requests, not only training


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--iterations", type=int, default=1500, help="training iterations N")
    p.add_argument("--warmup", type=int, default=300, help="warm-up iterations W (version 0 is published at W)")
    p.add_argument("--hidden", type=int, default=128, help="hidden width of the MLP 784-H-10")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--finetune-lr", type=float, default=0.0,
                   help="learning rate after the warm-up (0 = --lr): the warm-up trains the model version 0 "
                        "serves, the rest fine-tunes it with small steps")
    p.add_argument("--train-samples", type=int, default=0, help="training pool size (0 = all not in validation)")
    p.add_argument("--val-samples", type=int, default=1000, help="the producer's validation subset (training images)")
    p.add_argument("--val-every", type=int, default=20, help="iterations between validation losses")
    p.add_argument("--test-samples", type=int, default=2000, help="the consumers' request pool (t10k images)")
    p.add_argument("--requests-per-s", type=float, default=100.0, help="requests per second per consumer")
    p.add_argument("--strategy", default="online", help="online, optimal, fixed, viper-greedy, viper-fixed, epoch")
    p.add_argument("--tier", default="host", choices=["host", "pfs", "gpu"])
    p.add_argument("--mode", default="async", choices=["async", "sync"])
    p.add_argument("--notify", default="push", choices=["push", "poll"])
    p.add_argument("--pfs-dir", default="",
                   help="pfs tier: a directory all ranks see (default: a private one made for the run and removed "
                        "at its end)")
    p.add_argument("--bf16", action="store_true",
                   help="publish BF16 weights (the BF16 rounding of the FP32 master weights the optimizer keeps)")
    p.add_argument("--delta", action="store_true",
                   help="pfs tier: write versions after the first as deltas when smaller (Publisher(pfs_delta=True))")
    p.add_argument("--poll-period", type=float, default=0.1, help="notify poll: seconds between scans")
    p.add_argument("--drift", default="none", choices=["none", "class-incremental", "label-swap", "rotation"])
    p.add_argument("--drift-at", type=int, default=0, help="iteration the drift starts (0 = N/2)")
    p.add_argument("--initial-classes", type=int, default=5)
    p.add_argument("--swap-classes", default="0,6", help="label-swap: the two classes exchanged")
    p.add_argument("--swap-period", type=int, default=0,
                   help="label-swap: undo and redo the swap every this many iterations from --drift-at (swapped, "
                        "original, swapped, ...: labels that come back, where online re-publishes a kept model; "
                        "viper run's --drift-swap-period); 0 = swapped once, for good")
    p.add_argument("--rotation-degrees", type=float, default=90.0, help="rotation: the final angle")
    p.add_argument("--drift-duration", type=int, default=-1,
                   help="rotation: iterations from 0 degrees to the final angle (-1 = until the last iteration)")
    p.add_argument("--staleness-table", default="auto",
                   help="where the producer writes the staleness table (.csv or .csv.gz); 'auto' = next to "
                        "--json (<json>.staleness.csv.gz) when --drift is label-swap or rotation and --json a "
                        "file; 'none' = no table")
    p.add_argument("--staleness-samples", type=int, default=1000,
                   help="traffic (t10k) images each kept version is measured on at each validation point")
    p.add_argument("--staleness-max-mb", type=float, default=64.0, help="memory bound of the kept versions")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--json", default="-", help="where rank 0 writes the result ('-' = stdout)")
    p.add_argument("--check", action="store_true", help="exit 1 unless the run is sound (for the CTest)")
    a = p.parse_args(argv)
    if not 0 < a.warmup < a.iterations:
        p.error(f"--warmup must be in (0, --iterations), got {a.warmup}")
    if a.delta and a.tier != "pfs":
        p.error("--delta needs --tier pfs")
    if a.notify == "poll" and a.tier != "pfs":
        p.error("--notify poll needs --tier pfs")
    if a.drift_at == 0:
        a.drift_at = a.iterations // 2
    if a.swap_period < 0:
        p.error(f"--swap-period must be >= 0 (0 = swapped once), got {a.swap_period}")
    if a.swap_period > 0 and a.drift != "label-swap":
        p.error("--swap-period needs --drift label-swap")
    if a.drift_duration < 0:
        a.drift_duration = max(0, a.iterations - a.drift_at)
    try:
        a.swap_classes = tuple(int(c) for c in a.swap_classes.split(","))
    except ValueError:
        a.swap_classes = ()
    if len(a.swap_classes) != 2 or a.swap_classes[0] == a.swap_classes[1] or \
            not all(0 <= c <= 9 for c in a.swap_classes):
        p.error("--swap-classes must be two distinct classes 0..9, e.g. 0,6")
    if a.staleness_table == "auto":
        a.staleness_table = ""
        if a.drift in TRAFFIC_DRIFTS and a.json != "-":
            base = a.json[:-5] if a.json.endswith(".json") else a.json
            a.staleness_table = base + ".staleness.csv.gz"
    elif a.staleness_table == "none":
        a.staleness_table = ""
    return a


def drifted(a, x, y, iteration):
    """The samples (x, y) as the stream is after `iteration` (label-swap,
    rotation; other drifts leave the samples alone)."""
    if a.drift == "label-swap" and iteration >= a.drift_at and \
            (a.swap_period == 0 or (iteration - a.drift_at) // a.swap_period % 2 == 0):
        c0, c1 = a.swap_classes
        y = torch.where(y == c0, torch.full_like(y, c1), torch.where(y == c1, torch.full_like(y, c0), y))
    elif a.drift == "rotation" and iteration >= a.drift_at:
        frac = 1.0 if a.drift_duration == 0 else min(1.0, (iteration - a.drift_at) / a.drift_duration)
        angle = math.radians(a.rotation_degrees * frac)
        if angle != 0.0:
            c, s = math.cos(angle), math.sin(angle)
            theta = torch.tensor([[c, -s, 0.0], [s, c, 0.0]], dtype=x.dtype).expand(len(x), 2, 3)
            img = x.reshape(-1, 1, 28, 28)
            grid = torch.nn.functional.affine_grid(theta, list(img.shape), align_corners=False)
            x = torch.nn.functional.grid_sample(img, grid, mode="bilinear", padding_mode="zeros",
                                                align_corners=False).reshape(-1, 784)
    return x, y


def test_subset(a, seed_offset=1):
    """The consumers' request pool: a fixed subset of the t10k images."""
    x, y = load(a.data_dir, "t10k")
    perm = torch.randperm(len(y), generator=torch.Generator().manual_seed(a.seed + seed_offset))[:a.test_samples]
    return x[perm], y[perm]


def read_idx(path, header_bytes):
    try:
        with gzip.open(path, "rb") as f:
            return np.frombuffer(f.read(), dtype=np.uint8, offset=header_bytes)
    except OSError as e:
        sys.exit(f"train_and_serve: cannot read {path}: {e} (install dataset-fashion-mnist or give --data-dir)")


def load(data_dir, prefix):
    x = read_idx(os.path.join(data_dir, f"{prefix}-images-idx3-ubyte.gz"), 16).reshape(-1, 784)
    y = read_idx(os.path.join(data_dir, f"{prefix}-labels-idx1-ubyte.gz"), 8)
    return torch.from_numpy(x.astype(np.float32) / 255.0), torch.from_numpy(y.astype(np.int64))


def make_model(hidden, seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(784, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 10))


def model_bytes(model, bf16=False):
    return sum(t.numel() * (2 if bf16 else t.element_size()) for t in model.state_dict().values())


def published_state(a, model):
    """What the consumers get: the state_dict, or its BF16 rounding (--bf16)."""
    state = model.state_dict()
    if a.bf16:
        return {k: v.to(torch.bfloat16) for k, v in state.items()}
    return state


# ---------------------------------------------------------------------------
# Producer (rank 0).

def produce(a, comm, t_base):
    consumers = comm.Get_size() - 1
    x, y = load(a.data_dir, "train")
    g = torch.Generator().manual_seed(a.seed)
    perm = torch.randperm(len(y), generator=g)
    val = perm[:a.val_samples]  # the producer's validation subset
    pool = perm[a.val_samples:] if a.train_samples <= 0 else perm[a.val_samples:a.val_samples + a.train_samples]
    early = pool[y[pool] < a.initial_classes] if a.drift == "class-incremental" else pool

    model = make_model(a.hidden, a.seed)
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9)
    pub = viper.Publisher(tier=a.tier, mode=a.mode, notify=a.notify, pfs_dir=a.pfs_dir,
                          staging_bytes=model_bytes(model, a.bf16) + (1 << 20), peer_timeout_s=30,
                          pfs_delta=a.delta)
    planner = viper.Planner(a.strategy, total_iterations=a.iterations, warmup=a.warmup,
                            requests=a.requests_per_s, poll_period_s=a.poll_period if a.notify == "poll" else 0)

    def validation_loss():
        with torch.no_grad():
            xv, yv = drifted(a, x[val], y[val], it)
            return torch.nn.functional.cross_entropy(model(xv), yv).item()

    # The staleness table: a copy of the model at every validation point (and
    # each published version), each kept version measured at every validation
    # point on the validation sample and on a traffic sample (the consumers'
    # t10k pool), both as drifted now.
    recorder, traffic, record_s = None, None, 0.0
    if a.staleness_table:
        recorder = viper.StalenessRecorder(every=a.val_every, max_bytes=int(a.staleness_max_mb * (1 << 20)))
        tx, ty = test_subset(a)
        traffic = (tx[:a.staleness_samples], ty[:a.staleness_samples])
    served_it, served_measured = None, 0

    published = []  # (version, iteration, start relative to t_warm, report)
    republished = []  # (iteration, the kept model's iteration) of each re-publish
    kept = {}  # --delta: version -> the state published
    t_warm = None
    planning_s = 0.0
    cursor, order = 0, None
    t_start = time.monotonic()
    for it in range(1, a.iterations + 1):
        source = early if a.drift == "class-incremental" and it < a.drift_at else pool
        if order is None or order[1] is not source or cursor + a.batch > len(source):
            order, cursor = (source[torch.randperm(len(source), generator=g)], source), 0
        idx = order[0][cursor:cursor + a.batch]
        cursor += a.batch
        opt.zero_grad()
        xb, yb = drifted(a, x[idx], y[idx], it)
        loss = torch.nn.functional.cross_entropy(model(xb), yb)
        loss.backward()
        opt.step()
        v = None
        if it % a.val_every == 0:
            if a.drift in TRAFFIC_DRIFTS:
                for r in range(1, consumers + 1):
                    comm.send(it, dest=r, tag=TAG_TRAFFIC)  # the requests drift with the stream
            if recorder is None:
                v = validation_loss()
            else:
                t_rec = time.monotonic()
                recorder.maybe_keep(it, model)
                recorder.record(it, drifted(a, x[val], y[val], it), drifted(a, *traffic, it),
                                torch.nn.functional.cross_entropy, model)
                v = recorder.loss_of(it, "val")  # the diagonal: the current model on today's validation sample
                record_s += time.monotonic() - t_rec
        t0 = time.monotonic()
        planner.observe(it, train_loss=loss.item(), val_loss=v)
        if v is not None and recorder is not None and served_it is not None and a.strategy == "online" \
                and it > a.warmup + 1:
            # The closed loop, after this step's observe() (the re-measurements
            # belong to its measurement): the served version re-measured on
            # today's validation sample, and the models the planner keeps for
            # re-publishing (a domain that comes back).
            planner.observe_served(recorder.loss_of(served_it, "val"))
            served_measured += 1
            for k in planner.kept_versions():
                try:
                    planner.observe_kept(k, recorder.loss_of(k, "val"))
                except KeyError:
                    pass  # thinned out of the recorder (--staleness-max-mb): not re-published
        publish = it > a.warmup and planner.should_checkpoint(it)
        if it > a.warmup:
            planning_s += time.monotonic() - t0
        if it == a.warmup:  # version 0, the warm-up model; its cost is what the planner plans with
            if a.finetune_lr > 0:
                for group in opt.param_groups:
                    group["lr"] = a.finetune_lr
            t_warm = time.monotonic()
            tau = (t_warm - t_start) / a.warmup
            state = published_state(a, model)
            report = pub.publish(state, it)
            if a.delta:  # kept to count each delta's bound against its base
                kept[report.version] = {k: v.detach().clone() for k, v in state.items()}
            published.append((report.version, it, 0.0, report))
            served_it = it
            if recorder is not None:
                recorder.keep(it, model, served=True)
            pub.flush()
            r0 = pub.reports()[0]
            planner.set_cost(r0)  # sigma, delta measured on version 0, as `viper run` does
        elif publish:
            start = time.monotonic()
            # The current model, or an older kept one that measures better on
            # today's validation sample (a re-publish: its recorded copy goes out).
            m = planner.publishing() if a.strategy == "online" and recorder is not None else it
            if m == it:
                state = published_state(a, model)
            else:
                kept_state = recorder.state_of(m)
                state = {k: v.to(torch.bfloat16) for k, v in kept_state.items()} if a.bf16 else kept_state
                republished.append((it, m))
            report = pub.publish(state, it)
            if a.delta:  # kept to count each delta's bound against its base
                kept[report.version] = {k: v.detach().clone() for k, v in state.items()}
            published.append((report.version, it, start - t_warm, report))
            planner.commit(it)
            served_it = m
            if recorder is not None and m == it:
                recorder.keep(it, model, served=True)
            elif recorder is not None:
                recorder.serve(m)
    training_end = time.monotonic() - t_warm
    pub.close()
    reports = {r.version: r for r in pub.reports()}
    last = published[-1][0]
    for r in range(1, consumers + 1):
        comm.send(last, dest=r, tag=TAG_END)
    results = comm.gather(None, root=0)[1:]
    s = summarise(a, planner, published, reports, results, t_warm - t_base, training_end, tau, planning_s, r0)
    s["republished"] = [{"iteration": it, "model_iteration": m} for it, m in republished]
    for v in s["versions"]:
        base = base_version(v["encoding"])
        if base is not None:
            v.update(bounds(kept[base], kept[v["version"]]))
            v["over_values_bound"] = v["written_bytes"] / max(1.0, v["values_bound_bytes"])
    if recorder is not None:
        recorder.write(a.staleness_table)
        s["staleness_table"] = {"path": a.staleness_table, "rows": len(recorder.rows),
                                "versions_kept": len(recorder.versions_kept), "bytes_kept": recorder.bytes_kept,
                                "versions_thinned": recorder.thinned, "record_s": record_s,
                                "served_re_measurements": served_measured}
        # Version 0 and the later published versions on the last traffic point
        # (one traffic for all: under a traffic drift the served losses of
        # different versions were paid on different traffic).
        last_t = max(r[1] for r in recorder.rows)
        at_last = {r[0]: r[4] for r in recorder.rows if r[1] == last_t}
        model_of = dict(republished)  # a re-published version is its kept model's
        later = [at_last[model_of.get(it, it)] for _, it, _, _ in published[1:] if model_of.get(it, it) in at_last]
        s["staleness_table"]["on_last_traffic"] = {
            "traffic_iteration": last_t, "version0_test_loss": at_last.get(published[0][1]),
            "later_versions_mean_test_loss": sum(later) / len(later) if later else None}
    return s


def summarise(a, planner, published, reports, results, t_warm, training_end, tau, planning_s, r0):
    versions, index = [], {}
    for version, iteration, start, rep in published:
        r = reports[version]
        index[version] = len(versions)
        versions.append({"version": version, "iteration": iteration, "checkpoint_s": 0.0 if version == 0 else start,
                         "stall_s": rep.stall_s, "snapshot_s": r.snapshot_s, "transfer_s": r.transfer_s,
                         "notify_s": r.notify_s, "discovery_s": 0.0, "load_s": 0.0, "update_latency_s": 0.0,
                         "max_update_latency_s": 0.0, "delivered_to": 0, "superseded": r.superseded,
                         "requests": 0, "loss_sum": 0.0, "bytes": r.bytes, "written_bytes": r.written_bytes,
                         "encoding": r.encoding})
    starts = {v: s for v, _, s, _ in published}
    for res in results:
        for version, servable, receive_s, verify_s in res["swaps"]:
            if version not in index:
                continue
            v = versions[index[version]]
            lat = servable - t_warm - starts[version]
            v["delivered_to"] += 1
            v["update_latency_s"] += lat
            v["max_update_latency_s"] = max(v["max_update_latency_s"], lat)
            v["load_s"] += receive_s + verify_s
            sent = v["stall_s"] if a.mode == "sync" else v["snapshot_s"] + v["transfer_s"]
            v["discovery_s"] += max(0.0, lat - sent - receive_s - verify_s)
    for v in versions:
        if v["delivered_to"]:
            for k in ("update_latency_s", "load_s", "discovery_s"):
                v[k] /= v["delivered_to"]
    cil, stale, n = 0.0, 0.0, 0
    for res in results:
        for t, version, iteration, loss in res["requests"]:
            t -= t_warm
            if t > training_end:
                continue
            v = versions[index[version]]
            v["requests"] += 1
            v["loss_sum"] += loss
            cil += loss
            stale += t - v["checkpoint_s"]
            n += 1
    later = [v["update_latency_s"] for v in versions if v["version"] > 0 and v["delivered_to"]]
    total_stall = sum(v["stall_s"] for v in versions if v["version"] > 0)
    rep = planner.report()
    servable = max([c.servable_s for c in r0.consumers if c.delivered] or [0.0])
    delay = servable if servable > 0 else r0.snapshot_s + r0.transfer_s + r0.notify_s
    return {
        "termination": "completed", "message": "", "workload": "pytorch", "tier": a.tier, "mode": a.mode,
        "notify": a.notify, "fanout": "node", "host_protocol": "shm", "strategy": a.strategy,
        "consumers": len(results), "lost_consumers": [], "warmup_iterations": a.warmup,
        "total_iterations": a.iterations, "iterations_done": a.iterations, "seconds_per_iteration": tau,
        "planned_stall_s": r0.stall_s, "planned_delay_s": max(delay, r0.stall_s), "metric": rep.get("metric"),
        "plan_report": rep.get("summary", ""), "planning_s": planning_s, "schedule": rep["checkpoints"],
        "training_end_s": training_end, "total_stall_s": total_stall,
        "no_checkpoint_training_s": training_end - total_stall - planning_s,
        "slowdown_fraction": total_stall / max(1e-12, training_end - total_stall - planning_s),
        "cil": cil, "cil_per_consumer": cil / max(1, len(results)), "requests": n,
        "mean_staleness_s": stale / n if n else None, "traffic_iteration_bias": None, "traffic_iteration_mae": None,
        "mean_update_latency_s": sum(later) / len(later) if later else None,
        "every_version_delivered": all(v["delivered_to"] == len(results) for v in versions if not v["superseded"]),
        "versions": versions,
        "drift": a.drift, "bf16": a.bf16, "delta": a.delta,
        "state_dict_s": max([s for res in results for s in res["state_dict_s"]] or [0.0]),
    }


# ---------------------------------------------------------------------------
# Consumer (ranks 1..).

def consume(a, comm, t_base):
    rank = comm.Get_rank()
    x0, y0 = test_subset(a)
    x, y = x0, y0
    traffic_it = 0  # the iteration the traffic has drifted to (label-swap, rotation: told by the producer)
    offset = (rank - 1) * 997 % len(y)
    swaps = []  # (version, servable time, receive_s, verify_s): on the receiving thread
    model = make_model(a.hidden, 0)  # the architecture; each version's tensors are used in place
    sub = viper.Subscriber(tier=a.tier, notify=a.notify, pfs_dir=a.pfs_dir, poll_period_s=a.poll_period,
                           producer_timeout_s=300, preallocate_bytes=model_bytes(model, a.bf16) + (1 << 20),
                           callback=lambda v: swaps.append((v.version, time.monotonic() - t_base, v.receive_s,
                                                            v.verify_s)))
    sub.wait_for_version(0, timeout_s=600)
    requests, state_dict_s = [], []
    last, deadline = None, None
    held, params = None, None
    interval = 1.0 / a.requests_per_s
    start = time.monotonic()
    q = 0
    while True:
        wake = start + q * interval
        while time.monotonic() < wake:
            time.sleep(min(0.005, max(0.0, wake - time.monotonic())))
        if comm.Iprobe(source=0, tag=TAG_TRAFFIC):
            while comm.Iprobe(source=0, tag=TAG_TRAFFIC):
                traffic_it = comm.recv(source=0, tag=TAG_TRAFFIC)
            x, y = drifted(a, x0, y0, traffic_it)
        if last is None and comm.Iprobe(source=0, tag=TAG_END):
            last = comm.recv(source=0, tag=TAG_END)
            deadline = time.monotonic() + a.poll_period + 30
        cur = sub.current()
        if last is not None and (cur.version >= last or time.monotonic() > deadline):
            break
        if held is None or cur.version != held.version:
            t0 = time.monotonic()
            params = cur.state_dict()  # views of the received bytes: no copy
            if a.bf16:  # computed in FP32 from the served BF16 values (one small copy per version)
                params = {k: v.float() for k, v in params.items()}
            state_dict_s.append(time.monotonic() - t0)
            held = cur
        j = (q + offset) % len(y)
        with torch.no_grad():
            logits = functional_call(model, params, (x[j:j + 1],))
            loss = torch.nn.functional.cross_entropy(logits, y[j:j + 1]).item()
        requests.append((time.monotonic() - t_base, held.version, held.iteration, loss))
        q += 1
    sub.stop()
    while comm.Iprobe(source=0, tag=TAG_TRAFFIC):  # the drift points not yet read
        comm.recv(source=0, tag=TAG_TRAFFIC)
    comm.gather({"requests": requests, "swaps": swaps, "state_dict_s": state_dict_s}, root=0)


def main(argv):
    a = parse_args(argv)
    torch.set_num_threads(1)  # ranks share the cores
    comm = MPI.COMM_WORLD
    if comm.Get_size() < 2:
        sys.exit("train_and_serve: needs at least 2 ranks: mpirun -np 3 python3 train_and_serve.py")
    made_dir = None
    if a.tier == "pfs" and not a.pfs_dir:  # a private directory for this run (mkdtemp: 0700)
        made_dir = tempfile.mkdtemp(prefix="viper-example-") if comm.Get_rank() == 0 else None
        a.pfs_dir = comm.bcast(made_dir, root=0)
    try:
        return run(a, comm)
    finally:
        if made_dir:
            shutil.rmtree(made_dir, ignore_errors=True)


def run(a, comm):
    comm.Barrier()
    t_base = time.monotonic()  # CLOCK_MONOTONIC: one clock for every rank of this node
    t_base = comm.bcast(t_base, root=0)
    if comm.Get_rank() != 0:
        consume(a, comm, t_base)
        return 0
    s = produce(a, comm, t_base)
    text = json.dumps(s, indent=1)
    if a.json == "-":
        print(text)
    else:
        with open(a.json, "w") as f:
            f.write(text + "\n")
    print(f"{s['strategy']} over {a.tier}/{a.mode}/{a.notify} (pytorch, drift {a.drift}): {len(s['versions'])} "
          f"versions to {s['consumers']} consumer(s), CIL {s['cil']:.1f} ({s['cil_per_consumer']:.1f} per consumer) "
          f"over {s['requests']} requests, staleness {s['mean_staleness_s'] or 0:.2f} s, update latency "
          f"{(s['mean_update_latency_s'] or 0) * 1e3:.2f} ms, stall {s['total_stall_s']:.3f} s "
          f"({s['slowdown_fraction'] * 100:.2f}% slowdown); state_dict() in hand after at most "
          f"{s['state_dict_s'] * 1e3:.3f} ms", file=sys.stderr)
    if a.delta or a.bf16:
        later = [v for v in s["versions"][1:] if not v["superseded"]]
        full = sum(v["bytes"] for v in later)
        written = sum(v["written_bytes"] for v in later)
        for v in s["versions"]:
            if v["superseded"]:
                print(f"  version {v['version']:3d} (iteration {v['iteration']:5d}): superseded before it was written",
                      file=sys.stderr)
                continue
            bound = ""
            if "changed_elements" in v:
                bound = (f"; {100.0 * v['changed_elements'] / v['elements']:.1f}% of the elements changed, "
                         f"written / values bound {v['over_values_bound']:.3f}")
            print(f"  version {v['version']:3d} (iteration {v['iteration']:5d}): wrote {v['written_bytes']:9d} of "
                  f"{v['bytes']:9d} bytes ({100.0 * v['written_bytes'] / max(1, v['bytes']):5.1f}%), "
                  f"{v['encoding']}{bound}", file=sys.stderr)
        print(f"the {len(later)} versions written after the first: {written} bytes of {full} full ({100.0 * written / max(1, full):.1f}%)",
              file=sys.stderr)
    if s["republished"]:
        print("re-published kept models (iteration <- model): " +
              ", ".join(f"{r['iteration']} <- {r['model_iteration']}" for r in s["republished"]), file=sys.stderr)
    if "staleness_table" in s:
        t = s["staleness_table"]
        print(f"staleness table: {t['path']} ({t['rows']} rows, {t['versions_kept']} versions kept in "
              f"{t['bytes_kept'] / (1 << 20):.1f} MiB, {t['versions_thinned']} thinned, {t['record_s']:.2f} s "
              f"measuring on the training path)", file=sys.stderr)
    if a.check:
        problems = []
        if len(s["versions"]) < 2:
            problems.append("fewer than 2 versions published")
        if not s["every_version_delivered"]:
            problems.append("a version was not delivered to every consumer")
        if not s["requests"] or not math.isfinite(s["cil"]):
            problems.append("no requests served, or a non-finite CIL")
        v0, later = s["versions"][0], s["versions"][1:]
        n_later = sum(v["requests"] for v in later)
        if a.drift in TRAFFIC_DRIFTS:
            # The served losses were paid on different traffic: compare on one
            # traffic point, the table's last (no table: no comparison).
            last = s.get("staleness_table", {}).get("on_last_traffic", {})
            if last.get("version0_test_loss") is not None and last.get("later_versions_mean_test_loss") is not None \
                    and not last["later_versions_mean_test_loss"] < last["version0_test_loss"]:
                problems.append("on the last traffic the versions after the warm-up measure no better than version 0")
        elif a.finetune_lr > 0:
            pass  # small steps after the warm-up move the loss by less than the per-request noise: not judged
        elif v0["requests"] >= 20 and n_later >= 20:  # per-image losses are noisy: pool the later versions
            if not sum(v["loss_sum"] for v in later) / n_later < v0["loss_sum"] / v0["requests"]:
                problems.append("the versions after the warm-up serve no better than version 0")
        if a.swap_period > 0 and a.strategy == "online" and "staleness_table" in s:
            # Labels that come back: a model kept from before a swap measures
            # far better on the swapped-back traffic than one trained across it.
            if not s["republished"]:
                problems.append("labels swapped back and forth, but no kept model was re-published")
            if any(not r["model_iteration"] < r["iteration"] for r in s["republished"]):
                problems.append(f"a re-publish of a model not older than its step: {s['republished']}")
        if a.delta and len(s["versions"]) >= 2:
            # A small-step BF16 model changes few bytes: at least one later version must be a smaller delta.
            deltas = [v for v in s["versions"][1:] if v["encoding"].startswith("delta")]
            if not deltas:
                problems.append("--delta: no version was written as a delta")
            elif not all(v["written_bytes"] < v["bytes"] for v in deltas):
                problems.append("--delta: a delta version was not smaller than the full one")
        if problems:
            print("train_and_serve --check: " + "; ".join(problems), file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
