"""Run under `mpirun -np 4`: ranks 0-1 are a producer group holding an
FSDP-style split (dimension 0) of a torch.nn.Linear stack, ranks 2-3 a
consumer group with another split (the weights' dimension 1, the biases
replicated) and their own module of those local shapes. Every rank trains
the whole model the same way (seeded, one thread), so each knows the
reference; the producers publish views of their rows of the real
parameters, and every consumer's tensors must equal its reference slices
(ShardLayout.slice, C++) bit for bit after each version. Bounded mode
(received into the consumer module's parameters) and double buffer, on the
host links and (where a CUDA device is visible; else skipped) on the gpu
link: CUDA shards published, CUDA tensors served, bounded into the
consumer module's CUDA parameters. Without a device, link="gpu" is
accepted by the option check and then refused on every rank, saying why."""

import numpy
import pytest
import torch

import viper
from mpi_abort import abort_on_failure

pytestmark = pytest.mark.skipif(not viper.mpi.launched(), reason="run under mpirun -np 4")

PRODUCERS, CONSUMERS = [0, 1], [2, 3]
VERSIONS = 3


def whole_model():
    torch.manual_seed(11)
    return torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 16))


def train_step(model, opt, step):
    g = torch.Generator().manual_seed(100 + step)
    x, y = torch.randn(24, 64, generator=g), torch.randint(0, 16, (24,), generator=g)
    opt.zero_grad()
    torch.nn.functional.cross_entropy(model(x), y).backward()
    opt.step()


CONSUMER_SPLIT = {"0.weight": ("split", 1), "0.bias": "replicated", "2.weight": ("split", 1), "2.bias": "replicated"}


def consumer_module():
    # Row-parallel style: each rank holds half of every weight's input columns.
    torch.manual_seed(99)
    return torch.nn.Sequential(torch.nn.Linear(32, 128), torch.nn.ReLU(), torch.nn.Linear(64, 16))


def setup():
    torch.set_num_threads(1)
    rank, size = viper.mpi.init()
    assert size == 4, "run with mpirun -np 4"
    model = whole_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    whole = {k: v.detach() for k, v in model.state_dict().items()}
    p_layout = viper.ShardLayout.split_all(len(PRODUCERS), whole, dim=0)
    q_layout = viper.ShardLayout(len(CONSUMERS), whole, CONSUMER_SPLIT)
    return rank, model, opt, whole, p_layout, q_layout


def skip_unless_gpu():
    ok, reason = viper.cuda_device_available()
    if not ok or not torch.cuda.is_available():  # the same on every rank (one node)
        pytest.skip(reason or "torch has no CUDA")


