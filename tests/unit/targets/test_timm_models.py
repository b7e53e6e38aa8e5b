"""timm target families: built by name from random init, never pretrained, trained by the harness's trainer and
attacked through the KKT autograd engine."""

from __future__ import annotations

import pytest
import torch

from reconbench import conformance, plugins
from reconbench.attack.kkt.stationarity import make_engine
from reconbench.config import build_config
from reconbench.data import ProblemSpec
from reconbench.errors import IncompatibleError, ReconbenchError
from reconbench.runs import RunSpec, prepare
from reconbench.targets.cache import train_target
from reconbench.targets.recipe import TargetRecipe, TrainSpec

timm = pytest.importorskip("timm")

SHAPE = (1, 8, 8)


def family(name: str = "timm"):
    return plugins.get("models", name)


def test_timm_families_are_registered_and_listed(capsys):
    from reconbench.cli import main

    names = plugins.names("models")
    assert {"timm", "timm_resnet", "timm_vit"} <= set(names)
    assert main(["list", "models"]) in (0, None)
    out = capsys.readouterr().out
    assert "timm_resnet" in out and f"{len(timm.list_models())} architectures" in out
    assert main(["list", "models", "--arch", "resnet1*"]) in (0, None)
    out = capsys.readouterr().out
    assert "resnet18" in out and "vit_tiny_patch16_224" not in out


@pytest.mark.parametrize("spec", [{"pretrained": True}, {"arch": "vit_tiny_patch16_224", "kwargs": {}, "pretrained": True}])
def test_pretrained_weights_are_refused(spec):
    with pytest.raises(IncompatibleError, match="never downloads weights; set pretrained = false"):
        family().build(SHAPE, 2, spec)


def test_unknown_architecture_and_bad_options_are_one_line_errors():
    with pytest.raises(ReconbenchError, match="no architecture 'resnet181'.*Did you mean"):
        family().build(SHAPE, 2, {"arch": "resnet181"})
    with pytest.raises(ReconbenchError, match="no option 'depth'.*kwargs"):
        family().build(SHAPE, 2, {"depth": 3})


def test_an_architecture_that_cannot_take_the_input_size_is_refused():
    # a 16-pixel patch does not fit an 8x8 image
    spec = {"arch": "vit_tiny_patch16_224", "kwargs": {"embed_dim": 16, "depth": 1, "num_heads": 1}}
    with pytest.raises(IncompatibleError, match="cannot take 1x8x8 inputs"):
        family().build(SHAPE, 2, spec)


@pytest.mark.parametrize("name", ["timm_resnet", "timm_vit"])
def test_relus_are_swapped_and_the_forward_is_timms(name):
    """With ReLU as the activation the wrapped model computes exactly what timm's own model computes."""
    fam = family(name)
    s = fam.spec({})
    net = fam.build(SHAPE, 3, {}, generator=torch.Generator().manual_seed(0)).double().eval()
    assert net.swapped > 0
    reference = timm.create_model(s["arch"], pretrained=False, num_classes=3, in_chans=1,
                                  **({"img_size": (8, 8)} if name == "timm_vit" else {}),
                                  **{k: tuple(v) if isinstance(v, list) else v for k, v in s["kwargs"].items()})
    reference.load_state_dict(net.body.state_dict())
    reference = reference.double().eval()
    x = torch.randn(5, *SHAPE, dtype=torch.float64)
    assert torch.allclose(net(x), reference(x), atol=1e-12)
    with net.use_activation(lambda z: z):  # every ReLU now linear: the output must change
        assert not torch.allclose(net(x), reference(x), atol=1e-6)
    assert fam.homogeneity_degree({}) is None


def test_init_is_deterministic_and_leaves_the_global_stream_alone():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    a = family("timm_vit").build(SHAPE, 2, {}, generator=torch.Generator().manual_seed(4))
    after = torch.rand(3)
    b = family("timm_vit").build(SHAPE, 2, {}, generator=torch.Generator().manual_seed(4))
    c = family("timm_vit").build(SHAPE, 2, {}, generator=torch.Generator().manual_seed(5))
    assert torch.equal(after, expected)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters(), strict=True))
    assert not all(torch.equal(p, q) for p, q in zip(a.parameters(), c.parameters(), strict=True))


@pytest.fixture(scope="module")
def resnet_card(tmp_path_factory):
    recipe = TargetRecipe(problem=ProblemSpec(dataset="digits", task="binary", n_per_class=3, n_test_per_class=5),
                          family="timm_resnet", train=TrainSpec(lr=0.05, steps=60))
    return train_target(recipe, tmp_path_factory.mktemp("timm-resnet"), quiet=True)


def test_trains_with_the_harness_and_the_card_reloads_it(resnet_card):
    m = resnet_card.data["metrics"]
    assert m["steps_run"] == 60 and m["final_loss"] < 0.69  # below the loss of a constant 1/2 prediction
    assert resnet_card.data["homogeneity_degree"] is None
    model = resnet_card.load_model()
    assert not model.training  # released models run in eval mode (BatchNorm uses its running statistics)
    problem = resnet_card.problem()
    x = problem.x_train(torch.float64)
    with torch.no_grad():
        assert torch.equal(model(x), resnet_card.load_model()(x))  # eval mode: no batch statistics, no drift
    bn = [mod for mod in model.modules() if isinstance(mod, torch.nn.BatchNorm2d)]
    assert bn and not torch.equal(bn[0].running_mean, torch.zeros_like(bn[0].running_mean))  # trained stats saved


