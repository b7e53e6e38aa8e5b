"""`reconbench audit` on models trained elsewhere.

* Conversion check: a target reconbench trained, exported to plain safetensors and npz files and audited, gives
  exactly the numbers `reconbench run --model` gives on its card (same seed, search runs and steps).
* A network built and trained by a plain PyTorch script in this file (no reconbench code in the training) with its
  own input standardisation, and a timm ResNet with a small head: the audit runs, and the preprocessing it folds in
  reproduces the owner's forward pass (checked against the owner's own model on the owner's own inputs).
* Bad inputs get one line each, before any attack work.
* Each report opens in headless Chromium with its figures loaded and the JSON record's numbers on the page (skipped
  with the reason where no Chromium is installed, as tests/integration/test_site_browser.py).
"""

from __future__ import annotations

import json
import math
import shlex
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from _helpers.audit_kit import digits_split, rounding_mlp, small_mlp
from _helpers.browser import Browser, open_browser
from _helpers.cli import run_cli
from safetensors.torch import save_file

import reconbench
import reconbench.errors
from reconbench.auditing.card import audit_card
from reconbench.auditing.data import build_audit_problem, input_factor, load_data, parse_preprocess
from reconbench.auditing.export import export_card
from reconbench.auditing.model import read_state, registered_family
from reconbench.cli import main
from reconbench.targets.cache import train_target
from reconbench.targets.recipe import TargetRecipe

#: each module fixture runs a whole audit inside the first test that asks for it: 20-180 s on the shared 2-core machine
pytestmark = pytest.mark.timeout(600)

FACTORY = "_helpers.audit_kit:small_mlp"
OWNER_MEAN, OWNER_STD = 0.3, 0.35   # the plain script's input standardisation, (x - mean) / std on x in [0, 1]


def cli(args: list[str]) -> None:
    """The command line in-process; fails the test on a non-zero exit."""
    try:
        main(args)
    except SystemExit as exc:
        assert exc.code in (0, None), f"reconbench {' '.join(args)} exited with {exc.code}"


# -- (a) a target reconbench trained, exported ----------------------------------------------------------------------
@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("exported")
    recipe = TargetRecipe.from_dict({"problem": {"dataset": "digits", "task": "multiclass", "n_per_class": 1},
                                     "family": "mlp", "model": {"widths": [200]},
                                     "train": {"steps": 1500, "lr": 0.05, "schedule": "inverse_loss"}})
    card = train_target(recipe, root / "card", quiet=True)
    command = export_card(card, root / "owner")["command"]   # what `reconbench export` writes and prints
    cli(["run", "--model", str(root / "card"), "--attack", "multiclass_kkt", "--search-runs", "2", "--set", "steps=150",
         "--out", str(root / "run"), "-q"])
    cli([*shlex.split(command)[1:], "--attack", "multiclass_kkt", "--budget", "300", "--search-runs", "2",
         "--out", str(root / "audit"), "-q"])
    return {"root": root, "card": card, "run": json.loads((root / "run" / "result.json").read_text()),
            "audit": root / "audit"}


