"""The reward curve of a run as a PNG (matplotlib, no display needed)."""

from __future__ import annotations

from typing import Any, Dict, List, Optional


def plot_rewards(history: List[Dict[str, Any]], path: str, title: str = "mean reward per step") -> Optional[str]:
    if not history:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [h["step"] for h in history]
    scores = [h["score"] for h in history]
    fig, ax = plt.subplots(figsize=(7, 4), dpi=100)
    ax.plot(steps, scores, lw=1, alpha=0.5, label="train reward")
    k = max(1, len(scores) // 20)
    if k > 1:
        smooth = [sum(scores[max(0, i - k + 1):i + 1]) / len(scores[max(0, i - k + 1):i + 1]) for i in range(len(scores))]
        ax.plot(steps, smooth, lw=2, label=f"moving mean ({k} steps)")
    val = [(h["step"], h["val"]) for h in history if "val" in h]
    if val:
        ax.plot([s for s, _ in val], [v for _, v in val], "o-", label="validation (greedy)")
    ax.set_xlabel("step")
    ax.set_ylabel("reward")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.set_title(title)
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
