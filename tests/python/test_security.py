"""Issue 26 from Python (PFS tier, polling, no MPI): served tensors are
read-only, the metadata tensor's name is reserved, negative views keep their
sign, a refused version is retried once its file changes, an async
publisher recovers once a full disk has room again, the model directory is
private, and a consumer given a session id serves only that run's versions."""
import os
import shutil
import stat
import subprocess
import time

import pytest
import torch

import viper


def wait_until(condition, timeout_s=10.0):
    deadline = time.monotonic() + timeout_s
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.005)
    return condition()


def test_served_tensors_are_read_only(tmp_path):
    with viper.Publisher(tier="pfs", notify="poll", mode="sync", pfs_dir=tmp_path) as pub, \
            viper.Subscriber(tier="pfs", notify="poll", pfs_dir=tmp_path, poll_period_s=0.005) as sub:
        pub.publish({"weight": torch.ones(1, 8)}, 1)
        v = sub.wait_for_version(0, timeout_s=10)
        w = v.state_dict()["weight"]
        with pytest.raises(RuntimeError, match="read-only"):
            w.add_(1000)
        for write in (lambda: w[0].zero_(), lambda: w.__setitem__(0, 5.0), lambda: torch.mul(w, 2, out=w),
                      lambda: torch.nn.functional.relu(w, inplace=True), lambda: w.view(8).mul_(3)):
            with pytest.raises(RuntimeError, match="read-only"):
                write()
        assert not w.numpy().flags.writeable
        assert torch.equal(torch.nn.functional.relu(w) * 2, torch.full((1, 8), 2.0))  # reading is free
        assert torch.equal(sub.current().state_dict()["weight"], torch.ones(1, 8))
        # A copy is the consumer's own to change; load_into copies too.
        c = w.clone()
        c.add_(1)
        assert torch.equal(c, torch.full((1, 8), 2.0))
        m = torch.nn.Linear(8, 1, bias=False)
        sub.load_into(m)
        with torch.no_grad():
            m.weight.add_(1)  # the module's own parameters
        assert torch.equal(sub.current().state_dict()["weight"], torch.ones(1, 8))
        assert torch.equal(m(torch.ones(1, 8)), torch.full((1, 1), 16.0))


def test_metadata_tensor_name_is_reserved(tmp_path):
    with viper.Publisher(tier="pfs", notify="poll", mode="sync", pfs_dir=tmp_path) as pub:
        with pytest.raises(ValueError, match="reserved"):
            pub.publish({"__viper_metadata__": torch.zeros(4, dtype=torch.uint8)}, 1)
        assert not list(tmp_path.glob("model-v*.safetensors"))


def test_negative_views_are_published_with_their_sign(tmp_path):
    x = torch.arange(6, dtype=torch.float32)
    neg = torch._neg_view(x)
    assert neg.is_neg()
    with viper.Publisher(tier="pfs", notify="poll", mode="sync", pfs_dir=tmp_path) as pub, \
            viper.Subscriber(tier="pfs", notify="poll", pfs_dir=tmp_path, poll_period_s=0.005) as sub:
        pub.publish({"n": neg}, 1)
        v = sub.wait_for_version(0, timeout_s=10)
        assert torch.equal(v.state_dict()["n"], -x)
    viper.save_file({"n": neg}, tmp_path / "n.safetensors")
    assert torch.equal(viper.load_file(tmp_path / "n.safetensors")["n"], -x)


def test_refused_version_is_retried_once_its_file_changes(tmp_path):
    src, dst = tmp_path / "src", tmp_path / "dst"
    with viper.Publisher(tier="pfs", notify="poll", mode="sync", pfs_dir=src, pfs_keep_versions=0) as pub:
        for it in range(3):
            pub.publish({"w": torch.full((1000,), float(it))}, it)
    dst.mkdir(mode=0o700)
    shutil.copy(src / "model-v0.safetensors", dst / "model-v0.safetensors")
    good = (src / "model-v2.safetensors").read_bytes()
    (dst / "model-v2.safetensors").write_bytes(good[: len(good) // 2])  # truncated: refused
    with viper.Subscriber(tier="pfs", notify="poll", pfs_dir=dst, poll_period_s=0.005) as sub:
        sub.wait_for_version(0, timeout_s=10)
        assert wait_until(lambda: sub.summary()["rejected"] >= 1)
        assert sub.current().version == 0
        tmp = dst / ".fixed"
        tmp.write_bytes(good)
        os.replace(tmp, dst / "model-v2.safetensors")  # fixed in place
        v = sub.wait_for_version(2, timeout_s=10)
        assert torch.equal(v.state_dict()["w"], torch.full((1000,), 2.0))


def test_publisher_creates_a_missing_directory_privately(tmp_path):
    d = tmp_path / "a" / "b"
    old = os.umask(0)
    try:
        with viper.Publisher(tier="pfs", notify="poll", mode="sync", pfs_dir=d) as pub:
            pub.publish({"w": torch.zeros(4)}, 1)
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(d).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(d / "model-v0.safetensors").st_mode) == 0o600


def test_a_directory_others_may_write_into_is_refused(tmp_path):
    os.chmod(tmp_path, 0o777)
    with pytest.raises(Exception, match="group or others may write"):
        viper.Publisher(tier="pfs", notify="poll", mode="sync", pfs_dir=tmp_path)
    with pytest.raises(Exception, match="group or others may write"):
        viper.Subscriber(tier="pfs", notify="poll", pfs_dir=tmp_path)
    os.chmod(tmp_path, 0o700)


def test_a_consumer_serves_only_its_runs_versions(tmp_path):
    mine, theirs = viper.new_session_id(), viper.new_session_id()
    assert len(mine) == 32 and mine != theirs
    with viper.Publisher(tier="pfs", notify="poll", mode="sync", pfs_dir=tmp_path, pfs_keep_versions=0,
                         session_id=theirs) as other:
        for it in range(5):
            other.publish({"w": torch.full((4,), -1.0)}, it)
    with viper.Subscriber(tier="pfs", notify="poll", pfs_dir=tmp_path, poll_period_s=0.005,
                          session_id=mine) as sub:
        time.sleep(0.1)
        assert sub.current() is None
        with viper.Publisher(tier="pfs", notify="poll", mode="sync", pfs_dir=tmp_path, pfs_keep_versions=0,
                             session_id=mine) as pub:
            pub.publish({"w": torch.full((4,), 1.0)}, 10)
            v = sub.wait_for_version(0, timeout_s=10)
            assert torch.equal(v.state_dict()["w"], torch.full((4,), 1.0))
        assert sub.current().iteration == 10


def _mount_tmpfs(path, size):
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(path)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")


def test_async_publisher_recovers_once_the_disk_has_room(tmp_path):
    disk = tmp_path / "disk"
    disk.mkdir(mode=0o700)
    _mount_tmpfs(disk, "1m")
    try:
        big = {"w": torch.zeros(200_000)}  # 800 kB: one fits in 1 MiB, two do not
        pub = viper.Publisher(tier="pfs", notify="poll", mode="async", pfs_dir=disk, pfs_keep_versions=0)
        ballast = disk / "ballast"
        ballast.write_bytes(b"\0" * 600_000)  # the disk is nearly full
        pub.publish(big, 1)
        with pytest.raises(OSError, match="No space left"):
            pub.flush()
        ballast.unlink()  # room again
        pub.publish(big, 2)  # the reported error is not raised again
        pub.flush()
        pub.close()
        assert (disk / "model-v1.safetensors").exists()
    finally:
        subprocess.run(["umount", "-l", str(disk)])
