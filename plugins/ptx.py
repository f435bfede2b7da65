"""PTX of a plugin's entry kernel, compiled offline by Triton, fitted to TensorRT's launch.

TensorRT launches an AOT plugin's kernel with exactly its input pointers, scalars and output
pointers. Triton >= 3.3 appends hidden trailing pointer parameters to every kernel, one per
scratch buffer named in its metadata (``<kind>_scratch_size``): ``global_scratch`` (3.3, 3.4),
then ``global_scratch`` and ``profile_scratch`` (3.5 to 3.9). TensorRT does not pass them, so
the driver would read argument slots past the end of TensorRT's list. When a kernel needs no
scratch (metadata sizes 0) those parameters are declared but never read; :func:`compile_ptx`
checks exactly that and removes their declarations, so the PTX entry has exactly the plugin's
parameter list. Anything else raises.

Triton versions known to fit (hidden trailing parameters): :data:`KNOWN_GOOD_TRITON`. Triton
3.2 and older use another compile API (``AttrsDescriptor``) and are refused, as is any version
not in the table, until its PTX has been checked the same way.

The PTX's ``.version`` (:attr:`CompiledKernel.ptx_isa`, also in the manifest) is the newest
PTX ISA of the ptxas Triton uses for the target, and whatever turns the PTX into machine code
(the driver's JIT, for ``cuModuleLoadData``) must know it. For sm_90, Triton 3.4 to 3.7 write
8.7, 3.8 writes 8.8, and 3.9 writes 9.4 (its CUDA 13.4 ptxas), which a CUDA 13.0 driver (R580,
as on the H200 here) refuses: CUDA_ERROR_UNSUPPORTED_PTX_VERSION. Pointing
``TRITON_PTXAS_BLACKWELL_PATH`` (the ptxas Triton 3.9 uses from sm_90 on) at an older ptxas
makes Triton write that ptxas's ISA.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Dict, Optional, Tuple

import triton

from .spec import KernelSpec

__all__ = [
    "KNOWN_GOOD_TRITON",
    "FP8_MIN_ARCH",
    "MAX_SHARED_MEM",
    "CompiledKernel",
    "PtxEntry",
    "check_arch",
    "check_triton_version",
    "compile_ptx",
    "parse_ptx_entry",
    "parse_ptx_entries",
]

# Triton "major.minor" -> number of hidden trailing kernel parameters. Each was checked by
# compiling the entry kernels of tests/plugins (3.4.0 to 3.9.0: Mamba-2, GDN and KDA for sm_80,
# sm_90 and sm_100; 3.3.1: Mamba-2, as it cannot compile the GDN/KDA kernel): the hidden
# parameters are .u64 and unreferenced, one per ``*_scratch_size`` metadata field, and Triton's
# launcher passes exactly global_scratch (from 3.5 also profile_scratch) after the kernel's own
# arguments.
KNOWN_GOOD_TRITON: Dict[str, int] = {"3.3": 1, "3.4": 1, "3.5": 2, "3.6": 2, "3.7": 2, "3.8": 2, "3.9": 2}

# A launch above 48 KiB of dynamic shared memory needs cuFuncSetAttribute first; TensorRT's
# AOT launch is not documented to do that, so such a specialization is refused.
MAX_SHARED_MEM = 48 * 1024

# float8-e4m3 (Triton's fp8e4nv: an fp8 checkpoint) exists from sm_89 on; Triton refuses it below.
FP8_MIN_ARCH = 89

_ENTRY = re.compile(r"\.visible\s+\.entry\s+(\w+)\s*\((.*?)\)", re.S)
_PARAM = re.compile(r"\.param\s+\.(\w+)(?:\s+\.ptr(?:\s+\.\w+)*(?:\s+\.align\s+\d+)?)?\s+(\w+)")


@dataclass(frozen=True)
class PtxEntry:
    """An ``.entry`` of a PTX module: its name, (PTX type, name) per parameter, the module's target."""

    name: str
    params: Tuple[Tuple[str, str], ...]
    target: str


def parse_ptx_entry(ptx: str) -> PtxEntry:
    """Parses the entry of a Triton PTX module (exactly one ``.visible .entry``)."""
    found = _ENTRY.findall(ptx)
    if len(found) != 1:
        raise ValueError(f"expected exactly one .visible .entry in the PTX; found {len(found)}")
    return next(iter(parse_ptx_entries(ptx).values()))


