#!/usr/bin/env python3
"""Writes the small real-shaped training logs in datasets/testdata/ and the
hostile inputs of the log reader's seed corpus (fuzz/corpus/log_reader/).

Standard library only (no tensorflow, no protobuf): the TensorBoard event
files are TFRecord framing (uint64 length, masked CRC-32C of the length, data,
masked CRC-32C of the data) around hand-encoded Event protobufs. Every file is
written to its format's published layout; the curves are a noisy power law
from a fixed seed, so the output is the same on every run.

Usage: make_testdata.py [TESTDATA_DIR [CORPUS_DIR]]
"""
import json
import os
import random
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = sys.argv[1] if len(sys.argv) > 1 else HERE
CORPUS = sys.argv[2] if len(sys.argv) > 2 else os.path.join(HERE, "..", "..", "fuzz", "corpus", "log_reader")

T0 = 1700000000.0  # a Unix time for the TensorBoard wall times


def curve(step, scale=1.0, floor=0.25):
    """A learning curve: loss falling as a power of the step towards a floor."""
    return floor + scale * 2.0 * (1.0 + step / 50.0) ** -0.6


def write(path, text, binary=False):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if binary:
        with open(path, "wb") as f:
            f.write(text)
    else:
        with open(path, "w", newline="", encoding="utf-8") as f:
            f.write(text)


# --- CRC-32C and TFRecord -------------------------------------------------

_TABLE = []
for i in range(256):
    c = i
    for _ in range(8):
        c = (0x82F63B78 ^ (c >> 1)) if c & 1 else c >> 1
    _TABLE.append(c)


