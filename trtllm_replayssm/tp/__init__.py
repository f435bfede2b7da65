"""Tensor parallelism for the SSM layers: per-rank sharding (TensorRT-LLM's layout), the TP
group and its MPI launch, decode mixers and a small hybrid stack that runs whole or per rank."""

from .comm import TPGroup, init_distributed, init_from_mpi, init_from_torchrun, init_ranks, shutdown_distributed
from .layers import ROUTES, GDNMixer, KDAMixer, Mamba2Mixer
from .shard import DeltaRuleShard, Mamba2Shard, layer_shard, rank_major_rows
from .stack import DecodeRun, HybridDecodeStack, run_decode, shard_errors, ssm_stack, tiny_stack_model

__all__ = [
    "TPGroup",
    "init_distributed",
    "init_from_mpi",
    "init_from_torchrun",
    "init_ranks",
    "shutdown_distributed",
    "ROUTES",
    "Mamba2Mixer",
    "GDNMixer",
    "KDAMixer",
    "Mamba2Shard",
    "DeltaRuleShard",
    "layer_shard",
    "rank_major_rows",
    "HybridDecodeStack",
    "DecodeRun",
    "run_decode",
    "tiny_stack_model",
    "ssm_stack",
    "shard_errors",
]
