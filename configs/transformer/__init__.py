"""Translation configs (Vaswani et al. 2017) and the rows of its Table 3."""
