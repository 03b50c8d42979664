"""A PyTorch Geometric script in the style of its examples: a GCN classifying small random graphs,
batched by PyG's own `DataLoader` (a torch DataLoader that collates graphs into one `Batch`), trained
with torch.optim's Adam. `--epochs`."""
import argparse

import torch
from torch_geometric.data import Data
from torch_geometric.loader import DataLoader
from torch_geometric.nn import GCNConv, global_mean_pool

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=6)
args = parser.parse_args()

torch.manual_seed(0)
graphs = []
for i in range(512):
    n = 16
    edges = torch.randint(0, n, (2, 48))
    x = torch.randn(n, 8) + (i % 2)
    graphs.append(Data(x=x, edge_index=edges, y=torch.tensor([i % 2])))
loader = DataLoader(graphs, batch_size=32, shuffle=True)


class GCN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1, self.conv2 = GCNConv(8, 64), GCNConv(64, 64)
        self.head = torch.nn.Linear(64, 2)

    def forward(self, x, edge_index, batch):
        x = self.conv2(self.conv1(x, edge_index).relu(), edge_index).relu()
        return self.head(global_mean_pool(x, batch))


model = GCN()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
for epoch in range(args.epochs):
    for data in loader:
        loss = torch.nn.functional.cross_entropy(model(data.x, data.edge_index, data.batch), data.y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print(f"epoch {epoch}: loss {loss.item():.3f}")
