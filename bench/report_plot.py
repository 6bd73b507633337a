# Plots for `normgen report` (embedded in the normgen binary at build time; run as
# `python3 - DATA.json OUTDIR`). One PNG per layer: GB/s against the grid's cases (ordered by bytes
# moved), the tuned kernel beside the default schedule, the MLIR kernel, Halide's autoschedulers and
# the vendors, with the layer's limit of the same run (its p20-p80 spread shaded) and the copies.
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

data = json.load(open(sys.argv[1]))
out = sys.argv[2]
styles = {
    "normgen": dict(color="#c0392b", marker="o", linewidth=2.4, zorder=6, label="tuned"),
    "default": dict(color="#e6994a", marker="o", linewidth=1.4, linestyle="--", zorder=5, label="default schedule"),
    "mlir": dict(color="#8e44ad", marker="D", linewidth=1.4, zorder=4, label="MLIR"),
    "adams2019": dict(color="#16a085", marker="x", linewidth=1.0, label="Adams2019"),
    "li2018": dict(color="#27ae60", marker="+", linewidth=1.0, label="Li2018"),
    "mullapudi2016": dict(color="#2ecc71", marker="1", linewidth=1.0, label="Mullapudi2016"),
    "onednn": dict(color="#2471a3", marker="s", label="oneDNN"),
    "torch": dict(color="#ee7733", marker="^", label="PyTorch"),
    "scalar": dict(color="#7f8c8d", marker="v", label="scalar"),
}
roofs = {
    "limit": dict(color="black", linestyle="-", linewidth=1.2, label="layer's limit"),
    "copy_nt": dict(color="black", linestyle="--", linewidth=0.8, label="copy, non-temporal stores"),
    "copy_plain": dict(color="black", linestyle=":", linewidth=0.8, label="copy, ordinary stores"),
    "read": dict(color="#555555", linestyle="-.", label="read-only sum"),
}


def nan(ys):
    return [v if v is not None else float("nan") for v in ys]


for layer in data["layers"]:
    cases = layer["cases"]
    x = list(range(len(cases)))
    fig, ax = plt.subplots(figsize=(max(6.0, 0.55 * len(cases) + 3), 4.6), dpi=110)
    r = layer["rooflines"]
    if "limit_p20" in r and "limit_p80" in r:
        ax.fill_between(x, nan(r["limit_p20"]), nan(r["limit_p80"]), color="black", alpha=0.12, linewidth=0)
    for name, ys in r.items():
        if name in roofs:
            ax.plot(x, nan(ys), **roofs[name])
    for impl, ys in layer["series"].items():
        st = dict(styles.get(impl, dict(marker="x", label=impl)))
        ax.plot(x, nan(ys), **st)
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
