"""Benchmark suites: suite files (:mod:`.suite`), their cells (:mod:`.cells`), the runner (:mod:`.runner`),
leaderboards (:mod:`.leaderboard`, :mod:`.figures`) and the re-scoring checks (:mod:`.verify`)."""
