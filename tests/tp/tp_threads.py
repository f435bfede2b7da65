"""In-process tensor parallelism for tests: N ranks as N threads of one process, summing in rank
order at each all-reduce. It exercises the sharding and the collectives' placement at TP 2, 4
and 8 in seconds; the real launch (mpirun, torch.distributed) is tests/tp/test_tp_mpirun.py."""

from __future__ import annotations

import threading

import torch

from trtllm_replayssm.tp import TPGroup


class ThreadGroup(TPGroup):
    """Rank ``rank`` of ``size`` threads sharing ``board`` (one per run, from :func:`run_ranks`).

    ``skip(t)``: an all-reduce to leave out (teeth tests: a missing reduction must be seen)."""

    def __init__(self, rank: int, size: int, board: dict, skip=None) -> None:
        self.rank, self.size, self.process_group = rank, size, None
        self.board, self.skip = board, skip

    def all_reduce_(self, t):
        if self.skip is not None and self.skip(t):
            return t
        b = self.board
        b["parts"][self.rank] = t.clone()
        b["barrier"].wait()
        total = b["parts"][0].clone()
        for p in b["parts"][1:]:
            total += p
        b["barrier"].wait()  # everyone has read the parts before they are overwritten
        return t.copy_(total)


def run_ranks(size: int, fn, skip=None) -> list:
    """fn(group) on ``size`` threads, one per rank; their results in rank order. An exception
    in any rank is raised here (the others are released)."""
    board = {"barrier": threading.Barrier(size), "parts": [None] * size}
    results, errors = [None] * size, []

    def work(rank):
        try:
            results[rank] = fn(ThreadGroup(rank, size, board, skip))
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller
            errors.append(e)
            board["barrier"].abort()

    threads = [threading.Thread(target=work, args=(r,)) for r in range(size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    real = [e for e in errors if not isinstance(e, threading.BrokenBarrierError)]
    if real or errors:
        raise (real or errors)[0]
    return results


def single_threaded_torch():
    """Context: torch intra-op threads = 1 (rank threads would oversubscribe the CPU cores)."""

    class _Ctx:
        def __enter__(self):
            self.n = torch.get_num_threads()
            torch.set_num_threads(1)

        def __exit__(self, *exc):
            torch.set_num_threads(self.n)

    return _Ctx()
