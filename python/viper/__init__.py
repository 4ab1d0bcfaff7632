"""Viper from Python: publish a PyTorch model's state_dict to inference
consumers as it trains, serve the newest version, decide when to publish.

    import viper
    pub = viper.Publisher(tier="host", mode="async")          # rank 0 (mpirun)
    planner = viper.Planner("online", total_iterations=N, warmup=W, requests=100)
    ...
    planner.observe(it, train_loss=loss, val_loss=val)
    if planner.should_checkpoint(it):
        report = pub.publish(model.state_dict(), it)
        planner.commit(it)

    sub = viper.Subscriber(tier="host")                       # ranks 1..
    sub.wait_for_version(0, timeout_s=60)
    sub.load_into(model)                                      # or sub.current().state_dict()

    viper.save_file(model.state_dict(), "m.safetensors")     # safetensors' shapes
    tensors = viper.load_file("m.safetensors")

MPI: see viper.mpi (the module initialises it with MPI_THREAD_MULTIPLE when a
tier needs it, and cooperates with mpi4py).
"""
import atexit
import json
import warnings

import numpy
import torch

from . import _torch, _viper, mpi
from .staleness import StalenessRecorder

__all__ = ["save_file", "load_file", "load_metadata", "Publisher", "Subscriber", "Version", "Planner",
           "VersionReport", "DataLossError", "UnavailableError", "StalenessRecorder", "mpi", "cuda_device_available",
           "new_session_id", "__version__"]

__version__ = _viper.__version__
new_session_id = _viper.new_session_id
DataLossError = _viper.DataLossError
UnavailableError = _viper.UnavailableError
VersionReport = _viper.VersionReport

# Name of the U8 tensor that carries publish(..., metadata=...) as JSON: the
# C++ Publisher has no per-version user metadata, so it travels as a tensor
# that Version.state_dict() leaves out and Version.metadata decodes.
METADATA_TENSOR = "__viper_metadata__"

atexit.register(_viper.finalize)


def cuda_device_available():
    """(available, reason): whether Viper's GPU tier can run here."""
    return _viper.cuda_device_available()


