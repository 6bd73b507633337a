# Plots for `normgen report` (embedded in the normgen binary at build time; run as
# `python3 - DATA.json OUTDIR`). One PNG per layer: GB/s against the grid's cases (ordered by bytes
# moved), one line per implementation, the rooflines of the same run drawn in.
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

data = json.load(open(sys.argv[1]))
out = sys.argv[2]
styles = {
    "normgen": dict(color="#c0392b", marker="o", linewidth=2.2, zorder=5),
    "mlir": dict(color="#8e44ad", marker="D", linewidth=1.6, zorder=4),
    "onednn": dict(color="#2471a3", marker="s"),
    "torch": dict(color="#ee7733", marker="^"),
    "scalar": dict(color="#7f8c8d", marker="v"),
}
roofs = {
    "copy_nt": dict(color="black", linestyle="--", label="copy, non-temporal stores"),
    "copy_plain": dict(color="black", linestyle=":", label="copy, ordinary stores"),
    "read": dict(color="#555555", linestyle="-.", label="read-only sum"),
}
for layer in data["layers"]:
    cases = layer["cases"]
    x = list(range(len(cases)))
    fig, ax = plt.subplots(figsize=(max(6.0, 0.55 * len(cases) + 3), 4.6), dpi=110)
    for name, ys in layer["rooflines"].items():
        ax.plot(x, [v if v is not None else float("nan") for v in ys], **roofs.get(name, {}))
    for impl, ys in layer["series"].items():
        st = styles.get(impl, dict(marker="x"))
        ax.plot(x, [v if v is not None else float("nan") for v in ys], label=impl, **st)
    ax.set_xticks(x)
    ax.set_xticklabels(cases, rotation=40, ha="right", fontsize=8)
    ax.set_ylabel("GB/s (x read once + y written once)")
    ax.set_yscale("log")
    ax.set_title(f"{layer['name']}  ({data['context']})", fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    fig.savefig(f"{out}/{layer['name']}.png")
    plt.close(fig)
