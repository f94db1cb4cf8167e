"""Four scalar reads in one training loop (as pytorch/examples dcgan logs D(x), D(G(z)) and both
losses every iteration), and one in a helper the loop calls: two causes, two findings."""
import torch


def target_bias(t):
    return t.mean().item()  # HELPER-ITEM


torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(16, 4), torch.randn(16, 1)
for step in range(8):  # LOOP
    opt.zero_grad()
    out = model(x)
    loss = torch.nn.functional.mse_loss(out, y)
    loss.backward()
    opt.step()
    d_x = out.mean().item()  # ITEM-1
    d_g = out.std().item()  # ITEM-2
    err = loss.item()  # ITEM-3
    bias = target_bias(y)
    print(f"{step} {d_x:.3f} {d_g:.3f} {err:.3f} {bias:.3f} {out.max().item():.3f}")  # ITEM-4
