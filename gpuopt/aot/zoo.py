"""In-tree model zoo for the scheduler's tests and benchmarks: architectures in code, no weights.

Every factory returns ``(model.eval(), example_inputs)`` with deterministic random weights, so
``gpuopt schedule gpuopt.aot.zoo:inception_v3`` works as is. ``size="full"`` is the published
architecture at its usual input size (batch 1, Nimble's inference setting); ``size="small"``
keeps the same graph structure with few channels and small inputs, for fast CPU tests.

* :func:`inception_v3` - Inception-v3 (Szegedy et al., 2016), the torchvision layout without the
  auxiliary head: branchy "Inception-style blocks".
* :func:`nasnet_a_mobile` - NASNet-A-like network (Zoph et al., 2018): the NASNet-A normal and
  reduction cells (separable convolutions, pooling, identity, two inputs per cell), 4 normal
  cells per stage, 44 filters at 224x224 for "full". Simplified where noted (stem, and a strided
  1x1 convolution instead of the factorized reduction), so it is NASNet-like, not NASNet-A
  mobile itself.
* :func:`resnet_stage` - ResNet-50 stage 3 (6 bottleneck blocks, 1024 channels, 14x14).
* :func:`transformer_block` - one BERT-base encoder layer (d=768, 12 heads, FFN 3072,
  sequence 128) with separate Q/K/V projections.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

Factory = Callable[..., tuple[nn.Module, tuple[torch.Tensor, ...]]]


def _check_size(size: str) -> None:
    if size not in ("small", "full"):
        raise ValueError(f"size must be 'small' or 'full', got {size!r}")


# --------------------------------------------------------------------------- Inception-v3
class BasicConv2d(nn.Module):
    def __init__(self, cin: int, cout: int, **kw: Any) -> None:
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, bias=False, **kw)
        self.bn = nn.BatchNorm2d(cout, eps=0.001)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.bn(self.conv(x)))


class InceptionA(nn.Module):
    def __init__(self, cin: int, pool: int, c: Callable[[int], int]) -> None:
        super().__init__()
        self.b1 = BasicConv2d(cin, c(64), kernel_size=1)
        self.b5_1 = BasicConv2d(cin, c(48), kernel_size=1)
        self.b5_2 = BasicConv2d(c(48), c(64), kernel_size=5, padding=2)
        self.b3_1 = BasicConv2d(cin, c(64), kernel_size=1)
        self.b3_2 = BasicConv2d(c(64), c(96), kernel_size=3, padding=1)
        self.b3_3 = BasicConv2d(c(96), c(96), kernel_size=3, padding=1)
        self.bp = BasicConv2d(cin, pool, kernel_size=1)
        self.out = c(64) + c(64) + c(96) + pool

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b1 = self.b1(x)
        b5 = self.b5_2(self.b5_1(x))
        b3 = self.b3_3(self.b3_2(self.b3_1(x)))
        bp = self.bp(F.avg_pool2d(x, kernel_size=3, stride=1, padding=1))
        return torch.cat([b1, b5, b3, bp], 1)


class InceptionB(nn.Module):
    def __init__(self, cin: int, c: Callable[[int], int]) -> None:
        super().__init__()
        self.b3 = BasicConv2d(cin, c(384), kernel_size=3, stride=2)
        self.bd_1 = BasicConv2d(cin, c(64), kernel_size=1)
        self.bd_2 = BasicConv2d(c(64), c(96), kernel_size=3, padding=1)
        self.bd_3 = BasicConv2d(c(96), c(96), kernel_size=3, stride=2)
        self.out = c(384) + c(96) + cin

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b3 = self.b3(x)
        bd = self.bd_3(self.bd_2(self.bd_1(x)))
        bp = F.max_pool2d(x, kernel_size=3, stride=2)
        return torch.cat([b3, bd, bp], 1)


class InceptionC(nn.Module):
    def __init__(self, cin: int, c7: int, c: Callable[[int], int]) -> None:
        super().__init__()
        self.b1 = BasicConv2d(cin, c(192), kernel_size=1)
        self.b7_1 = BasicConv2d(cin, c7, kernel_size=1)
        self.b7_2 = BasicConv2d(c7, c7, kernel_size=(1, 7), padding=(0, 3))
        self.b7_3 = BasicConv2d(c7, c(192), kernel_size=(7, 1), padding=(3, 0))
        self.bd_1 = BasicConv2d(cin, c7, kernel_size=1)
        self.bd_2 = BasicConv2d(c7, c7, kernel_size=(7, 1), padding=(3, 0))
        self.bd_3 = BasicConv2d(c7, c7, kernel_size=(1, 7), padding=(0, 3))
        self.bd_4 = BasicConv2d(c7, c7, kernel_size=(7, 1), padding=(3, 0))
        self.bd_5 = BasicConv2d(c7, c(192), kernel_size=(1, 7), padding=(0, 3))
        self.bp = BasicConv2d(cin, c(192), kernel_size=1)
        self.out = 4 * c(192)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b1 = self.b1(x)
        b7 = self.b7_3(self.b7_2(self.b7_1(x)))
        bd = self.bd_5(self.bd_4(self.bd_3(self.bd_2(self.bd_1(x)))))
        bp = self.bp(F.avg_pool2d(x, kernel_size=3, stride=1, padding=1))
        return torch.cat([b1, b7, bd, bp], 1)


class InceptionD(nn.Module):
    def __init__(self, cin: int, c: Callable[[int], int]) -> None:
        super().__init__()
        self.b3_1 = BasicConv2d(cin, c(192), kernel_size=1)
        self.b3_2 = BasicConv2d(c(192), c(320), kernel_size=3, stride=2)
        self.b7_1 = BasicConv2d(cin, c(192), kernel_size=1)
        self.b7_2 = BasicConv2d(c(192), c(192), kernel_size=(1, 7), padding=(0, 3))
        self.b7_3 = BasicConv2d(c(192), c(192), kernel_size=(7, 1), padding=(3, 0))
        self.b7_4 = BasicConv2d(c(192), c(192), kernel_size=3, stride=2)
        self.out = c(320) + c(192) + cin

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b3 = self.b3_2(self.b3_1(x))
        b7 = self.b7_4(self.b7_3(self.b7_2(self.b7_1(x))))
        bp = F.max_pool2d(x, kernel_size=3, stride=2)
        return torch.cat([b3, b7, bp], 1)


class InceptionE(nn.Module):
    def __init__(self, cin: int, c: Callable[[int], int]) -> None:
        super().__init__()
        self.b1 = BasicConv2d(cin, c(320), kernel_size=1)
        self.b3_1 = BasicConv2d(cin, c(384), kernel_size=1)
        self.b3_2a = BasicConv2d(c(384), c(384), kernel_size=(1, 3), padding=(0, 1))
        self.b3_2b = BasicConv2d(c(384), c(384), kernel_size=(3, 1), padding=(1, 0))
        self.bd_1 = BasicConv2d(cin, c(448), kernel_size=1)
        self.bd_2 = BasicConv2d(c(448), c(384), kernel_size=3, padding=1)
        self.bd_3a = BasicConv2d(c(384), c(384), kernel_size=(1, 3), padding=(0, 1))
        self.bd_3b = BasicConv2d(c(384), c(384), kernel_size=(3, 1), padding=(1, 0))
        self.bp = BasicConv2d(cin, c(192), kernel_size=1)
        self.out = c(320) + 4 * c(384) + c(192)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b1 = self.b1(x)
        b3 = self.b3_1(x)
        b3 = torch.cat([self.b3_2a(b3), self.b3_2b(b3)], 1)
        bd = self.bd_2(self.bd_1(x))
        bd = torch.cat([self.bd_3a(bd), self.bd_3b(bd)], 1)
        bp = self.bp(F.avg_pool2d(x, kernel_size=3, stride=1, padding=1))
        return torch.cat([b1, b3, bd, bp], 1)


class InceptionV3(nn.Module):
    def __init__(self, width: float = 1.0, num_classes: int = 1000) -> None:
        super().__init__()

        def c(ch: int) -> int:
            return max(4, int(ch * width))

        self.stem = nn.Sequential(
            BasicConv2d(3, c(32), kernel_size=3, stride=2),
            BasicConv2d(c(32), c(32), kernel_size=3),
            BasicConv2d(c(32), c(64), kernel_size=3, padding=1),
            nn.MaxPool2d(3, 2),
            BasicConv2d(c(64), c(80), kernel_size=1),
            BasicConv2d(c(80), c(192), kernel_size=3),
            nn.MaxPool2d(3, 2),
        )
        blocks: list[nn.Module] = []
        cin = c(192)
        for pool in (c(32), c(64), c(64)):
            blk = InceptionA(cin, pool, c)
            blocks.append(blk)
            cin = blk.out
        b = InceptionB(cin, c)
        blocks.append(b)
        cin = b.out
        for c7 in (c(128), c(160), c(160), c(192)):
            blk2 = InceptionC(cin, c7, c)
            blocks.append(blk2)
            cin = blk2.out
        d = InceptionD(cin, c)
        blocks.append(d)
        cin = d.out
        for _ in range(2):
            e = InceptionE(cin, c)
            blocks.append(e)
            cin = e.out
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(cin, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.blocks(self.stem(x))
        x = F.adaptive_avg_pool2d(x, 1).flatten(1)
        logits: torch.Tensor = self.fc(x)
        return logits


def inception_v3(size: str = "full") -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """Inception-v3, batch 1: 299x299 (full) or 1/8 width at 75x75 (small)."""
    _check_size(size)
    torch.manual_seed(0)
    if size == "full":
        return InceptionV3().eval(), (torch.randn(1, 3, 299, 299),)
    return InceptionV3(width=0.125, num_classes=10).eval(), (torch.randn(1, 3, 75, 75),)


# --------------------------------------------------------------------------- NASNet-A-like
class SepConv(nn.Module):
    """NASNet's separable branch: (ReLU, depthwise, pointwise, BN) twice."""

    def __init__(self, cin: int, cout: int, k: int, stride: int = 1) -> None:
        super().__init__()
        p = k // 2
        self.dw1 = nn.Conv2d(cin, cin, k, stride, p, groups=cin, bias=False)
        self.pw1 = nn.Conv2d(cin, cout, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout, eps=0.001)
        self.dw2 = nn.Conv2d(cout, cout, k, 1, p, groups=cout, bias=False)
        self.pw2 = nn.Conv2d(cout, cout, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout, eps=0.001)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.bn1(self.pw1(self.dw1(F.relu(x))))
        out: torch.Tensor = self.bn2(self.pw2(self.dw2(F.relu(x))))
        return out


