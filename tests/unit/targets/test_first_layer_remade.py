"""The float32 trainer's first-layer pre-activations stay those of the weights it releases
(reconbench/targets/batched_training.py): P is made from the factorised first layer W_1 = s W_1(0) + C X every step,
so it is X W_1ᵀ to one product's rounding after any number of steps, where the copy stepped alongside C
(P <- decay P - lr K g) drifted further every step; a checkpoint saved by that trainer is read, not continued."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from reconbench import plugins
from reconbench.errors import ReconbenchError
from reconbench.nets import TargetNet
from reconbench.targets.batched_training import BATCH_LOSSES, FIRST_LAYER, BatchedChainGD, read_checkpoint

pytestmark = pytest.mark.usefixtures("one_torch_thread")   # n = 20 rows: a second thread only adds waiting

#: float32's unit roundoff
U32 = 2.0 ** -24
N, WIDTH, DIM = 20, 100, 784


def problem(seed: int) -> tuple[torch.Tensor, torch.Tensor, TargetNet]:
    gen = torch.Generator().manual_seed(seed)
    x = torch.rand(N, DIM, generator=gen) * 2 - 1
    y = torch.tensor([0.0, 1.0] * (N // 2))
    return x, y, plugins.get("models", "mlp").build((DIM,), 1, {"widths": [WIDTH, WIDTH]}, generator=gen).float()


def gap_and_bound(trainer: BatchedChainGD, t: int) -> tuple[float, float]:
    """‖P - (s X W_1(0)ᵀ + K Cᵀ)‖ / ‖P‖ in float64 from the trainer's own float32 K = X Xᵀ, X W_1(0)ᵀ and C (so
    X W_1ᵀ of the factorised weights), and the bound on it of remaking P once: each entry is s p0 plus a sum of n
    products, so Higham's Theorem 3.5 bounds its error by γ_{n+2} (s|P0| + |K||C|ᵀ) entrywise, γ_m = m u / (1 - m u)."""
    s = trainer.scales[t]
    k, p0, c, pre = (a[t].double() for a in (trainer.gram, trainer.pre0, trainer.coef, trainer.pre))
    exact = s * p0 + k @ c.t()
    magnitude = s * p0.abs() + k.abs() @ c.abs().t()
    m = N + 2
    gamma = m * U32 / (1 - m * U32)
    return float((pre - exact).norm() / pre.norm()), gamma * float(magnitude.norm() / pre.norm())


class SteppedCopy(BatchedChainGD):
    """The trainer as it was before P was remade: P stepped alongside C with the first layer's gradient g, the
    operations of the old ``_step_part`` (the one-target CPU path)."""

    def _step_part(self, sl: slice, loss: str, lr: float, wd: float) -> None:
        z = self._forward(sl)
        self.loss_now[sl].copy_(BATCH_LOSSES[loss](z, self.y[sl]))
        decay = 1.0 - lr * wd
        g = self._output_grad(z, sl, loss)
        for i in range(len(self.acts) - 1, 0, -1):
            w, h, b = self.weights[i - 1][sl], self.acts[i - 1][sl], self.biases[i]
            g_in = torch.bmm(g, w, out=self.grad_in[i - 1][sl]).masked_fill_(h <= 0, 0.0)
            w.baddbmm_(g.transpose(1, 2), h, beta=decay, alpha=-lr)
            if b is not None:
                b[sl].mul_(decay).add_(g.sum(dim=1), alpha=-lr)
            g = g_in
        coef, pre = self.coef[sl], self.pre[sl]
        if decay != 1.0:
            coef.mul_(decay)
            pre.mul_(decay)
        coef.sub_(g.transpose(1, 2), alpha=lr)
        pre.baddbmm_(self.gram[sl], g, alpha=-lr)
        if self.biases[0] is not None:
            self.biases[0][sl].mul_(decay).add_(g.sum(dim=1), alpha=-lr)


def test_the_pre_activations_stay_within_one_remake_of_the_released_first_layer():
    """10,000 float32 steps of a 784-100-100-1 net on n = 20 each way (about 10 s on one thread): the trainer's P
    stays within the rounding of one remake of X W_1ᵀ; the copy stepped alongside C (the trainer before the remake,
    the same steps otherwise) drifts past that bound, so this test fails on that trainer."""
    steps = 10_000
    x, y, model = problem(0)
    trainer = BatchedChainGD([model], [x], [y], "bce", lr=0.05)
    old = SteppedCopy([problem(0)[2]], [x], [y], "bce", lr=0.05)
    trainer.run(steps)
    old.run(steps)
    assert trainer.history[-1]["loss"][0] < 1e-4   # far into training, where C's updates round apart from P's
    gap, bound = gap_and_bound(trainer, 0)
    assert gap <= bound
    old_gap, old_bound = gap_and_bound(old, 0)
    assert old_gap > old_bound


