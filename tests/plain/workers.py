"""A plain script with a hand-written update (no optimizer) over a DataLoader with two workers that
restart every epoch of three batches, and a transform that is an nn.Module run inside the workers."""
import torch
from torch.utils.data import DataLoader, Dataset


class Samples(Dataset):
    transform = torch.nn.Identity()  # torchvision's transforms are modules too

    def __len__(self):
        return 48

    def __getitem__(self, i):
        return self.transform(torch.randn(32, generator=torch.Generator().manual_seed(i))), torch.tensor(i % 2.0)


if __name__ == "__main__":
    model = torch.nn.Linear(32, 1)
    loader = DataLoader(Samples(), batch_size=16, num_workers=2)
    for _epoch in range(1000):
        for x, y in loader:
            loss = torch.nn.functional.mse_loss(model(x).squeeze(1), y)
            model.zero_grad()
            loss.backward()
            with torch.no_grad():
                for p in model.parameters():
                    p -= 0.01 * p.grad
