"""rlsched trainer: the replay simulator and, with the ``train`` extra, learning.

``trainer/sim`` needs numpy only (``rlsched simulate`` and ``compare`` run on the runtime
install); the policy network, imitation and RL need ``pip install 'rlsched[train]'``.

Importing it sets two process-wide things, once, for every command and worker process
that uses it: pinned numerics (:mod:`trainer.numerics`) and malloc settings that keep
freed memory (:mod:`trainer.alloc`). The helper never imports it.
"""

from . import alloc as _alloc
from . import numerics as _numerics

_numerics.pin()
_alloc.keep_freed_memory()