def _same(a: Any, b: Any, where: str = "") -> list[str]:
    """Where two JSON values differ (floats: to float64 rounding; the same computation on the same machine)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in sorted(set(a) | set(b)) for d in _same(a.get(k), b.get(k), f"{where}.{k}")]
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{where}: {len(a)} vs {len(b)} entries"]
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True)) for d in _same(x, y, f"{where}[{i}]")]
    if isinstance(a, float) and isinstance(b, float):
        return [] if math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-15) or (math.isnan(a) and math.isnan(b)) \
            else [f"{where}: {a} vs {b}"]
    return [] if a == b else [f"{where}: {a!r} vs {b!r}"]


@pytest.mark.slow
def test_conversion_check_an_exported_target_audits_to_the_numbers_of_run(exported):
    run = exported["run"]
    audited = json.loads((exported["audit"] / "attacks" / "multiclass_kkt" / "result.json").read_text())
    assert run["spec"]["attack_config"] == audited["spec"]["attack_config"] == {"steps": 150}
    ev_run, ev_audit = run["evaluation"], audited["evaluation"]
    assert _same(ev_run["summary"], ev_audit["summary"]) == []
    assert _same(ev_run["null"]["per_draw"], ev_audit["null"]["per_draw"]) == []
    assert _same(ev_run["protocol"]["calibration"]["draw_maxima"], ev_audit["protocol"]["calibration"]["draw_maxima"]) == []
    assert _same([r["final_loss"] for r in run["runs"]], [r["final_loss"] for r in audited["runs"]]) == []
    per_image = ("corr", "ssim", "reconstructed_calibrated", "membership_score")
    assert _same([{k: row.get(k) for k in per_image} for row in ev_run["per_image"]],
                 [{k: row.get(k) for k in per_image} for row in ev_audit["per_image"]]) == []


@pytest.mark.slow
def test_the_exported_audit_record_states_the_headline_and_the_regime(exported):
    rec = json.loads((exported["audit"] / "audit.json").read_text())
    result = json.loads((exported["audit"] / "attacks" / "multiclass_kkt" / "result.json").read_text())
    assert rec["headline"]["reconstructed"] == result["evaluation"]["summary"]["reconstructed_calibrated"]
    assert rec["headline"]["n_train"] == 10
    # the regime measured from the released weights and theta0 is the certificate the card recorded at training
    cert = exported["card"].data["metrics"]["certificate"]
    assert rec["regime"]["theta0_available"] is True
    assert math.isclose(rec["regime"]["learned_ratio"], cert["learned"]["ratio"], rel_tol=1e-6)
    assert math.isclose(rec["regime"]["stationarity_ratio"], cert["ratio"], rel_tol=1e-6)
    assert rec["regime"]["gate_verdict"] == ("passes" if cert["learned"]["ratio"] <= 0.1 else "fails")
    assert rec["command"].startswith("reconbench audit ") and "--init-weights" in rec["command"]


# -- (b) a network trained by a plain PyTorch script ----------------------------------------------------------------
def _owner_inputs(images: np.ndarray) -> torch.Tensor:
    """The owner's preprocessing, written out here: uint8 -> [0, 1] -> (x - mean) / std, N x 1 x H x W."""
    return (torch.as_tensor(images, dtype=torch.float64)[:, None] / 255.0 - OWNER_MEAN) / OWNER_STD


def _train_plain(net: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, steps: int, lr: float,
                 loss: str = "bce") -> None:
    opt = torch.optim.SGD(net.parameters(), lr=lr)
    for _ in range(steps):
        opt.zero_grad()
        out = net(x)
        value = torch.nn.functional.binary_cross_entropy_with_logits(out.reshape(-1), y.double()) if loss == "bce" \
            else torch.nn.functional.cross_entropy(out, y.long())
        value.backward()
        opt.step()


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("plain")
    xtr, ytr, xho, yho = digits_split(5)
    torch.manual_seed(0)
    net = small_mlp((1, 8, 8), 1).double()
    _train_plain(net, _owner_inputs(xtr), torch.as_tensor(ytr), steps=400, lr=0.2)
    torch.save(net.state_dict(), root / "net.pt")
    np.savez(root / "train.npz", images=xtr, labels=ytr)
    np.savez(root / "held.npz", images=xho, labels=yho)
    args = {"weights": root / "net.pt", "family": FACTORY, "train": root / "train.npz",
            "held_out": root / "held.npz", "task": "binary",
            "preprocess": {"mean": str(OWNER_MEAN), "std": OWNER_STD}}
    rec = reconbench.audit(**args, budget=300, search_runs=2, out=root / "audit")
    return {"root": root, "net": net, "args": args, "record": rec, "audit": root / "audit", "train": (xtr, ytr)}


