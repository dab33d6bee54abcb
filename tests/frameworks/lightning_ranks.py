"""A Lightning script that knows only torch, run on 2 ranks by tests/test_frameworks.py:
`torchrun --nproc_per_node 2 -m fastload run lightning_ranks.py ROOT OUT`.

The datamodule returns torch's DataLoader (shuffle=True); Lightning's DDP (gloo, CPU) rebuilds
it around a DistributedSampler from the arguments it was built with. Each rank trains 2
epochs, then writes OUT.rankN: the loader that ran (its class and path) and the labels of
every step, by epoch.
"""

import json
import sys

import pytorch_lightning as pl
import torch
import torchvision
from torchvision import transforms as T

ROOT, OUT = sys.argv[1], sys.argv[2]


class Data(pl.LightningDataModule):
    def setup(self, stage):
        self.dataset = torchvision.datasets.ImageFolder(ROOT, transform=T.Compose([T.RandomResizedCrop(16),
                                                                                   T.ToTensor()]))

    def train_dataloader(self):
        return torch.utils.data.DataLoader(self.dataset, batch_size=2, shuffle=True)


class Model(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(3 * 16 * 16, 16)
        self.seen = []

    def training_step(self, batch, batch_idx):
        images, labels = batch
        self.seen.append({"epoch": self.current_epoch, "labels": labels.tolist()})
        return torch.nn.functional.cross_entropy(self.linear(images.flatten(1)), labels)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


model = Model()
trainer = pl.Trainer(max_epochs=2, accelerator="cpu", devices=2, strategy="ddp", logger=False,
                     enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
trainer.fit(model, datamodule=Data())
loader = trainer.train_dataloader
with open(f"{OUT}.rank{trainer.global_rank}", "w") as f:
    json.dump({"class": type(loader).__name__, "path": getattr(loader, "path", "torch"),
               "sampler": type(loader.sampler).__name__, "steps": model.seen}, f)
