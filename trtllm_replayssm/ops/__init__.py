"""Public ops of trtllm_replayssm (registered as ``torch.ops.replayssm.*``)."""

from ..cache import GDNReplayCache, KDAReplayCache, Mamba2ReplayCache
from ..checks import SlotBatch
from .gated_delta import gdn_decode_step, gdn_gate, gdn_replay_step, kda_decode_step, kda_gate, kda_replay_step
from .mamba2 import MAX_L, mamba2_decode_step, mamba2_replay_step
from .spec import (
    MAX_T,
    SnapshotCache,
    gdn_replay_verify,
    gdn_serial_decode,
    gdn_snapshot_verify,
    kda_replay_verify,
    kda_serial_decode,
    kda_snapshot_verify,
    mamba2_replay_verify,
    mamba2_serial_decode,
    mamba2_snapshot_verify,
    replay_commit,
    snapshot_commit,
    spec_buffer_len,
)
from .state import replay_cache_state

__all__ = [
    "Mamba2ReplayCache",
    "GDNReplayCache",
    "KDAReplayCache",
    "MAX_L",
    "SlotBatch",
    "mamba2_decode_step",
    "mamba2_replay_step",
    "replay_cache_state",
    "gdn_decode_step",
    "gdn_replay_step",
    "gdn_gate",
    "kda_decode_step",
    "kda_replay_step",
    "kda_gate",
    "MAX_T",
    "spec_buffer_len",
    "mamba2_replay_verify",
    "gdn_replay_verify",
    "kda_replay_verify",
    "replay_commit",
    "SnapshotCache",
    "mamba2_serial_decode",
    "gdn_serial_decode",
    "kda_serial_decode",
    "mamba2_snapshot_verify",
    "gdn_snapshot_verify",
    "kda_snapshot_verify",
    "snapshot_commit",
]
