"""torch.compile, seen through: what Dynamo compiled, where it broke graphs, why it recompiled.

The probe (:mod:`gpuopt.probes.compile`) hooks Dynamo's own records while the script runs and
hands back a :class:`~gpuopt.compile.events.CompileCapture`; everything here is pure: the
capture's records (:mod:`events`), Dynamo's texts read (:mod:`reasons`), one step's profiler
spans counted (:mod:`regions`), and the document's ``compile`` key built from them
(:mod:`summary`). docs/compile.md.
"""
