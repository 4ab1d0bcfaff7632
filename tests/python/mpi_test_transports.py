"""Run under `mpirun -np 2`: rank 0 trains a real nn.Module and publishes its
state_dict; rank 1 subscribes, loads every version it receives into its own
module (load_into, strict) and must reproduce the producer's outputs bit for
bit. Host tier (shm and two-sided; sync and async) and PFS tier (push).
MPI is initialised by the viper module here (no mpi4py); the example
(examples/pytorch) covers mpi4py initialising it first."""
import hashlib
import os
import tempfile

import pytest
import torch

import viper
from mpi_abort import abort_on_failure

pytestmark = pytest.mark.skipif(not viper.mpi.launched(), reason="run under mpirun -np 2")

PROBE = torch.randn(64, 20, generator=torch.Generator().manual_seed(7))


def make_model(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(20, 64), torch.nn.ReLU(), torch.nn.BatchNorm1d(64),
                               torch.nn.Linear(64, 5))


def outputs_digest(model):
    model.eval()
    with torch.no_grad():
        out = model(PROBE)
    model.train()
    return hashlib.sha256(out.numpy().tobytes()).hexdigest()


def train_steps(model, opt, steps, seed):
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        x, y = torch.randn(32, 20, generator=g), torch.randint(0, 5, (32,), generator=g)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()


def shared_dir():
    """A directory both ranks see (one node): rank 0 makes it."""
    rank, _ = viper.mpi.init()
    base = os.environ.get("VIPER_TEST_TMP", tempfile.gettempdir())
    path = os.path.join(base, f"viper_py_mpi_{os.getppid()}")
    if rank == 0:
        os.makedirs(path, exist_ok=True)
        for f in os.listdir(path):
            os.remove(os.path.join(path, f))
    viper.mpi.barrier()
    return path


@abort_on_failure
def test_viper_initialised_mpi():
    rank, size = viper.mpi.init()
    assert size == 2 and rank in (0, 1)
    assert viper.mpi.active()
    assert viper._viper.mpi_init()[2] is True  # this module called MPI_Init_thread


@pytest.mark.parametrize("tier, mode, notify, protocol", [
    ("host", "sync", "push", "shm"),
    ("host", "async", "push", "two-sided"),
    ("pfs", "sync", "push", "shm"),
])
@abort_on_failure
def test_module_bit_for_bit(tier, mode, notify, protocol):
    rank, _ = viper.mpi.init()
    pfs_dir = shared_dir() if tier == "pfs" else ""
    versions = 4
    if rank == 0:
        model = make_model(1)
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        pub = viper.Publisher(tier=tier, mode=mode, notify=notify, pfs_dir=pfs_dir, host_protocol=protocol,
                              peer_timeout_s=60)
        for k in range(versions):
            train_steps(model, opt, 2, seed=k)
            report = pub.publish(model.state_dict(), 10 * (k + 1), metadata={"digest": outputs_digest(model)})
            assert report.version == k and report.stall_s > 0
            if mode == "async":
                pub.flush()  # every version reaches the consumer (none superseded)
        pub.close()
        reports = pub.reports()
        assert [r.version for r in reports] == list(range(versions))
        assert all(r.sent and not r.superseded for r in reports)
        if mode == "sync" and tier == "host":
            assert all(c.delivered and c.servable_s > 0 for r in reports for c in r.consumers)
            # delta auto (the default) on one node: every version goes whole, and each says why.
            reasons = [c.encoding_reason for r in reports for c in r.consumers]
            assert all(c.encoding == "full" for r in reports for c in r.consumers), reasons
            assert all(x.startswith("full: ") for x in reasons), reasons
    else:
        model = make_model(2)  # different initial weights: only the loads make it equal
        seen = []
        sub = viper.Subscriber(tier=tier, notify=notify, pfs_dir=pfs_dir, producer_timeout_s=120,
                               callback=lambda v: seen.append(v.version))
        for k in range(versions):
            v = sub.wait_for_version(k, timeout_s=120)
            assert v.version == k and v.iteration == 10 * (k + 1)
            v.load_into(model, strict=True)
            assert outputs_digest(model) == v.metadata["digest"], f"version {k}: outputs differ from the producer's"
        assert sub.wait_until_done(60)
        sub.stop()
        assert seen == list(range(versions))
        assert sub.summary()["rejected"] == 0
    viper.mpi.barrier()


@abort_on_failure
def test_gpu_tier():
    rank, _ = viper.mpi.init()
    ok, reason = viper.cuda_device_available()
    if not ok:
        pytest.skip(f"gpu tier not run: {reason}")
    model = make_model(1)
    if rank == 0:
        pub = viper.Publisher(tier="gpu", mode="sync", peer_timeout_s=60)
        pub.publish(model.state_dict(), 1, metadata={"digest": outputs_digest(model)})
        pub.close()
    else:
        sub = viper.Subscriber(tier="gpu", producer_timeout_s=120)
        v = sub.wait_for_version(0, timeout_s=120)
        other = make_model(2)
        v.load_into(other)  # a host copy when torch has no CUDA
        assert outputs_digest(other) == v.metadata["digest"]
        sub.stop()
    viper.mpi.barrier()
