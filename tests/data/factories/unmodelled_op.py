"""A model calling an op with no cost formula: torch.cdist (aten._euclidean_dist on the meta
device) after a Linear. Coverage must name it and every report must warn."""
import torch


class Distances(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(64, 64)
        self.centres = torch.nn.Parameter(torch.randn(32, 64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cdist(self.proj(x), self.centres).sum(-1)


def make(batch_size=8):
    return Distances(), [(batch_size, 64)]
