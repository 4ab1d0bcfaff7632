"""Recording a staleness table (issue 25) from a user's own PyTorch loop.

A staleness table holds the loss of the model as it was after iteration v
(a *version*) on the data as it is after iteration t >= v: its diagonal
(v = t) is what a training log's validation/test columns hold, off the
diagonal it says how a stale version decays when the traffic drifts.

    rec = viper.StalenessRecorder(every=50, max_bytes=64 << 20)
    for step in range(1, n + 1):
        ...train...
        rec.maybe_keep(step, model)                   # a CPU copy every 50 steps
        if step % 50 == 0:
            rec.record(step, val_batch, traffic_batch, loss_fn, model)
            planner.observe_served(rec.loss_of(served_step, "val"))
    rec.write("run.staleness.csv.gz")

File: CSV (gzip for .gz), header
version_iteration,traffic_iteration,val_loss,val_accuracy,test_loss,test_accuracy
(accuracy columns only when measured), one row per measured pair v <= t,
written by the C++ core's writer (FormatStalenessCsv), atomically, mode 0600.
"""
import copy
import math

import torch

from . import _viper

__all__ = ["StalenessRecorder"]


def _state_bytes(state):
    return sum(t.numel() * t.element_size() for t in state.values())


def _copy_state(model, device):
    if isinstance(model, torch.nn.Module):
        state = model.state_dict()
    elif isinstance(model, dict):
        state = model
    else:
        raise TypeError(f"StalenessRecorder: model must be a torch.nn.Module or a state_dict, got {type(model).__name__}")
    out = {}
    for name, t in state.items():
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"StalenessRecorder: state_dict entry '{name}' is a {type(t).__name__}, not a tensor")
        out[name] = t.detach().to(device=device, copy=True)
    return out


def _as_float(x, what):
    try:
        return float(x)
    except (TypeError, ValueError):
        raise TypeError(f"StalenessRecorder.record: the loss function must return a number or a 0-dim tensor "
                        f"({what}), got {type(x).__name__}")


def _split(batch, what):
    if not isinstance(batch, (tuple, list)) or len(batch) != 2:
        raise ValueError(f"StalenessRecorder.record: {what} must be a pair (inputs, targets), "
                         f"got {type(batch).__name__}" + (f" of length {len(batch)}" if hasattr(batch, '__len__') else ""))
    return batch[0], batch[1]


def _accuracy(outputs, targets):
    """Top-1 accuracy where the batch is classification (outputs N x C
    floats, targets N class indices), else None."""
    if not (isinstance(outputs, torch.Tensor) and isinstance(targets, torch.Tensor)):
        return None
    if outputs.dim() != 2 or targets.dim() != 1 or outputs.shape[0] != targets.shape[0] or targets.numel() == 0:
        return None
    if not outputs.is_floating_point() or targets.is_floating_point() or targets.dtype == torch.bool:
        return None
    return (outputs.argmax(dim=1) == targets.to(outputs.device)).double().mean().item()


