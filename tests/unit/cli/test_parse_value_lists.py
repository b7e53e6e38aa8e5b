"""Command-line values are TOML-typed, and a list of bare words needs no quotes: ``metrics=[ssim, corr]`` is the list
``["ssim", "corr"]`` (a shell user would otherwise quote every word inside single quotes)."""

from __future__ import annotations

import pytest

from reconbench.cli.common import parse_assignments, parse_value


@pytest.mark.parametrize(("text", "value"), [
    ("[ssim,corr]", ["ssim", "corr"]),
    ("[ssim, corr, ]", ["ssim", "corr"]),
    ('[ssim, "corr"]', ["ssim", "corr"]),
    ("[1000, wide]", [1000, "wide"]),
    ("[1000, 1000]", [1000, 1000]),          # TOML as before
    ('["ssim", "corr"]', ["ssim", "corr"]),  # TOML as before
    ("[]", []),
    ("ssim", "ssim"),                        # a bare word stays a string
    ("1e-3", 1e-3),
])
def test_a_value_is_toml_and_a_list_of_bare_words_is_a_list(text, value):
    assert parse_value(text) == value


@pytest.mark.parametrize("text", ["[ssim,,corr]", "[[ssim], corr]", "[ssim", "[,]"])
def test_what_is_no_list_stays_the_text_for_the_option_to_refuse(text):
    assert parse_value(text) == text


def test_protocol_set_takes_an_unquoted_metric_list():
    assert parse_assignments(("metrics=[ssim, corr]",), "--protocol-set") == {"metrics": ["ssim", "corr"]}
