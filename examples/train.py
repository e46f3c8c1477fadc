#!/usr/bin/python3
"""Train a small MLP that classifies cell_type from log1p-normalised counts, on the real
PBMC files, fed by deltacells.CellDataset.

    PYTHONPATH=python /usr/bin/python3 examples/train.py [--data ../shared/data/real]
        [--epochs 15] [--batch-size 256] [--workers 0]

For every h5ad in --data whose obs has cell_type (the others are skipped): convert it with
build/deltacells (cached in build/examples/), hold out 20% of the labelled cells
(deltacells.train_val_split, deterministic in --seed), train on the rest, and report
  - accuracy on the held-out cells,
  - the data-stall fraction: time the loop waits for the next batch / total loop time,
  - the compute ceiling: the same loop over the same batches preloaded in RAM,
    and the ratio of the two epoch times.
Features, computed by the loader (transform=, in its prefetch thread or workers, on the
sparse batch): each cell's counts / its total over all genes * 10,000, log1p
(transforms.NormalizeLog1p), of the 2,000 genes with the most counts in the dataset
(transforms.TopGenes); an MLP 2000-256-128-classes on the densified batch.
"""
import argparse
import os
import subprocess
import sys
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir))
sys.path.insert(0, os.path.join(ROOT, "python"))


def has_cell_type(h5ad):
    import h5py
    with h5py.File(h5ad, "r") as f:
        return "obs" in f and "cell_type" in f["obs"]


def convert(h5ad, out_dir):
    out = os.path.join(out_dir, os.path.basename(h5ad).rsplit(".", 1)[0] + ".dcdb")
    if not os.path.exists(out) or os.path.getmtime(out) < os.path.getmtime(h5ad):
        conv = os.path.join(ROOT, "build", "deltacells")
        if not os.path.exists(conv):
            sys.exit(f"error: {conv} is not built; run make")
        subprocess.run([conv, "convert", h5ad, "-o", out, "--force"], check=True,
                       stdout=subprocess.DEVNULL)
    return out


def make_model(n_in, n_classes, seed):
    import torch
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(n_in, 256), torch.nn.ReLU(), torch.nn.Dropout(0.2),
                               torch.nn.Linear(256, 128), torch.nn.ReLU(),
                               torch.nn.Linear(128, n_classes))


def run_file(path, a):
    import numpy as np
    import torch
    from torch.utils.data import DataLoader
    import deltacells

    from deltacells import transforms as T

    name = os.path.basename(path)
    labelled = "cell_type IS NOT NULL"
    split = deltacells.train_val_split(path, val_fraction=0.2, where=labelled, seed=a.seed)
    # one TopGenes for both datasets: the same genes (chosen from the whole dataset's counts)
    feats = T.Compose([T.NormalizeLog1p(target_sum=1e4), T.TopGenes(a.top_genes)])
    train_ds = deltacells.CellDataset(path, cells=split.train, obs=["cell_type"],
                                      batch_size=a.batch_size, shuffle=True, seed=a.seed,
                                      output="csr", transform=feats)
    test_ds = deltacells.CellDataset(path, cells=split.val, obs=["cell_type"], batch_size=2048,
                                     shuffle=False, output="csr", transform=feats)
    classes = train_ds.categories["cell_type"]          # the label encoder
    n_top = train_ds.n_genes                             # after TopGenes
    model = make_model(n_top, len(classes), a.seed)
    opt = torch.optim.Adam(model.parameters(), lr=a.lr, weight_decay=1e-5)
    lossf = torch.nn.CrossEntropyLoss()

    def step(batch):
        X = batch["X"].to_dense()
        y = batch["cell_type"]
        opt.zero_grad()
        loss = lossf(model(X), y)
        loss.backward()
        opt.step()
        return float(loss)

    loader = DataLoader(train_ds, batch_size=None, num_workers=a.workers)
    wait = comp = 0.0
    t_loader0 = time.perf_counter()
    for epoch in range(a.epochs):
        train_ds.set_epoch(epoch)
        model.train()
        t = time.perf_counter()
        for batch in loader:
            t1 = time.perf_counter()
            wait += t1 - t
            loss = step(batch)
            t = time.perf_counter()
            comp += t - t1
    loader_time = time.perf_counter() - t_loader0

    # the compute ceiling: the same loop over the same batches, preloaded in RAM
    preloaded = []
    for epoch in range(a.epochs):
        train_ds.set_epoch(epoch)
        preloaded.append([b for b in DataLoader(train_ds, batch_size=None)])
    saved = model
    model = make_model(n_top, len(classes), a.seed)
    opt = torch.optim.Adam(model.parameters(), lr=a.lr, weight_decay=1e-5)
    t0 = time.perf_counter()
    for epoch_batches in preloaded:
        model.train()
        for batch in epoch_batches:
            step(batch)
    ram_time = time.perf_counter() - t0
    del preloaded
    model = saved

    model.train(False)
    correct = total = 0
    with torch.no_grad():
        for batch in test_ds:
            pred = model(batch["X"].to_dense()).argmax(1)
            correct += int((pred == batch["cell_type"]).sum())
            total += len(pred)
    n_train = train_ds.n_cells
    counts = np.bincount(
        np.concatenate([b["cell_type"].numpy() for b in test_ds]), minlength=len(classes))
    print(f"{name}: {train_ds.n_cells + test_ds.n_cells:,} cells, {n_top:,} of the genes, "
          f"{len(classes)} cell types; trained on {n_train:,} cells for {a.epochs} epochs "
          f"(loss {loss:.3f})")
    print(f"  held-out accuracy {correct / total:.3f} on {total:,} cells "
          f"(majority class {counts.max() / total:.3f})")
    print(f"  data-stall fraction {wait / (wait + comp):.3f} "
          f"(waiting {wait:.2f} s, computing {comp:.2f} s)")
    print(f"  epochs fed by deltacells {loader_time:.2f} s; preloaded in RAM {ram_time:.2f} s; "
          f"ratio {loader_time / ram_time:.2f}x the compute ceiling")
    return correct / total


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=os.path.join(ROOT, os.pardir, "shared", "data", "real"))
    ap.add_argument("--out", default=os.path.join(ROOT, "build", "examples"))
    ap.add_argument("--epochs", type=int, default=15)
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--workers", type=int, default=0)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--top-genes", type=int, default=2000,
                    help="model inputs: the genes with the most counts (default 2000)")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    if not os.path.isdir(a.data):
        sys.exit(f"error: no data folder {a.data}")
    os.makedirs(a.out, exist_ok=True)
    files = sorted(f for f in os.listdir(a.data) if f.endswith(".h5ad"))
    done = 0
    for f in files:
        p = os.path.join(a.data, f)
        if not has_cell_type(p):
            print(f"{f}: no cell_type in obs, skipped")
            continue
        run_file(convert(p, a.out), a)
        done += 1
    if not done:
        sys.exit("error: no file with cell_type")


if __name__ == "__main__":
    main(sys.argv[1:])
