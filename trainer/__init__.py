"""rlsched trainer: simulator, imitation and reinforcement learning (needs the ``train`` extra)."""
