"""Measurement on a real GPU: NVML discovery, micro-benchmarks, step profiling."""
