"""The per-slot state block (trtllm_replayssm.block): layout, views, planner byte count."""

import pytest
import torch

from trtllm_replayssm.block import Mamba2StateBlock, planner_bytes


def test_nemotron_3_super_block_is_the_planner_replay_bytes():
    block = Mamba2StateBlock(128, 64, 128, 8, 16, "bf16")
    # state 4 MiB + records 303,104 + cursors 12 (docs/architecture.md's plan table)
    assert block.nbytes == 4_194_304 + 303_104 + 12 == planner_bytes(block)


@pytest.mark.parametrize("act", ["f32", "bf16", "f16"])
@pytest.mark.parametrize("geom", [(4, 8, 16, 2, 1), (6, 16, 8, 3, 5), (24, 32, 64, 8, 64)])
def test_block_bytes_equal_planner(geom, act):
    nh, hd, ds, ng, L = geom
    block = Mamba2StateBlock(nh, hd, ds, ng, L, act)
    assert block.nbytes == planner_bytes(block)
    regions = block.regions
    assert block.checkpoint.nbytes == 4 * nh * hd * ds == block.state_bytes
    assert [r.name for r in regions] == ["dt_records", "cursor", "arrivals", "pending", "x_records", "B_records"]
    assert regions[0].offset == 0
    for a, b in zip(regions, regions[1:]):
        assert b.offset == a.offset + a.nbytes
    assert block.tail_bytes == regions[-1].offset + regions[-1].nbytes
    for r in regions:
        assert r.offset % r.itemsize == 0


def test_views_address_the_layer_bytes():
    """Checkpoints at slot * state_bytes (where TensorRT-LLM's stock plugin writes a slot's
    state), then one tail per slot after all the checkpoints."""
    block = Mamba2StateBlock(4, 8, 16, 2, 3, "bf16")
    num_slots = 3
    buf = torch.zeros(num_slots, block.nbytes, dtype=torch.uint8)
    v = block.views(buf)
    assert v["checkpoint"].shape == (3, 4, 8, 16) and v["x_records"].shape == (3, 4, 3, 8)
    raw = buf.view(-1)
    v["checkpoint"][2, 3, 7, 15] = 2.0
    end = 3 * block.state_bytes
    assert raw[end - 4 : end].view(torch.float32).item() == 2.0
    v["cursor"][1] = 7
    c = block.region("cursor")
    assert raw[num_slots * block.state_bytes + block.tail_bytes + c.offset] == 7
    assert block.layer_offset("cursor", num_slots) == num_slots * block.state_bytes + c.offset
    v["B_records"][2, 1, 2, 15] = 1.0
    assert raw[-2:].view(torch.bfloat16).item() == 1.0
    assert int(buf.count_nonzero()) == 4  # fp32 2.0 and int32 7: one nonzero byte each; bf16 1.0: two
    assert block.slot_stride("checkpoint") == 4 * 8 * 16 and block.slot_stride("x_records") == block.tail_bytes // 2
    # the runtime's fp32 buffer views the same bytes
    assert block.views(buf.view(torch.float32))["cursor"][1].item() == 7


def test_views_of_one_layer_of_a_pool_address_that_layer():
    """A layer buffer that is a view into a pooled allocation (``pool[1]``): the views start at
    its first byte, not at the storage's (as_strided's offset is absolute; the admit bug of the
    mamba2_replay_block interpreter test)."""
    block = Mamba2StateBlock(4, 8, 16, 2, 3, "bf16")
    pool = torch.zeros(2, 3, block.nbytes, dtype=torch.uint8)
    v = block.views(pool[1])
    v["checkpoint"][0, 0, 0, 0] = 1.0
    v["cursor"][2] = 5
    assert int(pool[0].count_nonzero()) == 0
    assert pool[1].reshape(-1)[:4].view(torch.float32).item() == 1.0
    assert pool[1].reshape(-1)[block.layer_offset("cursor", 3) + 2 * block.tail_bytes] == 5
    assert v["checkpoint"].data_ptr() == pool[1].data_ptr()
    with pytest.raises(ValueError, match="starts at byte 2 of its storage; expected a multiple of 4"):
        block.views(torch.zeros(2 + 3 * block.nbytes, dtype=torch.uint8)[2:])


def test_bad_input_names_the_field():
    with pytest.raises(ValueError, match="Mamba2StateBlock: L is 65"):
        Mamba2StateBlock(4, 8, 16, 2, 65, "bf16")
    with pytest.raises(TypeError, match="act_dtype is 'f64'"):
        Mamba2StateBlock(4, 8, 16, 2, 4, "f64")
    with pytest.raises(ValueError, match="must divide nheads"):
        Mamba2StateBlock(4, 8, 16, 3, 4, "bf16")
    with pytest.raises(ValueError, match="tail holds .* not a multiple of 4"):
        Mamba2StateBlock(1, 1, 2, 1, 1, "bf16")
    block = Mamba2StateBlock(4, 8, 16, 2, 3, "bf16")
    with pytest.raises(ValueError, match="expected a multiple"):
        block.views(torch.zeros(block.nbytes + 4, dtype=torch.uint8))
    with pytest.raises(KeyError, match="no region 'state'"):
        block.region("state")
