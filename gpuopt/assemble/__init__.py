"""Assembly: typed measurements → one :class:`~gpuopt.model.profile.Profile`.

The measuring packages produce records and know nothing of the document: :mod:`gpuopt.trace`
turns a Kineto trace into the records of :mod:`gpuopt.model.trace`; :mod:`gpuopt.probes` return
what a run measured. The modules here put such
records together into the profile that the rules read and the renderers draw: the contract's
parts (steps, breakdown, transfers, syncs, ``gpu[]``, ``ranks[]``), the ``trace`` details, the
tables every renderer shows. Nothing here measures, prints or writes files.

* :mod:`gpuopt.assemble.trace_profile`: ``gpuopt report TRACE``'s whole profile
  (:func:`~gpuopt.assemble.trace_profile.profile_from_traces`), and the GPU sections of
  ``gpuopt profile``'s profiler window
  (:func:`~gpuopt.assemble.trace_profile.add_trace_to_profile`);
* :mod:`gpuopt.assemble.trace_parts`: one rank's ``gpu[]`` and ``ranks[]`` entries and its
  breakdown, rounded as the document keeps them;
* :mod:`gpuopt.assemble.trace_tables`: the trace's tables, one function per table;
* :mod:`gpuopt.assemble.run_profile`: ``gpuopt profile``'s profile, from what its probes returned
  (a :class:`~gpuopt.assemble.run_record.RunRecord`), with :mod:`gpuopt.assemble.step_stats`;
* :mod:`gpuopt.assemble.rank_merge`: one profile for a multi-process run.

Import the submodules directly: this module stays empty so that importing the package costs
nothing.
"""
