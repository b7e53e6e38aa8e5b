"""A run with every name resolved and every option validated once, at the edge that starts it (``reconbench run``
or a bench cell), and handed down from there: the stages below read its plugins and typed configs instead of looking
names up and rebuilding configs again. :class:`RunSpec` stays the hashed, recorded form."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import torch

from reconbench import plugins
from reconbench.attack.search import resolve_search
from reconbench.config import build_config, check_option
from reconbench.errors import ReconbenchError
from reconbench.evaluation.protocol import ResolvedProtocol, resolve_protocol
from reconbench.interfaces import Attack, InitRegime, SearchStrategy
from reconbench.runs.spec import RunSpec
from reconbench.targets.recipe import DTYPES

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

#: an options dataclass (an init regime's), and an attack's options
D = TypeVar("D", bound="DataclassInstance")
A = TypeVar("A")


@dataclass(frozen=True)
class OptionNames:
    """How messages name each group of options: ``--set lr`` on the command line, ``attack NAME.lr`` elsewhere
    (the default: a suite's cell, a script)."""

    attack: str | None = None     # None: "attack NAME"
    init: str | None = None       # None: "init NAME"


#: the command line's names of the option groups (``reconbench run``)
CLI_NAMES = OptionNames(attack="--set", init="--init-set")


@dataclass(frozen=True)
class ResolvedRun:
    """What a :class:`RunSpec` names, resolved: the attack and the typed config of the options the user fixed, the
    init regime and its typed config, the search strategy and its config, the evaluation protocol, dtype and device."""

    spec: RunSpec
    attack: Attack[Any]
    #: the attack's config with the user's options (``--set``, a suite's ``config``) over its defaults
    attack_config: Any
    init: InitRegime[Any]
    #: the init regime's config with the user's options (``--init-set``, a suite's init ``config``)
    init_config: Any
    search: SearchStrategy[Any]
    search_config: Any
    protocol: ResolvedProtocol
    dtype: torch.dtype
    device: torch.device
    names: OptionNames = OptionNames()

    @property
    def fixed(self) -> dict[str, Any]:
        """The attack options the user fixed, as validated (an integer given for a float option is a float here)."""
        return {k: getattr(self.attack_config, k) for k in self.spec.attack_config}

    def run_config(self, proposed: dict[str, Any]) -> Any:
        """The attack config of one search run: the strategy's ``proposed`` values (each checked as an option is)
        under the options the user fixed, which were validated once when the run was resolved and are not rebuilt."""
        searched = {k: v for k, v in proposed.items() if k not in self.spec.attack_config}
        return with_options(self.attack.config_cls, self.attack_config, searched, f"attack {self.attack.name}")

    def init_config_for(self, attack_config: object) -> tuple[object, dict[str, Any]]:
        """The init config of one run (:func:`init_config_for`) from the init config resolved once."""
        return init_config_for(self.init, self.init_config, self.spec.init_config, self.attack, attack_config,
                               self.names.init)

    @property
    def init_is_oracle(self) -> bool:
        return bool(self.init.is_oracle(self.init_config))


def with_options(cls: type[D], config: D, values: dict[str, Any], where: str) -> D:
    """A copy of ``config`` (a config dataclass of ``cls``) with ``values`` set, each checked (name, type, finite,
    range) as :func:`reconbench.config.build_config` checks it; the fields already in ``config`` are not checked
    again."""
    unknown = sorted(set(values) - {f.name for f in dataclasses.fields(cls)})
    if unknown:
        build_config(cls, {unknown[0]: values[unknown[0]]}, where)  # the one-line refusal, with close matches
    label = (lambda k: f"{where} {k}") if where.startswith("--") else (lambda k: f"{where}.{k}")
    return dataclasses.replace(config, **{k: check_option(cls, k, v, label(k)) for k, v in values.items()})


def init_config_for(init: InitRegime[D], init_config: D, user_options: dict[str, Any], attack: Attack[A],
                    attack_config: A, where: str | None = None) -> tuple[D, dict[str, Any]]:
    """The init config of one run: ``init_config`` (the user's options, ``user_options``, over the regime's defaults)
    plus what the run's attack config hands to the init regime (``Attack.init_overrides``: the KKT attacks search the
    papers' init scale s_x and pass it as the gaussian regime's ``scale``). Options the user set win; overrides
    naming options the regime does not have are ignored. Returns the config and the overrides applied. This is the
    one place an init config gets an attack's overrides."""
    fields = {f.name for f in dataclasses.fields(init.config_cls)}
    overrides = {k: v for k, v in dict(attack.init_overrides(attack_config, init.name)).items()
                 if k in fields and k not in user_options}
    return with_options(init.config_cls, init_config, overrides, where or f"init {init.name}"), overrides


def resolve_run(spec: RunSpec, family: str, names: OptionNames = OptionNames()) -> ResolvedRun:
    """Resolve ``spec`` against a target of model ``family``: every plugin name, option, the protocol, dtype and
    device are checked here, before any work, and a bad one is refused with one line naming it and the fix."""
    attack = plugins.attack(spec.attack)
    init = plugins.init(spec.init)
    attack_config = build_config(attack.config_cls, spec.attack_config, names.attack or f"attack {attack.name}")
    init_config = build_config(init.config_cls, spec.init_config, names.init or f"init {init.name}")
    search, search_config = resolve_search(spec.search, spec.search_config)
    protocol = resolve_protocol(spec.protocol, family)
    if spec.dtype not in DTYPES:
        raise ReconbenchError(f"unknown dtype {spec.dtype!r}; choose one of {', '.join(DTYPES)}")
    try:
        device = torch.device(spec.device)
    except RuntimeError as exc:
        raise ReconbenchError(f"unknown device {spec.device!r} ({exc}); pass e.g. cpu or cuda") from None
    return ResolvedRun(spec=spec, attack=attack, attack_config=attack_config, init=init, init_config=init_config,
                       search=search, search_config=search_config, protocol=protocol, dtype=DTYPES[spec.dtype],
                       device=device, names=names)