def parse_ptx_entries(ptx: str) -> Dict[str, PtxEntry]:
    """Every ``.visible .entry`` of a PTX module, by name, in the module's order."""
    target = re.search(r"^\.target\s+(\w+)", ptx, re.M)
    entries = {}
    for name, body in _ENTRY.findall(ptx):
        if name in entries:
            raise ValueError(f"the PTX declares .entry {name} twice")
        entries[name] = _parse_params(name, body, target.group(1) if target else "")
    return entries


def _parse_params(name: str, body: str, target: str) -> PtxEntry:
    decls = [d.strip() for d in body.split(",") if d.strip()]
    params = []
    for d in decls:
        m = _PARAM.fullmatch(d)
        if m is None:
            raise ValueError(f"unrecognised PTX parameter declaration {d!r}")
        params.append((m.group(1), m.group(2)))
    return PtxEntry(name, tuple(params), target)


def check_triton_version(version: Optional[str] = None) -> int:
    """Hidden trailing parameters of the installed (or given) Triton; raises if it is not a
    version known to fit TensorRT's launch convention."""
    version = version or triton.__version__
    minor = ".".join(version.split(".")[:2])
    if minor not in KNOWN_GOOD_TRITON:
        known = ", ".join(f"{v}.x" for v in KNOWN_GOOD_TRITON)
        raise RuntimeError(
            f"Triton {version} is not known to fit TensorRT's AOT plugin launch (known: {known}); "
            "install one of those, or check its PTX entry signature (tests/plugins) and add it to KNOWN_GOOD_TRITON"
        )
    return KNOWN_GOOD_TRITON[minor]


def check_arch(spec: KernelSpec, arch: int) -> None:
    """ValueError when ``spec`` cannot be compiled for ``sm_{arch}``: an fp8 checkpoint below
    :data:`FP8_MIN_ARCH`."""
    if arch < FP8_MIN_ARCH and "*fp8e4nv" in spec.signature.values():
        raise ValueError(
            f"{spec.name}: arch is {arch} with an fp8 (e4m3) checkpoint; expected {FP8_MIN_ARCH} or newer "
            f"(Triton has no fp8e4nv below sm_{FP8_MIN_ARCH})"
        )


@dataclass(frozen=True)
class CompiledKernel:
    """A plugin entry kernel compiled for one architecture, ready for TensorRT.

    Attributes:
        spec: what was compiled and how it is launched.
        arch: compute capability as an int (80, 90, 100).
        kernel_name: the PTX entry name (TensorRT's ``kernel_name``).
        ptx: PTX text whose entry has exactly ``spec.params``, in order.
        shared_mem: dynamic shared memory per block, bytes.
        hidden_params_removed: Triton's trailing parameters taken out of the entry (0 for CUDA C++).
        compiler: what produced it, e.g. "triton 3.6.0", "nvrtc 13.0".
    """

    spec: KernelSpec
    arch: int
    kernel_name: str
    ptx: str
    shared_mem: int
    hidden_params_removed: int
    compiler: str

    @property
    def ptx_isa(self) -> str:
        """The PTX ISA version the PTX declares (``.version``), e.g. "8.7"."""
        m = re.search(r"^\.version\s+(\S+)", self.ptx, re.M)
        return m.group(1) if m else ""

    @property
    def file_name(self) -> str:
        return f"{self.spec.name}_sm{self.arch}_{self.spec.variant}.ptx"

    def manifest(self) -> dict:
        """Everything a launcher needs besides the PTX (JSON-ready)."""
        s = self.spec
        return dict(
            kernel_name=self.kernel_name,
            arch=self.arch,
            ptx_isa=self.ptx_isa,
            compiler=self.compiler,
            params=[dict(name=p.name, role=p.role, index=p.index, type=p.triton_type) for p in s.params],
            scalars=[
                dict(name=x.name, value=x.value if isinstance(x.value, int) else dict(input=x.value.input, axis=x.value.axis))
                for x in s.scalars
            ],
            grid=[g if isinstance(g, int) else dict(input=g.input, axis=g.axis) for g in s.grid],
            block=list(s.block),
            shared_mem=self.shared_mem,
            constexprs={k: v for k, v in s.constexprs.items()},
            hidden_params_removed=self.hidden_params_removed,
        )


