"""Sharded producer and consumer groups (issue 28): ShardLayout,
ShardedPublisher, ShardedSubscriber, ShardVersion. Imported into `viper`;
use them from there."""

import atexit
import warnings
import weakref

import numpy
import torch

from . import _torch, _viper, mpi

_live_groups = weakref.WeakSet()


def _close_groups():
    for g in list(_live_groups):
        g.close()


atexit.register(_close_groups)  # after _viper.finalize's registration: runs before it


def _as_tensor(name, t, what):
    if isinstance(t, numpy.ndarray):
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
            return torch.from_numpy(t)  # shares the array's memory
    if not isinstance(t, torch.Tensor):
        raise ValueError(f"{what}: '{name}' is a {type(t).__name__}, not a torch.Tensor or numpy.ndarray")
    return t


def _tensor_views(host_tensors):
    """name -> torch.Tensor over (name, dtype, shape, Buffer) tuples, no copy."""
    out = {}
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The given (buffer|NumPy array) is not writable")
        for name, dtype, shape, buffer in host_tensors:
            if buffer.typed:
                out[name] = torch.from_numpy(numpy.asarray(buffer))
            else:
                out[name] = _torch.from_buffer(buffer, _torch._torch_dtype(name, dtype), shape)
    return out


class ShardLayout:
    """How a model is split across the R ranks of a group (C++
    transports::ShardLayout): per tensor, in order, "replicated" (every rank
    holds all of it) or ("split", dim): rank r holds indices
    [r*n/R, (r+1)*n/R) of dimension `dim` (n divisible by R).

    `shapes`: name -> the whole tensor's shape (a tuple / torch.Size, with
    `dtype`), or name -> a torch.Tensor (its shape and dtype; e.g. the whole
    model's state_dict, or tensors on the "meta" device). `split`: name ->
    "replicated" | ("split", dim), one entry per tensor. ValueError names the
    tensor and the dimension."""

    def __init__(self, ranks, shapes, split, dtype=torch.float32):
        if not isinstance(shapes, dict) or not isinstance(split, dict):
            raise ValueError("ShardLayout: shapes and split must be dicts keyed by tensor name")
        for name in split:
            if name not in shapes:
                raise ValueError(f"ShardLayout: split names '{name}', which is not among the shapes")
        tensors = []
        for name, s in shapes.items():
            if isinstance(s, torch.Tensor):
                d, shape = s.dtype, list(s.shape)
            else:
                d, shape = dtype, [int(x) for x in s]
            viper_dtype = _torch.TO_VIPER.get(d)
            if viper_dtype is None:
                raise ValueError(f"ShardLayout: '{name}' has dtype {d}, which Viper does not support")
            if name not in split:
                raise ValueError(f"ShardLayout: no split for '{name}' (give \"replicated\" or (\"split\", dim))")
            how = split[name]
            if how == "replicated":
                dim = -1
            elif isinstance(how, (tuple, list)) and len(how) == 2 and how[0] == "split" and isinstance(how[1], int):
                dim = how[1]
                if dim < 0:
                    raise ValueError(f"ShardLayout: '{name}': split dimension {dim} is negative")
            else:
                raise ValueError(f"ShardLayout: '{name}': expected \"replicated\" or (\"split\", dim), got {how!r}")
            tensors.append((name, viper_dtype, shape, dim))
        self._l = _viper.ShardLayout(int(ranks), tensors)

    @classmethod
    def _wrap(cls, native):
        self = cls.__new__(cls)
        self._l = native
        return self

    @classmethod
    def split_all(cls, ranks, state_dict, dim=0):
        """Every tensor split along `dim` where it has one of size divisible
        by `ranks`, else replicated (the FSDP-style layout of a model)."""
        return cls._wrap(_viper.ShardLayout.split_all(int(ranks), _torch.specs(state_dict, "split_all"), int(dim)))

    @classmethod
    def parse(cls, text):
        """The layout from serialize()'s text; ValueError names the line."""
        return cls._wrap(_viper.ShardLayout.parse(str(text)))

    def serialize(self):
        return self._l.serialize()

    ranks = property(lambda self: self._l.ranks)

    @property
    def names(self):
        return [t[0] for t in self._l.tensors()]

    def split(self):
        """name -> "replicated" | ("split", dim)."""
        return {n: "replicated" if d < 0 else ("split", d) for n, _, _, d in self._l.tensors()}

    def _index(self, name):
        names = self.names
        if name not in names:
            raise ValueError(f"ShardLayout: no tensor '{name}'")
        return names.index(name)

    def local_shape(self, name, rank):
        """Shape of rank `rank`'s slice of tensor `name`."""
        return tuple(self._l.local_shape(self._index(name), int(rank)))

    def shard_bytes(self, rank):
        return self._l.shard_bytes(int(rank))

    def model_bytes(self):
        return self._l.model_bytes()

    def ordered(self, tensors, what):
        """`tensors` (torch tensors or numpy arrays) in layout order; ValueError for a missing or extra name."""
        if not isinstance(tensors, dict):
            raise ValueError(f"{what}: expected a dict of name -> tensor, got {type(tensors).__name__}")
        names = self.names
        for name in tensors:
            if name not in names:
                raise ValueError(f"{what}: '{name}' is not in the layout")
        for name in names:
            if name not in tensors:
                raise ValueError(f"{what}: '{name}' is missing (the layout has it)")
        return {name: _as_tensor(name, tensors[name], what) for name in names}

    def check_shard(self, shard, rank):
        """ValueError unless `shard` is rank `rank`'s shard (names, dtypes, local shapes)."""
        self._l.check_shard(_torch.specs(self.ordered(shard, "check_shard"), "check_shard"), int(rank))

    def slice(self, state_dict, rank):
        """Rank `rank`'s slices of the whole `state_dict`, as new tensors."""
        whole = self.ordered(state_dict, "slice")
        return _tensor_views(self._l.slice(_torch.specs(whole, "slice"), int(rank)))

    def __repr__(self):
        return f"ShardLayout(ranks={self.ranks}, split={self.split()})"


