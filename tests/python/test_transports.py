"""Publisher/Subscriber in one process on the PFS tier with polling (no MPI):
a real nn.Module's state_dict travels and load_into reproduces the
producer's outputs bit for bit; views keep their version alive; bad input."""
import gc
import time
import warnings
import weakref

import pytest
import torch

import viper
from conftest import mpi_launched


def wait_until(condition, timeout_s=10.0):
    """The callback runs on the receiving thread after the swap that wakes
    wait_for_version: give it time to have run."""
    deadline = time.monotonic() + timeout_s
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.002)
    return condition()


def make_model(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(20, 32), torch.nn.ReLU(), torch.nn.BatchNorm1d(32),
                               torch.nn.Linear(32, 5))


def train_steps(model, steps, seed):
    g = torch.Generator().manual_seed(seed)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model.train()
    for _ in range(steps):
        x, y = torch.randn(16, 20, generator=g), torch.randint(0, 5, (16,), generator=g)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()


def outputs(model):
    model.eval()
    with torch.no_grad():
        return model(torch.randn(64, 20, generator=torch.Generator().manual_seed(7)))


@pytest.fixture
def pfs(tmp_path):
    received = []
    pub = viper.Publisher(tier="pfs", notify="poll", mode="sync", pfs_dir=tmp_path, pfs_keep_versions=2)
    sub = viper.Subscriber(tier="pfs", notify="poll", pfs_dir=tmp_path, poll_period_s=0.005,
                           callback=lambda v: received.append((v.version, v.iteration)))
    yield pub, sub, received
    pub.close()
    sub.stop()


def test_module_round_trip_bit_for_bit(pfs):
    pub, sub, received = pfs
    producer, consumer = make_model(1), make_model(2)
    for version, it in enumerate((10, 20, 30)):
        train_steps(producer, 3, seed=it)
        report = pub.publish(producer.state_dict(), it, metadata={"step": str(it)})
        assert report.version == version and report.iteration == it and report.sent
        assert report.stall_s > 0 and report.bytes > 0
        v = sub.wait_for_version(version, timeout_s=30)
        assert (v.version, v.iteration, v.metadata) == (version, it, {"step": str(it)})
        v.load_into(consumer, strict=True)
        assert torch.equal(outputs(consumer), outputs(producer))
        for name, t in producer.state_dict().items():
            assert torch.equal(v.state_dict()[name], t), name
    assert wait_until(lambda: len(received) == 3)
    assert received == [(0, 10), (1, 20), (2, 30)]
    assert sub.load_into(consumer).version == 2
    assert [r.version for r in pub.reports()] == [0, 1, 2]
    assert pub.summary()["published"] == 3


def test_state_dict_views_keep_the_version_alive(pfs):
    pub, sub, _ = pfs
    pub.publish({"w": torch.arange(1000, dtype=torch.float32)}, 1)
    v = sub.wait_for_version(0, timeout_s=30)
    w = v.state_dict()["w"]
    # A view: the same address on every call, inside the received image.
    assert v.state_dict()["w"].data_ptr() == w.data_ptr()
    ref = weakref.ref(v)
    del v
    gc.collect()
    assert ref() is None  # the Python wrapper is gone, the bytes are not
    for k in range(1, 4):  # later versions land while `w` is held
        pub.publish({"w": torch.full((1000,), float(k))}, 1 + k)
        sub.wait_for_version(k, timeout_s=30)
    sub.stop()
    assert torch.equal(w, torch.arange(1000, dtype=torch.float32))


