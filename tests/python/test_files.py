"""viper.save_file / viper.load_file with torch tensors: round trips of every
dtype this torch shares with safetensors, byte layout per the specification,
Viper's checksum, and the errors for bad input."""
import os
import struct

import pytest
import torch

import viper
from conftest import read_safetensors, write_safetensors

# Every Viper (safetensors) dtype torch 1.13 has; F8_*, U16, U32, U64 have no
# torch 1.13 dtype (tested below as a clear error on load).
DTYPES = {
    torch.bool: "BOOL", torch.uint8: "U8", torch.int8: "I8", torch.int16: "I16", torch.float16: "F16",
    torch.bfloat16: "BF16", torch.int32: "I32", torch.float32: "F32", torch.int64: "I64", torch.float64: "F64",
}


def sample(dtype, shape, seed):
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if dtype.is_floating_point:
        return (torch.randn(shape, generator=g, dtype=torch.float64) * 100).to(dtype)
    info = torch.iinfo(dtype)
    return torch.randint(max(info.min, -2**31), min(info.max, 2**31 - 1), shape, generator=g, dtype=torch.int64).to(dtype)


def raw(t):
    return bytes(t.reshape(-1).view(torch.uint8).numpy())


def all_dtypes():
    return {f"t.{DTYPES[d]}": sample(d, (3, 5), i) for i, d in enumerate(DTYPES)}


def test_round_trip_every_dtype(tmp_dir):
    tensors = all_dtypes()
    tensors["scalar"] = torch.tensor(3.5, dtype=torch.float32)
    tensors["empty"] = torch.zeros((0, 4), dtype=torch.float32)
    tensors["big"] = sample(torch.float32, (257, 129), 99)
    path = tmp_dir / "all.safetensors"
    viper.save_file(tensors, path, metadata={"format": "pt", "note": "round trip"})
    loaded = viper.load_file(path)
    assert set(loaded) == set(tensors)
    for name, t in tensors.items():
        got = loaded[name]
        assert got.dtype == t.dtype, name
        assert got.shape == t.shape, name
        # Bit for bit (NaN-safe): compare the raw bytes.
        assert raw(got) == raw(t), name
        assert torch.equal(got, t), name
    meta = viper.load_metadata(path)
    assert meta["format"] == "pt" and meta["note"] == "round trip"
    assert len(meta["viper.checksum"]) == 16


def test_layout_follows_the_specification(tmp_dir):
    tensors = {"w": torch.arange(6, dtype=torch.float32).reshape(2, 3), "b": torch.tensor([7, 8], dtype=torch.int64)}
    path = tmp_dir / "spec.safetensors"
    viper.save_file(tensors, path, metadata={"k": "v"})
    header, data = read_safetensors(path)
    assert header["__metadata__"]["k"] == "v"
    (n,) = struct.unpack("<Q", open(path, "rb").read(8))
    assert n % 8 == 0
    for name, t in tensors.items():
        entry = header[name]
        assert entry["dtype"] == DTYPES[t.dtype]
        assert entry["shape"] == list(t.shape)
        begin, end = entry["data_offsets"]
        assert data[begin:end] == t.numpy().tobytes()
    assert sum(e["data_offsets"][1] - e["data_offsets"][0] for k, e in header.items() if k != "__metadata__") == len(data)


def test_reads_a_spec_file_without_checksum(tmp_dir):
    path = tmp_dir / "plain.safetensors"
    w = torch.arange(4, dtype=torch.float16)
    write_safetensors(path, {"w": ("F16", [2, 2], w.numpy().tobytes())}, metadata={"format": "pt"})
    loaded = viper.load_file(path)
    assert torch.equal(loaded["w"], w.reshape(2, 2))
    with pytest.raises(viper.DataLossError, match="checksum"):
        viper.load_file(path, require_checksum=True)


def test_loaded_tensors_are_writable_and_independent_of_the_file(tmp_dir):
    path = tmp_dir / "w.safetensors"
    viper.save_file({"x": torch.ones(3)}, path)
    x = viper.load_file(path)["x"]
    os.remove(path)
    x += 1  # the buffer belongs to this load alone
    assert torch.equal(x, torch.full((3,), 2.0))


