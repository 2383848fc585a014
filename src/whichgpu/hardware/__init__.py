"""Hardware as data: GPU specs from the catalog (one TOML file per accelerator)."""

from whichgpu.hardware.catalog import Catalog, load_catalog
from whichgpu.hardware.spec import COMPUTE_DTYPES, GpuSpec

__all__ = ["COMPUTE_DTYPES", "Catalog", "GpuSpec", "load_catalog"]
