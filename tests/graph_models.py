"""The small models `NAME.graph` is tested on: tests/test_graph.py imports them, and
tests/browser/test_graph.py copies this file next to the notebook it writes."""

import torch


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)
        self.act = torch.nn.ReLU()

    def forward(self, x):
        return x + self.act(self.fc(x))


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = torch.nn.Linear(4, 8)
        self.blocks = torch.nn.Sequential(Block(), Block())
        self.out = torch.nn.Linear(8, 2)

    def forward(self, x):
        return self.out(self.blocks(self.inp(x)))


class Root(torch.nn.Module):
    """Makes nan from finite inputs: the square root of a linear layer's negative outputs."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)

    def forward(self, x):
        return torch.sqrt(self.fc(x)) * 2
