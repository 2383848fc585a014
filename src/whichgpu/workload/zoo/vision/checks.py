"""Request validation shared by the vision builders (torch-free)."""

from __future__ import annotations

from whichgpu.errors import InputError
from whichgpu.workload.zoo.base import BuildRequest

TASKS = ("train", "infer")


def check_request(req: BuildRequest, default_image: int, min_image: int = 32) -> int:
    """Validate a vision build request and return the image side to use.

    Raises `InputError` for a non-positive batch, an unknown task or an image smaller than the
    network's total stride (``min_image``).
    """
    if req.task not in TASKS:
        raise InputError(f"task must be one of {', '.join(TASKS)}, got {req.task!r}")
    if req.batch_size <= 0:
        raise InputError(f"batch_size must be > 0, got {req.batch_size}")
    image = default_image if req.image_size is None else req.image_size
    if image < min_image:
        raise InputError(f"image_size must be >= {min_image} for this model, got {image}")
    return image


def int_option(req: BuildRequest, key: str, default: int, minimum: int = 1) -> int:
    """A positive integer builder option (``BuildRequest.options``), validated."""
    value = req.option(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise InputError(f"option {key!r} must be an integer >= {minimum}, got {value!r}")
    return value
