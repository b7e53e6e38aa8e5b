"""The attack side: what an attacker is given (candidate labels, restricted knowledge), the engines the built-in
attacks share (``kkt/``, ``bilevel/``) and how a run's outcome is judged (``outcome.py``). Running, evaluating and
persisting an attack is :mod:`reconbench.runs`."""
