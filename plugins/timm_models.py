"""Target families built from timm (PyTorch Image Models) architectures, always from random initialisation.

``timm`` builds any of timm's registered architectures by name (``model = { arch = "resnet18", kwargs = {...} }``);
``timm_resnet`` and ``timm_vit`` are tiny presets of it (a ResNet-18 layout with one block per stage and narrow
channels; a two-block ViT with 32-dimensional tokens and ReLU in its MLPs) that train in seconds on a CPU.

What the harness relies on (docs/architectures.md says more):

- Weights are never downloaded: ``pretrained`` must stay false, and timm is always called with ``pretrained=False``.
- Every ``nn.ReLU`` module of the timm model is replaced by a module calling the wrapper's swappable activation, so
  the KKT attacks' surrogate ReLU reaches them; other nonlinearities (GELU, softmax attention, normalisation) keep
  their exact gradient.
- These models are not positively homogeneous (biases, normalisation layers, residual sums, attention), so
  ``homogeneity_degree`` is None, and they are not a chain of linear layers, so the KKT engine uses autograd.
- Fused attention kernels are switched off (``fused_attn = False``): the KKT attacks differentiate the parameter
  gradient with respect to the inputs, a second derivative that PyTorch's fused CPU attention does not implement.
  The explicit softmax(QK^T)V path computes the same function.
- timm initialises from torch's global random stream; with a generator, the build draws one seed from it and runs
  under ``torch.random.fork_rng`` so that the init is deterministic and the caller's global stream is untouched.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import torch
from torch import nn

from reconbench import hookimpl
from reconbench.errors import IncompatibleError, ReconbenchError
from reconbench.interfaces import ModelFamily
from reconbench.nets import TargetNet, swap_relus

INSTALL_HINT = "pip install 'reconbench[timm]'"


def _timm() -> Any:
    try:
        import timm
    except ImportError:
        raise ReconbenchError(f"the timm model families need the timm package; install it with {INSTALL_HINT}") from None
    return timm


def architectures(pattern: str | None = None) -> list[str]:
    """timm's registered architecture names, optionally filtered by a wildcard such as ``'resnet*'``."""
    return list(_timm().list_models(pattern or "*"))


class TimmNet(TargetNet):
    """A timm model behind the target-network interface; ``body`` is the timm module."""

    def __init__(self, body: nn.Module) -> None:
        super().__init__()
        self.body = body
        self.swapped = swap_relus(body, self)
        for module in body.modules():  # the KKT attacks differentiate twice; fused attention kernels cannot
            if hasattr(module, "fused_attn"):
                setattr(module, "fused_attn", False)  # noqa: B010 (a plain attribute, not a submodule)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)  # type: ignore[no-any-return]


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"


def _create(timm: Any, arch: str, input_shape: tuple[int, int, int], out_dim: int, kwargs: dict[str, Any]) -> nn.Module:
    c, h, w = input_shape
    base = {"pretrained": False, "num_classes": out_dim, "in_chans": c}
    if "img_size" not in kwargs:  # size-aware architectures (ViT, Mixer, ...) are built for the problem's images
        try:
            return timm.create_model(arch, **base, img_size=(h, w), **kwargs)  # type: ignore[no-any-return]
        except TypeError as exc:
            if "img_size" not in str(exc):
                raise ReconbenchError(f"timm architecture {arch!r} rejects its kwargs {kwargs}: {_first_line(exc)}") from None
    try:
        return timm.create_model(arch, **base, **kwargs)  # type: ignore[no-any-return]
    except (TypeError, ValueError, AssertionError, RuntimeError) as exc:
        raise ReconbenchError(f"timm architecture {arch!r} cannot be built with kwargs {kwargs}: {_first_line(exc)}; "
                              "check its options in timm") from None


@dataclass(frozen=True)
class TimmFamily(ModelFamily):
    """A timm architecture by name (``arch``), with ``kwargs`` passed to ``timm.create_model``."""

    name: str = "timm"
    description: str = ("any timm architecture by name, random init (model = {arch = NAME, kwargs = {...}}); "
                        "`reconbench list models -v` lists the architectures")
    swappable_activation: bool = True  # ReLU modules are swapped; see the module docstring
    arch: str = "resnet18"
    kwargs: dict[str, Any] = field(default_factory=lambda: {"layers": [1, 1, 1, 1], "channels": [8, 16, 32, 64],
                                                            "stem_width": 8})

    def default_spec(self) -> dict[str, Any]:
        return {"arch": self.arch, "kwargs": dict(self.kwargs), "pretrained": False}

    def homogeneity_degree(self, spec: dict[str, Any]) -> int | None:
        return None  # biases, normalisation, residual sums and attention break positive homogeneity

    def architectures(self, pattern: str | None = None) -> list[str]:
        return architectures(pattern)

    def spec(self, spec: dict[str, Any]) -> dict[str, Any]:
        defaults = self.default_spec()
        unknown = sorted(set(spec) - set(defaults))
        if unknown:
            raise ReconbenchError(f"model family {self.name!r} has no option {unknown[0]!r}; its options are: "
                                  f"{', '.join(sorted(defaults))} (architecture options go in `kwargs`)")
        s = {**defaults, **spec}
        if s["pretrained"]:
            raise IncompatibleError(f"model family {self.name!r}: reconbench trains targets from random init and never "
                                    "downloads weights; set pretrained = false")
        if not isinstance(s["kwargs"], dict):
            raise ReconbenchError(f"model family {self.name!r}: kwargs must be a table of timm options, got {s['kwargs']!r}")
        return s

    def architecture(self, spec: dict[str, Any]) -> tuple[ModuleType, str, dict[str, object]]:
        """timm, the checked architecture name and its options (lists as tuples, as timm takes them)."""
        s = self.spec(spec)
        timm = _timm()
        arch = str(s["arch"])
        if not timm.is_model(arch):
            close = difflib.get_close_matches(arch, timm.list_models(), n=3, cutoff=0.6)
            hint = f" Did you mean: {', '.join(close)}?" if close else ""
            raise ReconbenchError(f"timm has no architecture {arch!r}.{hint} See `reconbench list models -v`")
        return timm, arch, {k: tuple(v) if isinstance(v, list) else v for k, v in s["kwargs"].items()}

    def build(self, input_shape: tuple[int, int, int], out_dim: int, spec: dict[str, Any],
              generator: torch.Generator | None = None) -> TargetNet:
        timm, arch, kwargs = self.architecture(spec)
        if generator is None:
            body = _create(timm, arch, input_shape, out_dim, kwargs)
        else:
            seed = int(torch.randint(0, 2**62, (1,), generator=generator))
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(seed)
                body = _create(timm, arch, input_shape, out_dim, kwargs)
        net = TimmNet(body)
        _check_input_size(net, arch, input_shape, out_dim)
        return net


