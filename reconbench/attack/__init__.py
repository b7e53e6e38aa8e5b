"""The attack side: what an attacker is given (candidate labels, restricted knowledge), the engines the built-in
attacks share (``kkt/``, ``bilevel/``) and the pipeline of one attack run (``pipeline.py``)."""
