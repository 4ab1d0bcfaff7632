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
