#!/usr/bin/env python3
"""Bytes a delta version moves against what any encoding must move.

    python3 examples/pytorch/delta_bounds.py v1.safetensors v2.safetensors ...

Publishes the given models, in order, as consecutive versions through the pfs
tier with delta versions (Publisher(pfs_delta=True), sync, one process, no
MPI) and compares each version's bytes written with two lower bounds counted
here, element by element, independently of the codec:

  values bound   the changed elements times their element bytes (a tensor
                 with no changed element counts 0): the issue's "encoding
                 bound";
  entropy bound  the values plus log2 C(n, k) bits per tensor of n elements
                 with k changed: what any encoding must spend to also say
                 which elements changed, when they change at random positions.

Both bounds are taken against the version the delta is a delta of (its
encoding says which). A full version (the first, every 9th, or a delta not
smaller) is listed with its size. Used by examples/pytorch/train_and_serve.py
(--delta) and for the fine-tune figures in workflow/README.md and
transports/README.md.
"""
import argparse
import json
import math
import re
import sys
import tempfile

import torch

_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def log2_binomial(n, k):
    """log2 C(n, k)."""
    if k <= 0 or k >= n:
        return 0.0
    return (math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)) / math.log(2)


def bounds(base, target):
    """Changed elements (bits differ) of `target` against `base` (dicts of
    name -> tensor with the same layout) and the two bounds in bytes."""
    changed = elements = 0
    values = entropy = 0.0
    for name, t in target.items():
        b = base[name]
        if b.shape != t.shape or b.dtype != t.dtype:
            raise ValueError(f"tensor {name!r}: {b.dtype} {list(b.shape)} in the base, {t.dtype} {list(t.shape)} now")
        bits = _BITS[t.element_size()]
        k = int((t.contiguous().view(bits) != b.contiguous().view(bits)).sum())
        n = t.numel()
        changed += k
        elements += n
        values += k * t.element_size()
        entropy += k * t.element_size() + log2_binomial(n, k) / 8
    return {"changed_elements": changed, "elements": elements, "values_bound_bytes": values,
            "entropy_bound_bytes": entropy}


def base_version(encoding):
    """The version a report's encoding says it is a delta of, or None (full)."""
    m = re.match(r"delta of version (\d+)", encoding)
    return int(m.group(1)) if m else None


def measure(states, iterations=None):
    """Publishes `states` (a list of dicts name -> tensor) as versions 0..n-1
    with pfs deltas and returns one row per version."""
    import viper  # the build tree's package (PYTHONPATH=build/python)
    rows = []
    with tempfile.TemporaryDirectory(prefix="viper-delta-bounds-") as d:
        with viper.Publisher(tier="pfs", notify="poll", mode="sync", pfs_dir=d, pfs_keep_versions=0,
                             pfs_delta=True) as pub:
            for i, state in enumerate(states):
                r = pub.publish(state, iterations[i] if iterations else i + 1)
                row = {"version": r.version, "bytes": r.bytes, "written_bytes": r.written_bytes,
                       "encoding": r.encoding}
                base = base_version(r.encoding)
                if base is not None:
                    row.update(bounds(states[base], state))
                    row["over_values_bound"] = r.written_bytes / max(1.0, row["values_bound_bytes"])
                    row["over_entropy_bound"] = r.written_bytes / max(1.0, row["entropy_bound_bytes"])
                rows.append(row)
    return rows


def print_rows(rows, out=sys.stdout):
    for r in rows:
        if "changed_elements" in r:
            print(f"version {r['version']:3d}: {r['encoding']}, {r['changed_elements']} of {r['elements']} elements "
                  f"changed ({100.0 * r['changed_elements'] / r['elements']:.2f}%), wrote {r['written_bytes']} of "
                  f"{r['bytes']} bytes; / values bound {r['over_values_bound']:.4f}, / entropy bound "
                  f"{r['over_entropy_bound']:.4f}", file=out)
        else:
            print(f"version {r['version']:3d}: {r['encoding']}, wrote {r['written_bytes']} of {r['bytes']} bytes",
                  file=out)
    deltas = [r for r in rows if "changed_elements" in r]
    if deltas:
        v = sorted(r["over_values_bound"] for r in deltas)
        e = sorted(r["over_entropy_bound"] for r in deltas)
        print(f"{len(deltas)} delta versions: bytes written / values bound median {v[len(v) // 2]:.4f} "
              f"(max {v[-1]:.4f}), / entropy bound median {e[len(e) // 2]:.4f} (max {e[-1]:.4f}); "
              f"written {sum(r['written_bytes'] for r in deltas)} of {sum(r['bytes'] for r in deltas)} bytes",
              file=out)


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("files", nargs="+", help=".safetensors files, oldest first (same tensor layout)")
    p.add_argument("--json", default="", help="also write the rows as JSON to this path")
    a = p.parse_args(argv)
    if len(a.files) < 2:
        p.error("give at least two versions")
    import viper
    states = []
    for f in a.files:
        try:
            states.append(viper.load_file(f))
        except (OSError, ValueError) as e:
            sys.exit(f"delta_bounds: {f}: {e}")
    try:
        rows = measure(states)
    except ValueError as e:
        sys.exit(f"delta_bounds: {e}")
    print_rows(rows)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
