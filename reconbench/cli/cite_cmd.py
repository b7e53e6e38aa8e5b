"""`reconbench cite [ATTACK]`: the BibTeX to cite the project and, with an attack, the paper it implements."""

from __future__ import annotations

import click

from reconbench import citations, plugins
from reconbench.cli.common import main_group


def cite_text(attack: str | None) -> str:
    """The project's BibTeX, then the attack's paper (or a line saying that it implements none)."""
    parts = [f"% reconbench {citations.project_version()}", citations.project_bibtex()]
    if attack is not None:
        paper = plugins.attack(attack).paper
        if paper:
            parts += ["", f"% the paper attack {attack!r} implements", paper]
        else:
            parts += ["", f"% attack {attack!r} implements no paper (a baseline or its own method): "
                          "cite reconbench and, for a third-party plugin, its package"]
    return "\n".join(parts)


@main_group.command("cite")
@click.argument("attack", required=False)
def cite_command(attack: str | None) -> None:
    """Print the BibTeX to cite reconbench and, with ATTACK, the paper that attack implements
    (`reconbench list attacks -v` shows which attacks have one)."""
    click.echo(cite_text(attack))
