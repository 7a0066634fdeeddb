"""Memory tasks (copy, denoise) with the agents' memory cores: Kerg et al. (2020), App. C-D.

* :mod:`.tasks` -- the two tasks, deterministic from a numpy generator (``MEMORY_TASKS``);
* :mod:`.models` -- input layer -> a core of :mod:`recurbench.agents.cores` -> linear readout;
* :mod:`.training` -- the reference code's training loop, accuracy at the scored steps, and the
  gradient-propagation measurements (``||dL/dh_t||`` per step; the kappa = nu + rho sweep);
* :mod:`.bench` -- steps per second of the step loop and of the fast paths.
"""

from recurbench.memory.tasks import MEMORY_TASKS, CopyTask, DenoiseTask, MemoryTask, make_task

__all__ = ["MEMORY_TASKS", "CopyTask", "DenoiseTask", "MemoryTask", "make_task"]
