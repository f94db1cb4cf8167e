"""Assembly: typed measurements in, one :class:`gpuopt.model.profile.Profile` out.

``run_profile`` builds the document of a ``gpuopt profile`` run from what its probes returned
(a :class:`~gpuopt.assemble.run_record.RunRecord`); ``trace_profile`` builds it from the trace
analyses of ``gpuopt.trace``; ``rank_merge`` joins the documents of a multi-process run. Nothing
here measures, prints or writes files: the runner and the loaders call it, the rules and the
renderers read what it builds.
"""
