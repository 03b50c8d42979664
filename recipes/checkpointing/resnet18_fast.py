"""Checkpointing recipe, ResNet-18 on CIFAR-10, fast twin: convolutions kept, the rest recomputed.

ResNet-18 (10 classes, weights=None) as its six stages (stem, layer1-4, head), Adam(lr=1e-4),
CrossEntropyLoss, 224 px crops. The input pipeline lives on the device so the pair measures the
memory/compute trade and nothing else. Each stage (the 112 px stem too) runs under selective
checkpointing: convolution outputs are saved; BatchNorm, ReLU and pooling are recomputed.
"""
import functools  # the policy's contexts, made per stage

import torch
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts  # selective AC

from common import harness
from common.workloads import resnet18

run = harness.start(__file__, __doc__)
model = resnet18.stages().to(run.device)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
criterion = torch.nn.CrossEntropyLoss()
batches = resnet18.train_batches(run)
KEEP = {torch.ops.aten.convolution.default, torch.ops.aten.addmm.default}  # the costly ops: save their outputs


def policy(ctx, op, *args, **kwargs):  # save what is costly to recompute; recompute the cheap rest
    return CheckpointPolicy.MUST_SAVE if op in KEEP else CheckpointPolicy.PREFER_RECOMPUTE  # per op, as it runs


def contexts(stage):  # the policy's two contexts; the recomputation leaves BatchNorm's statistics alone
    forward, recompute = create_selective_checkpoint_contexts(policy)  # save per the policy; replay the rest
    return forward, resnet18.batchnorm_stats_kept(stage, recompute)  # running stats updated once, not twice


for images, labels in run.loop(batches):
    with run.phase("forward"):
        outputs = images  # through the stages one by one
        for stage in model:  # one checkpoint per stage: the backward recomputes a stage at a time
            # the stem included: its 112 px activations are the largest
            outputs = checkpoint(stage, outputs, use_reentrant=False, context_fn=functools.partial(contexts, stage))
        loss = criterion(outputs, labels)
    with run.phase("backward"):
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
    with run.phase("optimizer"):
        optimizer.step()
    run.log_loss(loss)

run.finish()