def _cuda_devices(specs):
    """The CUDA devices among `specs`' tensors (_torch.specs tuples)."""
    return sorted({spec[5] for spec in specs if spec[5] >= 0})


def _check_layout(layout, what):
    if not isinstance(layout, ShardLayout):
        raise ValueError(f"{what}: layout must be a viper.ShardLayout, got {type(layout).__name__}")


class ShardedPublisher:
    """One rank of a producer group (C++ transports::ShardedPublisher). Every
    producer and consumer rank creates its object together (collective;
    groups of one job in the same order everywhere).
    `producers`, `consumers`: the MPI_COMM_WORLD ranks of the two groups;
    `layout`: the producers' ShardLayout (the same on every producer rank).
    `link`: "auto" (shared memory when every rank of both groups is on one
    node, else two-sided MPI), "mpi", "shm" or "gpu" (CUDA IPC between ranks
    on one node, each with a device: this rank stages its shard on CUDA
    device `gpu_device`; its shard may be CUDA tensors). Two different
    explicit links is an error; "auto" follows a rank asking for "gpu". On
    shm, `bucket_bytes` (0 = the consumers' window) and `ring_buckets` (1, the
    default: one bucket beyond the shard; or 2, overlapping) size each
    producer's ring."""

    def __init__(self, layout, producers, consumers, *, peer_timeout_s=30.0, decision_timeout_s=600.0,
                 link="auto", bucket_bytes=0, ring_buckets=1, gpu_device=0):
        _check_layout(layout, "ShardedPublisher")
        _, size = mpi.init()
        self._layout = layout
        self._pub = _viper.ShardedPublisher(list(producers), list(consumers), size, layout._l, float(peer_timeout_s),
                                            float(decision_timeout_s), str(link), int(bucket_bytes),
                                            int(ring_buckets), int(gpu_device))
        _live_groups.add(self)

    rank = property(lambda self: self._pub.rank, doc="this rank in the producer group")
    link = property(lambda self: self._pub.link, doc="the link the group got: 'mpi', 'shm' or 'gpu'")

    def publish(self, shard, iteration, publish=True):
        """Publishes this rank's `shard` (name -> torch CPU tensor or numpy
        array, contiguous, read in place: no copy; on the gpu link CUDA
        tensors too, read from their device pointers once torch's work on
        their devices is done) if producer rank 0's
        `publish` is true (the others follow rank 0). Every producer rank
        calls it once per step; returns when this rank's sends are done (rank
        0: when the consumers' Ack arrived) with a summary dict (published,
        version, committed (rank 0), whole_checksum (rank 0), sent_bytes,
        update_s, message)."""
        resolved = []
        specs = _torch.specs(self._layout.ordered(shard, "publish"), "publish", allow_cuda=self.link == "gpu",
                             keep=resolved)
        for device in _cuda_devices(specs):  # the values queued on torch's streams, before Viper copies them
            torch.cuda.synchronize(device)
        return self._pub.publish(specs, int(iteration), bool(publish))

    def close(self):
        """Frees the group's communicators. Idempotent."""
        _live_groups.discard(self)
        self._pub.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class ShardVersion:
    """A committed version as this consumer rank serves it: its slices."""

    __slots__ = ("version", "iteration", "whole_checksum", "_tensors", "_v", "_device")

    def __init__(self, version, iteration, whole_checksum, tensors=None, v=None, device=0):
        self.version, self.iteration, self.whole_checksum = version, iteration, whole_checksum
        self._tensors, self._v, self._device = tensors, v, device

    memory = property(lambda self: "device" if self._v is not None and self._v.memory == "device" else
                      "host" if self._v is not None else "target",
                      doc="where the served bytes are: 'host', 'device' (gpu link) or 'target' (bounded mode)")

    def state_dict(self):
        """name -> this rank's slice: the target's tensors (bounded mode) or
        read-only views of the received buffer (double buffer): on the gpu
        link CUDA tensors viewing the device buffer, no copy
        (__cuda_array_interface__; a host copy where torch has no CUDA)."""
        if self._tensors is None:
            if self._v.memory == "device" and torch.cuda.is_available():
                from . import _CudaView  # the single-producer Version's device views
                self._tensors = {name: _torch.read_only(_CudaView(self._v, dtype, shape, ptr, nbytes).tensor(dev))
                                 for name, dtype, shape, ptr, nbytes, dev in self._v.device_tensors(self._device)}
            else:
                self._tensors = {n: _torch.read_only(t) for n, t in _tensor_views(self._v.host_tensors()).items()}
        return dict(self._tensors)

    def __repr__(self):
        return f"ShardVersion(version={self.version}, iteration={self.iteration})"