@abort_on_failure
def run_group(bucket_bytes, link="auto"):
    gpu = link == "gpu"
    rank, model, opt, whole, p_layout, q_layout = setup()
    assert p_layout.split() == {n: ("split", 0) for n in whole}
    if rank in PRODUCERS:
        p = PRODUCERS.index(rank)
        pub = viper.ShardedPublisher(p_layout, PRODUCERS, CONSUMERS, peer_timeout_s=30, link=link)
        assert pub.rank == p
        assert pub.link == ("gpu" if gpu else pub.link)
        # This rank's rows of the live parameters: views, published in place.
        shard = {}
        for n, t in whole.items():
            rows = p_layout.local_shape(n, p)[0]
            shard[n] = t.narrow(0, p * rows, rows)
            if p == 1:
                shard[n] = shard[n].numpy()  # numpy arrays work too (sharing the parameters' memory)
        p_layout.check_shard(shard, p)
        for k in range(VERSIONS):
            train_step(model, opt, k)
            # gpu: this step's rows copied to the device, published from there.
            out = {n: torch.as_tensor(t).cuda() for n, t in shard.items()} if gpu else shard
            if k == 1:  # rank 0 decides not to (the others' True is ignored): no version
                s = pub.publish(out, iteration=10 * (k + 1), publish=p != 0)
                assert not s["published"] and s["sent_bytes"] == 0, s["brief"]
            s = pub.publish(out, iteration=10 * (k + 1), publish=p == 0 or k != 1)
            assert s["published"] and s["sent"] and s["version"] == k + 1, s["brief"]
            assert s["sent_bytes"] == pub._pub.sends_bytes > 0
            if p == 0:
                assert s["committed"] and s["whole_checksum"] != 0, s["brief"]
        pub.close()
        return
    q = CONSUMERS.index(rank)
    module = consumer_module()
    if gpu:
        module = module.cuda()  # bounded: received into its CUDA parameters
    own = {k: v.detach() for k, v in module.state_dict().items()}  # share the parameters' storage
    assert {n: tuple(t.shape) for n, t in own.items()} == {n: q_layout.local_shape(n, q) for n in own}
    if bucket_bytes:
        sub = viper.ShardedSubscriber(q_layout, PRODUCERS, CONSUMERS, target=own, bucket_bytes=bucket_bytes,
                                      peer_timeout_s=30, link=link)
    else:
        sub = viper.ShardedSubscriber(q_layout, PRODUCERS, CONSUMERS, peer_timeout_s=30, link=link)
    assert sub.rank == q and sub.version == 0
    assert not sub.serve(lambda v: pytest.fail("nothing is served yet"))
    for k in range(VERSIONS):
        train_step(model, opt, k)  # the reference, trained exactly as the producers did
        reference = q_layout.slice(whole, q)
        s = sub.receive_next(wait_s=60)
        assert s["committed"] and s["verified"] and s["serving"] and s["version"] == k + 1, s["brief"]
        assert s["received_bytes"] == s["slice_bytes"] == q_layout.shard_bytes(q)
        if bucket_bytes:  # not a back buffer: one bucket of staging (MPI link), none (shm, gpu: straight in)
            got_link = sub.link  # auto: shm on one node
            assert got_link in (("gpu",) if gpu else ("mpi", "shm")), got_link
            if got_link in ("shm", "gpu"):
                assert s["staging_bytes"] == 0, s["brief"]
                assert s["pause_s"] > 0, s["brief"]  # serving paused from the first copy to the decision
            else:
                assert bucket_bytes <= s["staging_bytes"] < s["slice_bytes"], s["brief"]
        else:
            assert s["staging_bytes"] >= s["slice_bytes"], s["brief"]
        seen = []

        def check(v):
            assert v.version == k + 1 and v.iteration == 10 * (k + 1)
            got = v.state_dict()
            for n, ref in reference.items():
                assert got[n].is_cuda == gpu, f"'{n}' is on {got[n].device}"
                assert torch.equal(got[n].cpu(), ref), f"version {k + 1}: consumer {q}'s '{n}' differs from its slice"
            seen.append(v.version)

        with pytest.raises(ZeroDivisionError):  # fn's error reaches the caller, the version is let go
            sub.serve(lambda v: 1 / 0)
        assert sub.serve(check) and seen == [k + 1]
        if bucket_bytes:
            assert sub.current() is None
            for n, ref in reference.items():  # landed in the module's own parameters
                assert torch.equal(dict(module.named_parameters())[n].detach().cpu(), ref)
        else:
            cur = sub.current()
            assert cur.version == k + 1
    with pytest.raises(TimeoutError):  # no further version
        sub.receive_next(wait_s=0.2)
    sub.close()


def test_bounded_into_module_parameters():
    run_group(bucket_bytes=4096)


def test_double_buffer():
    run_group(bucket_bytes=0)


def test_gpu_link_bounded_into_cuda_parameters():
    skip_unless_gpu()
    run_group(bucket_bytes=4096, link="gpu")


def test_gpu_link_double_buffer_serves_cuda_tensors():
    skip_unless_gpu()
    run_group(bucket_bytes=0, link="gpu")


