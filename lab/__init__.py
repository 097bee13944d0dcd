"""clickboost's lab: research code around the service, never imported by it.

The stream simulator and datasets (:mod:`lab.sim`), paper reproductions (:mod:`lab.repro`),
benchmarks (:mod:`lab.bench`), the seed-003 AdaBoost.MH experiments (:mod:`lab.boosting`), the run
store of long runs (:mod:`lab.runcache`) and the local Redis + replicas helper (:mod:`lab.cluster`).
Its commands (``clickboost simulate|reproduce|bench|adaboost-mh``) plug into the service's command
line through the ``clickboost.commands`` entry points; it needs the ``lab`` extra.
"""
