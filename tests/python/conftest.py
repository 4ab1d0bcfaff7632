"""Shared helpers for the viper Python tests (run by CTest with PYTHONPATH
set to the build tree's python/ folder; see tests/python/CMakeLists.txt)."""
import json
import os
import struct

import pytest


def read_safetensors(path):
    """A minimal reader written from the safetensors specification (8-byte
    little-endian header length, JSON header, data section): (header dict,
    data bytes). Independent of Viper's codec."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    return header, raw[8 + n:]


def write_safetensors(path, tensors, metadata=None):
    """A minimal writer from the specification: `tensors` maps name ->
    (dtype, shape, bytes). No Viper checksum."""
    header, data, offset = {}, b"", 0
    if metadata:
        header["__metadata__"] = metadata
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(raw)]}
        data += raw
        offset += len(raw)
    h = json.dumps(header).encode("utf-8")
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + data)


@pytest.fixture
def tmp_dir(tmp_path):
    return tmp_path


def mpi_launched():
    return any(v in os.environ for v in ("OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK"))
