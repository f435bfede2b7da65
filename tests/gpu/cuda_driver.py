"""The CUDA driver calls of TensorRT's AOT launch, through ctypes on libcuda (no extra package),
shared by the GPU tests that launch exported PTX (test_plugin_launch_gpu.py,
test_block_plugin_launch_gpu.py). Not a test module: it needs libcuda only when used."""

import ctypes

import torch


class Driver:
    """The few CUDA driver calls TensorRT's AOT launch makes, on torch's current context."""

    def __init__(self):
        lib = self.lib = ctypes.CDLL("libcuda.so.1")
        vp, sz, u = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint
        lib.cuGetErrorString.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
        lib.cuModuleLoadData.argtypes = [ctypes.POINTER(vp), ctypes.c_char_p]
        lib.cuModuleGetFunction.argtypes = [ctypes.POINTER(vp), vp, ctypes.c_char_p]
        lib.cuLaunchKernel.argtypes = [vp, u, u, u, u, u, u, u, vp, ctypes.POINTER(vp), ctypes.POINTER(vp)]
        self.has_param_info = hasattr(lib, "cuFuncGetParamInfo")
        if self.has_param_info:
            lib.cuFuncGetParamInfo.argtypes = [vp, sz, ctypes.POINTER(sz), ctypes.POINTER(sz)]

    def check(self, result, what):
        if result != 0:
            msg = ctypes.c_char_p()
            self.lib.cuGetErrorString(result, ctypes.byref(msg))
            raise RuntimeError(f"{what} failed: {result} {msg.value.decode() if msg.value else ''}")

    def load(self, ptx: str, name: str) -> ctypes.c_void_p:
        module, fn = ctypes.c_void_p(), ctypes.c_void_p()
        self.check(self.lib.cuModuleLoadData(ctypes.byref(module), ptx.encode()), "cuModuleLoadData")
        self.check(self.lib.cuModuleGetFunction(ctypes.byref(fn), module, name.encode()), "cuModuleGetFunction")
        return fn

    def param_sizes(self, fn) -> list:
        """Size of each kernel parameter, until the driver reports no more."""
        sizes = []
        offset, size = ctypes.c_size_t(), ctypes.c_size_t()
        while self.lib.cuFuncGetParamInfo(fn, len(sizes), ctypes.byref(offset), ctypes.byref(size)) == 0:
            sizes.append(size.value)
        return sizes

    def launch(self, fn, grid, block, shared_mem, args, params):
        slots = [ctypes.c_void_p(a.data_ptr()) if p.role != "scalar" else ctypes.c_int32(a) for a, p in zip(args, params)]
        array = (ctypes.c_void_p * len(slots))(*[ctypes.addressof(s) for s in slots])
        stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
        self.check(self.lib.cuLaunchKernel(fn, *grid, *block, shared_mem, stream, array, None), "cuLaunchKernel")
