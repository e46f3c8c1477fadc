#!/usr/bin/python3
"""One epoch of deltacells.CellDataset over a dataset, printing cells/s.

    PYTHONPATH=python /usr/bin/python3 scripts/demo_epoch.py DATASET.dcdb
        [--batch-size 5000] [--workers 0] [--where SQL] [--obs cell_type] [--prefetch-tiles 2]
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "python"))


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dataset")
    ap.add_argument("--batch-size", type=int, default=5000)
    ap.add_argument("--workers", type=int, default=0)
    ap.add_argument("--where", default=None)
    ap.add_argument("--obs", default="cell_type", help="comma-separated obs columns ('' for none)")
    ap.add_argument("--prefetch-tiles", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)

    import torch
    from torch.utils.data import DataLoader
    import deltacells

    t0 = time.perf_counter()
    ds = deltacells.CellDataset(a.dataset, where=a.where, batch_size=a.batch_size, shuffle=True,
                                seed=a.seed, obs=[c for c in a.obs.split(",") if c] or None,
                                prefetch_tiles=a.prefetch_tiles, output="csr")
    loader = DataLoader(ds, batch_size=None, num_workers=a.workers)
    n_cells = n_batches = nnz = 0
    first = None
    checksum = 0.0
    for b in loader:
        if first is None:
            first = time.perf_counter() - t0
        n_cells += b["X"].shape[0]
        nnz += b["X"].values().numel()
        checksum += float(b["X"].values().sum())   # touch the data, as a model would
        n_batches += 1
    dt = time.perf_counter() - t0
    if n_cells != ds.n_cells:
        print(f"error: the epoch delivered {n_cells} cells, the selection has {ds.n_cells}",
              file=sys.stderr)
        return 1
    print(f"epoch: {n_cells:,} cells ({ds.n_genes:,} genes, {nnz:,} nonzeros, sum {checksum:,.0f}) "
          f"in {n_batches} shuffled batches of <= {a.batch_size:,}, {a.workers} DataLoader workers")
    print(f"time to first batch {first if first is not None else float('nan'):.3f} s; "
          f"{dt:.2f} s total; {n_cells / dt:,.0f} cells/s (torch {torch.__version__})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
