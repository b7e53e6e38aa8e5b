"""LPIPS (AlexNet, v0.1) through the ``lpips`` package, an optional extra.

LPIPS needs two sets of weights: the linear calibration layers, which ship inside the ``lpips`` package, and the
ImageNet AlexNet backbone, which torchvision downloads on first use. reconbench never downloads it: it uses the file
when it is already in torch's hub cache (or at an explicit path) and otherwise reports LPIPS *unavailable* with the
reason. A number from an untrained backbone never reaches a result: :class:`LpipsScorer` with
``random_backbone=True`` exists for plumbing tests only, and its outputs are marked as such.
"""

from __future__ import annotations

import importlib.util
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from reconbench.errors import ReconbenchError
from reconbench.provenance import portable_path

#: torchvision's ImageNet AlexNet weights (AlexNet_Weights.IMAGENET1K_V1)
ALEXNET_FILE = "alexnet-owt-7be5be79.pth"
ALEXNET_URL = "https://download.pytorch.org/models/" + ALEXNET_FILE


#: how the reasons below start: the console's short line (:func:`short_reason`) is chosen by them
NO_PACKAGE = "the `lpips` package is not installed"
NO_BACKBONE = "the ImageNet AlexNet backbone weights are not available"
#: where the whole reason is printed for this machine
WHOLE_REASON = "`reconbench doctor`"


class LpipsUnavailable(ReconbenchError):
    """LPIPS cannot be computed here; the message says why and how to make it available."""


def backbone_path(explicit: str | None = None) -> Path:
    """Where the AlexNet backbone weights are looked for: an explicit file, else torch's hub cache."""
    if explicit:
        return Path(explicit).expanduser()
    return Path(torch.hub.get_dir()) / "checkpoints" / ALEXNET_FILE


def check_available(explicit: str | None = None) -> Path:
    """The backbone file, or :class:`LpipsUnavailable` saying what is missing (without importing lpips)."""
    spec = importlib.util.find_spec("lpips")
    if spec is None or spec.origin is None:
        raise LpipsUnavailable(f"{NO_PACKAGE}; pip install 'reconbench[lpips]'")
    lin = Path(spec.origin).parent / "weights" / "v0.1" / "alex.pth"
    if not lin.exists():
        raise LpipsUnavailable(f"the lpips package has no v0.1 AlexNet linear weights at {lin}; reinstall lpips")
    path = backbone_path(explicit)
    if not path.exists():
        raise LpipsUnavailable(
            f"{NO_BACKBONE} ({portable_path(path)} does not exist) and "
            f"reconbench never downloads weights; place {ALEXNET_FILE} (from {ALEXNET_URL}) there, or set lpips.backbone_weights")
    return path


def short_reason(reason: str) -> str:
    """A reason LPIPS is unavailable in under 90 characters, for the console: what is missing and where the fix is
    (the whole reason stays in result.json and is what :data:`WHOLE_REASON` prints)."""
    if reason.startswith(NO_BACKBONE):
        return f"no ImageNet AlexNet weights file; {WHOLE_REASON} says where to put it"
    if reason.startswith(NO_PACKAGE):
        return "lpips is not installed; pip install 'reconbench[lpips]'"
    head = " ".join(reason.split(";")[0].split())
    return f"{head if len(head) <= 50 else head[:47] + '...'}; {WHOLE_REASON} says more"


def availability() -> tuple[bool, str]:
    """Whether LPIPS can be computed here with the default options, and the path of its backbone or the whole
    reason it cannot."""
    try:
        return True, portable_path(check_available())
    except LpipsUnavailable as exc:
        return False, str(exc)


@dataclass
class LpipsScorer:
    """Perceptual distance between image pairs in [0, 1] (lower is more similar).

    Images are repeated to 3 channels when grayscale and bilinearly up-sampled so that the shorter side is at least
    ``min_size`` (AlexNet's pooling needs about 32 pixels; the papers' images are 28-32 pixels).
    """

    backbone_weights: str | None = None
    random_backbone: bool = False
    min_size: int = 64
    seed: int = 0
    batch: int = 64

    def __post_init__(self) -> None:
        path = None if self.random_backbone else check_available(self.backbone_weights)
        import lpips  # slow (imports torchvision): only once the weights are known to be there

        with warnings.catch_warnings(), torch.random.fork_rng(devices=[]):
            warnings.simplefilter("ignore")  # torchvision's "pretrained is deprecated"
            torch.manual_seed(self.seed)
            # pnet_rand: build the backbone without torchvision's download; the ImageNet weights are loaded below
            self.model = lpips.LPIPS(net="alex", version="0.1", pretrained=True, pnet_rand=True, verbose=False)
        if path is not None:
            self._load_backbone(path)
        self.model.eval()

    def _load_backbone(self, path: Path) -> None:
        try:
            state = torch.load(str(path), map_location="cpu", weights_only=True)
        except Exception as exc:  # corrupt or foreign file: torch raises several types
            raise LpipsUnavailable(f"{path} cannot be read as AlexNet weights ({exc}); replace the file") from exc
        own = self.model.net.state_dict()  # keys like "slice2.3.weight": slice, torchvision feature index, param
        new = {}
        for key in own:
            _, idx, param = key.split(".")
            src = f"features.{idx}.{param}"
            if src not in state or tuple(state[src].shape) != tuple(own[key].shape):
                raise LpipsUnavailable(f"{path} is not torchvision's AlexNet ({src} missing or of another shape)")
            new[key] = state[src]
        self.model.net.load_state_dict(new)

    def __call__(self, a: torch.Tensor, b: torch.Tensor) -> np.ndarray:
        """LPIPS distance per pair of images (N, C, H, W) in [0, 1] -> (N,)."""
        out = []
        with torch.no_grad():
            for s in range(0, a.shape[0], self.batch):
                x, y = self._prepare(a[s:s + self.batch]), self._prepare(b[s:s + self.batch])
                out.append(self.model(x, y, normalize=True).reshape(-1).double())
        return torch.cat(out).numpy() if out else np.zeros(0)

    def _prepare(self, x: torch.Tensor) -> torch.Tensor:
        x = x.to(torch.float32)
        if x.shape[1] == 1:
            x = x.repeat(1, 3, 1, 1)
        h, w = x.shape[-2:]
        if min(h, w) < self.min_size:
            scale = self.min_size / min(h, w)
            size = (max(self.min_size, round(h * scale)), max(self.min_size, round(w * scale)))
            x = F.interpolate(x, size=size, mode="bilinear", align_corners=False)
        return x
