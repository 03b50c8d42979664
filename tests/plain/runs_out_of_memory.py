"""A plain training script whose fourth step asks for more memory than any machine has (256 TiB):
the allocator refuses at once, as it would a real out-of-memory, without filling the machine first."""
import torch

model = torch.nn.Linear(8, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(100):
    loss = model(torch.randn(4, 8)).pow(2).mean()
    if step == 3:
        scratch = torch.empty(2**48, dtype=torch.uint8)  # the bug: a buffer sized in bytes, not in MiB
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
