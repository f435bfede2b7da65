"""Slot lifecycle as TensorRT-LLM drives it (new, finished, preempted, re-admitted, relocated
requests; CUDA-graph padding rows), checked step by step against ReplayCachePool + the public
ops driven with the same requests: outputs equal bit for bit, padding slot never written."""

import torch

from pooled import MAMBA2_GEOMETRY, pool_view, state_shape
from trtllm_replayssm.models import ATTENTION, MAMBA2, AttentionGeometry, HybridModel, Layer
from trtllm_replayssm.ops import mamba2_replay_step
from trtllm_replayssm.pool import ReplayCachePool
from trtllm_replayssm_builders.trtllm.layout import record_fields
from trtllm_replayssm_builders.trtllm.steps import mamba2_step, padding_rows, replay_slot_ids
from trtllm_replayssm_builders.trtllm.store import ReplayRecordStore

L, BATCH, PADDING_SLOT, DUMMY = 3, 4, 4, 2**63 - 1
G = MAMBA2_GEOMETRY
SSM_LAYERS = (0, 2)
KW = dict(record_dtype=torch.bfloat16, state_dtype=torch.float32)


class Engine:
    """TensorRT-LLM's side: SSM states and records in pool pages, 4 live slots + 1 padding."""

    def __init__(self):
        self.states, self.views = {}, {}
        for layer in SSM_LAYERS:
            self.states[layer], _ = pool_view(5, state_shape("mamba2", G), torch.float32)
            self.views[layer] = {f.name: pool_view(5, f.shape, f.dtype)[0] for f in record_fields("mamba2", G, L, **KW)}
        self.store = ReplayRecordStore(
            {i: ("mamba2", G, torch.bfloat16) for i in SSM_LAYERS}, L, 5, record_views=self.views, state_dtype=torch.float32
        )

    def admit(self, slot, states):
        """A context request finished its prefill: state written, cursor reset."""
        for layer, s in zip(SSM_LAYERS, states):
            self.states[layer][slot] = s
        self.store.reset([slot])

    def relocate(self, old, new):
        """V2 moved a live request's page: its states and records move with it."""
        for layer in SSM_LAYERS:
            self.states[layer][new] = self.states[layer][old]
            for view in self.views[layer].values():
                view[new] = view[old]
        self.store.relocate([old], [new])


def test_lifecycle_matches_pool_oracle():
    model = HybridModel(
        "tiny", "NemotronH", (Layer(0, MAMBA2, G), Layer(1, ATTENTION, AttentionGeometry(1, 8)), Layer(2, MAMBA2, G))
    )
    oracle = ReplayCachePool(
        model, 4, buffer_len=L, num_padding_slots=0, **{"state_dtype": torch.float32, "record_dtype": torch.bfloat16}
    )
    engine = Engine()
    padding_before = [engine.states[i][PADDING_SLOT].clone() for i in SSM_LAYERS]
    A = -(torch.rand(G.nheads) + 0.5)
    D, dt_bias = torch.randn(G.nheads), 0.3 * torch.randn(G.nheads)
    engine_slot, oracle_slot = {}, {}

    def arrive(request, eslot, oslot):
        states = [torch.randn(state_shape("mamba2", G)) for _ in SSM_LAYERS]
        engine.admit(eslot, states)
        oracle.admit([oslot], states=[s[None] for s in states])
        engine_slot[request], oracle_slot[request] = eslot, oslot

    def leave(request):
        oracle.release([oracle_slot.pop(request)])
        engine_slot.pop(request)

    events = {
        0: [("arrive", "A", 1, 0), ("arrive", "B", 3, 1)],
        4: [("leave", "B")],
        5: [("arrive", "C", 3, 1)],
        7: [("leave", "A")],
        9: [("arrive", "A", 0, 0)],
        10: [("relocate", "C", 2)],
    }
    flushes = 0
    for t in range(15):
        for event in events.get(t, []):
            if event[0] == "arrive":
                arrive(*event[1:])
            elif event[0] == "leave":
                leave(event[1])
            else:
                _, request, new = event
                engine.relocate(engine_slot[request], new)
                engine_slot[request] = new
        live = sorted(engine_slot)
        request_ids = [ord(r) for r in live] + [DUMMY] * (BATCH - len(live))
        indices = torch.tensor([engine_slot[r] for r in live] + [PADDING_SLOT] * (BATCH - len(live)), dtype=torch.int32)
        padding = torch.tensor(padding_rows(request_ids, BATCH, dummy_request_id=DUMMY))
        slot_ids = replay_slot_ids(indices, padding)
        oracle_ids = torch.tensor([oracle_slot[r] for r in live], dtype=torch.int32)
        for layer in SSM_LAYERS:
            x = torch.randn(BATCH, G.nheads, G.head_dim, dtype=torch.bfloat16)
            dt = torch.randn(BATCH, G.nheads)
            B = torch.randn(BATCH, G.ngroups, G.d_state, dtype=torch.bfloat16)
            C = torch.randn(BATCH, G.ngroups, G.d_state, dtype=torch.bfloat16)
            flushes += int((engine.store.layer(layer).cursor[indices[: len(live)].long()] == L - 1).sum())
            ours = mamba2_step(
                engine.store.layer(layer), engine.states[layer], x, dt, A, B, C, slot_ids=slot_ids, D=D, dt_bias=dt_bias
            )
            n = len(live)
            ref = mamba2_replay_step(
                oracle.cache(layer), x[:n], dt[:n], A, B[:n], C[:n], slot_ids=oracle_ids, D=D, dt_bias=dt_bias
            )
            assert torch.equal(ours[:n], ref), f"step {t} layer {layer}: outputs differ"
    assert flushes >= 6
    for i, layer in enumerate(SSM_LAYERS):
        assert torch.equal(engine.states[layer][PADDING_SLOT], padding_before[i])
    assert engine.store.counters[:, :, PADDING_SLOT].eq(0).all()
