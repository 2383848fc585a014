"""Factories with impossible inputs."""
import torch


def negative():
    return torch.nn.Linear(4, 4), [(-1, 4)]


def zero_batch():
    return torch.nn.Linear(4, 4), [(0, 4)]


def zero_tensor():
    return torch.nn.Linear(4, 4), torch.empty(0, 4)


def huge():
    return torch.nn.Linear(4, 4), [(2**62, 2**62, 4)]