def _check_metadata(metadata, what):
    if metadata is None:
        return {}
    if not isinstance(metadata, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
        raise ValueError(f"{what}: metadata must be a dict of str -> str (as in safetensors), got {metadata!r}")
    return metadata


# ---- Files ------------------------------------------------------------------

def save_file(tensors, filename, metadata=None):
    """Writes `tensors` (name -> contiguous CPU torch.Tensor) as a .safetensors
    file, byte-compatible with the safetensors library, plus Viper's checksum
    (viper.checksum in __metadata__). Written to a temporary name, fsync'd and
    renamed: `filename` is never left half-written. Same arguments as
    safetensors.torch.save_file."""
    metadata = _check_metadata(metadata, "save_file")
    resolved = []  # negative/conjugate views made real, alive during the write
    _viper.save_file(_torch.specs(tensors, "save_file", keep=resolved), str(filename), metadata)


def _load(filename, verify_checksum, require_checksum):
    buffer, described, metadata = _viper.load_file(str(filename), verify_checksum, require_checksum)
    out = {}
    for name, dtype, shape, offset, nbytes in described:
        out[name] = _torch.from_buffer(buffer, _torch._torch_dtype(name, dtype), shape, offset, nbytes)
    return out, metadata


def load_file(filename, device="cpu", verify_checksum=True, require_checksum=False):
    """Reads a .safetensors file into a dict of name -> torch.Tensor (views
    into one buffer read from the file; no further copy on the CPU). Viper's
    checksum is verified when the file has one (a mismatch raises
    viper.DataLossError); `require_checksum` refuses a file without one. Same
    shape as safetensors.torch.load_file."""
    tensors, _ = _load(filename, verify_checksum, require_checksum)
    if str(device) != "cpu":
        tensors = {k: v.to(device) for k, v in tensors.items()}
    return tensors


def load_metadata(filename):
    """The file's __metadata__ (str -> str), Viper's keys included."""
    return _load(filename, True, False)[1]


# ---- Consumer ---------------------------------------------------------------

class Version:
    """One served, verified, immutable version. Its tensors view the received
    bytes; the bytes stay alive while this object or any of its tensors is
    referenced (the Subscriber meanwhile receives the next version elsewhere).
    The tensors are read-only: every reader shares them, so an in-place
    change raises RuntimeError before anything is written (they are
    viper._torch.ReadOnlyTensor; copy with .clone() or load_into() to change
    a copy)."""

    __slots__ = ("_v", "_state_dict", "_metadata", "__weakref__")

    def __init__(self, v):
        self._v = v
        self._state_dict = None
        self._metadata = None

    version = property(lambda self: self._v.version, doc="0 = the warm-up model, +1 per publish")
    iteration = property(lambda self: self._v.iteration, doc="training iteration of the snapshot")
    producer = property(lambda self: self._v.producer)
    nbytes = property(lambda self: self._v.nbytes, doc="size of the safetensors image (header + data)")
    checksum = property(lambda self: self._v.checksum)
    tier = property(lambda self: self._v.tier)
    source = property(lambda self: self._v.source)
    receive_s = property(lambda self: self._v.receive_s)
    verify_s = property(lambda self: self._v.verify_s)

    def _tensors(self, device):
        if self._v.memory == "device" and device != "cpu" and torch.cuda.is_available():
            return {name: _CudaView(self._v, dtype, shape, ptr, nbytes).tensor(dev)
                    for name, dtype, shape, ptr, nbytes, dev in self._v.device_tensors(torch.cuda.current_device())}
        out = {}
        from_viper, from_buffer = _torch.FROM_VIPER, _torch.from_buffer
        from_numpy, asarray = torch.from_numpy, numpy.asarray
        # Served tensors are read-only (_torch.ReadOnlyTensor: an in-place
        # change raises before writing; the Subscriber also write-protects
        # the verified bytes, so a write from outside torch faults).
        read_only = _torch.read_only
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="The given (buffer|NumPy array) is not writable")
            for name, dtype, shape, buffer in self._v.host_tensors():
                if buffer.typed:  # a typed view: numpy + from_numpy is ~3x faster than frombuffer + view
                    out[name] = read_only(from_numpy(asarray(buffer)))
                    continue
                d = from_viper.get(dtype)
                out[name] = read_only(from_buffer(buffer, d if d is not None else _torch._torch_dtype(name, dtype),
                                                  shape))
        return out

    def state_dict(self, device=None):
        """name -> torch.Tensor viewing the received bytes, no copy (host and
        pfs tiers). A gpu-tier version gives CUDA views with device="cuda"
        where torch has CUDA, else a host copy. The same tensors on every
        call with the same device."""
        key = "cpu" if device is None else str(device)
        if self._state_dict is None:
            self._state_dict = {}
        if key not in self._state_dict:
            tensors = self._tensors(key)
            meta = tensors.pop(METADATA_TENSOR, None)
            if self._metadata is None:
                self._metadata = {} if meta is None else json.loads(bytes(meta.cpu().numpy()).decode("utf-8"))
            self._state_dict[key] = tensors
        return dict(self._state_dict[key])

    @property
    def metadata(self):
        """The metadata given to publish() (str -> str)."""
        if self._metadata is None:
            self.state_dict()
        return dict(self._metadata)

    def load_into(self, module, strict=True):
        """module.load_state_dict(self.state_dict(), strict): copies the
        version into the module's parameters and buffers."""
        return module.load_state_dict(self.state_dict(), strict=strict)

    def __repr__(self):
        return f"Version(version={self.version}, iteration={self.iteration}, nbytes={self.nbytes}, tier={self.tier})"


