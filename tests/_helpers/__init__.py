"""Helpers shared by the tests: generated fixtures, an independent protocol, suite and cell builders, the CLI runner."""
