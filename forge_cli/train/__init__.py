"""Training: samples from recorded calls, algorithms, trainer backends and the step loop (``forge train``)."""
