"""Sweep configs (`get_sweep(arg)`, run by `python -m train.sweep`): the papers' ablation tables."""
