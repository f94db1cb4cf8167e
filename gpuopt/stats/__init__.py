"""The statistics every part shares: Student's t quantiles (:mod:`.t`), numpy-exact order
statistics (:mod:`.quantiles`), the bootstrap's settings and draws (:mod:`.bootstrap`), a
lone outlier by its modified z-score (:mod:`.outliers`) and the binomial's lower tail
(:mod:`.binomial`).
Below everything: it imports nothing from gpuopt."""
