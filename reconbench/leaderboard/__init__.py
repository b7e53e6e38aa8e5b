"""Leaderboards from a results folder: aggregated tables (``tables.py``), the README and the build (``render.py``),
figures (``figures.py``) and the re-scoring check of published cells (``verify.py``)."""
