"""Benchmark results: the header line, JSON files and speedup plots."""

from __future__ import annotations

import datetime
import json
import os
from typing import Callable, Optional

import torch


def header(name: str, copy_bw: float) -> str:
    import triton

    return (
        f"# bench {name} | {datetime.date.today()} | {torch.cuda.get_device_name()} | "
        f"torch {torch.__version__} | triton {triton.__version__} | copy {copy_bw / 1e12:.2f} TB/s"
    )


def results_stem(out_dir: str, name: str) -> str:
    os.makedirs(out_dir, exist_ok=True)
    gpu = torch.cuda.get_device_name().split()[-1].lower()
    return os.path.join(out_dir, f"{datetime.date.today()}-{gpu}-{name}")


def write_json(stem: str, copy_bw: float, rows: list, **meta) -> None:
    import triton

    with open(stem + ".json", "w") as f:
        json.dump(
            dict(
                device=torch.cuda.get_device_name(),
                date=str(datetime.date.today()),
                torch=torch.__version__,
                triton=triton.__version__,
                copy_bytes_per_s=copy_bw,
                **meta,
                rows=rows,
            ),
            f,
            indent=1,
        )


def _replay_line(r: dict) -> Optional[str]:
    return f"replay L={r['L']}" if r["route"] == "replay_step" else None


def plot_speedups(
    rows: list,
    path: str,
    panels: list,
    title: str,
    *,
    series: Callable[[dict], Optional[str]] = _replay_line,
    ylabel: str = "speedup vs conventional kernel",
) -> None:
    """One panel per (label, predicate on rows); a line of speedup vs batch per ``series(row)``
    (rows it maps to None are left out; default: a line per L of the replay rows)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 4), sharey=True, squeeze=False)
    for ax, (label, keep) in zip(axes[0], panels):
        sel = [r for r in rows if keep(r) and series(r) is not None]
        for line in dict.fromkeys(series(r) for r in sel):
            pts = sorted((r["batch"], r["speedup"]) for r in sel if series(r) == line)
            ax.plot(*zip(*pts), marker="o", label=line)
        ax.axhline(1.0, color="gray", lw=0.8)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("batch")
        ax.set_title(f"{title}\n{label}", fontsize=9)
        ax.legend()
    axes[0][0].set_ylabel(ylabel)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