@pytest.mark.slow
def test_a_plain_pytorch_model_is_audited_with_every_applicable_attack(plain):
    rec = plain["record"]
    assert [a["attack"] for a in rec["attacks"]] == ["haim_binary_kkt", "weight_rows"]
    assert rec["headline"]["available"] and rec["headline"]["n_train"] == 10
    assert rec["regime"]["gate_verdict"] == "unavailable" and "theta0" in rec["regime"]["gate_reason"]
    assert json.loads((plain["audit"] / "audit.json").read_text())["headline"] == rec["headline"]
    # the record's training error is the owner's model on the owner's inputs
    xtr, ytr = plain["train"]
    with torch.no_grad():
        own = plain["net"](_owner_inputs(xtr)).reshape(-1)
    assert rec["model"]["train_error"] == float(((own > 0).long().numpy() != ytr).mean())


def test_the_folded_preprocessing_reproduces_the_owners_forward_pass(plain):
    a = plain["args"]
    data = load_data(a["train"], a["held_out"])
    pre = parse_preprocess(a["preprocess"])
    problem = build_audit_problem(data, "binary", None, pre)
    with registered_family(FACTORY), torch.no_grad():
        card = audit_card(plain["root"], FACTORY, {}, read_state(a["weights"]), problem, input_factor(pre, 1), None,
                          "0" * 64, {})
        mapped = card.load_model()(problem.x_train(torch.float64))
        own = plain["net"](_owner_inputs(plain["train"][0]))
    torch.testing.assert_close(mapped, own, rtol=1e-10, atol=1e-12)


def test_standardisation_folds_into_a_builtin_first_layer():
    """mlp: the factor scale / std multiplies the first layer's columns (one block of H*W per channel), so the
    network stays a homogeneous chain; its output equals the unfolded network on standardised inputs."""
    from reconbench import plugins
    from reconbench.auditing.model import fold_input_factor

    fam = plugins.get("models", "mlp")
    net = fam.build((3, 4, 4), 2, {"widths": [8]}, generator=torch.Generator().manual_seed(0)).double()
    x = torch.randn(5, 3, 4, 4, dtype=torch.float64)
    factor = np.array([2.0, 0.5, 4.0])
    expected = net(x * torch.as_tensor(factor)[None, :, None, None])
    folded = fold_input_factor(net, "mlp", factor)
    assert folded.linear_chain() is not None
    torch.testing.assert_close(folded(x), expected, rtol=1e-12, atol=1e-12)


# -- (c) a timm model with a small head -----------------------------------------------------------------------------
TIMM_KWARGS = {"layers": [1, 1, 1, 1], "channels": [8, 16, 32, 48]}  # a 48-wide head: not the 64 pixels


