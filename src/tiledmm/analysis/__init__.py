"""Why the kernels are as fast as they are: device properties, occupancy, traffic models."""
