"""Factories that take sizes: `make` honours batch_size (default 2); `ignores` takes it but builds batch 3."""
import torch


def make(batch_size=2):
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 2)), [(batch_size, 16)]


def ignores(batch_size=1):
    return torch.nn.Linear(16, 2), [(3, 16)]


def seq_first(batch_size=2):
    # (sequence, batch, features), as nn.LSTM takes by default
    return torch.nn.LSTM(8, 8), [(5, batch_size, 8)]
