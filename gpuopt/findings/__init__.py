"""Findings: rules that turn measurements (a profile document) into ranked advice with evidence."""

from gpuopt.findings.model import Finding

__all__ = ["Finding"]
