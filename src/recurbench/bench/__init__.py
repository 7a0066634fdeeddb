"""The benchmarks behind ``recurbench bench``: each module times one layer of the stack against a
reference or a peer, on the device asked for, and returns plain data the command line prints.

* :mod:`~recurbench.bench.rem`: the REM operator (dense against the default path) and an RSA layer's
  training-step overhead;
* :mod:`~recurbench.bench.memattn`: one memory-attention step (Triton against the PyTorch reference);
* :mod:`~recurbench.bench.kernels`: every Triton kernel compiled ahead of time (registers, spills,
  occupancy), at the shapes the suites use;
* :mod:`~recurbench.bench.forecast`: seconds per training epoch of a forecaster at paper settings;
* :mod:`~recurbench.bench.rl`: PPO steps per second per memory core, beside sb3-contrib;
* :mod:`~recurbench.bench.memory`: training steps per second of the memory tasks' sequence models.

Benchmarks sit above everything they time: nothing in the library imports them.
"""
