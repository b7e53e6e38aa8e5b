"""The papers' claims as data (``benchmarks/claims.toml``), measured from the claims suites' cells and judged by
tests with stated error rates; ``python -m reconbench.claims`` writes docs/claims.md (``--check``: is it current?).

Modules: :mod:`~reconbench.claims.records` (the data file), :mod:`~reconbench.claims.measure` (reading cells),
:mod:`~reconbench.claims.stats` (the tests), :mod:`~reconbench.claims.verdicts` (the rules),
:mod:`~reconbench.claims.page` (the page and the command line).
"""
