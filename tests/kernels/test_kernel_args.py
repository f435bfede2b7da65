"""nvrtc.KernelArgs: every parameter lands where its pointer says, with its kind's width, as the
driver reads it (CPU: no GPU needed)."""

import ctypes

import pytest
import torch

from trtllm_replayssm.kernels.nvrtc import KernelArgs

READ = {"ptr": ctypes.c_uint64, "i64": ctypes.c_int64, "i32": ctypes.c_int32}


def _read_back(args: KernelArgs) -> list:
    pointers = ctypes.cast(args.address, ctypes.POINTER(ctypes.c_void_p))
    values = []
    for i, kind in enumerate(args.kinds):
        if kind == "map":
            values.append(ctypes.string_at(pointers[i], 128))
        else:
            values.append(READ[kind].from_address(pointers[i]).value)
    return values


def test_every_value_is_read_back_at_its_pointer():
    t = torch.zeros(3, 5, 7)[:, 1:]  # strides (35, 7, 1), a data pointer past the storage's start
    blob = bytes(range(128))
    args = KernelArgs().i32(-3).tensor_map(blob).ptr(t).i32(7).tensor(t, 2).i64(-(2**40)).ptr(12345).i32(2**31 - 1)
    assert args.kinds == ["i32", "map", "ptr", "i32", "ptr", "i64", "i64", "i64", "ptr", "i32"]
    assert _read_back(args) == [-3, blob, t.data_ptr(), 7, t.data_ptr(), 35, 7, -(2**40), 12345, 2**31 - 1]


def test_a_second_list_of_the_same_kinds_is_packed_afresh():
    """The storage is shared by lists of the same kinds (one thread): each ``address`` packs its
    own values, as a launch reads them right after."""
    a, b = KernelArgs().i64(1).i32(2), KernelArgs().i64(3).i32(4)
    assert _read_back(a) == [1, 2]
    assert _read_back(b) == [3, 4]
    assert _read_back(a) == [1, 2]


def test_tensor_takes_the_leading_strides_only():
    t = torch.zeros(2, 3, 4, 5)
    assert KernelArgs().tensor(t, 3).kinds == ["ptr", "i64", "i64", "i64"]
    assert _read_back(KernelArgs().tensor(t, 3)) == [t.data_ptr(), 60, 20, 5]
    assert _read_back(KernelArgs().tensor(t, 0)) == [t.data_ptr()]


def test_a_tensor_map_of_the_wrong_size_is_refused():
    with pytest.raises(ValueError, match="KernelArgs.tensor_map: 64 bytes; a CUtensorMap has 128"):
        KernelArgs().tensor_map(b"\0" * 64)
