"""torch <-> Viper: tensor specs for the C++ side, torch views of its buffers."""
from collections.abc import Mapping

import torch

# torch dtype -> safetensors dtype name (the ones this torch has).
TO_VIPER = {
    torch.bool: "BOOL",
    torch.uint8: "U8",
    torch.int8: "I8",
    torch.int16: "I16",
    torch.float16: "F16",
    torch.bfloat16: "BF16",
    torch.int32: "I32",
    torch.float32: "F32",
    torch.int64: "I64",
    torch.float64: "F64",
}
for _name, _viper in (("float8_e4m3fn", "F8_E4M3"), ("float8_e5m2", "F8_E5M2"), ("uint16", "U16"),
                      ("uint32", "U32"), ("uint64", "U64")):
    if hasattr(torch, _name):  # newer torch releases
        TO_VIPER[getattr(torch, _name)] = _viper
FROM_VIPER = {v: k for k, v in TO_VIPER.items()}
_SUPPORTED = ", ".join(str(d).replace("torch.", "") for d in TO_VIPER)


def specs(tensors, what, allow_cuda=False, keep=None):
    """(name, dtype, shape, data_ptr, nbytes, device) per tensor, read in place.

    ValueError for anything Viper cannot read in place: a non-tensor, a
    non-contiguous or non-strided tensor, an unsupported dtype, a device other
    than the CPU (or CUDA where `allow_cuda`). A negative or conjugate view
    (its memory holds the values before the lazy negation) is resolved into
    a copy first, appended to `keep` (the caller holds it while the pointers
    are read); without `keep` such a view is a ValueError."""
    if not isinstance(tensors, Mapping):
        raise ValueError(f"{what}: expected a dict of name -> torch.Tensor (a state_dict), got {type(tensors).__name__}")
    out = []
    for name, t in tensors.items():
        if not isinstance(name, str) or not name:
            raise ValueError(f"{what}: tensor names must be non-empty strings, got {name!r}")
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{what}: '{name}' is a {type(t).__name__}, not a torch.Tensor")
        dtype = TO_VIPER.get(t.dtype)
        if dtype is None:
            raise ValueError(f"{what}: '{name}' has dtype {t.dtype}, which safetensors and Viper do not support "
                             f"(supported here: {_SUPPORTED})")
        if (hasattr(t, "is_neg") and t.is_neg()) or t.is_conj():
            # data_ptr() holds the values before the lazy negation/conjugation:
            # read as is, they would be published with the wrong sign.
            if keep is None:
                raise ValueError(f"{what}: '{name}' is a negative or conjugate view; pass t.resolve_neg().resolve_conj()")
            t = t.resolve_conj()
            if hasattr(t, "resolve_neg"):
                t = t.resolve_neg()
            keep.append(t)
        if t.layout != torch.strided:
            raise ValueError(f"{what}: '{name}' has layout {t.layout}; only dense (strided) tensors can be sent")
        if not t.is_contiguous():
            raise ValueError(f"{what}: '{name}' is not contiguous (shape {list(t.shape)}, strides {list(t.stride())}): "
                             "Viper reads tensors in place; pass t.contiguous()")
        if t.device.type == "cpu":
            device = -1
        elif t.device.type == "cuda" and allow_cuda:
            device = t.device.index if t.device.index is not None else torch.cuda.current_device()
        else:
            allowed = "cpu or cuda (gpu tier)" if allow_cuda else "cpu"
            raise ValueError(f"{what}: '{name}' is on device {t.device}; expected {allowed}")
        out.append((name, dtype, list(t.shape), t.data_ptr(), t.numel() * t.element_size(), device))
    return out


def _torch_dtype(name, dtype):
    d = FROM_VIPER.get(dtype)
    if d is None:
        raise ValueError(f"tensor '{name}' is {dtype}: torch {torch.__version__} has no such dtype")
    return d


_ITEMSIZE = {d: torch.empty((), dtype=d).element_size() for d in FROM_VIPER.values()}


def from_buffer(buffer, dtype, shape, offset=0, nbytes=None):
    """A torch tensor viewing `nbytes` bytes of `buffer` at `offset` (no copy).

    torch.frombuffer keeps `buffer` (and what it keeps alive) referenced for as
    long as the tensor's storage lives."""
    if nbytes is None:
        nbytes = len(buffer)
    if nbytes == 0:
        return torch.empty(shape, dtype=dtype)
    return torch.frombuffer(buffer, dtype=dtype, count=nbytes // _ITEMSIZE[dtype], offset=offset).view(shape)


def _writes(func, args, kwargs):
    """Whether calling `func` would write into a ReadOnlyTensor among its
    arguments: an in-place method (add_, copy_, zero_, __setitem__, __iadd__
    ...) on one, or one given as out=."""
    name = getattr(func, "__name__", "")
    inplace = (name.endswith("_") and not name.startswith("_")) or name == "__setitem__" or \
        (name.startswith("__i") and name.endswith("__") and name not in ("__index__", "__int__", "__init__"))
    # torch.nn.functional's inplace=True (relu, dropout, ...), by keyword or position.
    if not inplace and getattr(func, "__module__", "") == "torch.nn.functional":
        at = _inplace_position(func)
        inplace = bool(kwargs and kwargs.get("inplace")) or (at is not None and len(args) > at and args[at] is True)
    if inplace and args and isinstance(args[0], ReadOnlyTensor):
        return True
    out = kwargs.get("out") if kwargs else None
    outs = out if isinstance(out, (tuple, list)) else (out,)
    return any(isinstance(o, ReadOnlyTensor) for o in outs)


_INPLACE_AT = {}


def _inplace_position(func):
    """Position of `func`'s `inplace` parameter (torch.nn.functional), or None."""
    if func not in _INPLACE_AT:
        import inspect
        try:
            names = list(inspect.signature(func).parameters)
            _INPLACE_AT[func] = names.index("inplace") if "inplace" in names else None
        except (TypeError, ValueError):
            _INPLACE_AT[func] = None
    return _INPLACE_AT[func]


class ReadOnlyTensor(torch.Tensor):
    """A served tensor: a view of bytes every reader shares, verified once.
    An in-place change (w.add_(1), w[0] = 1, out=w, ...) raises RuntimeError
    before anything is written; views of it (w[0], w.view(...)) are
    read-only too; everything else returns ordinary tensors. Copy it
    (.clone(), load_state_dict) to change a copy. (The Subscriber also
    write-protects the pages: a write from outside torch faults.)"""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if _writes(func, args, kwargs):
            raise RuntimeError(f"{getattr(func, '__name__', func)}: a served tensor is read-only (every reader shares "
                               "it); change a copy: t.clone(), or load it into a module (load_into)")
        with torch._C.DisableTorchFunction():
            out = func(*args, **kwargs)
        if isinstance(out, torch.Tensor) and not isinstance(out, ReadOnlyTensor) and args and \
                isinstance(args[0], ReadOnlyTensor) and _shares_storage(out, args[0]):
            out = out.as_subclass(ReadOnlyTensor)  # a view of served bytes stays read-only
        elif getattr(func, "__name__", "") == "numpy" and hasattr(out, "flags"):
            out.flags.writeable = False
        return out


def _shares_storage(a, b):
    with torch._C.DisableTorchFunction():
        try:
            return a.device == b.device and a.storage().data_ptr() == b.storage().data_ptr()
        except (RuntimeError, NotImplementedError):
            return False


def read_only(t):
    """`t` as a ReadOnlyTensor (no copy)."""
    return t.as_subclass(ReadOnlyTensor)