class _CudaView:
    """__cuda_array_interface__ over a gpu-tier version's tensor (keeps it alive)."""

    _TYPESTR = {"BOOL": "|b1", "U8": "|u1", "I8": "|i1", "I16": "<i2", "F16": "<f2", "I32": "<i4", "F32": "<f4",
                "I64": "<i8", "F64": "<f8", "U16": "<u2", "U32": "<u4", "U64": "<u8"}

    def __init__(self, owner, dtype, shape, ptr, nbytes):
        self.owner, self.dtype, self.shape = owner, dtype, shape
        if dtype not in self._TYPESTR:
            raise ValueError(f"dtype {dtype} cannot be viewed on the GPU through __cuda_array_interface__")
        self.__cuda_array_interface__ = {"shape": tuple(shape), "typestr": self._TYPESTR[dtype],
                                         "data": (ptr, True), "version": 2}

    def tensor(self, device):
        return torch.as_tensor(self, device=f"cuda:{device}")


class Subscriber:
    """The consumer side: receives each new version on a background thread,
    verifies it and swaps it in atomically. Collective with the Publisher on
    the MPI tiers (every rank creates its Publisher or Subscriber).

    tier: "host" | "gpu" | "pfs" (as the Publisher's); notify: "push" | "poll"
    (poll: scan `pfs_dir` every `poll_period_s`, no MPI). `callback(version)`
    runs on the receiving thread after each swap, the first included; keep it
    short (it holds the GIL). `session_id` (pfs): serve only versions written
    by a Publisher with the same session_id (viper.new_session_id()), never
    another run's files in the same directory; `hmac_key_file` (pfs): serve
    only versions whose keyed digest verifies under that key (the
    Publisher's). The pfs directory must belong to this user (or root) and
    not be writable by group or others."""

    def __init__(self, tier="host", notify="push", pfs_dir="", poll_period_s=1.0, callback=None, *,
                 host_protocol="two-sided", producer_rank=0, window_slot_bytes=64 << 20, producer_timeout_s=0.0,
                 transfer_timeout_s=30.0, preallocate_bytes=0, idle_sleep_us=20, o_direct=False, gpu_device=0,
                 allow_ipc=True, allow_shm=True, session_id="", hmac_key_file=""):
        if callback is not None and not callable(callback):
            raise ValueError("Subscriber: callback must be callable")
        wrapped = None if callback is None else (lambda v: callback(Version(v)))
        self._sub = _viper.Subscriber(tier, notify, str(pfs_dir), poll_period_s, host_protocol, producer_rank,
                                      window_slot_bytes, producer_timeout_s, transfer_timeout_s, preallocate_bytes,
                                      idle_sleep_us, o_direct, gpu_device, allow_ipc, allow_shm, wrapped,
                                      str(session_id), str(hmac_key_file))

    def current(self):
        """The newest verified version, or None before the first."""
        v = self._sub.current()
        return None if v is None else Version(v)

    def wait_for_version(self, version, timeout_s=60.0):
        """Waits until a version >= `version` is current and returns it.
        TimeoutError after `timeout_s`; RuntimeError when the producer finished
        or was lost before that."""
        return Version(self._sub.wait_for_version(int(version), float(timeout_s)))

    def wait_until_done(self, timeout_s):
        """True once the producer closed (or was lost) and receiving ended."""
        return self._sub.wait_until_done(float(timeout_s))

    def load_into(self, module, strict=True):
        """Loads the current version into `module` (load_state_dict) and returns it."""
        v = self.current()
        if v is None:
            raise RuntimeError("load_into: no version received yet (wait_for_version(0) first)")
        v.load_into(module, strict=strict)
        return v

    def summary(self):
        """A dict: received, rejected (versions refused, never served),
        bytes_moved (bytes that reached this consumer for the versions swapped
        in), delta_versions (rebuilt from a delta against the version held),
        delta_copies_avoided (of those, rebuilt without a whole copy of the
        served image: the back buffer brought forward, host and pfs tiers),
        delta_copied_bytes (bytes copied from served images for them),
        producer_finished, producer_lost, message, brief, rejections."""
        return self._sub.summary()

    def stop(self):
        """Stops receiving; the current version stays available."""
        self._sub.stop()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


# ---- Producer ---------------------------------------------------------------