@pytest.mark.parametrize("stacked", [False, True])
def test_every_step_path_remakes_them_with_its_own_decay(stacked):
    """Two targets with their own lr and weight decay: one after another (the CPU's steps, each with its scalar
    decay) and as one stack (a GPU's: the mixed step, decays as a (T, 1, 1) factor). Each target's P stays within
    one remake's rounding, and the device's scale, which the remake reads, is the host's scale bit for bit (both
    multiply by 1 - lr wd once per step in float64)."""
    problems = [problem(1), problem(2)]
    trainer = BatchedChainGD([p[2] for p in problems], [p[0] for p in problems], [p[1] for p in problems], "bce",
                             lr=[0.05, 0.02], weight_decay=[1e-3, 0.0], loss_every=7, stacked=stacked)
    trainer.run(1_000)
    scale = 1.0
    for _ in range(1_000):
        scale *= 1.0 - 0.05 * 1e-3
    assert trainer.scales == [scale, 1.0]
    assert trainer._scale_t.flatten().tolist() == trainer.scales
    for t in range(2):
        gap, bound = gap_and_bound(trainer, t)
        assert gap <= bound, t


def old_state(path: Path, into: Path) -> None:
    """``path`` rewritten as the trainer before the remake saved it: its metadata without ``first_layer``."""
    with safe_open(str(path), framework="pt") as fh:
        meta = json.loads((fh.metadata() or {})["reconbench"])
    assert meta.pop("first_layer") == FIRST_LAYER
    save_file(load_file(str(path)), str(into), metadata={"reconbench": json.dumps(meta)})


def test_a_state_of_the_stepped_copy_is_read_for_its_weights_and_not_continued(tmp_path):
    """A checkpoint without ``first_layer`` loads (a finished target's card is re-made from its weights), its
    weights are those it holds, and running it on is refused in one line naming the fix; a checkpoint of this
    trainer continues, and loading one over the old one lifts the refusal."""
    x, y, model = problem(3)
    trainer = BatchedChainGD([model], [x], [y], "bce", lr=0.05, loss_every=10)
    trainer.run(25)
    new = trainer.save(tmp_path / "new.safetensors", with_base=False)
    assert read_checkpoint(new).first_layer == FIRST_LAYER
    old_state(new, tmp_path / "old.safetensors")
    assert read_checkpoint(tmp_path / "old.safetensors").first_layer is None
    fresh = BatchedChainGD([problem(3)[2]], [x], [y], "bce", lr=0.05, loss_every=10)
    fresh.load(tmp_path / "old.safetensors")
    assert fresh.step_count == 25 and fresh.stepped_copy == {0}
    for k, v in trainer.state_dicts()[0].items():
        assert torch.equal(fresh.state_dicts()[0][k], v), k
    fresh.run(0)
    # saved again (as training in pieces saves a finished state it only read), it is still the old trainer's
    assert read_checkpoint(fresh.save(tmp_path / "again.safetensors", with_base=False)).first_layer is None
    with pytest.raises(ReconbenchError, match=r"^batched training: target 0's checkpoint \(step 25\) .*float32 .*"
                                              r"drifting second copy.*restart its training from step 0 \(remove the state\)"):
        fresh.run(1)
    assert fresh.step_count == 25
    fresh.load(new)
    assert fresh.stepped_copy == set()
    fresh.run(5)
    trainer.run(5)
    for k, v in trainer.state_dicts()[0].items():
        assert torch.equal(fresh.state_dicts()[0][k], v), k


def test_a_float64_state_of_the_stepped_copy_continues(tmp_path):
    """In float64 the stepped copy kept to rounding (1e-14 over 10^6 steps), so an old float64 state continues: its
    weights go on within float64 rounding of this trainer's uninterrupted run."""
    x, y, model = problem(5)
    whole = BatchedChainGD([model.double()], [x.double()], [y.double()], "bce", lr=0.05, loss_every=10)
    whole.run(25)
    old_state(whole.save(tmp_path / "new.safetensors"), tmp_path / "old.safetensors")
    resumed = BatchedChainGD([problem(5)[2].double()], [x.double()], [y.double()], "bce", lr=0.05, loss_every=10)
    resumed.load(tmp_path / "old.safetensors")
    assert resumed.stepped_copy == {0}
    resumed.run(25)
    assert read_checkpoint(resumed.save(tmp_path / "on.safetensors")).first_layer is None   # not all this trainer's
    whole.run(25)
    tol = 50 * DIM * torch.finfo(torch.float64).eps   # 50 steps, products of at most DIM terms
    for k, v in whole.state_dicts()[0].items():
        torch.testing.assert_close(resumed.state_dicts()[0][k], v, rtol=tol, atol=tol * float(v.abs().max()))


def test_a_state_of_another_first_layer_form_is_refused(tmp_path):
    x, y, model = problem(4)
    trainer = BatchedChainGD([model], [x], [y], "bce", lr=0.05)
    path = trainer.save(tmp_path / "state.safetensors")
    with safe_open(str(path), framework="pt") as fh:
        meta = json.loads((fh.metadata() or {})["reconbench"])
    meta["first_layer"] = "something else"
    save_file(load_file(str(path)), str(path), metadata={"reconbench": json.dumps(meta)})
    with pytest.raises(ReconbenchError, match="first_layer = 'something else', this trainer's is"):
        trainer.load(path)
