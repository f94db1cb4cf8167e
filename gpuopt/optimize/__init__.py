"""``gpuopt optimize``: plan fixes from a profile's findings, apply them (at run time or as source
rewrites), run the same steps again, verify the training is unchanged, and measure each fix.

One way through (docs/optimize.md): the baseline profile → :mod:`~gpuopt.fixes.plan` (which
fixes the findings call for, each with its run-time and source forms) → the source forms as libcst
codemods (:mod:`~gpuopt.source`) on a private copy of the script's files → the runs
(:mod:`~gpuopt.optimize.run.runs`) → verification and gains → ``optimize.json``.
"""
