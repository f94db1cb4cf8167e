"""Device memory sizes: ``--memory-for h100``, ``--memory-for a100-40gb``, ``--memory-for 80GiB``.

:data:`DEVICES` is gpuopt's one list of GPU names: ``gpuopt schedule --device-profile`` takes the
same names for its cost models (:data:`gpuopt.aot.costmodel.COST_MODEL_OF`).

The table holds the total memory the driver reports for each card (``nvidia-smi``'s "Total", in
MiB, from NVIDIA's data sheets and common driver output; the H200 as gpuopt measured it on one,
../shared/gpu-h200/profile.json). A size is read with binary units for ``KiB``/``MiB``/``GiB``/
``TiB`` and for the bare ``K``/``M``/``G``/``T`` (the way GPU memory is spoken of), decimal for
``KB``/``MB``/``GB``/``TB``; a plain number is bytes.
"""

from __future__ import annotations

import re

from msgspec import Struct

from gpuopt.errors import GpuoptError

MiB = 1 << 20


class DeviceMemory(Struct, frozen=True):
    """What a prediction is made for: a name and the device's total memory in bytes."""

    name: str
    capacity_bytes: int
    source: str  # "table" (a known card), "size" (given as a size), "device" (the run's GPU)
    # a known card's compute capability (the cuBLAS workspace's size); None: not known
    capability: tuple[int, int] | None = None


# name -> (total bytes as the driver reports them, the card)
DEVICES: dict[str, tuple[int, str]] = {
    "h200": (150_109_880_320, "NVIDIA H200 141GB (as measured by gpuopt on one)"),
    "h100": (81_559 * MiB, "NVIDIA H100 80GB (SXM5 or PCIe)"),
    "h100-80gb": (81_559 * MiB, "NVIDIA H100 80GB (SXM5 or PCIe)"),
    "h100-nvl": (95_830 * MiB, "NVIDIA H100 NVL 94GB"),
    "a100-80gb": (81_920 * MiB, "NVIDIA A100 80GB"),
    "a100-40gb": (40_960 * MiB, "NVIDIA A100 40GB"),
    "a10g": (23_028 * MiB, "NVIDIA A10G 24GB (AWS)"),
    "a10": (24_564 * MiB, "NVIDIA A10 24GB"),
    "l4": (23_034 * MiB, "NVIDIA L4 24GB"),
    "l40s": (46_068 * MiB, "NVIDIA L40S 48GB"),
    "v100-16gb": (16_384 * MiB, "NVIDIA V100 16GB"),
    "v100-32gb": (32_768 * MiB, "NVIDIA V100 32GB"),
    "t4": (15_360 * MiB, "NVIDIA T4 16GB"),
    "rtx4090": (24_564 * MiB, "NVIDIA GeForce RTX 4090 24GB"),
    "rtx3090": (24_576 * MiB, "NVIDIA GeForce RTX 3090 24GB"),
}
# name prefix -> compute capability (NVIDIA's CUDA GPUs table)
CAPABILITIES: dict[str, tuple[int, int]] = {
    "h200": (9, 0),
    "h100": (9, 0),
    "a100": (8, 0),
    "a10": (8, 6),  # a10 and a10g
    "rtx3090": (8, 6),
    "l4": (8, 9),  # l4 and l40s
    "rtx4090": (8, 9),
    "v100": (7, 0),
    "t4": (7, 5),
}


def capability_of(key: str) -> tuple[int, int] | None:
    """The compute capability of a card of the table (its name's longest known prefix)."""
    found = [k for k in CAPABILITIES if key.startswith(k)]
    return CAPABILITIES[max(found, key=len)] if found else None


# names that stand for more than one card
AMBIGUOUS = {
    "a100": ("a100-40gb", "a100-80gb"),
    "v100": ("v100-16gb", "v100-32gb"),
}

_UNITS = {
    "": 1,
    "b": 1,
    "k": 1 << 10,
    "kib": 1 << 10,
    "m": 1 << 20,
    "mib": 1 << 20,
    "g": 1 << 30,
    "gib": 1 << 30,
    "t": 1 << 40,
    "tib": 1 << 40,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")
# No GPU has 1 PiB (the largest, an H200, has 141 GB): a size beyond it is a typo, and a number
# of 309 digits or more is no float at all
MAX_SIZE = 1 << 50


def device_key(name: str) -> str:
    """A device name as the table spells it: lower case, ``-`` for spaces and ``_``."""
    return re.sub(r"[\s_]+", "-", name.strip().lower())


def parse_size(text: str) -> int | None:
    """Bytes of a size such as ``80GiB``, ``40GB``, ``24G``, ``512MiB``; None if it is not one."""
    m = _SIZE.match(text)
    if m is None:
        return None
    unit = _UNITS.get(m.group(2).lower())
    if unit is None:
        return None
    value = float(m.group(1)) * unit  # inf beyond a float: refused as too large
    return int(value) if value < MAX_SIZE else MAX_SIZE


def device_memory(spec: str) -> DeviceMemory:
    """The device ``--memory-for`` names, or a :class:`GpuoptError` (exit 2) saying what is
    accepted."""
    key = device_key(spec)
    if key in DEVICES:
        size, _ = DEVICES[key]
        return DeviceMemory(key, size, "table", capability_of(key))
    if key in AMBIGUOUS:
        raise GpuoptError(
            f"--memory-for {spec}: which one? {' or '.join(AMBIGUOUS[key])} (or a size: 40GiB)"
        )
    given_size = parse_size(spec)
    if given_size is not None:
        size = given_size
        if size < MiB:
            raise GpuoptError(f"--memory-for {spec}: too small for a GPU (a size such as 80GiB)")
        if size >= MAX_SIZE:
            raise GpuoptError(
                f"--memory-for {_short(spec)}: too large for a GPU (1 PiB or more; a size such "
                "as 80GiB)"
            )
        return DeviceMemory(spec.strip(), size, "size")
    known = ", ".join(sorted(DEVICES))
    raise GpuoptError(
        f"--memory-for {_short(spec)}: not a device gpuopt knows or a size; give a size (80GiB, "
        f"40GB, 24G) or one of: {known}"
    )


def _short(text: str) -> str:
    """``text`` as a message names it: at most 40 characters (a 160-digit size is not repeated)."""
    text = text.strip()
    return text if len(text) <= 40 else f"{text[:20]}...{text[-8:]} ({len(text)} characters)"


def known_devices() -> list[tuple[str, int, str]]:
    """``(name, bytes, card)`` of every device of the table (docs, --help)."""
    return [(k, size, card) for k, (size, card) in DEVICES.items()]
