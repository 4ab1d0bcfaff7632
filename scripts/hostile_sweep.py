#!/usr/bin/env python3
"""Hostile-input sweep: generates inputs class by class, as an attacker or a
careless user would, runs the viper CLI on each and counts the outcomes.

Outcomes (one per input):
  clean     exit 1 or 2 with a message that names the input (the file or the
            option) in at most 4 KiB of stderr
  unclear   exit 1 or 2, but the message is missing, too long or does not
            name the input
  ok        exit 0 on an input that is valid, or on a mutated model file that
            still describes the same model (same tensors, same bytes; e.g. a
            checksum's hex digits changed case)
  accepted  exit 0 on an input that is corrupt or out of range (a corrupt
            model served, a bad value taken)
  crash     killed by a signal, an exit code outside 0-3, or a sanitizer or
            'terminate called' report
  hang      still running after --timeout seconds (killed)
  deleted-outside   a file outside the directory given was removed (through a
            symbolic link planted in it)
  written-outside   a file a planted link pointed to was written or truncated
  leaked    a secret file's bytes (reached through a planted link) appeared in
            the output or the message
  elsewhere a `viper run` consumer served a version that was not its run's
            (an earlier run's, or one planted in the model directory)
  leak      what a dead producer left (a PFS temporary of a dead pid, a
            shared-memory segment of one), or a failed run's temporaries,
            still there after the next run

The `viper run` classes (foreign-owned directories, a stale earlier run, a
full disk, dead producers' leftovers) need mpirun (--mpirun, default the one
on PATH); a class that cannot run here (no mpirun, not root for chown or
mount) is skipped with the reason on stderr.

Usage: hostile_sweep.py VIPER [--root DIR] [--per-class N] [--seed S]
                            [--timeout SECONDS] [--json PATH] [--mpirun PATH]
Exit 0 when no input crashed, hung, was accepted or got an unclear message;
1 otherwise (the table says which); 2 bad usage.
"""
import argparse
import json
import os
import random
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time

OUTCOMES = ["clean", "unclear", "ok", "accepted", "crash", "hang", "deleted-outside", "written-outside", "leaked",
            "elsewhere", "leak"]
BAD = ("unclear", "accepted", "crash", "hang", "deleted-outside", "written-outside", "leaked", "elsewhere", "leak")
SECRET = b"TOPSECRET-hostile-sweep-0123456789"
MAX_MESSAGE = 4096


def safetensors_image(header, data=b""):
    raw = header.encode() if isinstance(header, str) else header
    return struct.pack("<Q", len(raw)) + raw + data


def legacy_image(version):
    """A verified (data checksum only, legacy) model of `version` with an
    empty data section, whose XXH3-64 is 2d06800538d394c2."""
    header = json.dumps({"__metadata__": {"viper.checksum": "2d06800538d394c2", "viper.version": str(version)},
                         "w": {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]}})
    return safetensors_image(header + " " * (-len(header) % 8))


def split_image(image):
    n = struct.unpack("<Q", image[:8])[0]
    return image[8:8 + n], image[8 + n:]


