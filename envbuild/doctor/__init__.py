"""`envbuild doctor`: thin probes (probes.py) collect raw host facts, a pure evaluation
(evaluate.py) turns them and the version matrix into findings (model.py) and the
`envbuild make` command this host should run; report.py renders them."""