class StalenessRecorder:
    """Keeps versions of a model as it trains and measures every kept
    version on the current validation and traffic samples.

    every: maybe_keep() keeps a version at the steps that are multiples of
    `every` (> 0). max_bytes: the bound on the kept copies' bytes (the
    tensors' storage; each version costs the state_dict's bytes); when a new
    version would exceed it, old versions are thinned evenly (the kept
    version whose removal leaves the smallest gap goes first, the older on a
    tie; the oldest goes last), the newest is always kept, and the served
    version (keep(..., served=True)) is kept while the bound holds two.
    device: where the copies live ("cpu" by default: the GPU's memory stays
    the user's)."""

    def __init__(self, every, max_bytes, device="cpu"):
        if isinstance(every, bool) or not isinstance(every, int) or every <= 0:
            raise ValueError(f"StalenessRecorder: every must be an integer > 0 (keep a version every that many "
                             f"steps), got {every!r}")
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes <= 0:
            raise ValueError(f"StalenessRecorder: max_bytes must be an integer > 0 (the memory bound on the kept "
                             f"versions), got {max_bytes!r}")
        self.every = every
        self.max_bytes = max_bytes
        self.device = torch.device(device)
        self._versions = {}          # step -> state_dict copy (on self.device)
        self._bytes = {}             # step -> bytes of that copy
        self._served = None          # step of the served version (protected from thinning)
        self._rows = {}              # (version, traffic) -> row tuple
        self._last_traffic = None    # step of the latest record()
        self._scratch = None         # (source id, module): the module versions are loaded into for evaluation
        self.thinned = 0             # versions dropped to hold the bound

    # ---- Keeping versions ------------------------------------------------------

    @property
    def versions_kept(self):
        """Steps of the kept versions, oldest first."""
        return sorted(self._versions)

    @property
    def bytes_kept(self):
        """Bytes of the kept copies (<= max_bytes)."""
        return sum(self._bytes.values())

    @property
    def served_step(self):
        """The step of the version marked served (keep(..., served=True)), or None."""
        return self._served

    def maybe_keep(self, step, model):
        """Keeps a copy of `model` (a Module or a state_dict) as version
        `step` when `step` is a multiple of `every`; returns whether it did."""
        step = self._check_step(step, "maybe_keep")
        if step % self.every != 0:
            return False
        return self.keep(step, model)

    def keep(self, step, model, served=False):
        """Keeps a copy of `model` as version `step` whatever `every` says
        (e.g. the version just published). served=True marks it as the
        version the consumers serve (loss_of's default; kept through
        thinning while the bound holds two versions). Steps must not go
        back; keeping the same step again only updates `served`. ValueError
        when one version alone exceeds max_bytes."""
        step = self._check_step(step, "keep")
        newest = max(self._versions) if self._versions else None
        if newest is not None and step < newest:
            raise ValueError(f"StalenessRecorder.keep: step {step} is before the newest kept version ({newest}); "
                             f"versions are kept in training order")
        if step != newest:
            state = _copy_state(model, self.device)
            nbytes = _state_bytes(state)
            if nbytes > self.max_bytes:
                raise ValueError(f"StalenessRecorder: max_bytes={self.max_bytes} is too small for one version of "
                                 f"this model ({nbytes} bytes); give at least {nbytes} (x the number of versions "
                                 f"to keep)")
            self._versions[step] = state
            self._bytes[step] = nbytes
        if served:
            self._served = step
        self._thin()
        return True

    def serve(self, step):
        """Marks the kept version `step` as the one the consumers serve (a
        re-publish of an older kept model: Planner.publishing()). KeyError
        when it is not kept."""
        step = self._check_step(step, "serve")
        if step not in self._versions:
            raise KeyError(f"StalenessRecorder.serve: version {step} is not kept (kept: {self.versions_kept})")
        self._served = step

    def state_of(self, step):
        """The kept copy (a state_dict) of version `step`, e.g. to publish it
        again. KeyError when it is not kept."""
        step = self._check_step(step, "state_of")
        if step not in self._versions:
            raise KeyError(f"StalenessRecorder.state_of: version {step} is not kept (kept: {self.versions_kept})")
        return self._versions[step]

    def _thin(self):
        while self.bytes_kept > self.max_bytes:
            steps = sorted(self._versions)
            protected = {steps[-1]}
            if self._served is not None and self._served in self._versions:
                protected.add(self._served)
                if all(s in protected for s in steps):  # the bound holds one version: the newest wins
                    protected = {steps[-1]}
            best, best_gap = None, None
            for i, s in enumerate(steps):
                if s in protected:
                    continue
                # The gap left by removing s; the oldest only when nothing else can go.
                gap = steps[i + 1] - steps[i - 1] if i > 0 else math.inf
                if best_gap is None or gap < best_gap:
                    best, best_gap = s, gap
            del self._versions[best]
            del self._bytes[best]
            if best == self._served:
                self._served = None
            self.thinned += 1

    @staticmethod
    def _check_step(step, what):
        if isinstance(step, bool) or not isinstance(step, int):
            try:
                if isinstance(step, torch.Tensor) or float(step) != int(step):
                    raise TypeError
                step = int(step)
            except (TypeError, ValueError):
                raise ValueError(f"StalenessRecorder.{what}: step must be an integer, got {step!r}")
        if step < 0:
            raise ValueError(f"StalenessRecorder.{what}: step must be >= 0, got {step}")
        return step

    # ---- Measuring -------------------------------------------------------------

    def _module(self, model_factory_or_module):
        """A scratch module to load versions into (the user's stays as it is)."""
        key = id(model_factory_or_module)
        if self._scratch is not None and self._scratch[0] == key:
            return self._scratch[1]
        if isinstance(model_factory_or_module, torch.nn.Module):
            module = copy.deepcopy(model_factory_or_module)
        elif callable(model_factory_or_module):
            module = model_factory_or_module()
            if not isinstance(module, torch.nn.Module):
                raise TypeError(f"StalenessRecorder.record: the model factory returned a "
                                f"{type(module).__name__}, not a torch.nn.Module")
        else:
            raise TypeError("StalenessRecorder.record: model_factory_or_module must be a torch.nn.Module (copied "
                            "once) or a callable returning one")
        module.eval()
        for p in module.parameters():
            p.requires_grad_(False)
        self._scratch = (key, module, model_factory_or_module)  # the source kept alive: its id stays unique
        return module

    def _measure(self, module, batch, loss_fn):
        inputs, targets = batch
        outputs = module(inputs)
        loss = _as_float(loss_fn(outputs, targets), "a batch")
        return loss, _accuracy(outputs, targets)

    def record(self, step, val_batch, test_batch, loss_fn, model_factory_or_module):
        """Measures every kept version v <= step on `val_batch` (the
        validation sample as it is now) and `test_batch` (the traffic sample
        as it is now, disjoint from it), each a pair (inputs, targets):
        loss_fn(module(inputs), targets) under torch.no_grad() in eval mode,
        plus top-1 accuracy when the outputs are N x C and the targets N
        class indices. model_factory_or_module: a Module, copied once as a
        scratch module the versions are loaded into (the user's module is
        not touched), or a callable returning a fresh one. When a Module is
        given and no version is kept at `step`, the Module itself is
        measured as version `step` (the diagonal). Returns the new rows.
        Steps must increase from one record() to the next."""
        step = self._check_step(step, "record")
        if self._last_traffic is not None and step <= self._last_traffic:
            raise ValueError(f"StalenessRecorder.record: step {step} is not after the previous record "
                             f"({self._last_traffic})")
        if not callable(loss_fn):
            raise ValueError("StalenessRecorder.record: loss_fn must be callable, loss_fn(outputs, targets)")
        val = _split(val_batch, "val_batch")
        test = _split(test_batch, "test_batch")
        module = self._module(model_factory_or_module)
        versions = [(v, self._versions[v]) for v in self.versions_kept if v <= step]
        if step not in self._versions and isinstance(model_factory_or_module, torch.nn.Module):
            versions.append((step, model_factory_or_module.state_dict()))
        if not versions:
            raise ValueError(f"StalenessRecorder.record: no version kept at or before step {step} (call "
                             f"maybe_keep or keep first, or pass the Module)")
        rows = []
        with torch.no_grad():
            for v, state in versions:
                module.load_state_dict(state)
                val_loss, val_acc = self._measure(module, val, loss_fn)
                test_loss, test_acc = self._measure(module, test, loss_fn)
                row = (v, step, val_loss, val_acc, test_loss, test_acc)
                self._rows[(v, step)] = row
                rows.append(row)
        self._last_traffic = step
        return rows

    @property
    def rows(self):
        """Every measured row, (version_iteration, traffic_iteration,
        val_loss, val_accuracy, test_loss, test_accuracy) sorted by
        (version, traffic); accuracies None where not measured."""
        return [self._rows[k] for k in sorted(self._rows)]

    def loss_of(self, version_step=None, which="val", traffic_step=None):
        """The loss of version `version_step` (default: the served one) on
        the traffic of `traffic_step` (default: the latest record()), which
        "val" (what a producer can see: give it to Planner.observe_served)
        or "test". KeyError when that pair was not measured."""
        if which not in ("val", "test"):
            raise ValueError(f"StalenessRecorder.loss_of: which must be 'val' or 'test', got {which!r}")
        if version_step is None:
            version_step = self._served
            if version_step is None:
                raise KeyError("StalenessRecorder.loss_of: no served version (keep(step, model, served=True)) "
                               "and no version_step given")
        t = self._last_traffic if traffic_step is None else traffic_step
        row = self._rows.get((version_step, t))
        if row is None:
            raise KeyError(f"StalenessRecorder.loss_of: version {version_step} was not measured on the traffic of "
                           f"step {t} (kept versions: {self.versions_kept})")
        return row[2] if which == "val" else row[4]

    # ---- Writing ---------------------------------------------------------------

    def write(self, path):
        """Writes the table to `path` (CSV; gzip when it ends in .gz)
        atomically (a temporary beside it, fsync, rename) with mode 0600.
        ValueError for a non-finite loss (the table's readers refuse them)."""
        rows = self.rows
        if not rows:
            raise ValueError("StalenessRecorder.write: nothing recorded yet (call record() first)")
        _viper.write_staleness_table(str(path), rows)
