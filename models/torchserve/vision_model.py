"""A small convolutional digit classifier as an archive's --model-file, for TorchServe's
built-in `image_classifier` handler: a 3x224x224 image (ImageClassifier's own transforms)
in, ten scores out. BaseHandler builds the one nn.Module class here with no arguments."""

import torch
from torch import nn


class DigitsCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, kernel_size=8, stride=8), nn.ReLU(), nn.AdaptiveAvgPool2d(1)
        )
        self.out = nn.Linear(8, 10)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.out(torch.flatten(self.features(images), 1))
