"""The custom-op helper: every ``replayssm::`` op's CUDA launcher takes the op's arguments by
name (checked on the CPU, so a renamed launcher parameter fails here, not first on a GPU)."""

import importlib

import pytest
import torch

from trtllm_replayssm.ops.library import LAUNCHERS, by_name


def test_every_op_has_a_launcher():
    assert sorted(LAUNCHERS) == sorted(
        [
            "mamba2_decode_step",
            "mamba2_replay_step",
            "gated_delta_decode_step",
            "gated_delta_replay_step",
            "mamba2_replay_verify",
            "gated_delta_replay_verify",
            "replay_commit",
            "mamba2_snapshot_verify",
            "gated_delta_snapshot_verify",
            "snapshot_commit",
        ]
    )


@pytest.mark.parametrize("name", sorted(LAUNCHERS))
def test_launcher_takes_the_ops_arguments_by_name(name):
    module, function = LAUNCHERS[name].split(":")
    launcher = getattr(importlib.import_module(f"trtllm_replayssm.kernels.{module}"), function)
    params = [a.name for a in getattr(torch.ops.replayssm, name).default._schema.arguments]
    by_name(launcher, params)  # raises when the launcher needs an argument the op lacks


def test_by_name_refuses_a_target_needing_more():
    def target(a, b, *, c):
        return None

    with pytest.raises(TypeError, match=r"target needs \['c'\]"):
        by_name(target, ["a", "b"])


def test_ops_write_cache_views_made_under_no_grad():
    """A host (the Hugging Face hook) may build its cache views under torch.no_grad and step
    outside it: the ops write them without autograd's view checks."""
    from trtllm_replayssm.ops import Mamba2ReplayCache, mamba2_replay_step

    with torch.no_grad():
        whole = Mamba2ReplayCache.allocate(3, 2, 4, 8, 1, 4, state_dtype=torch.float32, act_dtype=torch.float32)
        views = Mamba2ReplayCache(**{name: t[:] for name, t in whole.tensors().items()})
    x, dt, B, C = torch.randn(1, 2, 4), torch.randn(1, 2), torch.randn(1, 1, 8), torch.randn(1, 1, 8)
    mamba2_replay_step(views, x, dt, -torch.ones(2), B, C, slot_ids=torch.tensor([1], dtype=torch.int32))
    assert whole.cursor.tolist() == [0, 1, 0] and whole.x_records[1, :, 0].equal(x[0])
