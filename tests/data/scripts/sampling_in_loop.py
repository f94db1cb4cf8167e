"""A character model that samples tokens from itself inside its training loop every 20
iterations (the shape of minGPT's chargpt: one step in twenty many times the others)."""

import torch
from torch import nn

VOCAB, CONTEXT = 32, 16


class Tiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(VOCAB, 64)
        self.head = nn.Linear(64 * CONTEXT, VOCAB)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.head(self.emb(idx).flatten(1))

    @torch.no_grad()
    def generate(self, idx: torch.Tensor, tokens: int) -> torch.Tensor:
        for _ in range(tokens):
            probs = torch.softmax(self(idx[:, -CONTEXT:]), dim=-1)
            idx = torch.cat([idx, torch.multinomial(probs, 1)], dim=1)
        return idx


torch.manual_seed(0)
model = Tiny()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
data = torch.randint(0, VOCAB, (4096,))
windows = data.unfold(0, CONTEXT + 1, 1)
for it in range(60):
    batch = windows[torch.randint(0, len(windows), (32,))]
    x, y = batch[:, :-1], batch[:, -1]
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    if it % 20 == 0:
        model.eval()
        out = model.generate(x[:1], 3000)  # slow: sampling inside the loop
        model.train()
