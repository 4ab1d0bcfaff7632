#!/usr/bin/env python3
"""The Python binding's overhead, measured beside the C++ engine in one run.

    mpirun -np 2 --bind-to none python3 bench/python_bench.py [--sizes 64,600] [--repeats 9] [--json out.json]

Rank 0 publishes, rank 1 subscribes (host tier, async, push: the defaults).
For each model size (MB), the same Publisher sends, interleaved:
  - python: a torch state_dict (--tensors float32 tensors) through
    viper.Publisher.publish: the wall time of that Python call;
  - c++: a model of the same tensor sizes made and owned by C++, published
    through the same engine by one C++ call (no specs, no torch): the wall
    time of that call.
The ratio python / c++ of these wall times is the binding's cost on the
producer's stall (goal <= 1.1); the engine's own stall_s of each is reported
beside them. The update latency (publish start -> servable at the consumer, as
the consumer acknowledged it) is reported for both.

On the consumer: the time from the version becoming servable (the
Subscriber's callback, on its receiving thread) to state_dict() in the
serving thread's hand (views of the received bytes: no copy; goal < 1 ms),
and state_dict() alone.
Every round ends with a barrier, so the two sides never overlap rounds.
"""
import argparse
import json
import statistics
import sys
import time

from mpi4py import MPI

import torch

import viper


def args_of(argv):
    p = argparse.ArgumentParser()
    p.add_argument("--sizes", default="64,600", help="model sizes in MB (10^6 bytes), comma-separated")
    p.add_argument("--tensors", type=int, default=16, help="tensors per model (equal sizes)")
    p.add_argument("--repeats", type=int, default=9)
    p.add_argument("--mode", default="async", choices=["async", "sync"])
    p.add_argument("--json", default="", help="also write the figures here (rank 0)")
    return p.parse_args(argv)


def median(xs):
    return statistics.median(xs) if xs else float("nan")


def producer(a, comm, size_mb):
    nbytes = int(size_mb * 1e6) // a.tensors // 4 * 4
    sd = {f"layer{k}.weight": torch.full((nbytes // 4,), float(k)) for k in range(a.tensors)}
    native = viper._viper._native_state([nbytes] * a.tensors)
    pub = viper.Publisher(mode=a.mode, staging_bytes=nbytes * a.tensors + (1 << 20), peer_timeout_s=120)
    py_wall, py_stall, cpp_stall, cpp_wall, py_update, cpp_update = [], [], [], [], [], []
    it = 0
    for r in range(a.repeats + 1):  # round 0 warms both paths up (first-touch of the staging buffer)
        for path in ("python", "c++"):
            it += 1
            t0 = time.perf_counter()
            if path == "python":
                rep = pub.publish(sd, it)
            else:
                rep = pub._pub._publish_native(native, it)
            wall = time.perf_counter() - t0
            pub.flush()
            comm.Barrier()  # the consumer has it (and measured its state_dict)
            full = pub.reports()[-1]
            update = max([c.servable_s for c in full.consumers if c.delivered] or [float("nan")])
            if r == 0:
                continue
            if path == "python":
                py_wall.append(wall)
                py_stall.append(rep.stall_s)
                py_update.append(update)
            else:
                cpp_wall.append(wall)
                cpp_stall.append(rep.stall_s)
                cpp_update.append(update)
    pub.close()
    # The Python side of a publish alone (tensors -> specs, layout check),
    # repeated: what the binding adds before the engine starts.
    t0 = time.perf_counter()
    for _ in range(100):
        specs = viper._torch.specs(sd, "bench")
        assert viper._layout(specs) is not None
    python_side = (time.perf_counter() - t0) / 100
    consumer = comm.recv(source=1)
    return {
        "size_mb": size_mb, "bytes": nbytes * a.tensors, "tensors": a.tensors, "mode": a.mode, "repeats": a.repeats,
        "python_publish_wall_s": median(py_wall), "python_engine_stall_s": median(py_stall),
        "cpp_engine_stall_s": median(cpp_stall), "cpp_publish_wall_s": median(cpp_wall),
        # The same measurement of both paths: the wall time of the call, as
        # the training loop sees it (the engine's own stall_s stops before the
        # caller's thread runs again, which on a busy core can take ms).
        "stall_ratio_python_over_cpp": median(py_wall) / median(cpp_wall),
        "python_side_per_publish_s": python_side,
        "python_update_latency_s": median(py_update), "cpp_update_latency_s": median(cpp_update),
        "update_ratio_python_over_cpp": median(py_update) / median(cpp_update),
        "consumer_servable_to_state_dict_s": consumer["servable_to_hand"],
        "consumer_state_dict_call_s": consumer["state_dict"],
        "consumer_servable_to_state_dict_max_s": consumer["servable_to_hand_max"],
    }


def consumer(a, comm, size_mb):
    nbytes = int(size_mb * 1e6) // a.tensors // 4 * 4
    servable = {}
    sub = viper.Subscriber(producer_timeout_s=300, preallocate_bytes=nbytes * a.tensors + (1 << 20),
                           callback=lambda v: servable.__setitem__(v.version, time.perf_counter()))
    to_hand, call = [], []
    version = 0
    for r in range(a.repeats + 1):
        for _ in range(2):
            v = sub.wait_for_version(version, timeout_s=300)
            t1 = time.perf_counter()
            sd = v.state_dict()
            t2 = time.perf_counter()
            assert len(sd) == a.tensors
            # The swap wakes this thread and then runs the callback: whichever
            # came first bounds the servable instant from above.
            deadline = time.perf_counter() + 5
            while v.version not in servable and time.perf_counter() < deadline:
                time.sleep(0.0005)
            became = min(servable.get(v.version, t1), t1)
            if r > 0:
                to_hand.append(t2 - became)
                call.append(t2 - t1)
            version = v.version + 1
            del sd, v
            comm.Barrier()
    sub.wait_until_done(60)
    sub.stop()
    comm.send({"servable_to_hand": median(to_hand), "servable_to_hand_max": max(to_hand), "state_dict": median(call)},
              dest=0)


def main(argv):
    a = args_of(argv)
    comm = MPI.COMM_WORLD
    if comm.Get_size() != 2:
        sys.exit("python_bench: run with mpirun -np 2")
    rows = []
    for size in (float(s) for s in a.sizes.split(",")):
        if comm.Get_rank() == 0:
            rows.append(producer(a, comm, size))
        else:
            consumer(a, comm, size)
    if comm.Get_rank() != 0:
        return 0
    print(f"{'MB':>6} {'py publish ms':>14} {'C++ publish ms':>15} {'ratio':>6} {'py update ms':>13} "
          f"{'C++ update ms':>14} {'ratio':>6} {'servable->sd ms':>16} {'state_dict ms':>14}")
    for r in rows:
        print(f"{r['size_mb']:6.0f} {r['python_publish_wall_s'] * 1e3:14.2f} {r['cpp_publish_wall_s'] * 1e3:15.2f} "
              f"{r['stall_ratio_python_over_cpp']:6.3f} {r['python_update_latency_s'] * 1e3:13.2f} "
              f"{r['cpp_update_latency_s'] * 1e3:14.2f} {r['update_ratio_python_over_cpp']:6.3f} "
              f"{r['consumer_servable_to_state_dict_s'] * 1e3:16.3f} {r['consumer_state_dict_call_s'] * 1e3:14.3f}")
        print(f"       python side of a publish (specs, layout check): {r['python_side_per_publish_s'] * 1e6:.0f} us "
              f"for {r['tensors']} tensors")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"mode": a.mode, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