def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = _TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def masked_crc(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def tfrecord(payload):
    length = struct.pack("<Q", len(payload))
    return length + struct.pack("<I", masked_crc(length)) + payload + struct.pack("<I", masked_crc(payload))


# --- protobuf wire format (the few fields an Event needs) -----------------

def varint(n):
    n &= 0xFFFFFFFFFFFFFFFF
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def key(field, wire):
    return varint(field << 3 | wire)


def f_bytes(field, data):
    return key(field, 2) + varint(len(data)) + data


def f_varint(field, n):
    return key(field, 0) + varint(n)


def f_double(field, x):
    return key(field, 1) + struct.pack("<d", x)


def f_float(field, x):
    return key(field, 5) + struct.pack("<f", x)


def event(wall, step, summary=None, file_version=None):
    e = f_double(1, wall)
    if step:
        e += f_varint(2, step)
    if file_version is not None:
        e += f_bytes(3, file_version.encode())
    if summary is not None:
        e += f_bytes(5, summary)
    return e


def simple_value(tag, x):
    """Summary.Value{tag, simple_value}: what torch.utils.tensorboard writes."""
    return f_bytes(1, f_bytes(1, tag.encode()) + f_float(2, x))


def scalars_metadata():
    # SummaryMetadata{plugin_data{plugin_name: "scalars"}}
    return f_bytes(9, f_bytes(1, f_bytes(1, b"scalars")))


def tensor_value(tag, x, how):
    """Summary.Value{tag, metadata, tensor}: what TF2's tf.summary.scalar writes."""
    t = f_varint(1, 1)  # dtype DT_FLOAT
    t += f_bytes(2, b"")  # tensor_shape: rank 0
    if how == "content":
        t += f_bytes(4, struct.pack("<f", x))
    else:  # packed float_val
        t += f_bytes(5, struct.pack("<f", x))
    return f_bytes(1, f_bytes(1, tag.encode()) + scalars_metadata() + f_bytes(8, t))


def image_value(tag):
    """A string tensor (an image summary): not a scalar, to be skipped."""
    t = f_varint(1, 7) + f_bytes(2, f_bytes(2, f_varint(1, 3))) + f_bytes(8, b"\x89PNG...")
    meta = f_bytes(9, f_bytes(1, f_bytes(1, b"images")))
    return f_bytes(1, f_bytes(1, tag.encode()) + meta + f_bytes(8, t))


def histogram_value(tag):
    """Summary.Value{histo}: skipped."""
    histo = f_double(1, -1.0) + f_double(2, 1.0) + f_double(3, 100.0)
    return f_bytes(1, f_bytes(1, tag.encode()) + f_bytes(5, histo))


# --- the logs ---------------------------------------------------------------

def keras(rng):
    # Keras CSVLogger: epoch, then the metrics in sorted order; no time.
    lines = ["epoch,accuracy,loss,val_accuracy,val_loss"]
    for e in range(17):
        loss = curve(e * 300, 0.9) + rng.gauss(0, 0.01)
        val = curve(e * 300, 0.9, 0.3) + rng.gauss(0, 0.01)
        lines.append("%d,%.4f,%.4f,%.4f,%.4f" % (e, 1 - loss / 3, loss, 1 - val / 3, val))
    write(os.path.join(OUT, "keras_training.log"), "\n".join(lines) + "\n")


def lightning(rng):
    # Lightning CSVLogger metrics.csv: train rows every 50 steps, val rows at
    # the end of each epoch (200 steps), on separate rows of the same step.
    lines = ["epoch,step,train_loss,val_acc,val_loss"]
    for step in range(49, 2000, 50):
        epoch = step // 200
        lines.append("%d,%d,%.5f,," % (epoch, step, curve(step) + rng.gauss(0, 0.03)))
        if (step + 1) % 200 == 0:
            val = curve(step, 1.0, 0.3) + rng.gauss(0, 0.005)
            lines.append("%d,%d,,%.4f,%.5f" % (epoch, step, 1 - val / 3, val))
    write(os.path.join(OUT, "lightning", "metrics.csv"), "\n".join(lines) + "\n")


def huggingface(rng):
    history = []
    steps, per_epoch = 600, 200
    for step in range(10, steps + 1, 10):
        history.append({"epoch": round(step / per_epoch, 4), "grad_norm": round(2.5 * curve(step), 4),
                        "learning_rate": 5e-05 * (1 - step / steps), "loss": round(curve(step) + rng.gauss(0, 0.03), 4),
                        "step": step})
        if step % 100 == 0:
            val = curve(step, 1.0, 0.3) + rng.gauss(0, 0.005)
            history.append({"epoch": round(step / per_epoch, 4), "eval_accuracy": round(1 - val / 3, 4),
                            "eval_loss": round(val, 4), "eval_runtime": 3.21, "eval_samples_per_second": 311.5,
                            "eval_steps_per_second": 38.9, "step": step})
    # The run summary: train_loss is the mean over the run, not a point.
    history.append({"epoch": 3.0, "step": steps, "total_flos": 1.25e15, "train_loss": 0.9123,
                    "train_runtime": 201.3, "train_samples_per_second": 23.8, "train_steps_per_second": 2.98})
    state = {"best_metric": None, "best_model_checkpoint": None, "epoch": 3.0, "eval_steps": 100,
             "global_step": steps, "is_hyper_param_search": False, "is_local_process_zero": True,
             "is_world_process_zero": True, "log_history": history, "logging_steps": 10, "max_steps": steps,
             "num_input_tokens_seen": 0, "num_train_epochs": 3, "save_steps": 500, "total_flos": 1.25e15,
             "train_batch_size": 8, "trial_name": None, "trial_params": None}
    write(os.path.join(OUT, "hf", "trainer_state.json"), json.dumps(state, indent=2, sort_keys=True) + "\n")


def tensorboard_exports(rng):
    # TensorBoard's "download CSV/JSON" of one scalar series:
    # run-<run>-tag-<tag>.{csv,json}; Wall time is a Unix time.
    rows = []
    wall = T0
    for step in range(10, 2001, 10):
        wall += 0.05 * 10 * (1 + rng.uniform(-0.1, 0.1))
        rows.append((wall, step, curve(step) + rng.gauss(0, 0.03)))
    csv = ["Wall time,Step,Value"] + ["%.3f,%d,%.6f" % r for r in rows]
    write(os.path.join(OUT, "run-version_0-tag-train_loss.csv"), "\n".join(csv) + "\n")
    write(os.path.join(OUT, "run-version_0-tag-train_loss.json"), json.dumps([[round(w, 3), s, round(v, 6)] for w, s, v in rows]))
    val = [(T0 + 0.5 * s, s, curve(s, 1.0, 0.3) + rng.gauss(0, 0.005)) for s in range(100, 2001, 100)]
    csv = ["Wall time,Step,Value"] + ["%.3f,%d,%.6f" % r for r in val]
    write(os.path.join(OUT, "run-version_0-tag-val_loss.csv"), "\n".join(csv) + "\n")


def tfevents_pytorch(rng):
    # torch.utils.tensorboard.SummaryWriter: simple_value scalars.
    out = tfrecord(event(T0, 0, file_version="brain.Event:2"))
    wall = T0
    for step in range(10, 2001, 10):
        wall += 0.05 * 10 * (1 + rng.uniform(-0.1, 0.1))
        out += tfrecord(event(wall, step, simple_value("train/loss", curve(step) + rng.gauss(0, 0.03))))
        out += tfrecord(event(wall, step, simple_value("lr", 0.1 * (1 - step / 2000))))
        if step % 100 == 0:
            out += tfrecord(event(wall + 0.2, step, simple_value("val/loss", curve(step, 1.0, 0.3) + rng.gauss(0, 0.005))))
            out += tfrecord(event(wall + 0.2, step, histogram_value("weights")))
    write(os.path.join(OUT, "tb-pytorch", "events.out.tfevents.1700000000.host.4242.0"), out, binary=True)


def tfevents_tf2(rng):
    # TF2's tf.summary.scalar: tensor-valued scalars with the scalars plugin,
    # as tensor_content and as float_val; an image summary to be skipped.
    out = tfrecord(event(T0, 0, file_version="brain.Event:2"))
    wall = T0
    for step in range(1, 41):
        wall += 25.0 * (1 + rng.uniform(-0.05, 0.05))
        s = step * 50
        out += tfrecord(event(wall, s, tensor_value("epoch_loss", curve(s) + rng.gauss(0, 0.01), "content")))
        out += tfrecord(event(wall, s, tensor_value("epoch_val_loss", curve(s, 1.0, 0.3) + rng.gauss(0, 0.005), "float_val")))
        if step % 10 == 0:
            out += tfrecord(event(wall, s, image_value("samples")))
    write(os.path.join(OUT, "tb-tf2", "events.out.tfevents.1700000000.tf2host.777.0.v2"), out, binary=True)


def detectron2(rng):
    # detectron2 metrics.json: sorted keys, one object per line, every 20
    # iterations; 'time' is seconds per iteration (not a clock); evaluation
    # entries at the end share the last iteration.
    lines = []
    total = 1000
    for it in range(19, total, 20):
        t = 0.35 + rng.uniform(-0.03, 0.03)
        parts = {"loss_box_reg": 0.3 * curve(it), "loss_cls": 0.4 * curve(it), "loss_rpn_cls": 0.1 * curve(it),
                 "loss_rpn_loc": 0.05 * curve(it)}
        total_loss = sum(parts.values()) + rng.gauss(0, 0.01)
        entry = {"data_time": round(0.002 + rng.uniform(0, 0.001), 6), "eta_seconds": round(t * (total - it - 1), 2),
                 "fast_rcnn/cls_accuracy": round(0.9, 4), "iteration": it, "lr": 0.00025,
                 "rank_data_time": 0.0021, "total_loss": round(total_loss, 5)}
        entry.update({k: round(v, 5) for k, v in parts.items()})
        if it >= 39:
            entry["time"] = round(t, 5)  # the first window has no timing yet
        lines.append(json.dumps(entry, sort_keys=True))
    lines.append(json.dumps({"bbox/AP": 31.2, "bbox/AP50": 52.4, "bbox/AP75": 32.9, "iteration": total - 1}, sort_keys=True))
    write(os.path.join(OUT, "detectron2", "metrics.json"), "\n".join(lines) + "\n")


def eval_only(rng):
    # A large model's periodic evaluation: 40 eval points over 10^5 steps, no
    # training loss, no time.
    lines = ["step,eval_loss"]
    for k in range(1, 41):
        s = k * 2500
        lines.append("%d,%.5f" % (s, 2.0 + 3.0 * (s / 1000.0) ** -0.4 + rng.gauss(0, 0.002)))
    write(os.path.join(OUT, "eval_only.csv"), "\n".join(lines) + "\n")


def quirks(rng):
    body = []
    for i in range(1, 61):
        body.append("%d,%.5f,%.4f" % (i * 10, curve(i * 10) + rng.gauss(0, 0.02), i * 10 * 0.05))
    # Mixed-case names (TensorBoard-style 'Step', 'Loss'), UTF-8 BOM, CR-only line ends.
    write(os.path.join(OUT, "mixed_case.csv"), "\n".join(["Step,Loss,Wall_Time"] + body) + "\n")
    write(os.path.join(OUT, "bom.csv"), "\ufeff" + "\n".join(["iteration,loss,time"] + body) + "\n")
    write(os.path.join(OUT, "cr_only.csv"), "\r".join(["iteration,loss,wall_time"] + body) + "\r")


def hostile():
    """One file per class of hostile input (each <= 1 MB)."""
    h = lambda name, data, binary=False: write(os.path.join(CORPUS, "hostile-" + name), data, binary)
    h("iteration-inf.csv", "iteration,loss\n1,2.0\ninf,1.9\n")
    h("iteration-1e19.csv", "iteration,loss\n1,2.0\n1e19,1.9\n")
    h("iteration-nan.jsonl", '{"step": 1, "loss": 2.0}\n{"step": NaN, "loss": 1.9}\n{"step": "nan", "loss": 1.9}\n')
    h("epoch-nan.csv", "epoch,loss,val_loss\n0,2.0,2.1\nnan,1.9,2.0\n")
    h("epoch-1e30.csv", "step,epoch,loss\n1,0,2.0\n2,1e30,1.9\n")
    h("nul-in-number.csv", "iteration,loss\n1,2\x00.0\n2,1.9\n")
    h("negative-wall-time.csv", "iteration,loss,wall_time\n1,2.0,-0.01\n2,1.9,0.5\n")
    h("decreasing-wall-time.csv", "iteration,loss,time\n1,2.0,0.35\n2,1.9,0.33\n3,1.8,0.36\n")
    h("wide-header.csv", ",".join("c%d" % i for i in range(100000)) + "\n" + ",".join("1" for _ in range(100000)) + "\n")
    h("long-line.csv", "iteration,loss\n1," + "9" * 900000 + "\n")
    h("summary-only.jsonl", '{"train_runtime": 80.5, "train_loss": 1.3, "epoch": 1.0, "step": 200}\n')
    h("deep-nesting.json", "[" * 300000 + "]" * 300000)
    h("deep-nesting.jsonl", '{"step": 1, "loss": ' + "[" * 200000 + "\n")
    h("cr-only-number-first.csv", "0\r1\r2\r")
    write(os.path.join(CORPUS, "bom-keras.csv"), "\ufeffepoch,loss,val_loss\n0,2.0,2.1\n1,1.5,1.6\n")
    h("trainer-state-no-history.json", '{"global_step": 10, "log_history": {"step": 1}}\n')
    h("tb-json-bad-entry.json", "[[1700000000.0, 1, 2.0], [1700000001.0, \"2\", 1.9]]")
    good = tfrecord(event(T0, 0, file_version="brain.Event:2")) + tfrecord(event(T0 + 1, 10, simple_value("loss", 2.0)))
    bad_data_crc = bytearray(good)
    bad_data_crc[-1] ^= 0xFF
    h("tfevents-bad-data-crc.tfevents", bytes(bad_data_crc), True)
    bad_len_crc = bytearray(good)
    bad_len_crc[9] ^= 0x01
    h("tfevents-bad-length-crc.tfevents", bytes(bad_len_crc), True)
    h("tfevents-truncated.tfevents", good[:-7], True)
    # A record whose length is huge but whose length CRC is right.
    huge = struct.pack("<Q", 1 << 62)
    h("tfevents-huge-length.tfevents", huge + struct.pack("<I", masked_crc(huge)) + b"\x00" * 16, True)
    # Valid framing around a malformed protobuf (a length running past the end).
    h("tfevents-bad-protobuf.tfevents", tfrecord(b"\x2a\xff\xff\xff\x0f\x01"), True)
    # Only non-loss tags: the error lists the tags present.
    h("tfevents-no-loss-tag.tfevents", tfrecord(event(T0, 5, simple_value("lr", 0.1))) +
      tfrecord(event(T0, 6, simple_value("grad_norm", 3.0))), True)
    h("tfevents-negative-step.tfevents", tfrecord(event(T0, -5, simple_value("loss", 0.1))), True)


def seed_corpus():
    """The valid logs as fuzzing seeds, flattened into one directory."""
    import shutil
    for root, _, files in os.walk(OUT):
        for name in files:
            if name.endswith(".py"):
                continue
            rel = "testdata-" + os.path.relpath(os.path.join(root, name), OUT).replace(os.sep, "-")
            shutil.copyfile(os.path.join(root, name), os.path.join(CORPUS, rel))


def main():
    rng = random.Random(19)
    keras(rng)
    lightning(rng)
    huggingface(rng)
    tensorboard_exports(rng)
    tfevents_pytorch(rng)
    tfevents_tf2(rng)
    detectron2(rng)
    eval_only(rng)
    quirks(rng)
    hostile()
    seed_corpus()


if __name__ == "__main__":
    main()
