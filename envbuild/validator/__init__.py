"""envbuild's validator: does a built environment match its spec, and does it work?

A package (rules, judges, checks, supervisor) that runs with the standard library and torch
only, on Python 3.9+, and never imports the rest of envbuild. Images carry it as one
deterministic zipapp (/opt/envbuild/validator.pyz, built by envbuild.validator.zipapp) run as
`python /opt/envbuild/validator.pyz --spec spec.json --peaks peaks.json --in-image`; on a host
it runs as `python -m envbuild.validator ...`.

The supervising process runs the stdlib checks itself and the torch checks in a worker
subprocess, one at a time, each with a deadline: a check that hangs (a stuck driver call) or
kills its process (a segfaulting wheel) fails alone, and the report is still written.
Decisions (versions, arch coverage, tolerances, perf verdicts) are pure functions of recorded
facts, so they are tested without a GPU. `envbuild.validator.rules` holds the rules the core
shares with it (versions, version codes, GPU architectures).
"""
