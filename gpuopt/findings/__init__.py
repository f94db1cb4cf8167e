"""Findings: rules that read a typed Profile and return ranked advice with its evidence.

Each rule module in :mod:`gpuopt.findings.rules` registers its rules with
:func:`gpuopt.findings.engine.rule`, naming the finding id it produces and the Profile fields it
reads; :func:`gpuopt.findings.engine.evaluate` runs them all.
"""