def test_every_dtype_and_shape_arrives_as_a_view(pfs):
    # Typed buffers (numpy + from_numpy) for most dtypes, bytes + frombuffer
    # for BF16: scalars, empty tensors and odd byte offsets included.
    pub, sub, _ = pfs
    sd = {"b": torch.tensor([True, False, True]), "u8": torch.arange(5, dtype=torch.uint8),
          "i8": torch.tensor([-3, 4], dtype=torch.int8), "i16": torch.tensor([[1, -2], [3, 4]], dtype=torch.int16),
          "f16": torch.randn(3, 2).half(), "bf16": torch.randn(4).bfloat16(), "i32": torch.tensor([7], dtype=torch.int32),
          "f32": torch.randn(2, 3, 4), "i64": torch.tensor(5), "f64": torch.randn(0, 3).double()}
    pub.publish(sd, 1)
    v = sub.wait_for_version(0, timeout_s=30)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the read-only views warn nothing
        got = v.state_dict()
    for name, t in sd.items():
        g = got[name]
        assert (g.dtype, g.shape) == (t.dtype, t.shape) and torch.equal(g, t), name
        assert g.numel() == 0 or not g.is_set_to(t), name
    assert got["f32"].data_ptr() == v.state_dict()["f32"].data_ptr()  # a view, not a copy


def test_wait_for_version_times_out(pfs):
    _, sub, _ = pfs
    with pytest.raises(TimeoutError):
        sub.wait_for_version(0, timeout_s=0.05)
    assert sub.current() is None
    with pytest.raises(RuntimeError, match="no version"):
        sub.load_into(make_model(1))


def test_layout_change_and_bad_tensors(pfs):
    pub, _, _ = pfs
    model = make_model(1)
    pub.publish(model.state_dict(), 1)
    sd = model.state_dict()
    sd["3.weight"] = torch.zeros(6, 32)
    with pytest.raises(ValueError, match=r"'3.weight' was F32 \[5, 32\], now F32 \[6, 32\]"):
        pub.publish(sd, 2)
    sd = model.state_dict()
    del sd["3.bias"]
    with pytest.raises(ValueError, match="'3.bias' is missing"):
        pub.publish(sd, 2)
    sd = model.state_dict()
    sd["0.weight"] = sd["0.weight"].t()
    with pytest.raises(ValueError, match="not contiguous"):
        pub.publish(sd, 2)
    sd = model.state_dict()
    sd["0.weight"] = sd["0.weight"].to(torch.complex64)
    with pytest.raises(ValueError, match="complex64"):
        pub.publish(sd, 2)
    assert pub.summary()["published"] == 1


def test_consumer_strict_load_refuses_another_architecture(pfs):
    pub, sub, _ = pfs
    pub.publish(make_model(1).state_dict(), 1)
    v = sub.wait_for_version(0, timeout_s=30)
    other = torch.nn.Sequential(torch.nn.Linear(20, 5))
    with pytest.raises(RuntimeError, match="state_dict"):
        v.load_into(other, strict=True)


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_callback_errors_do_not_stop_receiving(tmp_path):
    seen = []

    def callback(v):
        seen.append(v.version)
        raise KeyError("from the callback")

    pub = viper.Publisher(tier="pfs", notify="poll", mode="async", pfs_dir=tmp_path)
    with viper.Subscriber(tier="pfs", notify="poll", pfs_dir=tmp_path, poll_period_s=0.005, callback=callback) as sub:
        pub.publish({"x": torch.ones(4)}, 1)
        pub.flush()
        sub.wait_for_version(0, timeout_s=30)
        pub.publish({"x": torch.ones(4) * 2}, 2)
        pub.flush()
        assert torch.equal(sub.wait_for_version(1, timeout_s=30).state_dict()["x"], torch.full((4,), 2.0))
        assert wait_until(lambda: len(seen) >= 2)
    pub.close()
    assert seen[:2] == [0, 1]


def test_options_are_checked(tmp_path):
    with pytest.raises(ValueError, match="tier"):
        viper.Publisher(tier="disk", pfs_dir=tmp_path)
    with pytest.raises(ValueError, match="mode"):
        viper.Publisher(tier="pfs", mode="eventually", notify="poll", pfs_dir=tmp_path)
    with pytest.raises(ValueError, match="pfs_dir"):
        viper.Publisher(tier="pfs", notify="poll")
    with pytest.raises(ValueError, match="callback"):
        viper.Subscriber(tier="pfs", notify="poll", pfs_dir=tmp_path, callback=3)


