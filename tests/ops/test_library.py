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
