"""The tensor-parallel group a stack runs over, and how ranks join it.

:class:`TPGroup` is what the layers see: ``rank``, ``size`` and a sum all-reduce. One process
is ``TPGroup()`` (size 1, the all-reduce is the identity). Under ``torch.distributed`` it wraps
a process group: gloo on CPU tensors, NCCL on CUDA tensors.

:func:`init_from_mpi` is the launch path used by ``mpirun -n N python ...``: mpi4py gives the
rank, the world size and the rank on the node; rank 0 picks a TCP port and broadcasts it over
MPI, and every rank joins ``torch.distributed`` there. :func:`init_from_torchrun` reads the
variables ``torchrun`` sets instead (for hosts without an MPI launcher); :func:`init_ranks`
picks whichever launched the process. With NCCL keep NVLink multicast off in the launching
environment (``NCCL_NVLS_ENABLE=0``, ``TORCH_SYMM_MEM_DISABLE_MULTICAST=1``).
"""

from __future__ import annotations

import os
import sys
import socket
from datetime import timedelta
from typing import Optional, Tuple

import torch
import torch.distributed as dist

from torch import Tensor

__all__ = ["TPGroup", "init_distributed", "init_from_mpi", "init_from_torchrun", "init_ranks", "shutdown_distributed"]

BACKENDS = ("gloo", "nccl")


class TPGroup:
    """``size`` ranks of one tensor-parallel group; this process is ``rank``.

    Args:
        rank, size: this rank and the group size (0 and 1: a single process).
        process_group: the ``torch.distributed`` group the all-reduce runs over; None with
            size 1, or the default group.
    """

    def __init__(self, rank: int = 0, size: int = 1, process_group=None) -> None:
        if not isinstance(size, int) or size < 1 or not isinstance(rank, int) or not 0 <= rank < size:
            raise ValueError(f"TPGroup: rank {rank!r}, size {size!r}; expected 0 <= rank < size")
        if size > 1 and not dist.is_initialized():
            raise ValueError("TPGroup: size > 1 needs torch.distributed initialised (init_from_mpi or init_distributed)")
        self.rank, self.size, self.process_group = rank, size, process_group

    @classmethod
    def from_torch_distributed(cls, process_group=None) -> "TPGroup":
        """The group of every rank of ``process_group`` (default: the world)."""
        return cls(dist.get_rank(process_group), dist.get_world_size(process_group), process_group)

    def all_reduce_(self, t: Tensor) -> Tensor:
        """Sums ``t`` over the group in place (every rank must call it) and returns it."""
        if self.size > 1:
            dist.all_reduce(t, op=dist.ReduceOp.SUM, group=self.process_group)
        return t


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def init_distributed(
    rank: int, world_size: int, *, backend: str, master_addr: str, master_port: int, device: torch.device
) -> TPGroup:
    """Joins ``torch.distributed`` (TCP rendezvous at master_addr:master_port) and returns the
    world as a :class:`TPGroup`. ``device``: cuda:<local rank> with NCCL, cpu with gloo."""
    if backend not in BACKENDS:
        raise ValueError(f"init_distributed: backend is {backend!r}; expected one of {', '.join(BACKENDS)}")
    if backend == "nccl":
        if device.type != "cuda":
            raise ValueError(f"init_distributed: backend nccl needs a CUDA device; got {device}")
        torch.cuda.set_device(device)
    dist.init_process_group(
        backend,
        init_method=f"tcp://{master_addr}:{master_port}",
        rank=rank,
        world_size=world_size,
        timeout=timedelta(minutes=5),
        **({"device_id": device} if backend == "nccl" else {}),
    )
    return TPGroup.from_torch_distributed()


def _device(backend: str, local_rank: int) -> torch.device:
    return torch.device("cuda", local_rank) if backend == "nccl" else torch.device("cpu")


def init_from_mpi(backend: Optional[str] = None, master_addr: str = "127.0.0.1") -> Tuple[TPGroup, torch.device]:
    """Rank discovery with mpi4py (under ``mpirun -n N``, or a single process without it),
    collectives with ``torch.distributed``.

    Args:
        backend: ``"gloo"`` (CPU tensors) or ``"nccl"`` (one GPU per rank, cuda:<rank on the
            node>); None: nccl when CUDA is available, else gloo.
        master_addr: where rank 0 listens; the default serves ranks of one host.
    Returns:
        (group, device): the world as a TPGroup, and this rank's device.
    Raises:
        ImportError: mpi4py is missing (``pip install mpi4py mpich``).
    """
    try:
        from mpi4py import MPI
    except ImportError as e:
        raise ImportError(
            f"init_from_mpi needs mpi4py and an MPI library: pip install mpi4py mpich (or a system MPI) ({e})"
        ) from None
    comm = MPI.COMM_WORLD
    backend = backend or ("nccl" if torch.cuda.is_available() else "gloo")
    local_rank = comm.Split_type(MPI.COMM_TYPE_SHARED).Get_rank()
    device = _device(backend, local_rank)
    port = comm.bcast(_free_port() if comm.Get_rank() == 0 else None, root=0)
    group = init_distributed(
        comm.Get_rank(), comm.Get_size(), backend=backend, master_addr=master_addr, master_port=port, device=device
    )
    return group, device


def init_from_torchrun(backend: Optional[str] = None) -> Tuple[TPGroup, torch.device]:
    """As :func:`init_from_mpi`, with the ranks and rendezvous ``torchrun`` exports (RANK,
    WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT)."""
    backend = backend or ("nccl" if torch.cuda.is_available() else "gloo")
    env = {k: os.environ.get(k) for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    missing = [k for k, v in env.items() if v is None]
    if missing:
        raise ValueError(f"init_from_torchrun: {', '.join(missing)} not set; expected a torchrun launch")
    device = _device(backend, int(env["LOCAL_RANK"]))
    group = init_distributed(
        int(env["RANK"]),
        int(env["WORLD_SIZE"]),
        backend=backend,
        master_addr=env["MASTER_ADDR"],
        master_port=int(env["MASTER_PORT"]),
        device=device,
    )
    return group, device


def init_ranks(backend: Optional[str] = None) -> Tuple[TPGroup, torch.device]:
    """:func:`init_from_torchrun` under torchrun (TORCHELASTIC_RUN_ID set), else
    :func:`init_from_mpi` (mpirun, or one process)."""
    if "TORCHELASTIC_RUN_ID" in os.environ:
        return init_from_torchrun(backend)
    return init_from_mpi(backend)


def shutdown_distributed() -> None:
    """Leaves ``torch.distributed`` (no-op when it was never joined). Every rank reaches the
    teardown before any destroys its group (an early destroy can abort a rank still inside
    gloo), and under mpirun no rank exits before all have destroyed theirs: rank 0 hosts the
    TCP store that the others' teardown still talks to. A rank aborted at exit ("terminate
    called without an active exception", SIGABRT) in two of about twenty CI runs of the
    two-rank CPU test with the first guard alone."""
    if not dist.is_initialized():
        return
    dist.barrier()
    dist.destroy_process_group()
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is not None:
        mpi.COMM_WORLD.Barrier()
