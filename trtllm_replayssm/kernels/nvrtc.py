"""CUDA C++ kernels compiled at run time: NVRTC to machine code, loaded and launched through the
CUDA driver API (``cuda-bindings``) on PyTorch's current stream, so CUDA graphs capture them.

Sources live in ``kernels/cuda/*.cu`` and are specialised by ``-D`` constants. Compilation needs
no GPU (NVRTC runs on the host: CPU tests compile every launch-table shape); loading and
launching need one. The package requires ``cuda-bindings`` and ``nvidia-cuda-nvrtc`` 13.0 on
Linux (setup.py says why 13.0). Machine code (cubin) is loaded rather than PTX: it loads under
CUDA's minor-version compatibility on any 13.x driver.

Compiled programs are kept on disk, so a process compiles a shape once per machine rather than
once per process (about 0.5 s each): in ``$TRTLLM_REPLAYSSM_CACHE_DIR``, by default
``$XDG_CACHE_HOME/trtllm_replayssm/nvrtc`` (``~/.cache/...``); set it to an empty string to keep
nothing on disk. An entry is named by a hash of everything the output depends on (the source and
header texts, the options and defines, the NVRTC version), so an edited kernel never finds a stale
entry.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import struct
import threading
import warnings

from typing import Dict, Optional, Sequence, Tuple

import torch

__all__ = [
    "cuda_source",
    "cuda_headers",
    "compile_program",
    "compile_cache_dir",
    "CudaKernel",
    "load_kernel",
    "tensor_map_4d",
    "encode_tensor_map_4d",
    "checkpoint_map_boxes",
    "tensor_map_key",
    "checkpoint_tensor_maps",
    "copyable_rows",
    "scale_unsupported",
    "device_unsupported",
    "DTYPE_CODE",
    "KernelArgs",
    "SMEM_PER_SM",
    "SMEM_RESERVED_PER_CTA",
    "REGISTERS_PER_SM",
]

SMEM_PER_SM = 227 * 1024  # usable shared memory per multiprocessor on sm_90 (bytes)
SMEM_RESERVED_PER_CTA = 1024  # the driver's per-CTA reservation on sm_90
REGISTERS_PER_SM = 65536
# The .cu files' dtype codes (replay_common.cuh's load_f32<CODE>) of an input's torch dtype.
DTYPE_CODE = {torch.float32: 0, torch.bfloat16: 1, torch.float16: 2}

_SOURCE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cuda")


def _bindings():
    """(driver, nvrtc) modules of cuda-bindings; an ImportError that says what to install."""
    try:
        from cuda.bindings import driver, nvrtc
    except ImportError as e:  # pragma: no cover - setup.py installs both on Linux
        raise ImportError(
            "trtllm_replayssm's CUDA C++ kernels need cuda-bindings and nvidia-cuda-nvrtc==13.0.* "
            f"(pip install 'cuda-bindings>=13' 'nvidia-cuda-nvrtc==13.0.*'): {e}"
        ) from e
    return driver, nvrtc


def _check(result, what: str):
    """The values of a cuda-bindings call after its status; RuntimeError naming ``what`` otherwise."""
    err, *rest = result if isinstance(result, tuple) else (result,)
    if int(err) != 0:
        raise RuntimeError(f"{what} failed: {err!r}")
    return rest[0] if len(rest) == 1 else tuple(rest)


@functools.lru_cache(maxsize=None)
def nvrtc_version() -> str:
    """The loaded NVRTC's version, ``major.minor`` (register allocation differs between releases)."""
    _, nvrtc = _bindings()
    major, minor = _check(nvrtc.nvrtcVersion(), "nvrtcVersion")
    return f"{major}.{minor}"


def cuda_source(name: str) -> str:
    """Text of ``kernels/cuda/<name>`` (``name`` absolute: that file)."""
    with open(os.path.join(_SOURCE_DIR, name), encoding="utf-8") as f:
        return f.read()