class ShardedSubscriber:
    """One rank of a consumer group (C++ transports::ShardedSubscriber).
    `layout`: this group's ShardLayout (the producers' tensors, in their
    order). `link`: as ShardedPublisher's; on "gpu" the versions land in
    device memory on CUDA device `gpu_device`. Default: double buffer
    (receives into a back buffer, swaps it in; current() gives views: CUDA
    tensors on the gpu link). Bounded (`bucket_bytes` > 0 and `target`, a
    dict name -> tensor of this rank's slices, e.g. its module's
    parameters): receives straight into `target`, CPU tensors / numpy
    arrays through a staging buffer of `bucket_bytes` (mpi) or from the
    producers' rings (shm), CUDA tensors on `gpu_device` device to device
    from the producers' staging buffers (gpu; `bucket_bytes` is then the
    window each piece checksum covers); the tensors are the caller's, kept
    referenced here, and must not be resized or freed while this lives."""

    def __init__(self, layout, producers, consumers, *, target=None, bucket_bytes=0, peer_timeout_s=30.0,
                 chunk_bytes=64 << 20, link="auto", gpu_device=0):
        _check_layout(layout, "ShardedSubscriber")
        _, size = mpi.init()
        self._layout = layout
        self._gpu_device = int(gpu_device)
        self._target = None if target is None else layout.ordered(target, "ShardedSubscriber target")
        specs = None if self._target is None else _torch.specs(self._target, "ShardedSubscriber target",
                                                                allow_cuda=str(link) == "gpu")
        self._target_devices = [] if specs is None else _cuda_devices(specs)
        self._sub = _viper.ShardedSubscriber(list(producers), list(consumers), size, layout._l, float(peer_timeout_s),
                                             int(bucket_bytes), int(chunk_bytes), specs, str(link),
                                             self._gpu_device)
        _live_groups.add(self)

    rank = property(lambda self: self._sub.rank, doc="this rank in the consumer group")
    link = property(lambda self: self._sub.link, doc="the link the group got: 'mpi', 'shm' or 'gpu'")
    version = property(lambda self: self._sub.version, doc="the served version (0: none)")

    def receive_next(self, wait_s=60.0):
        """Receives the next version and takes part in the group's commit;
        every consumer rank calls it once per published version. Returns a
        summary dict (version, verified, committed, received_bytes, receive_s,
        commit_s, pause_s, serving, message; in_doubt: this rank voted yes
        and heard no decision, so it serves nothing until rank 0 answers;
        resolved_version / resolved_committed: an earlier doubt settled).
        TimeoutError when no version began within `wait_s`. Bounded into
        CUDA tensors: torch's work queued on their devices finishes first
        (none of it may read the target while the new version lands)."""
        for device in self._target_devices:
            torch.cuda.synchronize(device)
        return self._sub.receive_next(float(wait_s))

    def current(self):
        """Double buffer: the served ShardVersion (its views keep it alive),
        or None; always None in bounded mode (use serve)."""
        v = self._sub.current()
        return None if v is None else ShardVersion(v.version, v.iteration, v.whole_checksum, v=v,
                                                   device=self._gpu_device)

    def serve(self, fn):
        """Calls fn(ShardVersion) with the served version held stable; False
        (fn not called) when none is served (bounded mode: also mid-commit
        and after a failed commit)."""
        if self._target is None:
            v = self.current()
            if v is None:
                return False
            fn(v)
            return True
        return self._sub.serve(lambda version, iteration, checksum:
                               fn(ShardVersion(version, iteration, checksum, tensors=self._target)))

    def close(self):
        """Frees the group's communicators. Idempotent."""
        _live_groups.discard(self)
        self._sub.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
