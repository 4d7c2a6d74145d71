"""The digits classifier's architecture as an archive's --model-file: BaseHandler builds
the one nn.Module class here with no arguments and loads the state dict into it."""

import torch
from torch import nn
from torch.nn import functional as F

PIXEL_SCALE = 1.0 / 16.0


class DigitsMLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.hidden = nn.Linear(64, 64)
        self.out = nn.Linear(64, 10)

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.out(F.relu(self.hidden(pixels * PIXEL_SCALE))), dim=-1)
