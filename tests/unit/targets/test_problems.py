"""Problems are deterministic, follow the reference subset rules, and keep train/decoy/test disjoint."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from reconbench.data import ImageData, ProblemSpec
from reconbench.errors import DataError, ReconbenchError
from reconbench.targets.problems import build_problem


def test_same_spec_same_indices():
    a = build_problem(ProblemSpec(task="multiclass", n_per_class=4, seed=3))
    b = build_problem(ProblemSpec(task="multiclass", n_per_class=4, seed=3))
    c = build_problem(ProblemSpec(task="multiclass", n_per_class=4, seed=4))
    np.testing.assert_array_equal(a.train_indices, b.train_indices)
    assert sorted(a.train_indices) == sorted(c.train_indices) and list(a.train_indices) != list(c.train_indices)


def test_multiclass_permutation_matches_the_reference_global_rng():
    """The reference permutes right after torch.manual_seed(seed) (docs/method/targets.md#multiclass-subsets)."""
    p = build_problem(ProblemSpec(task="multiclass", n_per_class=3, seed=7, order="file"))
    labels = p.original_train_labels
    torch.manual_seed(7)
    perm = torch.randperm(30)
    from sklearn.datasets import load_digits

    target = load_digits().target
    blocks = np.concatenate([np.flatnonzero(target == c)[:3] for c in range(10)])
    np.testing.assert_array_equal(p.train_indices, blocks[perm.numpy()])
    np.testing.assert_array_equal(labels, target[p.train_indices])


def test_binary_first_per_class_in_file_order():
    p = build_problem(ProblemSpec(task="binary", n_per_class=5, order="file"))
    from sklearn.datasets import load_digits

    target = load_digits().target
    kept, counts = [], {0: 0, 1: 0}
    for i, t in enumerate(target):  # independent walk of the file
        c = t % 2
        if counts[c] < 5:
            kept.append(i)
            counts[c] += 1
    np.testing.assert_array_equal(p.train_indices, kept)
    np.testing.assert_array_equal(p.train_labels, target[kept] % 2)


def test_disjoint_splits_and_centring():
    p = build_problem(ProblemSpec(task="binary", n_per_class=10, n_test_per_class=20))
    tr, de, te = set(p.train_indices), set(p.decoy_indices), set(p.test_indices)
    assert not (tr & de) and not (tr & te) and not (de & te)
    assert len(de) == 2 * 2 * 10 and len(te) == 40
    np.testing.assert_allclose(p.x_train().mean(0).numpy(), 0.0, atol=1e-12)
    assert torch.allclose(p.x_train() + p.mean_tensor(), torch.as_tensor(p.train_images))


def test_regression_targets_are_pm_one():
    p = build_problem(ProblemSpec(task="regression", n_per_class=3))
    t = p.targets(p.train_labels)
    assert set(t.tolist()) == {-1.0, 1.0}


def test_vehicles_animals_rule_on_cifar_names():
    rng = np.random.default_rng(0)
    labels = np.arange(40) % 10
    data = ImageData("fake", rng.random((40, 3, 4, 4), dtype=np.float32), labels,
                     ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"], "x")
    p = build_problem(ProblemSpec(dataset="npz:x", task="binary", n_per_class=3, binary_rule="vehicles_animals",
                                  n_test_per_class=1), data=data)
    vehicles = {0, 1, 8, 9}
    for idx, lab in zip(p.train_indices, p.train_labels, strict=True):
        assert lab == (0 if labels[idx] in vehicles else 1)


def test_errors_for_bad_specs():
    with pytest.raises(DataError, match="Lower --n-per-class"):
        build_problem(ProblemSpec(task="multiclass", n_per_class=500))
    with pytest.raises(ReconbenchError, match="unknown task"):
        build_problem(ProblemSpec(task="ranking"))
    with pytest.raises(ReconbenchError, match="vehicles_animals.*parity"):
        build_problem(ProblemSpec(task="binary", binary_rule="vehicles_animals"))


def test_shuffled_order_picks_the_first_images_of_a_seeded_permutation():
    from sklearn.datasets import load_digits

    target = load_digits().target
    p = build_problem(ProblemSpec(task="binary", n_per_class=5, order_seed=3))
    walk = np.random.default_rng(3).permutation(len(target))
    kept, counts = [], {0: 0, 1: 0}
    for i in walk:  # independent walk of the permuted file
        if counts[target[i] % 2] < 5:
            kept.append(i)
            counts[target[i] % 2] += 1
    np.testing.assert_array_equal(p.train_indices, kept)
    rest = [i for i in walk if i not in set(kept)]
    decoys = [i for i in rest if sum(target[j] % 2 == target[i] % 2 for j in rest[:rest.index(i)]) < 10]
    np.testing.assert_array_equal(p.decoy_indices, decoys)
    m = build_problem(ProblemSpec(task="multiclass", n_per_class=2, order_seed=3, seed=7))
    blocks = np.concatenate([walk[target[walk] == c][:2] for c in range(10)])
    np.testing.assert_array_equal(m.train_indices, blocks[torch.randperm(20, generator=torch.Generator()
                                                                         .manual_seed(7)).numpy()])


def test_shuffled_members_are_not_the_front_of_the_file():
    """File order puts every member among the first images; over 50 seeded orders the members' mean position is
    the middle of the file (1797 images: mean 898, standard error about 17)."""
    assert build_problem(ProblemSpec(task="binary", n_per_class=5, order="file")).train_indices.max() < 20
    pos = np.concatenate([build_problem(ProblemSpec(task="binary", n_per_class=5, order_seed=s)).train_indices
                          for s in range(50)])
    assert 800 < pos.mean() < 1000


def test_records_without_order_mean_file_order_and_keep_their_keys():
    from reconbench.targets.problems import recorded_spec_dict

    legacy = {"dataset": "digits", "task": "binary", "n_per_class": 5, "num_classes": None, "binary_rule": None,
              "seed": 1, "n_test_per_class": 100, "n_decoy_per_class": None}
    spec = ProblemSpec(**recorded_spec_dict(legacy))
    assert spec.order == "file" and spec.to_dict() == legacy
    assert ProblemSpec(**legacy).order == "shuffled"  # a new problem shuffles
    assert ProblemSpec(**legacy).to_dict() == {**legacy, "order": "shuffled", "order_seed": 0}
    with pytest.raises(ReconbenchError, match="order"):
        build_problem(ProblemSpec(order="sorted"))  # type: ignore[arg-type]


def test_command_line_recipes_shuffle_unless_told_file_order():
    from reconbench.cli.recipe_options import recipe_from_options

    assert recipe_from_options({}).problem.order == "shuffled"
    assert recipe_from_options({"order": "file"}).problem.to_dict().keys() == ProblemSpec().to_dict().keys() - {
        "order", "order_seed"}
    assert recipe_from_options({"order_seed": 5}).problem.order_seed == 5


def test_a_changed_data_folder_loads_the_data_set_again(tmp_path, monkeypatch):
    """The loaded data sets are kept per process; a root read from $RECONBENCH_DATA is part of that key, so a process
    (or a test) that points the variable at another folder gets that folder's images, not the ones loaded before."""
    labels = np.arange(20) % 2
    for name, value in (("one", 0.25), ("two", 0.75)):
        (tmp_path / name).mkdir()
        np.savez(tmp_path / name / "x.npz", images=np.full((20, 8, 8), value, dtype=np.float32), labels=labels)
    spec = ProblemSpec(dataset="npz:x.npz", task="binary", n_per_class=2)
    seen = []
    for name in ("one", "two", "one"):
        monkeypatch.setenv("RECONBENCH_DATA", str(tmp_path / name))
        seen.append(float(build_problem(spec).train_images.max()))
    assert seen == [0.25, 0.75, 0.25]