@pytest.fixture(scope="module")
def vit_card(tmp_path_factory):
    recipe = TargetRecipe(problem=ProblemSpec(dataset="digits", task="binary", n_per_class=3, n_test_per_class=5),
                          family="timm_vit", train=TrainSpec(lr=0.05, steps=10))
    return train_target(recipe, tmp_path_factory.mktemp("timm-vit"), quiet=True)


@pytest.mark.parametrize("card_name", ["resnet_card", "vit_card"])
def test_kkt_attack_runs_on_a_timm_target_through_autograd(card_name, request):
    """The KKT objective differentiates the parameter gradient with respect to the inputs (a second derivative):
    it must go through BatchNorm, residuals and attention."""
    card = request.getfixturevalue(card_name)
    attack = plugins.get("attacks", "haim_binary_kkt")
    _, target, labels = prepare(card, RunSpec(attack=attack.name))
    _, engine_name = make_engine(target.model, alpha=10.0)
    assert engine_name == "autograd"
    cfg = build_config(attack.config_cls, {**(attack.smoke_config or {}), "steps": 3}, attack.name)
    x0 = torch.randn((len(labels), *SHAPE), dtype=target.dtype, generator=torch.Generator().manual_seed(0)) * 1e-2
    out = attack.run(target, x0, labels, cfg, generator=torch.Generator().manual_seed(1))
    assert out.candidates.shape == x0.shape and bool(torch.isfinite(out.candidates).all())
    assert not torch.equal(out.candidates, x0)


def test_timm_families_pass_the_model_conformance():
    for name in ("timm", "timm_resnet", "timm_vit"):
        conformance.check_model_family(family(name))


# -- the fine-tuning target: a frozen random backbone and a trained head ------------------------------------------
@pytest.fixture(scope="module")
def finetune_card(tmp_path_factory):
    recipe = TargetRecipe(problem=ProblemSpec(dataset="digits", task="binary", n_per_class=3, n_test_per_class=3),
                          family="timm_finetune", train=TrainSpec(steps=60, lr=0.05))
    return train_target(recipe, tmp_path_factory.mktemp("finetune"), quiet=True)


def test_finetune_family_trains_the_head_only_and_keeps_the_backbone_in_the_release(finetune_card):
    model, start = finetune_card.load_model(torch.float64), finetune_card.initial_model(torch.float64)
    assert [n for n, _ in model.named_parameters()] == ["head.weight", "head.bias"]
    backbone = {k: v for k, v in model.state_dict().items() if k.startswith("backbone.")}
    assert backbone and all(torch.equal(v, start.state_dict()[k]) for k, v in backbone.items())
    assert not torch.equal(model.head.weight, start.head.weight)   # type: ignore[arg-type]
    # p / (d n) counts the trained head only: num_features + 1 parameters for one output
    features = int(model.backbone.num_features)   # type: ignore[union-attr,arg-type]
    assert finetune_card.data["p_over_dn"] == {"p": features + 1, "d": 64, "n": 6, "ratio": (features + 1) / (64 * 6)}
    model.train()
    assert not model.backbone.training   # type: ignore[union-attr]


def test_finetune_head_change_lies_in_the_span_of_the_training_features(finetune_card):
    """The planted zero of Loo et al.'s and Iurada et al.'s attacks: with the backbone frozen, gradient descent moves
    the head only by combinations of the training images' features (a 1 appended for the bias)."""
    from reconbench_plugins.projection_law import head_change

    from reconbench.attack.projection import head_features, head_layer, projection_loss

    _, target, _ = prepare(finetune_card, RunSpec(attack="projection_law"))
    plugins.get("attacks", "projection_law").check(target)
    head, w = head_layer(target.model), head_change(target)
    problem = finetune_card.problem()

    def loss(xs: torch.Tensor) -> float:
        h, _ = head_features(target.model, head, xs.to(target.dtype))
        return float(projection_loss(h[None], w)[0][0])

    assert loss(problem.x_train(torch.float64)) < 1e-10
    assert loss(problem.x_train(torch.float64).flip(0)) < 1e-10
    assert loss(problem.x_test(torch.float64)[:6]) > 1e-3


def test_finetune_family_conforms_and_is_seeded():
    conformance.check_model_family(family("timm_finetune"))
    a = family("timm_finetune").build(SHAPE, 2, {}, generator=torch.Generator().manual_seed(3))
    b = family("timm_finetune").build(SHAPE, 2, {}, generator=torch.Generator().manual_seed(3))
    c = family("timm_finetune").build(SHAPE, 2, {}, generator=torch.Generator().manual_seed(4))
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values(), strict=True))
    assert not torch.equal(a.state_dict()["backbone.conv1.weight"], c.state_dict()["backbone.conv1.weight"])
    with pytest.raises(IncompatibleError, match="never downloads weights"):
        family("timm_finetune").build(SHAPE, 2, {"pretrained": True})