@pytest.fixture(scope="module")
def timm_audit(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    timm = pytest.importorskip("timm")
    from sklearn.datasets import load_digits

    root = tmp_path_factory.mktemp("timm")
    bunch = load_digits()
    images = np.round(bunch.images * 255.0 / 16.0).astype(np.uint8)
    train = np.concatenate([np.flatnonzero(bunch.target == c)[:1] for c in range(10)])
    held = np.setdiff1d(np.arange(len(images)), train)
    torch.manual_seed(0)
    net = timm.create_model("resnet18", pretrained=False, num_classes=10, in_chans=1,
                            **{k: tuple(v) if isinstance(v, list) else v for k, v in TIMM_KWARGS.items()})
    net.train()
    _train_plain(net.float(), torch.as_tensor(images[train], dtype=torch.float32)[:, None] / 255.0,
                 torch.as_tensor(bunch.target[train]), steps=30, lr=0.05, loss="ce")
    net.eval()
    save_file({k: v.contiguous() for k, v in net.state_dict().items()}, str(root / "resnet.safetensors"))
    np.savez(root / "train.npz", images=images[train], labels=bunch.target[train])
    np.savez(root / "held.npz", images=images[held], labels=bunch.target[held])
    rec = reconbench.audit(root / "resnet.safetensors", family="resnet18", model_set=TIMM_KWARGS,
                           train=root / "train.npz", held_out=root / "held.npz", task="multiclass", budget=20,
                           search_runs=1, out=root / "audit")
    return {"record": rec, "audit": root / "audit"}


@pytest.mark.slow
def test_a_timm_model_is_audited_and_the_baseline_it_cannot_take_is_named(timm_audit):
    rec = timm_audit["record"]
    assert [a["attack"] for a in rec["attacks"]] == ["multiclass_kkt"]
    assert rec["inputs"]["model_spec"]["arch"] == "resnet18"
    refused = {r["attack"]: r["reason"] for r in rec["refused"]}
    assert list(refused) == ["weight_rows"] and "\n" not in refused["weight_rows"]


# -- bad inputs: one line each ---------------------------------------------------------------------------------------
@pytest.fixture()
def owner_files(tmp_path: Path) -> dict[str, Path]:
    xtr, ytr, xho, yho = digits_split(5)
    torch.manual_seed(0)
    torch.save(small_mlp((1, 8, 8), 1).state_dict(), tmp_path / "net.pt")
    torch.save(rounding_mlp((1, 8, 8), 1).state_dict(), tmp_path / "rounding.pt")
    torch.save(small_mlp((1, 8, 8), 2).state_dict(), tmp_path / "two.pt")
    np.savez(tmp_path / "train.npz", images=xtr, labels=ytr)
    np.savez(tmp_path / "held.npz", images=xho, labels=yho)
    np.savez(tmp_path / "small.npz", images=xho[:40], labels=yho[:40])
    np.savez(tmp_path / "overlap.npz", images=np.concatenate([xho, xtr[3:4]]), labels=np.concatenate([yho, ytr[3:4]]))
    return {"dir": tmp_path}


@pytest.mark.parametrize(("change", "expected"), [
    ({"--model-set": "hidden=32"}, r"do not fit the architecture: '1.weight' has shape \(64, 64\) in the file but \(32, 64\)"),
    ({"--held-out": "small.npz"}, r"--held-out has \d+ image\(s\) of class \d, but the null needs 60"),
    ({"--held-out": "overlap.npz"}, r"--train and --held-out share 1 image\(s\) \(train #3 = held-out #\d+\)"),
    ({"--family": "_helpers.audit_kit:rounding_mlp", "weights": "rounding.pt"}, r"unsupported layer '2' \(Rounding\)"),
    ({"weights": "two.pt"}, r"the weights end in 2 outputs, but a binary audit needs .* is --task multiclass"),
])
def test_bad_inputs_get_one_line_before_any_work(owner_files, capsys, change, expected):
    import re

    d = owner_files["dir"]
    opts = {"--family": FACTORY, "--train": "train.npz", "--held-out": "held.npz", "--task": "binary"}
    opts.update({k: v for k, v in change.items() if k.startswith("--")})
    args = ["audit", str(d / change.get("weights", "net.pt"))]
    for k, v in opts.items():
        args += [k, str(d / v) if v.endswith((".npz", ".pt")) else v]
    code, out, err = run_cli([*args, "--out", str(d / "out")], capsys)
    assert code != 0
    lines = err.strip().splitlines()
    assert len(lines) == 1 and re.search(expected, lines[0]), err
    assert not (d / "out" / "attacks").exists()


# -- the reports in a real browser ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    yield from open_browser()


def report_problems(b: Browser, folder: Path) -> list[str]:
    """What the browser shows against audit.json: every figure loaded, the headline count and each attack's numbers."""
    rec = json.loads((folder / "audit.json").read_text())
    b.navigate((folder / "report.html").resolve().as_uri())
    problems = []
    images = b.evaluate("Array.from(document.images).map(i => [i.alt, i.complete, i.naturalWidth])")
    if len(images) != sum(1 for a in rec["attacks"] if a["figure"]):
        problems.append(f"{len(images)} figures on the page for {len(rec['attacks'])} attacks")
    problems += [f"{alt} did not load" for alt, complete, width in images if not complete or width == 0]
    head = rec["headline"]
    shown = b.evaluate("document.getElementById('headline-count').textContent")
    if shown != f"{head['reconstructed']} of {head['n_train']}":
        problems.append(f"headline shows {shown!r}")
    for a in rec["attacks"]:
        cells = b.evaluate(f"Array.from(document.querySelectorAll('table[data-attack=\"{a['attack']}\"] td[data-key]'))"
                           ".map(td => [td.dataset.key, td.textContent])")
        for key, text in cells:
            value = a["numbers"][key]["value"]
            if (value is None and text != "–") or (value is not None and not math.isclose(float(text), value,
                                                                                         rel_tol=5e-3, abs_tol=5e-4)):
                problems.append(f"{a['attack']} {key}: page {text!r}, record {value!r}")
    if b.evaluate("document.getElementById('command').textContent") != rec["command"]:
        problems.append("the command on the page is not the record's")
    return problems


@pytest.mark.slow
@pytest.mark.parametrize("which", ["exported", "plain", "timm_audit"])
def test_each_report_opens_in_chromium_with_its_numbers(browser, which, request, tmp_path):
    folder = request.getfixturevalue(which)["audit"]
    assert report_problems(browser, folder) == []
    shot = browser.screenshot(tmp_path / f"{which}.png")
    print(f"screenshot: {shot}", file=sys.stderr)


@pytest.mark.slow
def test_the_browser_check_fails_on_a_damaged_report(browser, plain, tmp_path):
    """The same check fails on a report whose figure was cut and whose headline was edited."""
    import shutil

    folder = tmp_path / "damaged"
    shutil.copytree(plain["audit"], folder)
    page = (folder / "report.html").read_text()
    page = page.replace("data:image/png;base64,", "data:image/png;base64,AAAA", 1)
    page = page.replace("id='headline-count'>", "id='headline-count'>1", 1)
    (folder / "report.html").write_text(page)
    problems = report_problems(browser, folder)
    assert any("did not load" in p for p in problems) and any("headline shows" in p for p in problems)


@pytest.mark.slow
def test_the_report_embeds_the_runs_figure_of_pairs(exported):
    """The report's reconstructions are the run's figure (the layout shared with the board and the site,
    ``pair_figure.py``), embedded byte for byte, with the layout record it was drawn with."""
    import base64
    import re

    from reconbench.evaluation.pair_figure import read_layout

    html = (exported["audit"] / "report.html").read_text()
    embedded = re.findall(r"src='data:image/png;base64,([A-Za-z0-9+/=]+)'", html)
    run_figure = exported["audit"] / "attacks" / "multiclass_kkt" / "figures" / "reconstructions.png"
    assert base64.b64encode(run_figure.read_bytes()).decode() in embedded
    layout = read_layout(run_figure)
    assert layout is not None and layout.pairs
    assert {row[3] for row in layout.arrangement() if row[3] is not None} == {(0, -1)}   # candidate above


@pytest.mark.slow
def test_export_writes_the_files_and_the_audit_command(exported, capsys, tmp_path):
    code, out, err = run_cli(["export", str(exported["root"] / "card"), "--out", str(tmp_path / "owner")], capsys)
    assert code == 0, err
    problem = exported["card"].problem()
    with np.load(tmp_path / "owner" / "train.npz") as z:
        np.testing.assert_array_equal(z["images"].astype(np.float64), problem.train_images[:, 0])
        np.testing.assert_array_equal(z["labels"], problem.train_labels)
    with np.load(tmp_path / "owner" / "held.npz") as z:
        assert len(z["labels"]) == len(problem.decoy_labels) + len(problem.held_out_indices)
    command = out.strip().splitlines()[-1].strip()
    assert command.startswith("reconbench audit ") and "--model-set 'widths=[200]'" in command


def test_reconbench_audit_is_the_function_the_command_line_calls(monkeypatch, capsys, tmp_path):
    import reconbench.auditing.run as run_module

    assert reconbench.audit is run_module.audit
    seen: dict[str, Any] = {}

    def fake(weights: Any, **kwargs: Any) -> dict[str, Any]:
        seen.update(kwargs, weights=weights)
        raise reconbench.errors.ReconbenchError("stopped here")

    monkeypatch.setattr(run_module, "audit", fake)
    code, _, err = run_cli(["audit", "w.pt", "--family", "mlp", "--model-set", "widths=[8]", "--train", "t.npz",
                            "--held-out", "h.npz", "--task", "binary", "--preprocess", "std=0.5", "--out",
                            str(tmp_path)], capsys)
    assert code != 0 and "stopped here" in err
    assert seen["model_set"] == {"widths": [8]} and seen["preprocess"] == {"std": 0.5}
    assert seen["budget"] == run_module.DEFAULT_BUDGET
    assert seen["command"].startswith("reconbench audit w.pt")


def test_preprocessing_options_give_the_mean_and_factor_they_name(tmp_path):
    from reconbench.auditing.data import Preprocess, mean_image
    from reconbench.errors import ReconbenchError

    rng = np.random.default_rng(0)
    unit = rng.random((6, 3, 4, 5))
    pre = parse_preprocess({"scale": 255, "mean": "127.5,100,50", "std": "2,4,8"})
    np.testing.assert_allclose(mean_image(pre, unit)[:, 0, 0], [0.5, 100 / 255, 50 / 255], rtol=1e-12)
    np.testing.assert_allclose(input_factor(pre, 3), [127.5, 63.75, 31.875], rtol=1e-12)
    np.testing.assert_array_equal(mean_image(Preprocess(mean="train"), unit), unit.mean(axis=0))
    np.testing.assert_allclose(mean_image(Preprocess(mean="train-channel"), unit)[:, 2, 3], unit.mean(axis=(0, 2, 3)))
    np.save(tmp_path / "m.npy", np.full((4, 5, 3), 0.25))   # H x W x C, in the scaled units
    np.testing.assert_array_equal(mean_image(Preprocess(scale=0.5, mean=str(tmp_path / "m.npy")), unit), 0.5)
    for bad, match in (({"shift": 1}, "has no key 'shift'"), ({"std": 0}, "std=0 must be one positive number"),
                       ({"scale": -1}, "scale=-1 must be a positive number")):
        with pytest.raises(ReconbenchError, match=match):
            parse_preprocess(bad)
    with pytest.raises(ReconbenchError, match="mean has 2 values for 3-channel images"):
        mean_image(parse_preprocess({"mean": "0.1,0.2"}), unit)


def test_an_image_folder_reads_as_its_npz(tmp_path):
    """DIR/<class>/*.png: the same images and labels as the npz that holds them; the held-out folder's classes are
    mapped by name onto the training folder's."""
    from PIL import Image

    xtr, ytr, xho, yho = digits_split(5)
    names = ["even", "odd"]
    for split, images, labels, classes in (("train", xtr, ytr, names), ("held", xho[:200], yho[:200], names)):
        for k, (img, lab) in enumerate(zip(images, labels, strict=True)):
            folder = tmp_path / split / classes[lab]
            folder.mkdir(parents=True, exist_ok=True)
            Image.fromarray(img).save(folder / f"{k:04d}.png")
    np.savez(tmp_path / "train.npz", images=xtr, labels=ytr)
    np.savez(tmp_path / "held.npz", images=xho[:200], labels=yho[:200])
    folders, files = load_data(tmp_path / "train", tmp_path / "held"), load_data(tmp_path / "train.npz",
                                                                                  tmp_path / "held.npz")
    for a, b in ((folders.train, files.train), (folders.held_out, files.held_out)):
        order_a, order_b = np.lexsort((a.labels,)), np.lexsort((b.labels,))   # the folder is in class order
        np.testing.assert_array_equal(a.images[order_a], b.images[order_b])
        np.testing.assert_array_equal(a.labels[order_a], b.labels[order_b])
    assert folders.train.classes == names
    (tmp_path / "held" / "other").mkdir()
    Image.fromarray(xho[0]).save(tmp_path / "held" / "other" / "x.png")
    with pytest.raises(reconbench.errors.DataError, match=r"class folder\(s\) \['other'\] that the training folder lacks"):
        load_data(tmp_path / "train", tmp_path / "held")