def _check_input_size(net: TargetNet, arch: str, input_shape: tuple[int, int, int], out_dim: int) -> None:
    """One forward pass on zeros (eval mode: batch statistics untouched) so that a size mismatch fails now."""
    was = net.training
    net.eval()
    try:
        with torch.no_grad():
            out = net(torch.zeros(2, *input_shape))
    except (RuntimeError, AssertionError, ValueError) as exc:
        c, h, w = input_shape
        raise IncompatibleError(
            f"timm architecture {arch!r} cannot take {c}x{h}x{w} inputs ({_first_line(exc)}); pick an architecture "
            "that fits the images or set its kwargs (e.g. patch_size, img_size)") from None
    finally:
        net.train(was)
    if tuple(out.shape) != (2, out_dim):
        raise IncompatibleError(f"timm architecture {arch!r} gives outputs of shape {tuple(out.shape)[1:]} on "
                                f"{'x'.join(map(str, input_shape))} inputs, not ({out_dim},); use a classifier architecture")


def freeze_into_buffers(module: nn.Module) -> None:
    """Turn every parameter of ``module`` into a buffer of the same name: saved with the weights (the release holds
    the backbone), never handed to the trainer's optimiser, not counted in p. Hand-written because torch has no
    call that demotes a parameter in place; requires_grad = False would still count it among the parameters."""
    for sub in module.modules():
        for name, param in list(sub._parameters.items()):
            if param is None:
                continue
            del sub._parameters[name]
            sub.register_buffer(name, param.detach().clone())


class FrozenBackboneNet(TargetNet):
    """A frozen timm backbone (pooled features, normalisation in eval mode for good) and a trained linear head."""

    def __init__(self, backbone: nn.Module, out_dim: int) -> None:
        super().__init__()
        self.backbone = backbone
        self.swapped = swap_relus(backbone, self)
        for module in backbone.modules():
            if hasattr(module, "fused_attn"):
                setattr(module, "fused_attn", False)  # noqa: B010 (a plain attribute, not a submodule)
        freeze_into_buffers(backbone)
        self.head = nn.Linear(int(getattr(backbone, "num_features")), out_dim)  # noqa: B009 (timm's attribute)

    def train(self, mode: bool = True) -> FrozenBackboneNet:
        super().train(mode)
        self.backbone.eval()   # frozen: batch statistics are never updated, the features never change
        return self

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.backbone(x))  # type: ignore[no-any-return]


@dataclass(frozen=True)
class TimmFinetuneFamily(TimmFamily):
    """Loo et al.'s fine-tuning example at CPU scale: a seeded random timm backbone, frozen, and a trained head."""

    name: str = "timm_finetune"
    description: str = ("fine-tuning at CPU scale: a timm backbone drawn at random from the seed (nothing "
                        "downloaded), frozen (saved as buffers), and a trained linear head with bias on its pooled "
                        "features (Loo et al.'s fine-tuning example; the default is the timm_resnet layout)")

    def build(self, input_shape: tuple[int, int, int], out_dim: int, spec: dict[str, Any],
              generator: torch.Generator | None = None) -> TargetNet:
        timm, arch, kwargs = self.architecture(spec)
        seed = None if generator is None else int(torch.randint(0, 2**62, (1,), generator=generator))
        with torch.random.fork_rng(devices=[]):
            if seed is not None:
                torch.manual_seed(seed)
            backbone = _create(timm, arch, input_shape, 0, kwargs)   # num_classes = 0: pooled features
            net = FrozenBackboneNet(backbone, out_dim)
        _check_input_size(net, arch, input_shape, out_dim)
        return net


FAMILIES = [
    TimmFamily(),
    TimmFamily(name="timm_resnet",
               description="timm ResNet-18 layout, one basic block per stage, channels 8-16-32-64, BatchNorm",
               arch="resnet18"),
    TimmFamily(name="timm_vit",
               description=("timm ViT: patch 2 (set kwargs.patch_size for larger images), 2 blocks, 32-dim tokens, "
                            "2 heads, ReLU MLPs, LayerNorm"),
               arch="vit_tiny_patch16_224",
               kwargs={"patch_size": 2, "embed_dim": 32, "depth": 2, "num_heads": 2, "act_layer": "relu"}),
    TimmFinetuneFamily(),
]


@hookimpl
def register_models(register):  # type: ignore[no-untyped-def]
    for family in FAMILIES:
        register(family)