@pytest.mark.skipif(mpi_launched(), reason="checks the error without mpirun")
@pytest.mark.parametrize("tier, notify", [("host", "push"), ("gpu", "push"), ("pfs", "push")])
def test_mpi_tiers_need_mpirun(tmp_path, tier, notify):
    with pytest.raises(viper.UnavailableError, match="mpirun -np 2"):
        viper.Publisher(tier=tier, notify=notify, pfs_dir=tmp_path)
    with pytest.raises(viper.UnavailableError, match="mpirun -np 2"):
        viper.Subscriber(tier=tier, notify=notify, pfs_dir=tmp_path)
    assert not viper.mpi.active()


def test_pfs_delta_bf16_small_steps_are_rebuilt_bit_identical(tmp_path):
    """pfs_delta: a BF16 model updated with a small learning rate changes few
    of its elements per step (most bf16 values do not move), so each version
    after the first is written as a small delta; the consumer rebuilds and
    verifies it, and serves exactly what was published."""
    torch.manual_seed(0)
    w = torch.randn(256, 512).to(torch.bfloat16)
    b = torch.zeros(512, dtype=torch.bfloat16)
    with viper.Publisher(tier="pfs", notify="poll", mode="sync", pfs_dir=tmp_path, pfs_keep_versions=0,
                         pfs_delta=True) as pub, \
            viper.Subscriber(tier="pfs", notify="poll", pfs_dir=tmp_path, poll_period_s=0.005) as sub:
        for version in range(4):
            if version > 0:
                grad = torch.randn(256, 512)
                w = (w.float() - 1e-3 * grad).to(torch.bfloat16)  # most elements round back to themselves
            r = pub.publish({"w": w, "b": b}, 10 * (version + 1))
            if version == 0:
                assert r.encoding == "full"
            else:
                assert r.encoding == "delta of version %d" % (version - 1), r.encoding
                assert r.written_bytes < r.bytes // 2, (r.written_bytes, r.bytes)
            v = sub.wait_for_version(version, timeout_s=10)
            got = v.state_dict()
            assert torch.equal(got["w"], w) and torch.equal(got["b"], b)
        assert (tmp_path / "model-v3.delta").exists()
        # The consumer's summary: versions 1-3 rebuilt from the delta files,
        # fewer bytes read than the images; version 1 in a whole copy of the
        # image it held, 2 and 3 in its back buffer brought forward (nothing
        # here holds the version before the served one): only the header and
        # w, which the last delta wrote, are copied, not b (never changed).
        s = sub.summary()
        assert s["received"] == 4 and s["delta_versions"] == 3, s
        image = r.bytes
        assert s["bytes_moved"] < 4 * image // 2, (s["bytes_moved"], image)
        b_bytes = b.numel() * b.element_size()
        assert s["delta_copies_avoided"] == 2, s
        assert s["delta_copied_bytes"] == image + 2 * (image - b_bytes), (s, image)


def test_delta_option_on_writes_pfs_deltas_and_bad_values_are_refused(tmp_path):
    """Publisher(delta=...): "on" on the pfs tier writes delta files (as
    pfs_delta), and the consumer, which holds the previous version, rebuilds
    from it; an unknown mode, or "on" where versions always go whole (gpu),
    is a ValueError naming the option."""
    torch.manual_seed(1)
    w = torch.randn(128, 256)
    with viper.Publisher(tier="pfs", notify="poll", mode="sync", pfs_dir=tmp_path, pfs_keep_versions=0,
                         delta="on") as pub, \
            viper.Subscriber(tier="pfs", notify="poll", pfs_dir=tmp_path, poll_period_s=0.005) as sub:
        for version in range(3):
            if version > 0:
                w[version, :8] += 1.0  # a few elements change
            r = pub.publish({"w": w}, version)
            assert r.encoding == ("full" if version == 0 else "delta of version %d" % (version - 1)), r.encoding
            v = sub.wait_for_version(version, timeout_s=10)
            assert torch.equal(v.state_dict()["w"], w)
    with pytest.raises(ValueError, match="delta"):
        viper.Publisher(tier="pfs", notify="poll", mode="sync", pfs_dir=tmp_path, delta="sometimes")
    with pytest.raises(ValueError, match="delta: on needs tier host"):
        viper.Publisher(tier="host", host_protocol="one-sided", mode="sync", delta="on")
