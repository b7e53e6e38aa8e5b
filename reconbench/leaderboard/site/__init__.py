"""A static website of the published leaderboards (``reconbench site``): see :mod:`reconbench.leaderboard.site.build`."""

from reconbench.leaderboard.site.build import SiteSummary, build_site

__all__ = ["SiteSummary", "build_site"]
