"""The model demo behind ``trtllm-replayssm demo``: a random hybrid generates with and without
ReplaySSM. This module computes the figures; ``trtllm_replayssm_builders.cli`` prints them.

Both runs are greedy ``model.generate`` calls of the same model on the same left-padded prompts:
first the host's own decode, then with :func:`enable_replayssm`. Forward hooks on the model time
every decode step and, in the ReplaySSM run, read the caches' cursors after it to count what
each step wrote: a flushing row writes its checkpoint, any other row appends one record.
"""

from __future__ import annotations

import time

from dataclasses import dataclass, fields
from typing import Optional, Union

import torch

from tqdm import tqdm

from trtllm_replayssm.models import from_hf_config
from trtllm_replayssm.planner import PlanConfig, sequence_ssm_bytes, step_traffic

from .compat import host_cache
from .hook import disable_replayssm, enable_replayssm
from .random_models import build_random_model

__all__ = ["run_model_demo"]


def _slot_bytes(cache) -> tuple[int, int]:
    """(checkpoint bytes, bytes of one record) of one slot of a ReplaySSM cache."""
    state = cache.checkpoint[0].numel() * cache.checkpoint.element_size()
    # Record fields are [slot, heads, L, ...]: position 0 of slot 0 is one record's share.
    record = sum(
        getattr(cache, f.name)[0, :, 0].numel() * getattr(cache, f.name).element_size()
        for f in fields(cache)
        if f.name.endswith("_records")
    )
    return state, record


def _host_state_bytes(past_key_values) -> int:
    """Bytes of every recurrent state the host cache holds: what its decode step rewrites."""
    total = 0
    for layer in past_key_values.layers:
        state = getattr(layer, "recurrent_states", {}).get(0)
        total += state.numel() * state.element_size() if state is not None else 0
    return total


@dataclass
class _Run:
    """One generate call: tokens, per-step logits, per-decode-step time and state bytes written."""

    sequences: torch.Tensor
    logits: torch.Tensor
    step_seconds: list
    step_bytes: list


def _generate(model, input_ids, attention_mask, new_tokens: int, *, hook=None, desc: str, progress: bool) -> _Run:
    """Greedy generation of exactly ``new_tokens`` tokens, timing and counting each decode step."""
    sync = torch.cuda.synchronize if input_ids.is_cuda else (lambda: None)
    seconds, written, started = [], [], []
    bar = tqdm(total=new_tokens, desc=desc, unit="tok", disable=not progress, leave=False)

    def pre(module, args, kwargs):
        if kwargs["input_ids"].shape[1] == 1:
            sync()
            started.append(time.perf_counter())

    def post(module, args, kwargs, output):
        bar.update(1)
        if kwargs["input_ids"].shape[1] != 1:
            return
        sync()
        seconds.append(time.perf_counter() - started.pop())
        cache = host_cache(kwargs)
        if hook is None:
            written.append(_host_state_bytes(cache))
            return
        nbytes = 0
        for store in hook.stores(cache).values():
            # Every row is live, so a cursor back at 0 after the step means that row flushed.
            flushed = int((store.cursor == 0).sum())
            state, record = _slot_bytes(store)
            nbytes += flushed * state + (store.num_slots - flushed) * record
        written.append(nbytes)

    handles = (model.register_forward_pre_hook(pre, with_kwargs=True), model.register_forward_hook(post, with_kwargs=True))
    try:
        out = model.generate(
            input_ids,
            attention_mask=attention_mask,
            max_new_tokens=new_tokens,
            min_new_tokens=new_tokens,
            do_sample=False,
            output_logits=True,
            return_dict_in_generate=True,
        )
    finally:
        for h in handles:
            h.remove()
        bar.close()
    return _Run(out.sequences[:, input_ids.shape[1] :], torch.stack(out.logits), seconds, written)