def _layout(specs):
    return [(name, dtype, tuple(shape)) for name, dtype, shape, _, _, _ in specs]


def _layout_change(before, now):
    b, n = dict((x[0], x[1:]) for x in before), dict((x[0], x[1:]) for x in now)
    for name in b:
        if name not in n:
            return f"'{name}' is missing"
    for name in n:
        if name not in b:
            return f"'{name}' is new"
        if b[name] != n[name]:
            return f"'{name}' was {b[name][0]} {list(b[name][1])}, now {n[name][0]} {list(n[name][1])}"
    return "the tensors come in a different order"


class Publisher:
    """The producer side. Each publish() sends the state_dict as the next
    version to the Subscribers (host/gpu tiers, over MPI) or writes it to
    `pfs_dir` (pfs tier), and tells them (push) or lets them find it (poll).

    mode "async": publish() returns once the snapshot is taken (the only
    stall); a background thread sends it. "sync": returns once delivered.
    Contiguous CPU tensors are read in place (no copy beyond the engine's own
    snapshot); CUDA tensors go through the gpu tier from their device
    pointers. Every version must have the layout (names, dtypes, shapes) of
    the first.

    pfs: `pfs_dir` is created when missing (mode 0700) and refused when
    another user owns it or group/others may write into it; files are 0600.
    `session_id` (e.g. viper.new_session_id()) goes into every version's
    metadata; Subscribers given the same one serve only those versions.
    `hmac_key_file` (a file of 16-4096 bytes, yours, mode 0600): each
    version carries an HMAC-SHA256 under it, checked by Subscribers given
    the same file (one SHA-256 pass over the data per version).
    `pfs_delta` (pfs): each version after the first is written as a delta
    against the previous one when that is smaller (the report's `encoding`
    and `written_bytes` say what was written); Subscribers rebuild and
    verify it. The Publisher keeps a copy of the previous version.
    `delta` ("auto", "on" or "off"; Publisher::Options::delta): host tier, a
    consumer that holds the last version gets only what changed (auto: to
    consumers on other nodes, when the measured link, encode and apply times
    make it faster; on: every consumer that holds the base), rebuilt and
    verified before it is served; each report's consumers say which
    `encoding` they got, why (`encoding_reason`) and `bytes_moved`. pfs: "on" is `pfs_delta`. A
    failed background write (async, e.g. a full disk) is raised once, by the
    next publish/flush/close, and then cleared."""

    def __init__(self, tier="host", mode="async", notify="push", pfs_dir="", *, host_protocol="shm", fanout="node",
                 staging_bytes=0, snapshot_threads=0, subscriber_ranks=None, peer_timeout_s=30.0,
                 wait_for_servable=True, o_direct=False, pfs_keep_versions=2, producer_id=0, gpu_device=0,
                 chunk_bytes=64 << 20, session_id="", hmac_key_file="", pfs_delta=False, delta="auto"):
        self._tier = tier
        self._layout = None
        self._pub = _viper.Publisher(tier, mode, notify, str(pfs_dir), host_protocol, fanout, staging_bytes,
                                     snapshot_threads, list(subscriber_ranks or []), peer_timeout_s,
                                     wait_for_servable, o_direct, pfs_keep_versions, producer_id, gpu_device,
                                     chunk_bytes, str(session_id), str(hmac_key_file), bool(pfs_delta),
                                     str(delta))

    def publish(self, state_dict, iteration, metadata=None):
        """Publishes `state_dict` as the next version, taken after training
        iteration `iteration`; returns its VersionReport (stall_s,
        snapshot_s, transfer_s, consumers[i].servable_s; async: the stall
        now, the rest in reports() once sent). ValueError for a non-contiguous
        tensor, an unsupported dtype or a layout that differs from the first
        version's."""
        if isinstance(state_dict, dict) and METADATA_TENSOR in state_dict:
            # Consumers take a tensor of that name for the metadata: reserved.
            raise ValueError(f"publish: the tensor name {METADATA_TENSOR} is reserved for Viper's metadata")
        resolved = []  # negative/conjugate views made real, alive during the publish
        specs = _torch.specs(state_dict, "publish", allow_cuda=self._tier == "gpu", keep=resolved)
        layout = _layout(specs)
        if self._layout is None:
            self._layout = layout
        elif layout != self._layout:
            raise ValueError("publish: the state_dict's layout changed since the first version: " +
                             _layout_change(self._layout, layout) + " (consumers load every version into one model)")
        meta = _check_metadata(metadata, "publish")
        keep = None
        if meta:
            keep = torch.frombuffer(bytearray(json.dumps(meta).encode("utf-8")), dtype=torch.uint8)
            specs.append((METADATA_TENSOR, "U8", [keep.numel()], keep.data_ptr(), keep.numel(), -1))
        return self._pub.publish(specs, int(iteration))

    def flush(self):
        """Waits until the background sender is idle (async)."""
        self._pub.flush()

    def close(self):
        """Flushes, tells the consumers no more versions come. Idempotent."""
        self._pub.close()

    def reports(self):
        """VersionReport of every version so far (async ones completed)."""
        return self._pub.reports()

    def summary(self):
        return self._pub.summary()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# ---- Planner ----------------------------------------------------------------

