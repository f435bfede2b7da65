"""One Mamba-2 layer decoded twice, conventionally and by ReplaySSM, from the same state.

The logic behind ``trtllm-replayssm layer-demo``: :func:`run_mamba2_demo` returns the figures,
:func:`format_layer_demo` words them. Importing this module imports no torch (the CLI reads its
constants while building its parser).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional, Union

if TYPE_CHECKING:
    import torch

__all__ = ["DTYPE_NAMES", "torch_dtype", "CPU_GEOMETRY", "CUDA_GEOMETRY", "run_mamba2_demo", "format_layer_demo"]

# The demos' dtype names and the torch dtypes they stand for.
DTYPE_NAMES = {"f32": "float32", "bf16": "bfloat16", "f16": "float16"}

# (nheads, head_dim, d_state, ngroups): small enough for the CPU reference, and the
# Nemotron-3-Super Mamba-2 layer for a GPU.
CPU_GEOMETRY = (8, 16, 32, 2)
CUDA_GEOMETRY = (128, 64, 128, 8)


def torch_dtype(name: str) -> torch.dtype:
    """The torch dtype of a :data:`DTYPE_NAMES` name (f32, bf16, f16)."""
    import torch

    return getattr(torch, DTYPE_NAMES[name])


def run_mamba2_demo(
    *,
    nheads: int,
    head_dim: int,
    d_state: int,
    ngroups: int,
    L: int = 16,
    batch: int = 4,
    steps: int = 300,
    state_dtype: Optional[torch.dtype] = None,
    act_dtype: Optional[torch.dtype] = None,
    device: Union[str, torch.device] = "cpu",
    seed: int = 0,
    progress: bool = True,
) -> dict:
    """Decodes ``batch`` sequences with both ops and compares them step by step.

    Both paths start from the same admitted state (random, rounded to ``state_dtype``) and see
    the same random inputs (activations in ``act_dtype``, ``D`` and ``dt_bias`` given, no
    ``z``). Before the ``steps`` batched steps, row r is stepped alone r mod L times, so the
    replay cursors are spread over [0, L) as in a running engine.

    Args:
        nheads, head_dim, d_state, ngroups (int): layer geometry; ngroups divides nheads.
        L (int): records per slot of the replay cache, 1 <= L <= 64.
        batch (int): sequences decoded together (one cache slot each).
        steps (int): batched decode steps, >= 1.
        state_dtype (torch.dtype): state / checkpoint dtype, fp32 (default) | bf16 | fp16.
        act_dtype (torch.dtype): activation and record dtype, fp32 (default) | bf16 | fp16.
        device (str | torch.device): where both ops run (CPU runs the PyTorch reference).
        seed (int): seeds the inputs and the initial state.
        progress (bool): show a tqdm bar over the batched steps.

    Returns:
        dict: ``rel_err`` (float): worst step's max|y_replay - y_conv| / max|y_conv|, over the
        spreading steps and the batched steps; ``flushes`` (int): replay rows that folded their
        records into the checkpoint during the batched steps; ``steps``, ``warmup_steps``
        (int); bytes per sequence per step, averaged over the batched steps:
        ``conventional_written`` (the whole state, every step), ``replay_written`` (measured:
        checkpoint bytes for each flushed row, record bytes for each appending row),
        ``model_conventional_written`` and ``model_replay_written`` (from
        :func:`trtllm_replayssm.memory.mamba2_step_bytes`: state_written, plus records_written
        for replay); ``state_bytes`` and ``record_bytes`` (one sequence's state, one record).

    Raises:
        ValueError, TypeError: bad geometry, L, batch or steps (from the cache and the ops).
    """
    import torch
    from tqdm import tqdm

    from .cache import Mamba2ReplayCache
    from .memory import mamba2_step_bytes
    from .ops import mamba2_decode_step, mamba2_replay_step

    if steps < 1 or batch < 1:
        raise ValueError(f"run_mamba2_demo: steps = {steps}, batch = {batch}; expected both >= 1")
    state_dtype = torch.float32 if state_dtype is None else state_dtype
    act_dtype = torch.float32 if act_dtype is None else act_dtype
    device = torch.device(device)
    gen = torch.Generator(device=device).manual_seed(seed)

    def randn(*shape: int, dtype: torch.dtype = act_dtype) -> torch.Tensor:
        return torch.randn(*shape, generator=gen, device=device).to(dtype)

    A = -(torch.rand(nheads, generator=gen, device=device) + 1.0)  # in [-2, -1]
    dt_bias = torch.rand(nheads, generator=gen, device=device) - 4.0  # softplus ~ 0.02-0.05
    D = randn(nheads, dtype=torch.float32)

    cache = Mamba2ReplayCache.allocate(
        batch, nheads, head_dim, d_state, ngroups, L, state_dtype=state_dtype, act_dtype=act_dtype, device=device
    )
    slots = torch.arange(batch, dtype=torch.int32, device=device)
    cache.admit(slots, randn(batch, nheads, head_dim, d_state, dtype=torch.float32))
    state = cache.checkpoint.clone()  # the conventional path's state, same rounded start

    worst = torch.zeros((), dtype=torch.float64, device=device)

    def step(slot_ids: torch.Tensor) -> None:
        n = slot_ids.numel()
        x, dt = randn(n, nheads, head_dim), randn(n, nheads)
        B, C = randn(n, ngroups, d_state), randn(n, ngroups, d_state)
        kw = dict(slot_ids=slot_ids, D=D, dt_bias=dt_bias)
        y_replay = mamba2_replay_step(cache, x, dt, A, B, C, **kw).double()
        y_conv = mamba2_decode_step(state, x, dt, A, B, C, **kw).double()
        err = (y_replay - y_conv).abs().max() / y_conv.abs().max().clamp_min(1e-30)
        torch.maximum(worst, err, out=worst)

    warmup_steps = 0
    for r in range(batch):
        for _ in range(r % L):
            step(slots[r : r + 1])
            warmup_steps += 1

    flushes = torch.zeros((), dtype=torch.int64, device=device)
    for _ in tqdm(range(steps), desc="decode", unit="step", disable=not progress, leave=False):
        step(slots)
        flushes += (cache.cursor == 0).sum()  # every slot is live: cursor 0 after a step = flush
    flushes = int(flushes)

    state_bytes = cache.checkpoint[0].numel() * cache.checkpoint.element_size()
    record_bytes = sum(t[0, :, 0].numel() * t.element_size() for t in (cache.x_records, cache.dt_records, cache.B_records))
    rows = steps * batch
    geom = dict(
        nheads=nheads, head_dim=head_dim, d_state=d_state, ngroups=ngroups, L=L, state_dtype=state_dtype, act_dtype=act_dtype
    )
    model_replay = mamba2_step_bytes("replay_step", **geom)
    return {
        "rel_err": float(worst),
        "flushes": flushes,
        "steps": steps,
        "warmup_steps": warmup_steps,
        "state_bytes": state_bytes,
        "record_bytes": record_bytes,
        "conventional_written": float(state_bytes),
        "replay_written": (state_bytes * flushes + record_bytes * (rows - flushes)) / rows,
        "model_conventional_written": mamba2_step_bytes("decode_step", **geom).state_written,
        "model_replay_written": model_replay.state_written + model_replay.records_written,
    }


def format_layer_demo(config: dict, fig: dict) -> str:
    """The ``layer-demo`` text: ``config`` (device, geometry, L, batch, steps, dtype names, seed)
    and ``fig`` (:func:`run_mamba2_demo`'s figures)."""
    c = config
    conv, replay, model = (fig["conventional_written"], fig["replay_written"], fig["model_replay_written"])
    rows = fig["steps"] * c["batch"]
    out = [
        "trtllm-replayssm layer-demo: one Mamba-2 layer, conventional decode vs ReplaySSM",
        f"  {c['device']} | nheads {c['nheads']}, head_dim {c['head_dim']}, d_state {c['d_state']}, "
        f"ngroups {c['ngroups']} | L {c['L']} | batch {c['batch']} | state {c['state_dtype']}, "
        f"act {c['act_dtype']} | seed {c['seed']}",
        f"  steps: {fig['steps']} batched (+ {fig['warmup_steps']} single-row steps spreading"
        f" the cursors), flushes: {fig['flushes']}",
        f"  max relative error, replay vs conventional y: {fig['rel_err']:.2e}  (worst step's max|Δ| / max|ref|)",
        "  state bytes written per step per sequence:",
        f"    conventional      {conv:12,.0f} B  (whole state every step)",
        f"    replay, measured  {replay:12,.0f} B  (= conventional / {conv / replay:.1f}: checkpoint"
        f" at flushes, a {fig['record_bytes']:,} B record otherwise)",
        f"    replay, model     {model:12,.0f} B  (memory.mamba2_step_bytes: a flush on 1/L of"
        f" the row-steps, a record on the others)",
    ]
    if round(replay) != round(model):
        # The model assumes cursors spread evenly over [0, L): exactly 1/L of the rows flush each
        # step. With batch < L the cursors start at 0 .. batch-1 only, and over a number of
        # steps that is not a multiple of L some rows flush once less than others.
        out.append(
            f"    (measured != model: this run flushed {fig['flushes']:,} times in {rows:,} "
            f"row-steps, 1 in {rows / max(fig['flushes'], 1):.2f}, where the model counts 1 in "
            f"L = {c['L']}; they agree when --batch or --steps is a multiple of L)"
        )
    return "\n".join(out)
