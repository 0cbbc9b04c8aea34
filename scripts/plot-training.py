#!/usr/bin/env python3
"""Plots a loom-train --log-csv file: loss (and validation loss) per step, with the learning rate
and the gradient norm below. Usage: scripts/plot-training.py LOG.csv OUT.png [TITLE]
Needs Debian's python3-matplotlib (scripts/setup-deps.sh installs it)."""
import csv
import sys

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    rows = list(csv.DictReader(open(sys.argv[1])))
    if not rows:
        sys.exit(f"{sys.argv[1]}: no steps")
    step = [int(r["step"]) for r in rows]
    val = [(int(r["step"]), float(r["val_loss"])) for r in rows if r["val_loss"]]
    fig, (top, mid, low) = plt.subplots(3, 1, figsize=(7, 6), sharex=True,
                                        gridspec_kw={"height_ratios": [3, 1, 1]})
    top.plot(step, [float(r["loss"]) for r in rows], lw=1, label="training loss (per step)")
    if val:
        top.plot([s for s, _ in val], [v for _, v in val], "o-", ms=4, label="validation loss (per epoch)")
    top.set_ylabel("loss (nats/token)")
    top.legend()
    top.grid(alpha=0.3)
    if len(sys.argv) > 3:
        top.set_title(sys.argv[3])
    mid.plot(step, [float(r["lr"]) for r in rows], color="tab:green", lw=1)
    mid.set_ylabel("learning rate")
    mid.grid(alpha=0.3)
    low.plot(step, [float(r["grad_norm"]) for r in rows], color="tab:red", lw=1)
    low.set_ylabel("grad norm")
    low.set_xlabel("step")
    low.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=80)


if __name__ == "__main__":
    main()
