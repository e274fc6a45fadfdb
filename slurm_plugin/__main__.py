"""``python -m slurm_plugin`` runs the ``rlsched`` command line."""

from .cli import main

main()