def test_corrupt_file_is_refused(tmp_dir):
    path = tmp_dir / "c.safetensors"
    viper.save_file({"x": torch.arange(100, dtype=torch.float32)}, path)
    raw = bytearray(open(path, "rb").read())
    raw[-7] ^= 0x40  # one bit of the data section
    open(path, "wb").write(bytes(raw))
    with pytest.raises(viper.DataLossError, match="checksum"):
        viper.load_file(path)
    assert isinstance(viper.DataLossError("x"), ValueError)
    assert viper.load_file(path, verify_checksum=False)["x"].numel() == 100


def test_truncated_file_is_refused(tmp_dir):
    path = tmp_dir / "t.safetensors"
    viper.save_file({"x": torch.arange(100, dtype=torch.float32)}, path)
    raw = open(path, "rb").read()
    open(path, "wb").write(raw[:-10])
    with pytest.raises(ValueError, match=str(path)):
        viper.load_file(path)


def test_missing_file(tmp_dir):
    with pytest.raises(FileNotFoundError, match="nope.safetensors"):
        viper.load_file(tmp_dir / "nope.safetensors")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        viper.save_file({"x": torch.ones(1)}, tmp_dir / "no_dir" / "x.safetensors")


def test_dtype_torch_lacks_is_a_clear_error(tmp_dir):
    path = tmp_dir / "u16.safetensors"
    write_safetensors(path, {"u": ("U16", [2], struct.pack("<HH", 1, 65535))})
    if hasattr(torch, "uint16"):
        assert viper.load_file(path)["u"].tolist() == [1, 65535]
    else:
        with pytest.raises(ValueError, match="'u' is U16: torch .* has no such dtype"):
            viper.load_file(path)


@pytest.mark.parametrize("bad, message", [
    ({"x": torch.arange(6.0).reshape(2, 3).t()}, "'x' is not contiguous"),
    ({"x": torch.arange(6.0)[::2]}, "'x' is not contiguous"),
    ({"x": torch.zeros(2, dtype=torch.complex64)}, "'x' has dtype torch.complex64"),
    ({"x": [1.0, 2.0]}, "'x' is a list, not a torch.Tensor"),
    ({"": torch.zeros(1)}, "non-empty strings"),
    ([torch.zeros(1)], "expected a dict"),
    ({"x": torch.zeros(2, 2).to_sparse()}, "layout"),
])
def test_bad_tensors(tmp_dir, bad, message):
    with pytest.raises(ValueError, match=message):
        viper.save_file(bad, tmp_dir / "bad.safetensors")
    assert not (tmp_dir / "bad.safetensors").exists()


def test_bad_metadata(tmp_dir):
    with pytest.raises(ValueError, match="str -> str"):
        viper.save_file({"x": torch.zeros(1)}, tmp_dir / "m.safetensors", metadata={"n": 1})
    with pytest.raises(ValueError, match="reserved"):
        viper.save_file({"x": torch.zeros(1)}, tmp_dir / "m.safetensors", metadata={"viper.version": "3"})


def test_save_file_never_writes_through_a_planted_link(tmp_dir):
    """Issue 26, item 2: a link planted where save_file put its temporary
    (<path>.tmp.<pid>) is never written through; the file is private."""
    path = tmp_dir / "m.safetensors"
    victim = tmp_dir / "victim"
    victim.write_text("precious")
    os.symlink(victim, f"{path}.tmp.{os.getpid()}")
    viper.save_file({"x": torch.arange(4, dtype=torch.float32)}, path)
    assert victim.read_text() == "precious"
    assert path.is_file() and not path.is_symlink()
    assert os.stat(path).st_mode & 0o7777 == 0o600
    assert torch.equal(viper.load_file(path)["x"], torch.arange(4, dtype=torch.float32))
    assert not [n for n in os.listdir(tmp_dir) if ".tmp-" in n]


def test_load_file_reads_no_fifo_and_follows_a_link(tmp_dir):
    """Issue 26, item 8: a FIFO is refused at once; a link is followed (as
    safetensors.torch.load_file does: the Hugging Face cache is links)."""
    fifo = tmp_dir / "model.safetensors"
    os.mkfifo(fifo)
    with pytest.raises(Exception, match="FIFO"):
        viper.load_file(fifo)
    real = tmp_dir / "real.safetensors"
    viper.save_file({"x": torch.ones(2)}, real)
    link = tmp_dir / "link.safetensors"
    os.symlink(real, link)
    assert torch.equal(viper.load_file(link)["x"], torch.ones(2))
