"""The audited model: its architecture (a built-in family, a timm name or an importable ``module:factory``), its
released weights (safetensors, or a state dict read with ``torch.load(weights_only=True)``), and the input
preprocessing folded in so that the network reads images centred on the audit's mean in [0, 1] units, as every
reconbench target does.

An outside network is wrapped as a :class:`~reconbench.nets.TargetNet` whose ``nn.ReLU`` modules call the
wrapper's swappable activation, so the KKT attacks' surrogate ReLU reaches them; layers the attacks cannot
differentiate through are refused before any work (:func:`check_layers`).
"""

from __future__ import annotations

import importlib
import inspect
import sys
import sysconfig
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file
from torch import nn

from reconbench import hookimpl, plugins
from reconbench.errors import IncompatibleError, ModelCardError, ReconbenchError
from reconbench.interfaces import ModelFamily
from reconbench.nets import SwappableReLU, TargetNet, swap_relus
from reconbench.targets.cards import LEGACY_PREFIXES

#: built-in families whose first layer the input factor is folded into (their forward stays a homogeneous chain)
FOLDABLE = ("mlp", "mlp_bias", "affine", "conv")

#: leaf layers an outside network may hold: the attacks differentiate through them twice, and the surrogate ReLU
#: reaches the ReLUs (timm's own layers are accepted as the timm families accept them)
SUPPORTED_LAYERS: tuple[type[nn.Module], ...] = (
    nn.Linear, nn.Conv1d, nn.Conv2d, nn.ReLU, nn.Flatten, nn.Unflatten, nn.Identity, nn.Dropout, nn.Dropout2d,
    nn.BatchNorm1d, nn.BatchNorm2d, nn.LayerNorm, nn.GroupNorm, nn.AvgPool2d, nn.AdaptiveAvgPool2d, nn.MaxPool2d,
    nn.GELU, nn.SiLU, nn.Tanh, nn.Sigmoid, nn.Softplus, nn.LeakyReLU, nn.ELU, nn.Softmax,
)


class OutsideNet(TargetNet):
    """An outside network behind the target interface: ``body`` is the network, its ReLU modules swapped."""

    def __init__(self, body: nn.Module) -> None:
        super().__init__()
        self.body = body
        self.swapped = swap_relus(body, self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)  # type: ignore[no-any-return]


