"""DataLoader workers started with a given method; checks __main__, argv, path and __file__."""
import os
import sys

import torch
from torch.utils.data import DataLoader, Dataset


class Squares(Dataset):
    def __len__(self):
        return 24

    def __getitem__(self, i):
        return torch.tensor([float(i * i)])


if __name__ == "__main__":
    method = sys.argv[1]
    assert sys.argv[0].endswith("spawn_workers.py"), sys.argv
    assert os.path.isabs(__file__) and __file__.endswith("spawn_workers.py")
    assert sys.path[0] == os.path.dirname(os.path.abspath(__file__)), sys.path[0]
    model = torch.nn.Linear(1, 1)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    loader = DataLoader(Squares(), batch_size=4, num_workers=2, multiprocessing_context=method)
    seen = 0
    for x in loader:
        opt.zero_grad()
        model(x).sum().backward()
        opt.step()
        seen += x.shape[0]
    print(f"seen={seen} method={method}")
    sys.exit(int(sys.argv[2]) if len(sys.argv) > 2 else 0)
