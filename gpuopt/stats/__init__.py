"""The statistics every part shares: Student's t quantiles (:mod:`.t`), numpy-exact order
statistics (:mod:`.quantiles`), the bootstrap's settings and draws (:mod:`.bootstrap`) and a
lone outlier by its modified z-score (:mod:`.outliers`).
Below everything: it imports nothing from gpuopt."""