def _cost_of(cost, poll_period_s=0.0):
    """(stall_s, delay_s) from a tuple, a dict or a VersionReport (as the live
    producer does: delay = the slowest consumer's servable time when
    acknowledged, else snapshot + transfer + notify; + half a poll period)."""
    if isinstance(cost, VersionReport):
        servable = max([c.servable_s for c in cost.consumers if c.delivered] or [0.0])
        delay = servable if servable > 0 else cost.snapshot_s + cost.transfer_s + cost.notify_s
        return cost.stall_s, max(cost.stall_s, delay + 0.5 * poll_period_s)
    if isinstance(cost, dict):
        return float(cost["stall_s"]), float(cost.get("delay_s", cost["stall_s"]))
    try:
        stall, delay = cost
        return float(stall), float(delay)
    except (TypeError, ValueError):
        raise ValueError(f"cost must be (stall_s, delay_s), a dict with stall_s/delay_s or a VersionReport, got {cost!r}")


def _request_interval(requests):
    """Seconds between requests (0 = one per iteration) from `requests`."""
    if requests is None:
        return 0.0
    if isinstance(requests, dict):
        if set(requests) == {"per_s"}:
            requests = requests["per_s"]
        elif set(requests) == {"interval_s"}:
            t = float(requests["interval_s"])
            if not t > 0:
                raise ValueError(f"Planner: requests interval_s must be > 0, got {t}")
            return t
        else:
            raise ValueError(f"Planner: requests must be a rate or {{'per_s': r}} or {{'interval_s': t}}, got {requests!r}")
    try:
        rate = float(requests)
    except (TypeError, ValueError):
        raise ValueError(f"Planner: requests must be requests per second, got {requests!r}")
    if not rate > 0:
        raise ValueError(f"Planner: requests must be > 0 per second, got {rate}")
    return 1.0 / rate


