"""A recommendation-style training step whose helpers index tensors element by element in Python
loops (the vectorize patterns besides per-class masks):

- an embedding lookup row by row through an index tensor (a gather),
- a histogram of the items seen, one ``+= 1`` per item (a scatter-add),
- a per-row rescaling written row by row (row updates),
- the running maximum score over the rows (a maximum).

``gpuopt optimize examples/index_loops.py`` rewrites each loop into one vectorized op, checks
each rewrite on the inputs of its first run, and measures the training before and after.
"""

import argparse

import torch
from torch import nn

N_ITEMS, DIM, BATCH = 1000, 32, 256


def lookup(table, ids):
    out = torch.empty(len(ids), table.shape[1])
    for i in range(len(ids)):
        out[i] = table[ids[i]]
    return out


def count_items(ids, counts):
    for i in range(len(ids)):
        counts[ids[i]] += 1


def rescale(x, scale):
    out = torch.empty_like(x)
    for i in range(len(x)):
        out[i] = x[i] * scale[i]
    return out


def best_scores(scores, best):
    for i in range(len(scores)):
        best = torch.maximum(best, scores[i])
    return best


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=40)
    args = ap.parse_args()
    torch.manual_seed(0)
    table = torch.randn(N_ITEMS, DIM)
    model = nn.Sequential(nn.Linear(DIM, 64), nn.ReLU(), nn.Linear(64, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    counts = torch.zeros(N_ITEMS, dtype=torch.long)
    best = torch.full((1,), float("-inf"))
    for _ in range(args.steps):
        ids = torch.randint(0, N_ITEMS, (BATCH,))
        weights = torch.rand(BATCH, 1) + 0.5
        target = torch.randn(BATCH, 1)
        x = rescale(lookup(table, ids), weights)
        count_items(ids, counts)
        scores = model(x)
        loss = nn.functional.mse_loss(scores, target)
        opt.zero_grad()
        loss.backward()
        opt.step()
        best = best_scores(scores.detach(), best)
    print(f"items seen {int(counts.sum())}, best score {float(best):.3f}, loss {float(loss):.4f}")


if __name__ == "__main__":
    main()
