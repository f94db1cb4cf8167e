"""``gpuopt check``: gate a candidate run against a baseline (docs/check.md)."""
