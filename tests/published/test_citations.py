"""Citations: CITATION.cff is valid CFF 1.2, every built-in attack that implements a paper carries a parseable BibTeX
entry of it, and `reconbench cite` prints the project's entry and the attack's."""

from __future__ import annotations

import html
import re
from pathlib import Path
from typing import Any

import bibtexparser
import pytest
import tomllib
import yaml
from _helpers.cli import run_cli

from reconbench import citations, plugins
from reconbench.leaderboard.site.build import build_site

ROOT = Path(__file__).resolve().parents[2]

#: the built-in attacks and the first author / year of the paper each implements (None: a baseline)
PAPERS = {"haim_binary_kkt": ("Haim", "2022"), "multiclass_kkt": ("Buzaglo", "2023"),
          "general_loss_wd": ("Buzaglo", "2023"), "runkel_bilevel": ("Runkel", "2024"), "loo_ntk": ("Loo", "2024"),
          "projection_law": ("Iurada", "2026"), "weight_rows": None, "init_only": None, "data_prior": None}


def parse_one(text: str) -> Any:
    """The single entry of a BibTeX string; fails on anything the parser could not read."""
    library = bibtexparser.parse_string(text)
    assert not library.failed_blocks, f"unparseable BibTeX: {library.failed_blocks}"
    assert len(library.entries) == 1, text
    return library.entries[0]


def cff() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "CITATION.cff").read_text())


def test_citation_cff_is_valid_cff_1_2() -> None:
    text = (ROOT / "CITATION.cff").read_text()
    try:
        from cffconvert import Citation
    except ImportError:   # without the converter: the keys CFF 1.2 requires
        data = cff()
        assert data["cff-version"] == "1.2.0"
        assert data["message"] and data["title"] and data["authors"]
    else:
        Citation(text).validate()   # raises on a schema violation


def test_citation_cff_names_the_packaged_version() -> None:
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert str(cff()["version"]) == version


def test_project_bibtex_says_what_citation_cff_says() -> None:
    entry = parse_one(citations.project_bibtex())
    data = cff()
    assert entry.fields_dict["title"].value == data["title"]
    assert entry.fields_dict["author"].value.strip("{}") == data["authors"][0]["name"]
    pytest.importorskip("cffconvert")
    from cffconvert import Citation  # the converter's own BibTeX of the file: same title and author

    converted = parse_one(Citation((ROOT / "CITATION.cff").read_text())._implementation.as_bibtex())
    assert converted.fields_dict["title"].value == entry.fields_dict["title"].value
    assert converted.fields_dict["author"].value == entry.fields_dict["author"].value.strip("{}")


@pytest.mark.parametrize("name", sorted(PAPERS))
def test_each_builtin_attack_declares_its_paper(name: str) -> None:
    paper = plugins.get("attacks", name).paper
    expected = PAPERS[name]
    if expected is None:
        assert paper is None
        return
    assert isinstance(paper, str)
    entry = parse_one(paper)
    first_author, year = expected
    assert entry.entry_type in {"inproceedings", "article", "misc"}
    assert entry.key.startswith(first_author.lower() + year)
    fields = entry.fields_dict
    for required in ("title", "author", "year"):
        assert fields[required].value.strip(), f"{name}: empty {required}"
    assert fields["author"].value.split(",")[0] == first_author
    assert fields["year"].value == year
    if entry.entry_type == "inproceedings":
        assert fields["booktitle"].value.strip()


def test_paper_keys_are_distinct_per_paper() -> None:
    keys: dict[str, str] = {}
    for name, expected in PAPERS.items():
        if expected is not None:
            entry = parse_one(plugins.get("attacks", name).paper)
            assert keys.setdefault(entry.key, entry.fields_dict["title"].value) == entry.fields_dict["title"].value


def test_cite_prints_the_project_and_the_attacks_paper(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(["cite", "multiclass_kkt"], capsys)
    assert code == 0
    library = bibtexparser.parse_string(out)
    assert not library.failed_blocks
    assert [e.key for e in library.entries] == ["reconbench", "buzaglo2023deconstructing"]


def test_cite_without_attack_prints_only_the_project(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(["cite"], capsys)
    assert code == 0
    assert [e.key for e in bibtexparser.parse_string(out).entries] == ["reconbench"]


def test_cite_of_a_baseline_says_it_has_no_paper(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(["cite", "init_only"], capsys)
    assert code == 0
    assert [e.key for e in bibtexparser.parse_string(out).entries] == ["reconbench"]
    assert "implements no paper" in out


def test_cite_of_an_unknown_attack_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(["cite", "no_such_attack"], capsys)
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and "no_such_attack" in err and "reconbench list attacks" in err


def test_list_attacks_verbose_shows_each_paper(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(["list", "attacks", "-v"], capsys)
    assert code == 0
    for name, expected in PAPERS.items():
        assert f"{name} paper:" in out
        if expected is not None:
            assert parse_one(plugins.get("attacks", name).paper).key in out


def test_claims_page_shows_each_attacks_paper(tmp_path: Path) -> None:
    """The generated site's claims page lists each paper once with its BibTeX and the attacks that implement it."""
    build_site(ROOT / "leaderboards", tmp_path / "site", boards=["claims-a", "claims-b"], images=False)
    page = (tmp_path / "site" / "claims.html").read_text()
    shown = [html.unescape(b) for b in re.findall(r'<pre class="bibtex">(.*?)</pre>', page, flags=re.S)]
    papers = {plugins.get("attacks", name).paper for name, expected in PAPERS.items() if expected is not None}
    assert sorted(shown) == sorted(papers)   # each once: the two Buzaglo attacks share one entry
    for bibtex in shown:
        parse_one(bibtex)


def test_conformance_refuses_a_paper_that_is_not_bibtex() -> None:
    """A plugin's paper is one BibTeX entry or None: the conformance suite says so before its smoke run."""
    from dataclasses import dataclass

    from conftest import ToyAttack

    from reconbench.conformance import check_attack

    @dataclass(frozen=True)
    class PlainTextPaper(ToyAttack):
        paper: str | None = "Haim et al. 2022, NeurIPS"

    with pytest.raises(AssertionError, match="paper must be None or one BibTeX entry"):
        check_attack(PlainTextPaper())