def run_model_demo(
    family: str = "nemotron_h",
    *,
    size: str = "small",
    buffer_len: int = 16,
    batch: int = 4,
    new_tokens: Optional[int] = None,
    dtype: torch.dtype = torch.float32,
    device: Union[str, torch.device] = "cpu",
    seed: int = 0,
    progress: bool = True,
) -> dict:
    """Generates with the host's decode and with ReplaySSM; returns the comparison.

    Args:
        family (str): a :data:`~trtllm_replayssm_builders.hf.random_models.FAMILIES` name.
        size (str): ``"small"`` (demo) or ``"tiny"`` (tests).
        buffer_len (int): L of the ReplaySSM caches.
        batch (int): prompts, of lengths spread over [8, 16] tokens, left-padded.
        new_tokens (int, optional): tokens generated per prompt; default 4·L + 1, i.e. 4·L decode
            steps after the prefill's token (four flushes per sequence).
        dtype (torch.dtype): model dtype (the SSM states stay fp32, as the host keeps them).
        device (str | torch.device): where both runs happen.
        seed (int): seeds the weights and the prompts.
        progress (bool): tqdm bars while generating.

    Returns:
        dict: ``summary`` (the hook's), ``parameters``, ``batch``, ``prompt_lengths``,
        ``new_tokens``, ``decode_steps``, ``flushes`` (per sequence and layer);
        ``tokens_equal`` / ``tokens_total`` (generated tokens that agree), ``first_divergence``
        (step index or None), ``logits_rel_err`` (max |Δ logits| / max |logits| over the steps up
        to the first divergence); ``host_written`` / ``replay_written`` (state bytes written per
        decode step, all SSM layers, whole batch, mean over steps); ``host_step_ms`` /
        ``replay_step_ms`` (median decode step); ``plan`` (the planner's bytes per sequence, for
        ``from_hf_config`` of the model's config:
        ``conventional_bytes``, ``replay_bytes``, ``conventional_written``, ``replay_written``
        per decode step, all SSM layers).
    Raises:
        ValueError: bad family, size, buffer_len, batch or new_tokens. RuntimeError: a hooked
            layer did not run the replay op on every decode step.
    """
    if not isinstance(batch, int) or batch < 1:
        raise ValueError(f"run_model_demo: batch is {batch!r}; expected a positive int")
    new_tokens = 4 * buffer_len + 1 if new_tokens is None else new_tokens
    if not isinstance(new_tokens, int) or new_tokens < 2:
        raise ValueError(f"run_model_demo: new_tokens is {new_tokens!r}; expected an int >= 2 (one decode step at least)")
    device = torch.device(device)
    model = build_random_model(family, size, dtype=dtype, device=device, seed=seed)
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.linspace(16, 8, batch).round().long() if batch > 1 else torch.tensor([16])
    input_ids = torch.randint(3, model.config.vocab_size, (batch, 16), generator=gen)
    attention_mask = (torch.arange(16)[None, :] >= 16 - lengths[:, None]).long()
    input_ids = (input_ids * attention_mask).to(device)  # pad token 0 on the left
    attention_mask = attention_mask.to(device)

    host = _generate(model, input_ids, attention_mask, new_tokens, desc="host decode", progress=progress)
    hook = enable_replayssm(model, buffer_len)
    try:
        replay = _generate(model, input_ids, attention_mask, new_tokens, hook=hook, desc="ReplaySSM decode", progress=progress)
    finally:
        disable_replayssm(model)
    decode_steps = new_tokens - 1
    missed = {
        layer.index: hook.decode_steps.get(layer.index, 0)
        for layer in hook.layers
        if hook.decode_steps.get(layer.index, 0) != decode_steps
    }
    if missed:
        raise RuntimeError(
            f"run_model_demo: the ReplaySSM run decoded {decode_steps} steps, but "
            f"these layers ran the replay op a different number of times "
            f"(layer: calls): {missed}; the comparison would not measure ReplaySSM"
        )

    same = host.sequences == replay.sequences
    diverged = (~same).any(dim=0).nonzero()
    first = int(diverged[0]) if diverged.numel() else None
    upto = slice(0, new_tokens if first is None else first + 1)
    ref = host.logits[upto].double()
    rel_err = float((replay.logits[upto].double() - ref).abs().max() / ref.abs().max())

    state_dtype = torch.float32
    config = PlanConfig(buffer_len=buffer_len, spec_tokens=1, state_dtype=state_dtype, record_dtype=dtype, conv_dtype=dtype)
    planned = from_hf_config(model.config.to_dict())  # the planner's model of the host config
    conv_traffic = step_traffic(planned, "conventional", config)
    replay_traffic = step_traffic(planned, "replay", config)
    return {
        "summary": hook.summary(),
        "parameters": sum(p.numel() for p in model.parameters()),
        "batch": batch,
        "prompt_lengths": lengths.tolist(),
        "new_tokens": new_tokens,
        "decode_steps": decode_steps,
        "flushes": decode_steps // buffer_len,
        "tokens_equal": int(same.sum()),
        "tokens_total": same.numel(),
        "first_divergence": first,
        "logits_rel_err": rel_err,
        "host_written": sum(host.step_bytes) / len(host.step_bytes),
        "replay_written": sum(replay.step_bytes) / len(replay.step_bytes),
        "host_step_ms": 1e3 * float(torch.tensor(host.step_seconds).median()),
        "replay_step_ms": 1e3 * float(torch.tensor(replay.step_seconds).median()),
        "plan": {
            "conventional_bytes": sequence_ssm_bytes(planned, "conventional", config),
            "replay_bytes": sequence_ssm_bytes(planned, "replay", config),
            "conventional_written": conv_traffic.state_written + conv_traffic.records_written,
            "replay_written": replay_traffic.state_written + replay_traffic.records_written,
        },
    }