class ReluConvBn(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int = 1) -> None:
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, 1, stride, bias=False)
        self.bn = nn.BatchNorm2d(cout, eps=0.001)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.bn(self.conv(F.relu(x)))
        return out


class NormalCell(nn.Module):
    """NASNet-A normal cell: five pairwise combinations of h (right) and h_prev (left)."""

    def __init__(self, c_prev: int, c_in: int, f: int, prev_stride: int) -> None:
        super().__init__()
        self.left = ReluConvBn(c_prev, f, prev_stride)  # simplification of factorized reduction
        self.right = ReluConvBn(c_in, f)
        self.c0_l, self.c0_r = SepConv(f, f, 5), SepConv(f, f, 3)
        self.c1_l, self.c1_r = SepConv(f, f, 5), SepConv(f, f, 3)
        self.c4_l = SepConv(f, f, 3)
        self.out = 6 * f

    def forward(self, h: torch.Tensor, h_prev: torch.Tensor) -> torch.Tensor:
        x_left = self.left(h_prev)
        x_right = self.right(h)
        c0 = self.c0_l(x_right) + self.c0_r(x_left)
        c1 = self.c1_l(x_left) + self.c1_r(x_left)
        c2 = F.avg_pool2d(x_right, 3, 1, 1, count_include_pad=False) + x_left
        c3 = F.avg_pool2d(x_left, 3, 1, 1, count_include_pad=False) + F.avg_pool2d(
            x_left, 3, 1, 1, count_include_pad=False
        )
        c4 = self.c4_l(x_right) + x_right
        return torch.cat([x_left, c0, c1, c2, c3, c4], 1)


