"""envbuild's validator: does a built environment match its spec, and does it work?

A package that runs with the standard library and torch only, on Python 3.9+, and never
imports the rest of envbuild:
- `supervisor` (the CLI and the report), `procs` (how it runs itself again: the worker, a
  distributed child) and `checks` (the check table: ids, titles, time limits, code);
- the checks: `host` (stdlib only, run in the supervisor), `facts` (judged from probed facts),
  `numerics`, `training`, `compile_smoke`, `perf`, `dist` and `mps` (Apple's Metal backend),
  on the worker's `context`;
- `probes`, the only code that touches torch: plain data (facts) out;
- `judges/` (spec, driver, libs, gpuless, wsl2, macos, numerics, perf, toolchain, results): pure
  decisions on recorded facts;
- `rules`, what envbuild's core shares with it (versions, version codes, GPU architectures);
- `zipapp`, its build.

Images carry it as one deterministic zipapp (/opt/envbuild/validator.pyz) run as
`python /opt/envbuild/validator.pyz --spec spec.json --peaks peaks.json --in-image`; on a host
it runs as `python -m envbuild.validator ...`.

The supervising process runs the stdlib checks itself and the torch checks in a worker
subprocess, one at a time, each with a deadline: a check that hangs (a stuck driver call) or
kills its process (a segfaulting wheel) fails alone, and the report is still written.
Decisions (versions, arch coverage, tolerances, perf verdicts) are pure functions of recorded
facts, so they are tested without a GPU.
"""
