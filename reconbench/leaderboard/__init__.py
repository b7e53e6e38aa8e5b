"""Leaderboards from a results folder: aggregated tables (``tables.py``), the README (``readme.py``), the build of a
board (``render.py``), figures (``figures.py``) and the re-scoring check of published cells (``verify.py``); they read
cells and ``results.json`` as the typed records of :mod:`reconbench.records`."""