class ScaledInput(TargetNet):
    """``net`` reading ``factor * x`` (per channel): an outside network trained on standardised inputs."""

    def __init__(self, net: TargetNet, factor: torch.Tensor) -> None:
        super().__init__()
        self.net = net
        self.factor: torch.Tensor
        self.register_buffer("factor", factor.reshape(1, -1, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        object.__setattr__(self.net, "activation", self.activation)  # follow a swap made on the wrapper
        return self.net(x * self.factor)  # type: ignore[no-any-return]


@dataclass(frozen=True)
class FactoryFamily(ModelFamily):
    """An importable ``module:factory`` returning an ``nn.Module`` (called with ``input_shape`` and ``out_dim`` when
    it takes them, and with the ``--model-set`` options)."""

    name: str = "factory"
    description: str = "an outside network built by an importable module:factory (reconbench audit)"
    swappable_activation: bool = True

    def default_spec(self) -> dict[str, Any]:
        return {}

    def build(self, input_shape: tuple[int, int, int], out_dim: int, spec: dict[str, Any],
              generator: torch.Generator | None = None) -> TargetNet:
        factory = import_factory(self.name)
        params = inspect.signature(factory).parameters
        extra = {k: v for k, v in (("input_shape", input_shape), ("out_dim", out_dim)) if k in params}
        try:
            body = factory(**extra, **spec)
        except TypeError as exc:
            raise ReconbenchError(f"{self.name} cannot be called with {sorted({**extra, **spec})}: {exc}; pass its "
                                  "options with --model-set KEY=VALUE") from None
        if not isinstance(body, nn.Module):
            raise ReconbenchError(f"{self.name} returned a {type(body).__name__}, not a torch nn.Module")
        return body if isinstance(body, TargetNet) else OutsideNet(body)


def import_factory(ref: str) -> Any:
    module_name, sep, attr = ref.partition(":")
    if not sep or not module_name or not attr:
        raise ReconbenchError(f"--family {ref!r}: write an importable factory as module:function")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ReconbenchError(f"--family {ref}: cannot import {module_name!r} ({exc}); put its folder "
                               "on PYTHONPATH (e.g. PYTHONPATH=. for a module in the current folder)") from None
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise ReconbenchError(f"--family {ref}: module {module_name!r} has no callable {attr!r}")
    return factory


def factory_folder(ref: str) -> Path | None:
    """The folder a ``module:factory`` was imported from (the ``sys.path`` entry holding its top-level package),
    or None when it is installed (site-packages, the standard library) and imports without help in any shell."""
    import_factory(ref)
    module_name = ref.partition(":")[0]
    origin = getattr(sys.modules.get(module_name), "__file__", None)
    if origin is None:
        return None
    folder = Path(origin).resolve().parent
    for _ in range(module_name.count(".") + (Path(origin).stem == "__init__")):
        folder = folder.parent
    installed = {Path(sysconfig.get_paths()[k]).resolve() for k in ("purelib", "platlib", "stdlib", "platstdlib")}
    return None if folder in installed else folder


class _FactoryPlugin:
    def __init__(self, family: FactoryFamily) -> None:
        self.family = family

    @hookimpl
    def register_models(self, register):  # type: ignore[no-untyped-def]
        register(self.family)


@contextmanager
def registered_family(family: str) -> Iterator[str]:
    """The registered family name for ``--family``: a built-in or plugin family as is, any other timm name as the
    ``timm`` family, a ``module:factory`` registered for the block."""
    if ":" not in family:
        yield family
        return
    host = plugins.host()
    name = f"audit-factory {family}"
    host.register(_FactoryPlugin(FactoryFamily(name=family)), name=name)
    try:
        yield family
    finally:
        host.unregister(name)


def family_and_spec(family: str, model_set: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """(registered family, model spec) for ``--family`` and its ``--model-set`` options."""
    if ":" in family or family in plugins.names("models"):
        return family, dict(model_set)
    try:
        import timm
    except ImportError:
        raise ReconbenchError(f"--family {family!r} is no model family ({', '.join(plugins.names('models'))}) and timm "
                              "is not installed to build it by name; pip install 'reconbench[timm]'") from None
    if not timm.is_model(family):
        raise ReconbenchError(f"--family {family!r} is neither a model family ({', '.join(plugins.names('models'))}), "
                              "a timm architecture, nor a module:factory")
    return "timm", {"arch": family, "kwargs": dict(model_set), "pretrained": False}


def read_state(path: str | Path) -> dict[str, torch.Tensor]:
    """The tensors of a safetensors file or of a torch state dict (``weights_only=True``: no code is run)."""
    p = Path(path)
    if not p.is_file():
        raise ModelCardError(f"weights {path}: no such file; pass a .safetensors file or a torch state dict")
    if p.suffix == ".safetensors":
        try:
            return dict(load_file(str(p)))
        except (SafetensorError, OSError, ValueError) as exc:
            raise ModelCardError(f"weights {path} are not a readable safetensors file ({exc})") from None
    try:
        obj = torch.load(str(p), map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises UnpicklingError, RuntimeError, ... for unsafe or corrupt files
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ModelCardError(f"weights {path} cannot be loaded with weights_only=True ({first}); save the state dict "
                             "(torch.save(model.state_dict(), path)) or convert it to safetensors") from None
    for key in ("state_dict", "model", "model_state_dict"):
        if isinstance(obj, dict) and isinstance(obj.get(key), dict):
            obj = obj[key]
    if not isinstance(obj, dict) or not all(isinstance(v, torch.Tensor) for v in obj.values()):
        raise ModelCardError(f"weights {path} hold a {type(obj).__name__}, not a state dict of tensors; save "
                             "model.state_dict()")
    return dict(obj)


def fit_state(model: nn.Module, state: dict[str, torch.Tensor], where: str) -> dict[str, torch.Tensor]:
    """``state`` renamed onto ``model``'s keys (wrapper prefixes stripped, ``body.`` added for a wrapped outside
    network) and checked: names, shapes and dtypes; a one-line error otherwise."""
    clean, named = {}, {}   # named: the key as the file writes it, for messages
    for key, v in state.items():
        k = key
        changed = True
        while changed:
            changed = False
            for pre in LEGACY_PREFIXES:
                if k.startswith(pre):
                    k, changed = k[len(pre):], True
        clean[k], named[k] = v, key
    expected = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    if not set(clean) & set(expected) and {"body." + k for k in clean} & set(expected):
        clean = {"body." + k: v for k, v in clean.items()}
        named = {"body." + k: key for k, key in named.items()}
    missing = sorted(k.removeprefix("body.") for k in set(expected) - set(clean))
    extra = sorted(named[k] for k in set(clean) - set(expected))
    if missing or extra:
        raise ModelCardError(f"{where} do not fit the architecture: missing {missing[:3]}"
                             f"{' ...' if len(missing) > 3 else ''}, unexpected {extra[:3]}{' ...' if len(extra) > 3 else ''}; "
                             "check --family and --model-set")
    for k, v in clean.items():
        if tuple(v.shape) != expected[k]:
            raise ModelCardError(f"{where} do not fit the architecture: {named[k]!r} has shape {tuple(v.shape)} in the "
                                 f"file but {expected[k]} in the model; check --family and --model-set (widths, "
                                 "channels)")
        if v.is_floating_point() and not bool(torch.isfinite(v).all()):
            raise ModelCardError(f"{where}: tensor {named[k]!r} holds NaN or infinite values")
    return clean


def check_layers(model: nn.Module, family: str) -> None:
    """Refuse a leaf layer the attacks cannot work through, naming it and what is supported."""
    if family in FOLDABLE:
        return
    for name, module in model.named_modules():
        if any(True for _ in module.children()) or isinstance(module, (SwappableReLU, TargetNet)):
            continue
        if isinstance(module, SUPPORTED_LAYERS) or type(module).__module__.startswith(("timm.", "reconbench_plugins.")):
            continue
        raise IncompatibleError(
            f"unsupported layer {name.removeprefix('body.')!r} ({type(module).__name__}): the attacks differentiate "
            "the network twice and "
            f"need its layers to be among {', '.join(sorted({t.__name__ for t in SUPPORTED_LAYERS}))}; replace it or "
            "audit a model without it")


def check_second_order(model: TargetNet, input_shape: tuple[int, int, int]) -> None:
    """The KKT attacks differentiate the parameter gradient with respect to the inputs; try it once on 2 inputs."""
    param = next(model.parameters())
    x = torch.randn(2, *input_shape, dtype=param.dtype, device=param.device, requires_grad=True)
    try:
        out = model(x)
        params = [p for p in model.parameters() if p.requires_grad]
        grads = torch.autograd.grad(out.sum(), params, create_graph=True, allow_unused=True)
        total = sum((g ** 2).sum() for g in grads if g is not None)
        if isinstance(total, torch.Tensor) and total.requires_grad:
            torch.autograd.grad(total, x, allow_unused=True)
    except (RuntimeError, NotImplementedError) as exc:
        first = str(exc).strip().splitlines()[0]
        raise IncompatibleError(f"the network cannot be differentiated twice ({first}); the attacks need it: "
                                "replace the layer that lacks a second derivative") from None


def fold_input_factor(model: TargetNet, family: str, factor: np.ndarray) -> TargetNet:
    """The network reading centred [0, 1] images: the per-channel factor scale / std multiplied into the first
    layer's weights (built-in families: the forward stays a homogeneous chain) or applied in front."""
    if np.allclose(factor, 1.0, rtol=0, atol=0):
        return model
    f = torch.as_tensor(factor)
    if family in FOLDABLE:
        first = model.conv if family == "conv" else model.linear_chain()[0]  # type: ignore[index]
        with torch.no_grad():
            w: torch.Tensor = first.weight  # type: ignore[assignment,union-attr]
            if w.ndim == 4:
                w.mul_(f.to(w)[None, :, None, None])
            else:
                per_pixel = w.shape[1] // len(f) if len(f) > 1 else w.shape[1]
                w.mul_(f.to(w).repeat_interleave(per_pixel)[None, :] if len(f) > 1 else f.to(w))
        return model
    return ScaledInput(model, f.to(next(model.parameters()).dtype))
