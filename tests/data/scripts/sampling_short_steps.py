"""A character model with steps of a few milliseconds that samples 300 tokens from itself every
5 iterations, from a callback at the end of each batch (the shape of minGPT's chargpt, with a
tiny model): each sampling step is tens of milliseconds above the median, far under a second,
and the 60 of them are three quarters of the loop's time."""

import torch
from torch import nn

VOCAB, CONTEXT, EVERY = 32, 8, 5


class Tiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(VOCAB, 64)
        self.mlp = nn.Sequential(nn.Linear(64 * CONTEXT, 256), nn.ReLU(), nn.Linear(256, 256))
        self.head = nn.Linear(256, VOCAB)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.head(self.mlp(self.emb(idx).flatten(1)))

    @torch.no_grad()
    def generate(self, idx: torch.Tensor, tokens: int) -> torch.Tensor:
        for _ in range(tokens):
            probs = torch.softmax(self(idx[:, -CONTEXT:]), dim=-1)
            idx = torch.cat([idx, torch.multinomial(probs, 1)], dim=1)
        return idx


def on_batch_end(model: Tiny, it: int, x: torch.Tensor) -> None:
    if it % EVERY == 0:
        model.eval()
        model.generate(x[:1], 300)  # slow: sampling every 5 iterations
        model.train()


torch.manual_seed(0)
model = Tiny()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
data = torch.randint(0, VOCAB, (4096,))
windows = data.unfold(0, CONTEXT + 1, 1)
for it in range(300):
    batch = windows[torch.randint(0, len(windows), (32,))]
    x, y = batch[:, :-1], batch[:, -1]
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    on_batch_end(model, it, x)