def _strip_hidden_params(ptx: str, entry: PtxEntry, n_declared: int, hidden: int) -> str:
    """Removes the ``hidden`` trailing parameters from the entry, after checking that they are
    the expected pointers and that the body never reads them."""
    if len(entry.params) != n_declared + hidden:
        raise RuntimeError(
            f"{entry.name}: the PTX entry has {len(entry.params)} parameters; expected "
            f"{n_declared} declared + {hidden} hidden for Triton {triton.__version__}"
        )
    for ptx_type, name in entry.params[n_declared:]:
        if ptx_type != "u64":
            raise RuntimeError(f"{entry.name}: hidden parameter {name} is .{ptx_type}; expected a .u64 pointer")
        if len(re.findall(rf"\b{name}\b", ptx)) != 1:
            raise RuntimeError(f"{entry.name}: the kernel reads Triton's hidden parameter {name}; TensorRT cannot pass it")
    if hidden == 0:
        return ptx
    m = _ENTRY.search(ptx)
    decls = m.group(2).split(",")
    kept = ",".join(decls[:n_declared])
    if not kept.endswith("\n"):
        kept += "\n"
    return ptx[: m.start(2)] + kept + ptx[m.end(2) :]


_CACHE: Dict[Tuple[str, str, int], CompiledKernel] = {}


def compile_ptx(spec: KernelSpec, entry_fn, arch: int) -> CompiledKernel:
    """Compiles ``entry_fn`` (a ``@triton.jit`` kernel) as ``spec`` says, for ``sm_{arch}``.

    The PTX is cached per (spec variant, arch) within the process; specs of one variant (which
    may differ in runtime scalar values, e.g. ``sr_seed``) share it, each getting its own spec.

    Raises:
        ValueError: an fp8 checkpoint below sm_89 (:func:`check_arch`).
        RuntimeError: Triton version not known to fit, or whose metadata names another number
            of scratch buffers than its hidden parameters; Triton running as the interpreter;
            a kernel that needs scratch memory, clusters, cooperative or PDL launch, more than
            48 KiB of shared memory, or whose PTX entry does not match ``spec.params``.
    """
    key = (spec.name, spec.variant, arch)
    if key in _CACHE:
        return dataclasses.replace(_CACHE[key], spec=spec)
    check_arch(spec, arch)
    hidden = check_triton_version()
    if not isinstance(entry_fn, triton.runtime.jit.JITFunction):
        raise RuntimeError(
            f"{spec.name}: PTX export needs Triton's compiler, but {type(entry_fn).__name__} came "
            "(TRITON_INTERPRET=1 was set before the kernels were imported); run without it"
        )
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    src = ASTSource(entry_fn, dict(spec.signature), dict(spec.constexprs), spec.triton_attrs())
    compiled = triton.compile(src, target=GPUTarget("cuda", arch, 32), options={"num_warps": spec.num_warps})
    md = compiled.metadata
    scratch = {k: v for k, v in md._asdict().items() if k.endswith("_scratch_size")}
    if len(scratch) != hidden:
        raise RuntimeError(
            f"{spec.name}: Triton {triton.__version__} names {len(scratch)} scratch buffers "
            f"({', '.join(sorted(scratch))}); KNOWN_GOOD_TRITON expects {hidden} hidden parameters"
        )
    problems = []
    if any(scratch.values()):
        problems.append("needs scratch memory (" + ", ".join(f"{k} = {v}" for k, v in scratch.items() if v) + ")")
    if getattr(md, "num_ctas", 1) != 1 or getattr(md, "cluster_dims", (1, 1, 1)) not in ((1, 1, 1), [1, 1, 1]):
        problems.append("needs a cluster launch")
    if getattr(md, "launch_cooperative_grid", False) or getattr(md, "launch_pdl", False):
        problems.append("needs a cooperative or programmatic-dependent launch")
    if md.shared > MAX_SHARED_MEM:
        problems.append(f"needs {md.shared} bytes of shared memory (> {MAX_SHARED_MEM})")
    if md.num_warps != spec.num_warps:
        problems.append(f"compiled for {md.num_warps} warps; the launch uses {spec.num_warps}")
    if problems:
        raise RuntimeError(
            f"{spec.name} ({spec.variant}): the kernel " + "; ".join(problems) + ": TensorRT's AOT launch cannot provide it"
        )
    ptx = compiled.asm["ptx"]
    entry = parse_ptx_entry(ptx)
    ptx = _strip_hidden_params(ptx, entry, len(spec.params), hidden)
    entry = parse_ptx_entry(ptx)
    want = tuple("u64" if p.triton_type.startswith("*") else "u32" for p in spec.params)
    got = tuple(t for t, _ in entry.params)
    if got != want:
        raise RuntimeError(f"{spec.name}: PTX entry parameter types {got} do not match the plugin's launch list {want}")
    result = CompiledKernel(spec, arch, entry.name, ptx, md.shared, hidden, f"triton {triton.__version__}")
    _CACHE[key] = result
    return result
