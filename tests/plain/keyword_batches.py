"""A plain training script with no DataLoader whose model takes its batch as keyword arguments, as a
Hugging Face model is called: model(input_ids=..., labels=...)."""
import torch


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed, self.head = torch.nn.Embedding(100, 32), torch.nn.Linear(32, 2)

    def forward(self, input_ids=None, labels=None):
        logits = self.head(self.embed(input_ids).mean(1))
        return torch.nn.functional.cross_entropy(logits, labels)


model = Net()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
for _ in range(400):
    batch = {"input_ids": torch.randint(0, 100, (24, 16)), "labels": torch.randint(0, 2, (24,))}
    loss = model(**batch)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