class ReductionCell(nn.Module):
    """NASNet-A reduction cell: strided separable convolutions and pooling, halving H and W."""

    def __init__(self, c_prev: int, c_in: int, f: int, prev_stride: int) -> None:
        super().__init__()
        self.left = ReluConvBn(c_prev, f, prev_stride)
        self.right = ReluConvBn(c_in, f)
        self.c0_l, self.c0_r = SepConv(f, f, 5, 2), SepConv(f, f, 7, 2)
        self.c1_r = SepConv(f, f, 7, 2)
        self.c2_r = SepConv(f, f, 5, 2)
        self.c4_l = SepConv(f, f, 3)
        self.out = 4 * f

    def forward(self, h: torch.Tensor, h_prev: torch.Tensor) -> torch.Tensor:
        x_left = self.left(h_prev)
        x_right = self.right(h)
        c0 = self.c0_l(x_right) + self.c0_r(x_left)
        c1 = F.max_pool2d(x_right, 3, 2, 1) + self.c1_r(x_left)
        c2 = F.avg_pool2d(x_right, 3, 2, 1, count_include_pad=False) + self.c2_r(x_left)
        c3 = F.avg_pool2d(c0, 3, 1, 1, count_include_pad=False) + c1
        c4 = self.c4_l(c0) + F.max_pool2d(x_right, 3, 2, 1)
        return torch.cat([c1, c2, c3, c4], 1)