def cuda_headers(name: str = "") -> Tuple[str, ...]:
    """Paths of the headers (``*.cuh``) the program ``name`` may include by their file names: those
    in its directory (``kernels/cuda`` for a plain name; for an absolute path, such as an older
    revision's source exported beside its own headers, that path's directory)."""
    directory = os.path.dirname(os.path.join(_SOURCE_DIR, name))
    return tuple(os.path.join(directory, n) for n in sorted(os.listdir(directory)) if n.endswith(".cuh"))


def compile_cache_dir() -> Optional[str]:
    """The directory of compiled programs kept on disk: ``$TRTLLM_REPLAYSSM_CACHE_DIR`` if set
    (None when it is empty: nothing is kept), else ``$XDG_CACHE_HOME/trtllm_replayssm/nvrtc``
    (``~/.cache/trtllm_replayssm/nvrtc``)."""
    configured = os.environ.get("TRTLLM_REPLAYSSM_CACHE_DIR")
    if configured is not None:
        return configured or None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "trtllm_replayssm", "nvrtc")


def _compile_options(arch: str, defines: Tuple[Tuple[str, int], ...]) -> list:
    return [f"--gpu-architecture={arch}", "-std=c++17"] + [f"-D{k}={int(v)}" for k, v in defines]


def _compile_key(name: str, options: list, output: str) -> str:
    """Hex SHA-256 of what a compile's output depends on: NVRTC's version, the options, the
    output kind, the source and every header (names and texts)."""
    h = hashlib.sha256()
    parts = [nvrtc_version(), output, *options, name, cuda_source(name)]
    for header in cuda_headers(name):
        parts += [os.path.basename(header), cuda_source(header)]
    for part in parts:
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


_CACHE_WARNED = set()  # directories already warned about in this process


def _store(directory: str, key: str, data: bytes) -> None:
    """Writes ``data`` as entry ``key`` of ``directory`` atomically (a temporary file renamed
    over the entry); warns once per directory when it cannot be written, and goes on."""
    try:
        os.makedirs(directory, exist_ok=True)
        tmp = os.path.join(directory, f".{key}.{os.getpid()}.{threading.get_ident()}.tmp")
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, os.path.join(directory, key))
    except OSError as e:
        if directory not in _CACHE_WARNED:
            _CACHE_WARNED.add(directory)
            warnings.warn(
                f"compile_program: cannot keep compiled programs in {directory} ({e}); each process "
                f"compiles them again (set TRTLLM_REPLAYSSM_CACHE_DIR to a writable directory, or to "
                f"an empty string to keep nothing)",
                RuntimeWarning,
                stacklevel=3,
            )


