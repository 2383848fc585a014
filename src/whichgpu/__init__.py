"""whichgpu: how fast will my model train or serve on that GPU, will it fit, which GPU to get."""

__version__ = "0.1.0"
