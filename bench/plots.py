"""PNG plots of a `python -m bench` run (matplotlib, Agg backend), written next to its JSON.

    python -m bench.plots bench/results/latest.json      # re-plot a results file

`<prefix>-throughput.png`: msgs/s of every matrix send cell and the consume cells, by mode;
`<prefix>-latency.png`: p50 / p99 / p99.9 per send cell (log scale);
`<prefix>-peers.png`: project / peer ratios (throughput, p50, p99) per paired cell, 1.0 marked;
`<prefix>-limits.png`: every matrix figure as % of its limit of the same run (log scale).
"""
from __future__ import annotations

import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def _hbar(ax, labels, series: dict, xlabel: str, log: bool = False) -> None:
    import numpy as np
    y = np.arange(len(labels))
    h = 0.8 / max(1, len(series))
    for i, (name, vals) in enumerate(series.items()):
        ax.barh(y + (i - (len(series) - 1) / 2) * h, vals, height=h, label=name)
    ax.set_yticks(y)
    ax.set_yticklabels(labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel(xlabel)
    if log:
        ax.set_xscale("log")
    ax.grid(axis="x", alpha=0.3)
    if len(series) > 1:
        ax.legend(fontsize=8)


def _fig(n_rows: int):
    return plt.subplots(figsize=(11, max(3.0, 0.35 * n_rows + 1.5)), layout="constrained")


def write_all(figs: dict, out_dir: str, prefix: str) -> list[str]:
    M = figs.get("matrix") or {}
    L = figs["limits"]
    files: list[str] = []
    send = M.get("send") or {}
    title = f"{figs['meta']['started']} ({'quick' if figs['meta']['quick'] else 'full'})"
    if send or M.get("consume"):
        labels = list(send) + [f"{k} consume" for k in M.get("consume", {})]
        vals = [r["msgs_per_s"] for r in send.values()] + [r["msgs_per_s"] for r in M.get("consume", {}).values()]
        fig, ax = _fig(len(labels))
        _hbar(ax, labels, {"msgs/s": vals}, "msgs/s (project's client)")
        for i, (lab, v) in enumerate(zip(labels, vals)):
            mb = (list(send.values()) + list(M.get("consume", {}).values()))[i]["mb_per_s"]
            ax.text(v, i, f" {v:,.0f} ({mb:,.1f} MB/s)", va="center", fontsize=7)
        ax.set_title(f"throughput per mode - {title}")
        files.append(_save(fig, out_dir, prefix, "throughput"))
    if send:
        labels = list(send)
        fig, ax = _fig(len(labels))
        _hbar(ax, labels, {q: [r[f"{q}_us"] for r in send.values()] for q in ("p50", "p99", "p999")},
              "latency per send, us (log)", log=True)
        ax.axvline(L["loopback_rtt_p50_us"], color="k", ls=":", lw=1, label="loopback RTT p50")
        ax.axvline(L["fdatasync_p50_us"], color="r", ls=":", lw=1, label="fdatasync p50")
        ax.legend(fontsize=8)
        ax.set_title(f"latency per mode - {title}")
        files.append(_save(fig, out_dir, prefix, "latency"))
    ratios = M.get("ratios") or {}
    if ratios:
        labels = [k.replace(" / ", "\n/ ") for k in ratios]
        fig, ax = _fig(len(labels) * 2)
        _hbar(ax, labels, {"throughput": [r["throughput_ratio"] for r in ratios.values()],
                           "p50 latency": [r["p50_ratio"] for r in ratios.values()],
                           "p99 latency": [r["p99_ratio"] for r in ratios.values()]},
              "project / peer (log; throughput > 1 and latency < 1 favour the project)", log=True)
        ax.axvline(1.0, color="k", lw=1)
        ax.set_title(f"ratio to each peer - {title}")
        files.append(_save(fig, out_dir, prefix, "peers"))
    if send:
        labels = list(send)
        keys = (("pct_loopback_bw", "MB/s, % of loopback bandwidth"),
                ("pct_seq_durable", "MB/s, % of sequential durable write"),
                ("rtt_pct_of_p50", "loopback RTT p50, % of p50"),
                ("fdatasync_pct_of_p50", "fdatasync p50, % of p50 (SYNC_FLUSH)"))
        series = {lab: [r["limits"].get(k, float("nan")) for r in send.values()] for k, lab in keys}
        fig, ax = _fig(len(labels) * 2)
        _hbar(ax, labels, series, "% of the limit measured in the same run (log; 100 % = at the limit)", log=True)
        ax.axvline(100.0, color="k", lw=1)
        ax.set_title(f"% of each limit - {title}")
        files.append(_save(fig, out_dir, prefix, "limits"))
    return files


def _save(fig, out_dir: str, prefix: str, what: str) -> str:
    path = os.path.join(out_dir, f"{prefix}-{what}.png")
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


if __name__ == "__main__":
    import json
    src = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "results", "latest.json")
    with open(src) as f:
        data = json.load(f)
    for p in write_all(data, os.path.dirname(os.path.abspath(src)),
                       os.path.splitext(os.path.basename(src))[0]):
        print(p)