class NASNetALike(nn.Module):
    def __init__(
        self, filters: int = 44, cells_per_stage: int = 4, stem: int = 32, num_classes: int = 1000
    ) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, stem, 3, 2, 1, bias=False), nn.BatchNorm2d(stem, eps=0.001)
        )
        cells: list[nn.Module] = []
        # Two stem reduction cells (NASNet-A mobile has them at filters/4 and filters/2).
        c_prev, c_in, prev_stride = stem, stem, 1
        f = max(4, filters // 4)
        plan: list[tuple[str, int]] = [("r", max(4, filters // 4)), ("r", max(4, filters // 2))]
        for stage in range(3):
            f = filters * (2**stage)
            if stage > 0:
                plan.append(("r", f))
            plan.extend(("n", f) for _ in range(cells_per_stage))
        for kind, f in plan:
            cell: NormalCell | ReductionCell
            if kind == "r":
                cell = ReductionCell(c_prev, c_in, f, prev_stride)
            else:
                cell = NormalCell(c_prev, c_in, f, prev_stride)
            cells.append(cell)
            # After a reduction, the next cell's h_prev is at twice the resolution of h.
            prev_stride = 2 if kind == "r" else 1
            c_prev, c_in = c_in, cell.out
        self.cells = nn.ModuleList(cells)
        self.fc = nn.Linear(c_in, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h_prev = h = self.stem(x)
        for cell in self.cells:
            h_prev, h = h, cell(h, h_prev)
        logits: torch.Tensor = self.fc(F.adaptive_avg_pool2d(F.relu(h), 1).flatten(1))
        return logits


def nasnet_a_mobile(size: str = "full") -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """NASNet-A-like (mobile setting: 4 cells per stage, 44 filters, 224x224); small: 1 cell,
    8 filters, 32x32."""
    _check_size(size)
    torch.manual_seed(0)
    if size == "full":
        return NASNetALike().eval(), (torch.randn(1, 3, 224, 224),)
    return NASNetALike(filters=8, cells_per_stage=1, stem=8, num_classes=10).eval(), (
        torch.randn(1, 3, 32, 32),
    )


# --------------------------------------------------------------------------- ResNet stage
class Bottleneck(nn.Module):
    def __init__(self, cin: int, width: int, stride: int = 1) -> None:
        super().__init__()
        cout = width * 4
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, cout, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(cout)
        self.down: nn.Module | None = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = F.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        idt = self.down(x) if self.down is not None else x
        return F.relu(out + idt)


def resnet_stage(size: str = "full") -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """ResNet-50 stage 3 (conv4_x): 6 bottlenecks 512 -> 1024 channels, 28x28 -> 14x14; small:
    2 blocks, 16 wide."""
    _check_size(size)
    torch.manual_seed(0)
    blocks, width, cin, hw = (6, 256, 512, 28) if size == "full" else (2, 4, 8, 8)
    layers = [Bottleneck(cin, width, 2)] + [Bottleneck(width * 4, width) for _ in range(blocks - 1)]
    return nn.Sequential(*layers).eval(), (torch.randn(1, cin, hw, hw),)


# --------------------------------------------------------------------------- Transformer
class TransformerBlock(nn.Module):
    """Post-LN encoder layer (BERT): attention with separate Q/K/V projections, then the MLP."""

    def __init__(self, d: int, heads: int, ffn: int) -> None:
        super().__init__()
        self.heads = heads
        self.q = nn.Linear(d, d)
        self.k = nn.Linear(d, d)
        self.v = nn.Linear(d, d)
        self.o = nn.Linear(d, d)
        self.ln1 = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, ffn)
        self.fc2 = nn.Linear(ffn, d)
        self.ln2 = nn.LayerNorm(d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        h = self.heads

        def split(t: torch.Tensor) -> torch.Tensor:
            return t.view(b, s, h, d // h).transpose(1, 2)

        q, k, v = split(self.q(x)), split(self.k(x)), split(self.v(x))
        att = torch.softmax(q @ k.transpose(-2, -1) / (d // h) ** 0.5, dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, s, d)
        x = self.ln1(x + self.o(y))
        out: torch.Tensor = self.ln2(x + self.fc2(F.gelu(self.fc1(x))))
        return out


def transformer_block(size: str = "full") -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """BERT-base layer at sequence 128, batch 1; small: d=32, 4 heads, sequence 8."""
    _check_size(size)
    torch.manual_seed(0)
    d, heads, ffn, seq = (768, 12, 3072, 128) if size == "full" else (32, 4, 64, 8)
    return TransformerBlock(d, heads, ffn).eval(), (torch.randn(1, seq, d),)


ZOO: dict[str, Factory] = {
    "inception_v3": inception_v3,
    "nasnet_a_mobile": nasnet_a_mobile,
    "resnet_stage": resnet_stage,
    "transformer_block": transformer_block,
}