@functools.lru_cache(maxsize=None)
def compile_program(name: str, arch: str, defines: Tuple[Tuple[str, int], ...], output: str = "cubin") -> bytes:
    """NVRTC compile of ``kernels/cuda/<name>`` for ``arch`` (e.g. ``"sm_90"``) with ``-D`` defines,
    the headers of :func:`cuda_headers` includable by their file names.

    Args:
        output: ``"cubin"`` (machine code, what :func:`load_kernel` loads) or ``"ptx"``.
    Returns:
        The cubin or PTX bytes (PTX without its trailing NUL). Cached per arguments in the
        process, and on disk in :func:`compile_cache_dir` (read back when an entry of the same
        key exists; written after a compile).
    Raises:
        RuntimeError: with NVRTC's log when the compile fails.
    """
    if output not in ("cubin", "ptx"):
        raise ValueError(f"compile_program: output is {output!r}; expected 'cubin' or 'ptx'")
    options = _compile_options(arch, defines)
    directory = compile_cache_dir()
    key = _compile_key(name, options, output) if directory else None
    if key:
        try:
            with open(os.path.join(directory, key), "rb") as f:
                return f.read()
        except OSError:
            pass  # not compiled on this machine yet (or unreadable): compile it
    _, nvrtc = _bindings()
    headers = cuda_headers(name)
    prog = _check(
        nvrtc.nvrtcCreateProgram(cuda_source(name).encode(), name.encode(), len(headers),
                                 [cuda_source(h).encode() for h in headers],
                                 [os.path.basename(h).encode() for h in headers]),
        "nvrtcCreateProgram",
    )
    try:
        opts = [o.encode() for o in options]
        (status,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        size = _check(nvrtc.nvrtcGetProgramLogSize(prog), "nvrtcGetProgramLogSize")
        log = b" " * size
        nvrtc.nvrtcGetProgramLog(prog, log)
        if int(status) != 0:
            raise RuntimeError(f"NVRTC could not compile {name} for {arch} with {dict(defines)}:\n{log.decode(errors='replace')}")
        if output == "cubin":
            size = _check(nvrtc.nvrtcGetCUBINSize(prog), "nvrtcGetCUBINSize")
            data = b" " * size
            _check(nvrtc.nvrtcGetCUBIN(prog, data), "nvrtcGetCUBIN")
        else:
            size = _check(nvrtc.nvrtcGetPTXSize(prog), "nvrtcGetPTXSize")
            data = b" " * size
            _check(nvrtc.nvrtcGetPTX(prog, data), "nvrtcGetPTX")
            data = data.rstrip(b"\0")
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
    if key:
        _store(directory, key, data)
    return data


class KernelArgs:
    """A kernel's parameters for ``cuLaunchKernelEx``: 64-bit pointers and integers, 32-bit
    integers and floats, and 128-byte tensor maps, in the kernel's order, kept as Python ints and bytes.

    ``address`` packs them with one ``struct.pack_into`` into storage kept per thread and
    parameter-kind list (its ``void**`` array built once) and returns that array's address. It
    stays valid until the next ``address`` of an argument list of the same kinds on the same
    thread: :meth:`CudaKernel.launch` takes it right before the launch, which copies the values.
    Eager steps build both of the CUDA step's argument lists every layer (kernel notes, "the
    CUDA step's host side")."""

    def __init__(self):
        self._values = []
        self.kinds = []  # "ptr", "i64", "i32", "f32", "map": what tests compare with the PTX parameters

    def _add(self, kind: str, value) -> "KernelArgs":
        self.kinds.append(kind)
        self._values.append(value)
        return self

    def ptr(self, t) -> "KernelArgs":
        """A tensor's data pointer (or an int address)."""
        return self._add("ptr", t if isinstance(t, int) else t.data_ptr())

    def tensor(self, t, strides: int) -> "KernelArgs":
        """A tensor's data pointer, then its first ``strides`` strides (elements) as 64-bit ints."""
        self.kinds.append("ptr")
        self._values.append(t.data_ptr())
        if strides:
            self.kinds.extend(("i64",) * strides)
            self._values.extend(t.stride()[:strides])
        return self

    def i64(self, v: int) -> "KernelArgs":
        return self._add("i64", int(v))

    def i32(self, v: int) -> "KernelArgs":
        return self._add("i32", int(v))

    def f32(self, v: float) -> "KernelArgs":
        return self._add("f32", float(v))

    def tensor_map(self, blob: bytes) -> "KernelArgs":
        """A CUtensorMap (128 bytes) passed by value."""
        if len(blob) != 128:
            raise ValueError(f"KernelArgs.tensor_map: {len(blob)} bytes; a CUtensorMap has 128")
        return self._add("map", bytes(blob))

    @property
    def address(self) -> int:
        layout, buffer, pointers = _arg_storage(tuple(self.kinds))
        layout.pack_into(buffer, 0, *self._values)
        return ctypes.addressof(pointers)


_ARG_FORMATS = {"ptr": "Q", "i64": "q", "i32": "i", "f32": "f", "map": "128s"}
_ARG_STORAGE = threading.local()


def _arg_storage(kinds: Tuple[str, ...]):
    """(struct of the values in native alignment, this thread's buffer for them, the ``void**``
    array of each value's address in it), made once per kind list and thread."""
    storage = _ARG_STORAGE.__dict__.setdefault("by_kinds", {})
    entry = storage.get(kinds)
    if entry is None:
        codes = [_ARG_FORMATS[k] for k in kinds]
        offsets = [struct.calcsize("@" + "".join(codes[:i]) + c) - struct.calcsize(c) for i, c in enumerate(codes)]
        layout = struct.Struct("@" + "".join(codes))
        buffer = ctypes.create_string_buffer(max(layout.size, 1))
        base = ctypes.addressof(buffer)
        entry = storage[kinds] = (layout, buffer, (ctypes.c_void_p * len(codes))(*[base + o for o in offsets]))
    return entry


class CudaKernel:
    """One loaded kernel entry: ``launch`` on a stream with a grid, block, dynamic shared memory
    and optional programmatic dependent launch (the kernel may then start before the previous
    kernel on the stream ends; it must execute ``griddepcontrol.wait`` before reading that
    kernel's results)."""

    def __init__(self, function, max_dynamic_smem: int):
        self.function = function
        self.max_dynamic_smem = max_dynamic_smem
        self._occupancy: Dict[Tuple[int, int], int] = {}

    def ctas_per_sm(self, threads: int, smem: int) -> int:
        """Resident CTAs per multiprocessor at ``threads`` and ``smem`` bytes (the occupancy API)."""
        n = self._occupancy.get((threads, smem))
        if n is None:
            driver, _ = _bindings()
            n = self._occupancy[(threads, smem)] = _check(
                driver.cuOccupancyMaxActiveBlocksPerMultiprocessor(self.function, threads, smem),
                "cuOccupancyMaxActiveBlocksPerMultiprocessor",
            )
        return n

    def resources(self) -> Tuple[int, int]:
        """(registers per thread, local memory bytes per thread: spills and stack) of the loaded code."""
        driver, _ = _bindings()
        attr = driver.CUfunction_attribute
        return tuple(
            _check(driver.cuFuncGetAttribute(a, self.function), "cuFuncGetAttribute")
            for a in (attr.CU_FUNC_ATTRIBUTE_NUM_REGS, attr.CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES)
        )

    def launch(self, grid: Sequence[int], block: int, smem: int, stream: int, args: KernelArgs, pdl: bool = False):
        driver, _ = _bindings()
        if smem > self.max_dynamic_smem:
            raise ValueError(f"CudaKernel.launch: {smem} bytes of shared memory; the kernel was loaded for {self.max_dynamic_smem}")
        cfg = driver.CUlaunchConfig()
        cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = (list(grid) + [1, 1])[:3]
        cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = block, 1, 1
        cfg.sharedMemBytes = smem
        cfg.hStream = driver.CUstream(stream)
        if pdl:
            attr = driver.CUlaunchAttribute()
            attr.id = driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
            attr.value.programmaticStreamSerializationAllowed = 1
            cfg.attrs = [attr]
            cfg.numAttrs = 1
        else:
            cfg.numAttrs = 0
        _check(driver.cuLaunchKernelEx(cfg, self.function, args.address, 0), "cuLaunchKernelEx")


def _current_context(device: torch.device):
    """Makes the device's primary context (the one PyTorch uses) current on this thread."""
    driver, _ = _bindings()
    _check(driver.cuInit(0), "cuInit")
    index = device.index if device.index is not None else torch.cuda.current_device()
    dev = _check(driver.cuDeviceGet(index), "cuDeviceGet")
    ctx = _check(driver.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
    _check(driver.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")


_KERNELS: Dict[tuple, CudaKernel] = {}
_MODULES: Dict[tuple, object] = {}


def load_kernel(name: str, entry: str, defines: Tuple[Tuple[str, int], ...], device: torch.device, max_dynamic_smem: int,
                arch_specific: bool = False) -> CudaKernel:
    """``entry`` of ``kernels/cuda/<name>`` compiled for ``device``'s architecture with
    ``defines``, loaded once per (device, source, defines) with ``max_dynamic_smem`` bytes of
    dynamic shared memory allowed. ``arch_specific``: for the architecture's own features (e.g.
    ``sm_90a``: wgmma), which run on that architecture only."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    key = (index, name, entry, defines, max_dynamic_smem, arch_specific)
    kernel = _KERNELS.get(key)
    if kernel is None:
        driver, _ = _bindings()
        major, minor = torch.cuda.get_device_capability(index)
        _current_context(torch.device("cuda", index))
        module = _MODULES.get((index, name, defines, arch_specific))
        if module is None:
            cubin = compile_program(name, f"sm_{major}{minor}{'a' if arch_specific else ''}", defines)
            module = _MODULES[(index, name, defines, arch_specific)] = _check(driver.cuModuleLoadData(cubin), f"cuModuleLoadData({name})")
        function = _check(driver.cuModuleGetFunction(module, entry.encode()), f"cuModuleGetFunction({entry})")
        attr = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        _check(driver.cuFuncSetAttribute(function, attr, max_dynamic_smem), "cuFuncSetAttribute")
        kernel = _KERNELS[key] = CudaKernel(function, max_dynamic_smem)
    return kernel


_TMA_DTYPES = (torch.bfloat16, torch.float16, torch.float32, torch.float8_e4m3fn)


def tensor_map_4d(t: torch.Tensor, box: Tuple[int, int]) -> bytes:
    """CUtensorMap (128 bytes) of a 4-D bf16, fp16, fp32 or fp8-e4m3 tensor ``t`` (innermost dimension contiguous),
    boxes of ``box`` = (innermost elements, second-dimension rows) and one index of the two
    outer dimensions, 128-byte swizzle. The caller checks the TMA rules (16-byte aligned base
    and strides, box inner bytes <= 128 with the swizzle)."""
    if t.dim() != 4 or t.dtype not in _TMA_DTYPES or t.stride(3) != 1:
        raise ValueError(
            f"tensor_map_4d: expected a 4-D bf16, fp16, fp32 or fp8-e4m3 tensor with a contiguous last dim; got "
            f"{tuple(t.shape)} {t.dtype} strides {t.stride()}"
        )
    return encode_tensor_map_4d(t.data_ptr(), t.dtype, tuple(t.shape), tuple(t.stride(d) for d in (0, 1, 2)), box)



def encode_tensor_map_4d(
    address: int, dtype: torch.dtype, shape: Tuple[int, int, int, int], strides: Tuple[int, int, int], box: Tuple[int, int]
) -> bytes:
    """CUtensorMap (128 bytes) of a 4-D tensor at device ``address``: ``shape`` outermost first,
    the element ``strides`` of its three outer dimensions (the innermost is contiguous), boxes
    as :func:`tensor_map_4d`. Needs the CUDA driver (``cuTensorMapEncodeTiled``; initialised here
    if nothing has yet, e.g. a fresh process), no context; the address is only encoded, never
    dereferenced."""
    driver, _ = _bindings()
    _check(driver.cuInit(0), "cuInit")  # idempotent; the encoder fails with NOT_INITIALIZED without it
    types = {
        torch.bfloat16: driver.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
        torch.float16: driver.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
        torch.float32: driver.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_FLOAT32,
        torch.float8_e4m3fn: driver.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_UINT8,  # codes, copied as bytes
    }
    es = torch.empty((), dtype=dtype).element_size()
    dims = [driver.cuuint64_t(s) for s in reversed(shape)]
    byte_strides = [driver.cuuint64_t(s * es) for s in reversed(strides)]
    boxes = [driver.cuuint32_t(box[0]), driver.cuuint32_t(box[1]), driver.cuuint32_t(1), driver.cuuint32_t(1)]
    elem = [driver.cuuint32_t(1)] * 4
    tmap = _check(
        driver.cuTensorMapEncodeTiled(
            types[dtype],
            4,
            address,
            dims,
            byte_strides,
            boxes,
            elem,
            driver.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
            driver.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B,
            driver.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            driver.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
        ),
        "cuTensorMapEncodeTiled",
    )
    return ctypes.string_at(tmap.getPtr(), 128)


def checkpoint_map_boxes(rows: int, element_size: int) -> Tuple[Tuple[int, int], Tuple[int, int]]:
    """Boxes of a checkpoint's (load, store) tensor maps, (columns, rows): 128 bytes of columns,
    ``rows`` rows (a unit) for loads, 16 rows (a consumer warp's) for stores."""
    cols = 128 // element_size
    return (cols, rows), (cols, 16)


def device_unsupported(t: torch.Tensor) -> Optional[str]:
    """Why the CUDA C++ kernels cannot run on ``t``'s device (None: they can): they are built for
    sm_90 (TMA, tensor maps, programmatic launches)."""
    if t.device.type != "cuda":
        return "not a CUDA tensor"
    if torch.cuda.get_device_capability(t.device) != (9, 0):
        return f"compute capability {torch.cuda.get_device_capability(t.device)}, built for (9, 0)"
    return None


def copyable_rows(t: torch.Tensor) -> bool:
    """Whether bulk copies can move ``t``'s rows: last dim contiguous, base and every outer
    stride 16-byte multiples."""
    es = t.element_size()
    return t.stride(-1) == 1 and t.data_ptr() % 16 == 0 and all(t.stride(d) * es % 16 == 0 for d in range(t.dim() - 1))


def scale_unsupported(checkpoint: torch.Tensor, checkpoint_scale: Optional[torch.Tensor]) -> Optional[str]:
    """Why the CUDA steps cannot copy an fp8 ``checkpoint``'s row scales (None: they can): fp32
    of the checkpoint's shape but its last dim ([slot, heads, rows]), each head's rows one
    16-byte aligned range (rows dense, base and outer strides 16-byte multiples)."""
    if checkpoint_scale is None:
        return "fp8 checkpoint without checkpoint_scale; the CUDA step reads each row's scale"
    want = tuple(checkpoint.shape[:3])
    if checkpoint_scale.dtype != torch.float32 or tuple(checkpoint_scale.shape) != want:
        return f"fp8 checkpoint_scale {checkpoint_scale.dtype} {tuple(checkpoint_scale.shape)}; expected fp32 {want}"
    if not copyable_rows(checkpoint_scale):
        return (
            f"fp8 checkpoint_scale strides {checkpoint_scale.stride()}; the CUDA step copies each head's row scales "
            "as one 16-byte aligned range"
        )
    return None


_TENSOR_MAPS: dict = {}


def tensor_map_key(t: torch.Tensor) -> tuple:
    """Everything a tensor map of ``t`` encodes: address, dtype (element size and data type),
    shape, strides and device. The caching allocator hands a freed tensor's address to the next
    one, so a key without the dtype gave an fp32 checkpoint the bf16 map of an earlier tensor
    (strides in bytes halved: stores landed in other slots; found by the GPU test's unused-slot
    check, 2026-12-02)."""
    return (t.data_ptr(), t.dtype, tuple(t.shape), t.stride(), t.device)


def checkpoint_tensor_maps(checkpoint: torch.Tensor, rows: int) -> Tuple[bytes, bytes]:
    """(load map: boxes of [128 bytes of columns, ``rows`` rows], store map: [128 bytes, 16 rows])
    of a 4-D checkpoint [slot, heads, rows, columns], cached by :func:`tensor_map_key` and
    ``rows`` (the cache's tensors live as long as the model)."""
    key = (tensor_map_key(checkpoint), rows)
    maps = _TENSOR_MAPS.get(key)
    if maps is None:
        if len(_TENSOR_MAPS) > 256:
            _TENSOR_MAPS.clear()
        load, store = checkpoint_map_boxes(rows, checkpoint.element_size())
        maps = _TENSOR_MAPS[key] = (tensor_map_4d(checkpoint, load), tensor_map_4d(checkpoint, store))
    return maps