class Planner:
    """When to publish. strategy "online" (the closed loop: re-plans at every
    measurement, detects regime changes, publishes a candidate only when its
    validation loss beats the served version's by more than the noise), or
    one of the offline strategies ("optimal", "fixed", "viper-greedy",
    "viper-fixed", "epoch"), planned once at the end of the warm-up.

    Call observe() every iteration (train_loss, and val_loss where measured),
    then should_checkpoint(); after publishing, commit(). The plan is made at
    the first should_checkpoint() after `warmup`, from the warm-up's
    observations: tau is their measured pace unless `seconds_per_iteration` is
    given, and the checkpoint cost is `cost` or set_cost(report) (the report
    of the version published at the warm-up). `requests`: each consumer's
    request rate, requests per second (a number, or {"per_s": r} or
    {"interval_s": t}); None = one request per training iteration.
    `traffic_clock`: "wall" (the default: the traffic moves on in real time,
    every stall leaves later versions further behind it, and online prices
    that lag from the decay observe_served() measures) or "producer" (the
    traffic's drift follows the producer's iteration and waits while it
    stalls). `drift_prior` (online, wall clock; None = the C++ default 3,
    0 = none, at most 1000): how much drift to expect before any is
    measured, as the factor by which it raises a stale model's loss over the
    serving window (1 = doubles it); each publish's stall is priced as that
    much lag, so publishes whose gain does not pay for it are skipped (fewer
    before a drift nobody can see coming; where the traffic never drifts it
    costs more than that with a fixed request count on a slow tier: pass 0
    for traffic known not to drift). It applies only once observe_served()
    has been called: without re-measurements of the served version no drift
    can be seen.
    `record_decisions` (online): keep every decision for decisions().
    Re-publishing (online; recurring domains, README "Staleness tables"):
    `keep_versions` (None = the C++ default 8; 0 = never re-publish, at most
    1000): how many models it keeps for a possible re-publish (the last ones
    it published, plus copies of a regime's end); `keep_regime_ends`
    ("predicted", the default: a copy at the measurement before a predicted
    switch once a recurring cycle is known; "every": at every validation
    point; "off": none): which unpublished models it asks you to copy,
    copy_at() says where; `anticipate_returns` (None = on): publish a kept
    model ahead of a predicted return of its domain.
    `wait_guard` (online; None = the C++ default 4, 0 = off, at most 1000):
    once the served version, re-measured by observe_served(), has measured
    above the candidate since the last publish by more (in loss x seconds,
    less the gate's margin) than this many stalls at the candidate's loss,
    the candidate is published even where the re-plan waits."""

    def __init__(self, strategy="online", total_iterations=None, warmup=None, cost=None, requests=None, *,
                 seconds_per_iteration=None, metric="auto", gate_z=0.5, drift_per_s=0.0, price_per_slowdown_s=0.0,
                 slowdown_budget_s=None, min_spacing=1, poll_period_s=0.0, traffic_clock="wall", drift_prior=None,
                 record_decisions=False, keep_versions=None, keep_regime_ends=None, anticipate_returns=None,
                 wait_guard=None):
        if total_iterations is None or warmup is None:
            raise ValueError("Planner: total_iterations and warmup are required")
        stall = delay = None
        if cost is not None:
            stall, delay = _cost_of(cost, poll_period_s)
        interval_s = _request_interval(requests)
        self._poll_period_s = poll_period_s
        prior = {} if drift_prior is None else {"drift_prior": float(drift_prior)}
        if keep_versions is not None:
            if isinstance(keep_versions, bool) or int(keep_versions) != keep_versions:
                raise ValueError(f"Planner: keep_versions must be a whole number in [0, 1000], got {keep_versions!r}")
            prior["keep_versions"] = int(keep_versions)
        if keep_regime_ends is not None:
            prior["keep_regime_ends"] = str(keep_regime_ends)
        if anticipate_returns is not None:
            prior["anticipate_returns"] = bool(anticipate_returns)
        if wait_guard is not None:
            prior["wait_guard"] = float(wait_guard)
        self._p = _viper.Planner(strategy, int(total_iterations), int(warmup), float(seconds_per_iteration or 0.0),
                                 stall, delay, interval_s, metric,
                                 float(gate_z), float(drift_per_s), float(price_per_slowdown_s), slowdown_budget_s,
                                 int(min_spacing), str(traffic_clock), record_decisions=bool(record_decisions),
                                 **prior)

    def set_cost(self, cost):
        """The checkpoint cost: (stall_s, delay_s), a dict, or a VersionReport.
        Before the warm-up ends it is the cost the plan is made with; after
        it, online only, the measured cost of the next update (e.g. the last
        delta version's report), which later re-plans charge to every
        checkpoint."""
        self._p.set_cost(*_cost_of(cost, self._poll_period_s))

    def observe(self, iteration, train_loss=None, val_loss=None):
        """What the producer measured at `iteration` (floats or 0-dim tensors)."""
        as_float = lambda x: None if x is None else float(x)
        self._p.observe(int(iteration), as_float(train_loss), as_float(val_loss))

    def should_checkpoint(self, iteration):
        """Whether to publish after `iteration` (False during the warm-up)."""
        return self._p.should_checkpoint(int(iteration))

    def commit(self, iteration):
        """Records a publish after `iteration`."""
        self._p.commit(int(iteration))

    def set_pace(self, seconds_per_iteration):
        """online: the training loop's pace as measured (seconds per step over
        its latest steps, publishing pauses left out). Later re-plans plan the
        time left on it instead of the warm-up's seconds_per_iteration; it is
        taken when it differs from the pace in use by more than 10%."""
        self._p.set_pace(float(seconds_per_iteration))

    def observe_clock(self, step, seconds):
        """online: the producer's own clock, the training seconds from the
        end of the warm-up to the end of `step` (checkpoint stalls not
        counted), for every step after the warm-up, in order (a step given
        again is ignored). Under the wall traffic clock a past traffic
        position is then read off it once training has got there, instead of
        estimated at the pace. ValueError for a skipped step, or seconds that
        are not finite or run backwards."""
        self._p.observe_clock(int(step), float(seconds))

    def observe_served(self, loss):
        """online: the served version re-measured on today's validation data,
        after this step's observe() (it belongs to the latest observed step:
        given before observe(), it is the previous step's, and the kept
        models re-measured with it are never compared with the candidate).
        ValueError when the latest observe() had no val_loss."""
        self._p.observe_served(float(loss))

    def copy_at(self, step):
        """online: whether to copy the model measured at `step` and keep it
        unpublished for a possible re-publish (keep_regime_ends; decided in
        observe(), so ask after the step's observe()). Keep it where
        kept_versions() can re-measure it, e.g. StalenessRecorder.keep(step,
        model); each copy is a stall of your loop that the judge charges
        (`copies` in report())."""
        return bool(self._p.copy_at(int(step)))

    def kept_versions(self):
        """online: the steps of the models it keeps for re-publishing (the
        last ones it published and the last of each regime before a detected
        change; never the served one), to re-measure with observe_kept()."""
        return list(self._p.kept_versions())

    def observe_kept(self, step, loss):
        """online: the kept model of `step` re-measured on today's validation
        data (after observe() and observe_served() of this step; ValueError
        when the latest observe() had no val_loss)."""
        self._p.observe_kept(int(step), float(loss))

    def publishing(self):
        """The step whose model to publish when should_checkpoint() said
        True: the current step's, or an older kept one that measures better
        on today's data (a re-publish: publish that model, then commit())."""
        return int(self._p.publishing())

    def decisions(self):
        """online with record_decisions=True: one dict per decision taken so
        far, at every validation point after the warm-up: what it saw
        (candidate_loss, served_model and served_loss, noise_sd, gate_margin,
        best_kept_model and best_kept_loss, decay_per_s, lag_price_per_s,
        traffic_iteration, changes, switches, cycle, predicted_switch) and
        what it chose (plan_wants, planned_checkpoint: the re-plan's first
        checkpoint or None when it plans none, gated, held_for_return, held_on_ramp,
        held_for_switch, waited_too_long, publish, published_model, publish_kind: "fresh", "kept" or
        "ahead");
        None where there was nothing (judge_traffic_iteration always: only
        the offline replay knows where the judge placed the traffic). The columns of `viper simulate
        --decisions-csv` (README, "Why online published"). Empty otherwise."""
        return list(self._p.decisions())

    def report(self):
        """What the planner did: strategy, checkpoints, tau, cost, summary..."""
        return self._p.report()


# ---- Sharded producer and consumer groups (issue 28): groups.py ----------------
# Imported last: its atexit hook must be registered after _viper.finalize's.

from .groups import ShardLayout, ShardedPublisher, ShardedSubscriber, ShardVersion  # noqa: E402

__all__ += ["ShardLayout", "ShardedPublisher", "ShardedSubscriber", "ShardVersion"]
