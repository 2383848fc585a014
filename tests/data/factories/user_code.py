"""Factories whose code misbehaves: prints, exits, interrupts, hangs, imports a module beside it."""
import os
import sys
import time

import torch

print("printed while importing")


class Loud(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        print("printed in forward")
        return self.lin(x)


def prints(batch_size=2):
    print("printed in the factory")
    os.write(1, b"written to file descriptor 1\n")
    return Loud(), [(batch_size, 4)]


def exit0():
    sys.exit(0)


def exit3():
    sys.exit(3)


def os_exit0():
    os._exit(0)


def interrupt():
    raise KeyboardInterrupt


def hangs():
    time.sleep(600)
    return torch.nn.Linear(4, 4), [(2, 4)]


def spins():
    while True:
        pass


def sibling():
    import factory_sibling

    return torch.nn.Linear(factory_sibling.WIDTH, 4), [(2, factory_sibling.WIDTH)]
