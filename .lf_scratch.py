import torch, time
from reconbench.data import ProblemSpec
from reconbench.targets.problems import build_problem
from reconbench.targets.recipe import TargetRecipe, TrainSpec
from reconbench.targets.training import train
for form in ("legacy","stable"):
    r=TargetRecipe(problem=ProblemSpec(dataset="digits",task="multiclass",n_per_class=3,num_classes=3,n_test_per_class=5),
        family="mlp",model={"widths":[32]},train=TrainSpec(lr=0.2,steps=400,dtype="float32",schedule="inverse_loss",eval_every=50,loss_form=form))
    t=time.time(); res=train(r,build_problem(r.problem),quiet=True)
    print(form, res.metrics["final_loss"], res.metrics["stalled_samples"], [h["loss"] for h in res.history], min(res.metrics["margins"]), res.metrics["certificate"]["regime"]["theta"]["residual"], time.time()-t)
