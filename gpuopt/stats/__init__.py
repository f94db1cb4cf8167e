"""The statistics every part shares: Student's t quantiles (:mod:`.t`), numpy-exact order
statistics (:mod:`.quantiles`) and the bootstrap's settings and draws (:mod:`.bootstrap`).
Below everything: it imports nothing from gpuopt."""
