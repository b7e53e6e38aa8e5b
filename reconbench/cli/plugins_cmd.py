"""`reconbench plugins` and `reconbench list KIND`."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

import click
from tabulate import tabulate

from reconbench import plugins
from reconbench.cli.common import main_group
from reconbench.config import describe_options
from reconbench.errors import ReconbenchError
from reconbench.interfaces import Attack, InitRegime, Metric, SearchStrategy


@main_group.command("plugins")
def plugins_command() -> None:
    """Show loaded plugins: name, distribution, version, and the hooks each implements."""
    host = plugins.host()
    rows = [(i.name, i.distribution or "-", i.version or "-", ", ".join(i.hooks)) for i in host.plugin_infos()]
    click.echo(tabulate(rows, headers=["plugin", "distribution", "version", "hooks"], tablefmt="github"))
    for f in host.failed:
        click.echo(f"\nFAILED to load plugin {f.name} ({f.entry_point}): {f.error}", err=True)


@main_group.command("list")
@click.argument("kind", type=click.Choice(list(plugins.KINDS)))
@click.argument("pattern", required=False)
@click.option("--verbose", "-v", is_flag=True,
              help="Also show each entry's options and defaults, and each attack's paper (BibTeX) and default "
                   "target.")
@click.option("--arch", "arch_pattern", default=None,
              help="models: list the architectures of families that build them by name (e.g. timm) matching a wildcard.")
def list_command(kind: str, pattern: str | None, verbose: bool, arch_pattern: str | None) -> None:
    """List registered names of KIND with one-line descriptions; PATTERN is a wildcard such as '*kkt*'."""
    entries = list(plugins.host().entries(kind, pattern))
    rows: list[tuple[str, ...]] = []
    for e in entries:
        flag = " (oracle)" if isinstance(e.obj, (InitRegime, SearchStrategy)) and e.obj.oracle else ""
        if isinstance(e.obj, Metric):
            flag += " (higher is better)" if e.obj.higher_is_better else " (lower is better)"
        rows.append((e.name + flag, e.plugin, e.description))
    if kind == "attacks":  # what each attack reads besides the final weights (its declared threat model)
        rows = [(name, plugin, _reads(plugins.attack(e.name)), desc)
                for (name, plugin, desc), e in zip(rows, entries, strict=True)]
        headers = ["name", "plugin", "threat model", "description"]
    else:
        headers = ["name", "plugin", "description"]
    click.echo(tabulate(rows, headers=headers, tablefmt="github"))
    _list_architectures(entries, verbose, arch_pattern)
    if verbose:
        for e in entries:
            if isinstance(e.obj, Attack):
                paper = e.obj.paper or "none (a baseline, or a method of its own)"
                click.echo(f"\n{e.name} paper:\n{paper}")
                click.echo(f"\n{e.name} default target (what `reconbench run --attack {e.name}` trains without "
                           f"--model; recipe options given change it): {_recipe_line(e.obj.default_recipe)}")
            cls = e.obj.config_cls
            if isinstance(cls, type) and dataclasses.is_dataclass(cls) and dataclasses.fields(cls):
                click.echo(f"\n{e.name} options:")
                opts = [(n, t, d, h) for n, t, d, h in describe_options(cls)]
                click.echo(tabulate(opts, headers=["option", "type", "default", "help"], tablefmt="github"))


def _recipe_line(recipe: Mapping[str, Any] | None) -> str:
    """An attack's default recipe on one line, TOML-like (its sections as key = value lists)."""
    if not recipe:
        return "none; the defaults `reconbench train -h` states"
    parts = []
    for key, value in recipe.items():
        if isinstance(value, Mapping):
            parts.append(f"[{key}] " + ", ".join(f"{k} = {json.dumps(v)}" for k, v in value.items()))
        else:
            parts.append(f"{key} = {json.dumps(value)}")
    return "; ".join(parts)


def _reads(attack: Attack) -> str:
    """The threat model's short name, plus the recipe facts the attack needs (loss, weight decay, mean image)."""
    facts = sorted(set(attack.needs) - {"task", "labels", "class_balance"})
    threat = getattr(attack.threat, "label", repr(attack.threat))
    return threat + (f" ({', '.join(facts)})" if facts else "")


EXAMPLE_ARCHITECTURES = ("resnet18", "vit_tiny_patch16_224", "mixer_s16_224", "convnext_atto", "efficientnet_b0")


def _list_architectures(entries: list, verbose: bool, pattern: str | None) -> None:
    """Families that build architectures by name (an ``architectures(pattern)`` method) list them."""
    for e in entries:
        lister = getattr(e.obj, "architectures", None)
        if not callable(lister):
            continue
        try:
            names = lister(pattern)
        except ReconbenchError as exc:
            click.echo(f"\n{e.name}: {exc}")
            continue
        if verbose or pattern:
            click.echo(f"\n{e.name} architectures{f' matching {pattern!r}' if pattern else ''} ({len(names)}): "
                       + ", ".join(names))
        else:
            examples = [n for n in EXAMPLE_ARCHITECTURES if n in names] or names[:5]
            click.echo(f"\n{e.name}: {len(names)} architectures, e.g. {', '.join(examples)}, ... "
                       f"(all: `reconbench list models {e.name} -v`; filtered: --arch 'resnet*')")
        break