class Sweep:
    def __init__(self, viper, root, work, timeout, rng):
        self.viper = viper
        self.root = root
        self.work = work
        self.timeout = timeout
        self.rng = rng
        self.results = []  # dicts: class, name, outcome, seconds, rc, message
        self.counter = 0

    # ---- running ------------------------------------------------------------
    def run(self, args, prefix=()):
        t0 = time.monotonic()
        try:
            p = subprocess.run(list(prefix) + [self.viper] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               timeout=self.timeout, cwd=self.work)
            return p.returncode, p.stdout, p.stderr, time.monotonic() - t0, False
        except subprocess.TimeoutExpired as e:
            return None, e.stdout or b"", e.stderr or b"", time.monotonic() - t0, True

    def judge(self, cls, name, args, expect, mentions, same_model=None, prefix=(), after=None):
        """expect: 'reject' (must exit 1/2), 'any' (valid or refused, both fine).
        mentions: strings one of which the message must contain.
        same_model: callable -> bool, asked when a 'reject' input exits 0.
        prefix: a command the viper command line is appended to (a wrapper).
        after: callable(out, err) -> an outcome that overrides the rest
        (deleted-outside, written-outside, leaked) or None."""
        rc, out, err, secs, timed_out = self.run(args, prefix)
        text = err.decode("utf-8", "replace")
        if timed_out:
            outcome = "hang"
        elif rc < 0 or rc > 3 or re.search(r"terminate called|AddressSanitizer|runtime error:|Segmentation", text):
            outcome = "crash"
        elif rc == 0:
            if expect == "any":
                outcome = "ok"
            else:
                outcome = "ok" if same_model is not None and same_model() else "accepted"
        elif rc == 3:
            outcome = "unclear"
        else:
            named = any(m in text for m in mentions)
            outcome = "clean" if text.strip() and len(err) <= MAX_MESSAGE and named else "unclear"
        if after is not None and not timed_out:
            outcome = after(out, err) or outcome
        self.results.append({"class": cls, "input": name, "outcome": outcome, "seconds": round(secs, 3),
                             "rc": rc, "message": text.strip()[:300]})

    def file(self, name, content):
        self.counter += 1
        path = os.path.join(self.work, "%04d-%s" % (self.counter, name))
        with open(path, "wb") as f:
            f.write(content)
        return path

    # ---- model files ----------------------------------------------------------
    def inspect(self, cls, name, image, expect="reject", base=None):
        path = self.file(name + ".safetensors", image)
        same = None
        if base is not None:
            same = lambda: self.describe(path) == self.describe(base)  # noqa: E731
        self.judge(cls, name, ["inspect", "--file", path], expect, [os.path.basename(path)], same)

    def describe(self, path):
        """What a consumer would serve: tensors, the metadata Viper reads, the data bytes."""
        rc, out, _, _, _ = self.run(["inspect", "--file", path, "--json", "-"])
        if rc != 0:
            return None
        j = json.loads(out)
        meta = {k: v for k, v in j.get("metadata", {}).items() if not k.endswith("checksum")}
        with open(path, "rb") as f:
            _, data = split_image(f.read())
        return (json.dumps(j.get("tensors"), sort_keys=True), json.dumps(meta, sort_keys=True), data)

    def model_classes(self, per_class):
        corpus = os.path.join(self.root, "fuzz", "corpus", "safetensors")
        # Format 2 files: their header checksum covers the tensor table and the
        # metadata. (A legacy file's checksum covers the data only, so a header
        # edit in one is served with "data only (legacy)": by design, not swept.)
        bases = [os.path.join(corpus, n) for n in ("valid-v2-table.safetensors", "valid-v2-all-dtypes.safetensors")]
        images = [open(b, "rb").read() for b in bases]
        r = self.rng

        # 1. Deep nesting, in every place a value can stand.
        depths = [65, 100, 1000, 10000, 100000, 600000]
        shapes = [
            lambda d: "[" * d,
            lambda d: "[" * d + "]" * d,
            lambda d: '{"a":' * d + "1" + "}" * d,
            lambda d: '{"__metadata__":{"k":' + "[" * d + "}}",
            lambda d: '{"t":{"dtype":"U8","shape":' + "[" * d + "]" * d + ',"data_offsets":[0,0]}}',
            lambda d: '{"t":{"dtype":"U8","shape":[0],"data_offsets":[0,0],"x":' + "[" * d + "}}",
        ]
        cases = [(d, s) for d in depths for s in range(len(shapes))]
        for d, s in r.sample(cases, min(per_class, len(cases))):
            self.inspect("deep-nesting", "nest-%d-%d" % (s, d), safetensors_image(shapes[s](d)))

        # 2. Counts: tensors and metadata entries around and past the caps (linear time).
        def tensors(n):
            return "{" + ",".join('"t%d":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}' % i for i in range(n)) + "}"

        def metadata(n):
            return '{"__metadata__":{' + ",".join('"k%d":"v"' % i for i in range(n)) + "}}"
        counts = [("tensors-1e5", tensors(100000), "any"), ("tensors-1e6+1", tensors(1000001), "reject"),
                  ("metadata-1e5", metadata(100000), "any"), ("metadata-2e5", metadata(200000), "reject"),
                  ("metadata-5e5", metadata(500000), "reject")]
        for name, header, expect in counts[:max(2, per_class)]:
            self.inspect("many-keys", name, safetensors_image(header), expect)

        # 3. Header edits a flipped bit or a careless tool could make.
        edits = [
            ("transposed", '"shape":[2,3]', '"shape":[3,2]'),
            ("f32-to-i32", '"dtype":"F32"', '"dtype":"I32"'),
            ("renamed", '"w":{', '"v":{'),
            ("renamed", '"t_I8"', '"t_I9"'),
            ("iteration", '"viper.iteration":"1200"', '"viper.iteration":"1300"'),
            ("iteration", '"viper.iteration":"100"', '"viper.iteration":"900"'),
            ("shape", '"shape":[2,3],"data_offsets":[0,6]', '"shape":[3,2],"data_offsets":[0,6]'),
            ("version", '"viper.version":"7"', '"viper.version":"8"'),
            ("offsets", '"data_offsets":[24,30]', '"data_offsets":[24,29]'),
            ("u8-to-i8", '"dtype":"U8"', '"dtype":"I8"'),
            ("bool-to-u8", '"dtype":"BOOL"', '"dtype":"U8"'),
        ]
        done = 0
        for label, old, new in edits:
            for base, image in zip(bases, images):
                header, data = split_image(image)
                h = header.decode()
                if old in h and done < per_class:
                    self.inspect("header-edit", label, safetensors_image(h.replace(old, new, 1), data), base=base)
                    done += 1

        # 4. One flipped bit in the data section.
        for i in range(per_class):
            k = r.randrange(len(bases))
            header, data = split_image(images[k])
            if not data:
                continue
            b = bytearray(data)
            pos = r.randrange(len(b))
            b[pos] ^= 1 << r.randrange(8)
            self.inspect("data-flip", "data-bit-%d" % pos, safetensors_image(header, bytes(b)), base=bases[k])

        # 5. One flipped bit anywhere in the header.
        for i in range(per_class):
            k = r.randrange(len(bases))
            header, data = split_image(images[k])
            b = bytearray(header)
            pos = r.randrange(len(b))
            b[pos] ^= 1 << r.randrange(8)
            self.inspect("header-flip", "header-bit-%d" % pos, safetensors_image(bytes(b), data), base=bases[k])

        # 6. Edits that would switch verification off.
        header, data = split_image(images[0])
        h = header.decode()
        off = []
        for key in ("viper.checksum", "viper.header_checksum", "viper.format", "viper.version"):
            at = h.index('"%s"' % key) + 1
            for j in range(len(key)):
                if key[j].isalpha():
                    off.append(("case-%s-%d" % (key, j), h[:at + j] + key[j].upper() + h[at + j + 1:]))
        off.append(("duplicate-metadata", h.rstrip()[:-1] + ',"__metadata__":{}}'))
        off.append(("duplicate-tensor", h.rstrip()[:-1] + ',"w":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}}'))
        off.append(("duplicate-field", h.replace('"dtype":"F32"', '"dtype":"F32","dtype":"I32"', 1)))
        off.append(("duplicate-meta-key", h.replace('"viper.format":"2"', '"viper.format":"2","viper.format":"1"')))
        off.append(("no-data-checksum", re.sub(r'"viper.checksum":"[0-9a-f]+",', "", h)))
        off.append(("no-header-checksum", re.sub(r',"viper.header_checksum":"[0-9a-f]+"', "", h)))
        off.append(("format-1", h.replace('"viper.format":"2"', '"viper.format":"1"')))
        off.append(("no-format", re.sub(r',"viper.format":"2"', "", h)))
        for name, edited in r.sample(off, min(per_class, len(off))):
            self.inspect("verification-off", name, safetensors_image(edited.encode(), data), base=bases[0])

        # 7. Framing: truncation, the length prefix, trailing bytes.
        frames = []
        for base_image in images:
            for cut in r.sample(range(1, len(base_image)), 4):
                frames.append(("truncated-%d" % cut, base_image[:cut]))
        img = images[0]
        n = struct.unpack("<Q", img[:8])[0]
        for label, value in (("n-zero", 0), ("n-huge", 2**63), ("n-max", 2**64 - 1), ("n-past-end", len(img)),
                             ("n-minus-one", n - 1), ("n-plus-one", n + 1), ("n-100mb", 100 << 20)):
            frames.append((label, struct.pack("<Q", value) + img[8:]))
        frames.append(("trailing-bytes", img + b"\0" * 7))
        frames.append(("empty", b""))
        frames.append(("seven-bytes", img[:7]))
        for name, image in r.sample(frames, min(per_class, len(frames))):
            self.inspect("framing", name, image, base=bases[0])

        # 8. Unbounded values: the message quotes an excerpt only.
        big = "x" * (1 << 20)
        unbounded = [
            ("long-name", '{"%s":{"dtype":"Q8","shape":[1],"data_offsets":[0,1]}}' % big),
            ("long-dtype", '{"t":{"dtype":"%s","shape":[1],"data_offsets":[0,1]}}' % big),
            ("long-metadata", '{"__metadata__":{"viper.version":"%s"}}' % big),
            ("long-number", '{"t":{"dtype":"U8","shape":[%s],"data_offsets":[0,1]}}' % ("9" * 100000)),
            ("unterminated", '{"t":"' + big),
        ]
        for name, header in unbounded[:max(2, per_class)]:
            self.inspect("unbounded-values", name, safetensors_image(header))

    # ---- training logs ----------------------------------------------------------
    def log(self, cls, name, content, expect="reject", extra=()):
        path = self.file(name, content)
        self.judge(cls, name, ["log-info", "--log", path] + list(extra), expect, [os.path.basename(path)])

    def log_classes(self, per_class):
        r = self.rng
        good = [(i, 2.0 / (1 + 0.01 * i)) for i in range(1, 41)]

        def csv(rows, header="iteration,loss"):
            return (header + "\n" + "".join(",".join(str(v) for v in row) + "\n" for row in rows)).encode()

        def jsonl(rows):
            return "".join('{"step": %s, "loss": %s}\n' % row for row in rows).encode()

        # 9. Numbers out of range where an integer or a finite value is needed.
        bad_numbers = ["inf", "-inf", "nan", "NaN", "1e19", "-1e19", "9.3e18", "1e308", "1e999", "-0.5e400"]
        cases = []
        for v in bad_numbers:
            for col in ("iteration", "loss"):
                for fmt in ("csv", "jsonl"):
                    cases.append((v, col, fmt))
            cases.append((v, "epoch", "csv"))
        # A loss may be any finite number (1e308 is odd, not out of range).
        cases = [c for c in cases if c[1] != "loss" or c[0] not in ("1e19", "-1e19", "9.3e18", "1e308")]
        for v, col, fmt in r.sample(cases, min(per_class, len(cases))):
            rows = [list(x) for x in good]
            at = r.randrange(len(rows))
            name = "%s-%s-%s.%s" % (col, v, at, fmt)
            if col == "epoch":
                data = csv([[x[0], 0 if j != at else v, x[1]] for j, x in enumerate(rows)], "iteration,epoch,loss")
            else:
                rows[at][0 if col == "iteration" else 1] = v
                if fmt == "csv":
                    data = csv(rows)
                else:
                    quoted = [(a if a not in ("inf", "-inf", "nan", "NaN") else '"%s"' % a,
                               b if b not in ("inf", "-inf", "nan", "NaN") else '"%s"' % b) for a, b in rows]
                    data = jsonl(quoted)
            # A non-finite loss is a diverged model by default (kept as +inf);
            # refused under --non-finite reject, which is what is swept here.
            extra = ["--non-finite", "reject"] if col == "loss" else []
            self.log("number-range", name, data, extra=extra)

        # 10. Bytes that do not belong in a number.
        junk = ["2\x000", "0x10", "1e", "--1", "1..5", "1 2", "\x01", "\xff", "1e5e5", "+-3"]
        for v in r.sample(junk, min(per_class, len(junk))):
            rows = [list(x) for x in good]
            rows[r.randrange(len(rows))][r.randrange(2)] = v
            self.log("bytes-in-numbers", "junk-%d.csv" % ord(v[-1]), csv(rows).replace(b"\xc3\xbf", b"\xff"))

        # 11. Wall times that are not a clock.
        clocks = []
        for label, times in (("decreasing", [100 - i for i in range(40)]), ("negative", [-1 - i for i in range(40)]),
                             ("nan", [float(i) if i != 7 else "nan" for i in range(40)]),
                             ("inf", [i if i != 9 else "inf" for i in range(40)]),
                             ("step-back", [float(i) if i != 20 else 3.0 for i in range(40)])):
            clocks.append((label, csv([[g[0], g[1], t] for g, t in zip(good, times)], "iteration,loss,time")))
        for label, data in clocks[:max(2, per_class)]:
            self.log("wall-time", "time-%s.csv" % label, data)

        # 12. Structure: limits, encodings, garbage. Some are valid (any).
        structure = [
            ("long-line.csv", csv(good).replace(b"\n", b"," + b"9" * (2 << 20) + b"\n", 1), "reject"),
            ("wide-header.csv", (",".join(["iteration", "loss"] + ["c%d" % i for i in range(100000)]) + "\n1,2\n").encode(), "any"),
            ("deep.jsonl", ('{"step": 1, "loss": ' + "[" * 100000 + "\n").encode(), "reject"),
            ("deep-object.json", ("{\"a\":" * 100000).encode(), "reject"),
            ("empty.csv", b"", "reject"),
            ("header-only.csv", b"iteration,loss\n", "reject"),
            ("bom.csv", b"\xef\xbb\xbf" + csv(good), "any"),
            ("cr-only.csv", csv(good).replace(b"\n", b"\r"), "any"),
            ("nul-lines.csv", csv(good).replace(b"\n", b"\0\n"), "reject"),
            ("utf16.csv", csv(good).decode().encode("utf-16"), "reject"),
            ("binary-1.csv", bytes(r.randrange(256) for _ in range(4096)), "reject"),
            ("binary-2.jsonl", bytes(r.randrange(256) for _ in range(4096)), "reject"),
            ("binary-3", bytes(r.randrange(256) for _ in range(65536)), "reject"),
            ("bad.gz", b"\x1f\x8b\x08\x00" + bytes(r.randrange(256) for _ in range(512)), "reject"),
            ("summary-only.json", b'{"log_history": [{"train_runtime": 10.0, "train_loss": 1.0, "step": 100}]}', "reject"),
            ("trainer-state-no-history.json", b'{"global_step": 10}', "reject"),
        ]
        for name, data, expect in r.sample(structure, min(per_class, len(structure))):
            self.log("structure", name, data, expect)
        self.judge("structure", "/dev/zero", ["log-info", "--log", "/dev/zero"], "reject", ["/dev/zero"])

        # 13. One flipped bit in a TensorBoard event file (CRC-checked framing).
        events = os.path.join(self.root, "datasets", "testdata", "tb-pytorch")
        event_files = [os.path.join(events, f) for f in sorted(os.listdir(events))]
        base = open(event_files[0], "rb").read()
        for i in range(per_class):
            b = bytearray(base)
            pos = r.randrange(len(b))
            b[pos] ^= 1 << r.randrange(8)
            self.log("tfevents-flip", "events.out.tfevents.%d.host.%d" % (pos, i), bytes(b))

    # ---- options --------------------------------------------------------------
    def option_classes(self, per_class):
        r = self.rng
        log = os.path.join(self.root, "datasets", "logs", "sgd-h32.csv.gz")
        numeric = ["--requests", "--request-interval-s", "--model-bytes", "--total-iterations",
                   "--slowdown-budget-s", "--price-per-slowdown-s", "--min-spacing", "--poll-period-s",
                   "--stall-s", "--delay-s", "--drift", "--seconds-per-iteration", "--warmup", "--seed",
                   "--gate-z", "--change-threshold", "--max-rows", "--max-line-bytes"]
        invalid = ["nan", "-inf", "inf", "-1", "abc", "", "1e309", "1,5", "--", "%original_token%"]
        absurd = ["1e30", "1e-12", "1000000000000", "9223372036854775808", "0", "0x10"]
        # Documented meanings, not errors: a negative budget is "no bound".
        valid = {("--slowdown-budget-s", "-1"), ("--slowdown-budget-s", "-inf")}
        cases = [(o, v, "any" if (o, v) in valid else "reject") for o in numeric for v in invalid]
        cases += [(o, v, "any") for o in numeric for v in absurd]
        for opt, value, expect in r.sample(cases, min(per_class * 3, len(cases))):
            cmd = r.choice(["plan", "simulate"])
            args = [cmd, "--log", log, opt, value, "--strategies" if cmd == "simulate" else "--strategy", "epoch"]
            self.judge("option-values", "%s %s %s" % (cmd, opt, value), args, expect, [opt])
        # Paths that are not UTF-8; a failed run leaves no partial JSON.
        weird = self.file("latin1_\xe9.csv".encode("latin-1").decode("utf-8", "surrogateescape"),
                          b"iteration,loss\n" + b"".join(b"%d,%f\n" % (i, 2.0 / i) for i in range(1, 60)))
        out = os.path.join(self.work, "out_\udce9.json")
        self.judge("paths", "latin-1 log and json names", ["log-info", "--log", weird, "--json", out], "any",
                   [os.path.basename(weird)])
        if os.path.exists(out):
            try:
                json.load(open(out))
            except ValueError:
                self.results[-1]["outcome"] = "crash"
                self.results[-1]["message"] = "a partial JSON file was left at " + out

    # ---- planted links and FIFOs (issue 26) ------------------------------------
    def filesystem_classes(self, per_class):
        """A directory another user can write into: links planted at the
        names the CLI writes (the pid-named temporaries of old, the final
        name), links and FIFOs under a model version's name, tf-serving
        version directories that are links elsewhere."""
        r = self.rng
        corpus = os.path.join(self.root, "fuzz", "corpus", "safetensors")
        good = open(os.path.join(corpus, "valid-v2-spec.safetensors"), "rb").read()  # viper.version 3
        log = os.path.join(self.root, "datasets", "logs", "sgd-h32.csv.gz")

        def fresh(tag):
            self.counter += 1
            d = os.path.join(self.work, "%04d-%s" % (self.counter, tag))
            os.makedirs(d)
            return d

        def secret_file(d):
            path = os.path.join(d, "secret")
            with open(path, "wb") as f:
                f.write(SECRET)
            os.chmod(path, 0o600)
            return path

        def untouched(path):
            def check(out, err):
                try:
                    return None if open(path, "rb").read() == SECRET else "written-outside"
                except OSError:
                    return "written-outside"
            return check

        # 1. Links planted at every temporary name an output used (pid-named:
        # the wrapper shell plants them under its own pid, then execs viper).
        plant = 'for n in $1; do ln -s "$2" "$(printf %s "$n" | sed "s/@PID@/$$/g")"; done; shift 2; exec "$@"'
        outputs = [
            ("plan --json", lambda d: ["plan", "--log", log, "--strategy", "epoch", "--json", d + "/o.json"], ["o.json"]),
            ("log-info --json", lambda d: ["log-info", "--log", log, "--json", d + "/o.json"], ["o.json"]),
            ("simulate outputs", lambda d: ["simulate", "--log", log, "-q", "--strategies", "epoch,oracle", "--trace-strategy", "oracle",
                                            "--json", d + "/o.json", "--trace", d + "/t.json",
                                            "--requests-csv", d + "/r.csv"], ["o.json", "t.json", "r.csv"]),
            ("inspect --json", lambda d: ["inspect", "--file", os.path.join(corpus, "valid-v2-table.safetensors"),
                                          "--json", d + "/o.json"], ["o.json"]),
        ]
        for i in range(per_class):
            what, argv, names = outputs[i % len(outputs)]
            d = fresh("links")
            secret = secret_file(fresh("outside"))
            planted = " ".join("%s/.%s.tmp.@PID@" % (d, n) for n in names)
            if i % 2:  # also the final name itself: replaced, never written through
                planted += " " + " ".join("%s/%s" % (d, n) for n in names)
            self.judge("planted-links", what, argv(d), "any", [d], prefix=["sh", "-c", plant, "sh", planted, secret],
                       after=untouched(secret))

        # 2. FIFOs and links under a version's name: model-dir and inspect
        # return promptly, read nothing through a link, quote no bytes.
        for i in range(per_class):
            d = fresh("fifos")
            with open(os.path.join(d, "model-v3.safetensors"), "wb") as f:
                f.write(good)
            secret = secret_file(fresh("outside"))
            v = 4 + r.randrange(100)
            kind = i % 3
            target = os.path.join(d, "model-v%d.safetensors" % v)
            if kind == 0:
                os.mkfifo(target)
            elif kind == 1:
                os.symlink(secret, target)
            else:
                os.symlink("/dev/zero", target)

            def no_leak(out, err, secret=secret):
                if SECRET[:12] in out or SECRET[:12] in err:
                    return "leaked"
                return untouched(secret)(out, err)
            self.judge("fifos-links", "model-dir, version %d a %s" % (v, ["FIFO", "link to a secret", "link to /dev/zero"][kind]),
                       ["model-dir", "--dir", d, "--keep", "1"], "reject", [target], after=no_leak)
            self.judge("fifos-links", "inspect a %s" % ["FIFO", "link to a secret", "link to /dev/zero"][kind],
                       ["inspect", "--file", target], "reject", [os.path.basename(target)], after=no_leak)

        # 3. tf-serving version directories that are links elsewhere, and
        # flat versions that are links: --keep never deletes outside.
        for i in range(per_class):
            d = fresh("tfs")
            elsewhere = fresh("elsewhere")
            victim = os.path.join(elsewhere, "model.safetensors")
            with open(victim, "wb") as f:
                f.write(legacy_image(1))
            newest = 10 + r.randrange(100)
            os.makedirs(os.path.join(d, str(newest)))
            with open(os.path.join(d, str(newest), "model.safetensors"), "wb") as f:
                f.write(legacy_image(newest))
            for v in r.sample(range(newest), 1 + i % 3):
                os.symlink(elsewhere, os.path.join(d, str(v)))

            def kept(out, err, victim=victim):
                return None if os.path.exists(victim) else "deleted-outside"
            self.judge("links-outside", "tf-serving --keep 1 with linked version directories",
                       ["model-dir", "--dir", d, "--layout", "tf-serving", "--keep", "1"], "any", [d], after=kept)
            flat = fresh("flat")
            with open(os.path.join(flat, "model-v9.safetensors"), "wb") as f:
                f.write(legacy_image(9))
            os.symlink(victim, os.path.join(flat, "model-v%d.safetensors" % r.randrange(9)))
            self.judge("links-outside", "flat --keep 1 with a linked version",
                       ["model-dir", "--dir", flat, "--keep", "1"], "any", [flat], after=kept)
    # ---- viper run: the model directory against other users and runs --------
    def viper_run(self, mpirun, pfs_dir, extra=(), json_out=None, csv_out=None):
        log = os.path.join(self.root, "datasets", "logs", "sgd-h32.csv.gz")
        cmd = [mpirun, "--oversubscribe", "-np", "2", self.viper, "run", "--workload", "replay", "--log", log,
               "--replay-max-iterations", "200", "--replay-time-scale", "3", "--model-bytes", "65536",
               "--transport", "pfs", "--notify", "poll", "--poll-period-s", "0.02", "--strategy", "fixed",
               "--producer-timeout-s", "20", "--consumer-timeout-s", "10", "--pfs-dir", pfs_dir] + list(extra)
        if json_out:
            cmd += ["--json", json_out]
        if csv_out:
            cmd += ["--requests-csv", csv_out]
        return cmd

    def served_elsewhere(self, json_out, csv_out):
        """Requests served with a version that is not one of the run's own
        (by version and iteration); None when the outputs are missing."""
        try:
            with open(json_out) as f:
                own = {(int(v["version"]), int(v["iteration"])) for v in json.load(f)["versions"]}
            with open(csv_out) as f:
                rows = [line.split(",") for line in f.read().splitlines()[1:] if line]
        except (OSError, ValueError, KeyError):
            return None
        return [r for r in rows if (int(r[2]), int(r[3])) not in own]

    def run_classes(self, mpirun):
        def skip(cls, why):
            print("skipped: %s: %s" % (cls, why), file=sys.stderr)
        if not mpirun or not os.access(mpirun, os.X_OK):
            for cls in ("foreign-dirs", "stale-run", "full-disk", "dead-leftovers"):
                skip(cls, "no mpirun")
            return
        env = dict(os.environ)
        if os.geteuid() == 0:
            env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
        # As for every MPI test in CTest (tests/CMakeLists.txt VIPER_MPI_ENV):
        # under an ASan build Open MPI 4.1.4's own leaks from MPI_Init would be
        # reported at exit; address and UB errors stay fatal.
        asan = env.get("ASAN_OPTIONS", "")
        env["ASAN_OPTIONS"] = (asan + ":" if asan else "") + "detect_leaks=0"
        env.setdefault("OMPI_MCA_btl_vader_single_copy_mechanism", "none")
        root = os.geteuid() == 0

        def run(cls, name, cmd, expect, mentions):
            """Runs `cmd` and judges it as judge() does (mpirun's own lines
            may follow the message: only Viper's are measured)."""
            t0 = time.monotonic()
            try:
                p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=self.timeout * 4,
                                   cwd=self.work, env=env)
                rc, err, hung = p.returncode, p.stderr.decode("utf-8", "replace"), False
            except subprocess.TimeoutExpired as e:
                rc, err, hung = None, (e.stderr or b"").decode("utf-8", "replace"), True
            secs = time.monotonic() - t0
            viper_lines = "\n".join(l for l in err.splitlines() if "viper" in l)
            if hung:
                outcome = "hang"
            elif re.search(r"terminate called|AddressSanitizer|runtime error:|Segmentation|signal 11", err):
                outcome = "crash"
            elif rc == 0:
                outcome = "ok" if expect == "any" else "accepted"
            else:
                named = any(m in viper_lines for m in mentions)
                outcome = "clean" if viper_lines.strip() and named and len(viper_lines) <= MAX_MESSAGE else "unclear"
            self.results.append({"class": cls, "input": name, "outcome": outcome, "seconds": round(secs, 3),
                                 "rc": rc, "message": (viper_lines or err).strip()[:300]})
            return self.results[-1]

        def fresh(name):
            self.counter += 1
            d = os.path.join(self.work, "%04d-%s" % (self.counter, name))
            os.mkdir(d, 0o700)
            return d

        # Foreign-owned or writable model directories, and a link to one: refused, naming the directory.
        d = fresh("writable")
        os.chmod(d, 0o777)
        run("foreign-dirs", "group/other-writable --pfs-dir", self.viper_run(mpirun, d), "reject", [d])
        d = fresh("linked")
        link = d + ".link"
        os.symlink(d, link)
        run("foreign-dirs", "--pfs-dir a symbolic link", self.viper_run(mpirun, link), "reject", [link])
        if root:
            d = fresh("foreign")
            os.chown(d, 4242, 4242)
            run("foreign-dirs", "--pfs-dir owned by another uid", self.viper_run(mpirun, d), "reject", [d])
        else:
            skip("foreign-dirs: another user's directory", "chown needs root")

        # A stale earlier run: a longer run's versions left in the directory.
        d = fresh("stale")
        first = self.viper_run(mpirun, d)
        first[first.index("--replay-max-iterations") + 1] = "400"
        first += ["--json", os.path.join(d, "..", os.path.basename(d) + "-first.json")]
        run("stale-run", "the earlier run itself", first, "any", [d])
        j, c = d + "-second.json", d + "-second.csv"
        r = run("stale-run", "a shorter run in the same directory", self.viper_run(mpirun, d, json_out=j, csv_out=c),
                "any", [d])
        if r["outcome"] == "ok":
            wrong = self.served_elsewhere(j, c)
            if wrong is None:
                r["outcome"], r["message"] = "unclear", "no --json/--requests-csv output to judge"
            elif wrong:
                r["outcome"] = "elsewhere"
                r["message"] = "%d requests served with another run's version, e.g. %s" % (len(wrong), ",".join(wrong[0]))

        # Dead producers' leftovers: a PFS temporary and a shared-memory segment of a dead pid.
        child = subprocess.Popen(["true"])
        child.wait()
        dead = child.pid
        d = fresh("dead")
        tmp = os.path.join(d, ".model-v0.safetensors.tmp-%d-0" % dead)
        with open(tmp, "wb") as f:
            f.write(b"\0" * 100000)
        seg = "/dev/shm/viper-%d-00000000deadbeef-r0-g1" % dead
        made_seg = False
        try:
            fd = os.open(seg, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
            os.ftruncate(fd, 1 << 20)
            os.close(fd)
            made_seg = True
        except OSError as e:
            skip("dead-leftovers: shared memory", str(e))
        r = run("dead-leftovers", "the next run (pfs)", self.viper_run(mpirun, d), "any", [d])
        left = [p for p in [tmp] if os.path.exists(p)]
        if made_seg:
            # A host-tier run (shm) is what makes segments: the next one removes a dead producer's.
            log = os.path.join(self.root, "datasets", "logs", "sgd-h32.csv.gz")
            host = [mpirun, "--oversubscribe", "-np", "2", self.viper, "run", "--workload", "replay", "--log", log,
                    "--replay-max-iterations", "100", "--model-bytes", "65536", "--transport", "host"]
            run("dead-leftovers", "the next run (host, shm)", host, "any", ["viper"])
            if os.path.exists(seg):
                left.append(seg)
                os.unlink(seg)
        if left:
            self.results.append({"class": "dead-leftovers", "input": "after the next run", "outcome": "leak",
                                 "seconds": 0, "rc": None, "message": "still there: " + ", ".join(left)})

        # A full disk: a 1 MiB tmpfs smaller than one version. The run must
        # fail cleanly and leave no temporary; the next run (room again) succeeds.
        if not root:
            skip("full-disk", "mounting a tmpfs needs root")
            return
        d = fresh("full")
        m = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,mode=0700", "tmpfs", d],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        if m.returncode != 0:
            skip("full-disk", "cannot mount a tmpfs: " + m.stderr.decode("utf-8", "replace").strip())
            return
        try:
            big = self.viper_run(mpirun, d)
            big[big.index("--model-bytes") + 1] = str(4 << 20)
            run("full-disk", "a version larger than the disk", big, "reject", ["No space left", d])
            left = [n for n in os.listdir(d) if ".tmp-" in n]
            if left:
                self.results.append({"class": "full-disk", "input": "after the failed run", "outcome": "leak",
                                     "seconds": 0, "rc": None, "message": "temporaries left: " + ", ".join(left)})
            run("full-disk", "the next run, with room", self.viper_run(mpirun, d), "any", [d])
        finally:
            subprocess.run(["umount", "-l", d])

    # ---- report ---------------------------------------------------------------
    def table(self):
        classes = []
        for res in self.results:
            if res["class"] not in classes:
                classes.append(res["class"])
        rows = []
        for c in classes:
            rs = [x for x in self.results if x["class"] == c]
            row = {"class": c, "inputs": len(rs), "max_seconds": max(x["seconds"] for x in rs)}
            for o in OUTCOMES:
                row[o] = sum(1 for x in rs if x["outcome"] == o)
            rows.append(row)
        return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("viper", help="the viper executable")
    ap.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."),
                    help="the source tree (seed files, shipped logs); default: this script's parent")
    ap.add_argument("--per-class", type=int, default=30, help="inputs per class (default 30)")
    ap.add_argument("--seed", type=int, default=1, help="random seed (default 1)")
    ap.add_argument("--timeout", type=float, default=30.0, help="seconds one run may take before it counts as a hang (default 30)")
    ap.add_argument("--json", help="also write every input's outcome as JSON here")
    ap.add_argument("--mpirun", default=shutil.which("mpirun") or "",
                    help="mpirun for the `viper run` classes (default: the one on PATH; empty: skip them)")
    args = ap.parse_args()
    if args.per_class < 1 or args.timeout <= 0 or not os.access(args.viper, os.X_OK):
        ap.error("need an executable viper, --per-class >= 1 and --timeout > 0")
    work = tempfile.mkdtemp(prefix="viper-hostile-")
    try:
        s = Sweep(os.path.abspath(args.viper), os.path.abspath(args.root), work, args.timeout, random.Random(args.seed))
        s.model_classes(args.per_class)
        s.log_classes(args.per_class)
        s.option_classes(args.per_class)
        s.filesystem_classes(args.per_class)
        s.run_classes(args.mpirun)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    rows = s.table()
    cols = ["class", "inputs"] + OUTCOMES + ["max_seconds"]
    print(" ".join("%-16s" % c if i == 0 else "%9s" % c for i, c in enumerate(cols)))
    for row in rows + [{"class": "total", "inputs": sum(x["inputs"] for x in rows),
                        "max_seconds": max(x["max_seconds"] for x in rows),
                        **{o: sum(x[o] for x in rows) for o in OUTCOMES}}]:
        print(" ".join("%-16s" % row[c] if i == 0 else "%9s" % row[c] for i, c in enumerate(cols)))
    bad = [x for x in s.results if x["outcome"] in BAD]
    for x in bad:
        print("%s: %s: %s (exit %s, %.1f s): %s" % (x["outcome"], x["class"], x["input"], x["rc"], x["seconds"],
                                                   x["message"][:200]), file=sys.stderr)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"schema": "viper.hostile-sweep/1", "classes": rows, "inputs": s.results}, f, indent=1)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