@abort_on_failure
def test_gpu_link_without_a_device_says_why_on_every_rank():
    ok, _ = viper.cuda_device_available()
    if ok:
        pytest.skip("a CUDA device is visible (the gpu link's group tests run instead)")
    rank, _, _, whole, p_layout, q_layout = setup()
    # A link that does not exist: refused on this rank before anything collective.
    with pytest.raises(ValueError, match="'auto', 'mpi', 'shm' or 'gpu', not 'nvlink'"):
        viper.ShardedSubscriber(q_layout, PRODUCERS, CONSUMERS, link="nvlink")
    with pytest.raises(ValueError, match="'auto', 'mpi', 'shm' or 'gpu', not 'nvlink'"):
        viper.ShardedPublisher(p_layout, PRODUCERS, CONSUMERS, link="nvlink")

    def create(consumer_link, target=None):
        if rank in PRODUCERS:
            return viper.ShardedPublisher(p_layout, PRODUCERS, CONSUMERS, link="gpu", peer_timeout_s=5)
        if target is None:
            return viper.ShardedSubscriber(q_layout, PRODUCERS, CONSUMERS, link=consumer_link, peer_timeout_s=5)
        return viper.ShardedSubscriber(q_layout, PRODUCERS, CONSUMERS, link=consumer_link, target=target,
                                       bucket_bytes=4096, peer_timeout_s=5)

    # "gpu" passes the option check, then every rank learns the device is missing.
    for consumer_link in ("gpu", "auto"):  # auto follows the producers' gpu
        with pytest.raises(viper.UnavailableError, match="link = gpu: .*no CUDA device"):
            create(consumer_link)
    # Bounded consumers into CPU parameters on the gpu link: refused on every
    # rank, naming the tensor (before any device is looked for).
    own = None
    if rank in CONSUMERS:
        own = {k: v.detach() for k, v in consumer_module().state_dict().items()}
    for consumer_link in ("gpu", "auto"):
        with pytest.raises(ValueError, match="target tensor '0.weight' is in host memory"):
            create(consumer_link, own)
    # A target neither on the CPU nor on a CUDA device: refused on this rank, before anything collective.
    if rank in CONSUMERS:
        with pytest.raises(ValueError, match="'0.weight' is on device meta; expected cpu or cuda"):
            viper.ShardedSubscriber(q_layout, PRODUCERS, CONSUMERS, link="gpu", bucket_bytes=4096,
                                    target={n: torch.empty_like(t, device="meta") for n, t in own.items()})


def test_layout_errors():
    whole = {"w": torch.zeros(6, 4), "b": torch.zeros(6)}
    with pytest.raises(ValueError, match="w"):
        viper.ShardLayout(4, whole, {"w": ("split", 0), "b": "replicated"})  # 6 rows over 4 ranks
    with pytest.raises(ValueError, match="b"):
        viper.ShardLayout(2, whole, {"w": ("split", 0)})
    with pytest.raises(ValueError, match="'w'"):
        viper.ShardLayout(2, whole, {"w": ("split", 2), "b": "replicated"})
    with pytest.raises(ValueError, match="rows"):
        viper.ShardLayout(2, whole, {"w": "rows", "b": "replicated"})
    layout = viper.ShardLayout(2, whole, {"w": ("split", 1), "b": "replicated"})
    assert viper.ShardLayout.parse(layout.serialize()).split() == layout.split()
    assert layout.local_shape("w", 1) == (6, 2)
    with pytest.raises(ValueError, match="w"):
        layout.check_shard({"w": torch.zeros(6, 4), "b": torch.zeros(6)}, 0)
    with pytest.raises(ValueError, match="missing"):
        layout.check_shard({"w": numpy.zeros((6, 2), numpy.float32)}, 0)
    layout.check_shard({"w": numpy.zeros((6, 2), numpy.float32), "b": numpy.zeros(6, numpy.float32)}, 0)
    rank, _ = viper.mpi.init()
    with pytest.raises(ValueError, match="ShardedPublisher"):
        viper.ShardedPublisher(layout, [0, 1], [1, 2])  # rank 1 in both groups
    with pytest.raises(ValueError, match="ShardLayout"):
        viper.ShardedSubscriber(layout.serialize(), [0, 1], [2, 3])
