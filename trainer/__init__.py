"""rlsched trainer: the replay simulator and, with the ``train`` extra, learning.

``trainer/sim`` needs numpy only (``rlsched simulate`` and ``compare`` run on the runtime
install); the policy network, imitation and RL need ``pip install 'rlsched[train]'``.
"""

from . import numerics as _numerics

_numerics.pin()
