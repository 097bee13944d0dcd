"""How much of a Hoeffding forest's leaf statistics its memory bound dropped, in one seed-001 run.

Runs one booster of the seed-001 table (default: AdaBandit on isolet at the table's setting, seed 0,
one-hot input) for ``--rounds`` rounds and prints the entry pool's size against
``hoeffding_tree.MAX_ENTRY_BYTES`` and how many leaf rows have dropped their statistics (they keep
counting classes but no longer split). docs/REPRODUCTION.md cites its output for the isolet row.

    .venv/bin/python scripts/forest_bound_check.py [--learner adabandit] [--rounds 30000] [--seed 0]
"""

from __future__ import annotations

import argparse

from lab.repro.seed001 import _params, new_run
from lab.sim.stream import run_stream
from service.learners.weak.hoeffding_tree import ENTRY_BYTES, MAX_ENTRY_BYTES
from service.sampling import DecisionIds


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--learner", default="adabandit", choices=["adabandit", "banditbbm", "binbandit"])
    p.add_argument("--rho", type=float, default=0.005)
    p.add_argument("--rounds", type=int, default=30_000)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    params = {**_params("isolet", a.learner, a.rho, 10), "weight_divide": True}
    model, X, y = new_run(a.learner, "isolet", params, a.seed, a.rounds, "onehot")
    correct = run_stream(model, X, y, DecisionIds.for_seed(a.seed))
    forest = model.trees_
    rows = int(forest.pool_[0])
    dropped = int((~forest.active_[:rows]).sum())
    print(
        f"{a.learner} isolet seed {a.seed} {params}: {len(correct):,} rounds, accuracy {correct.mean():.3f}"
    )
    pool, bound = forest.key_.size * ENTRY_BYTES / 2**20, MAX_ENTRY_BYTES / 2**20
    print(f"entry pool {pool:.1f} MiB of the {bound:.0f} MiB bound; {dropped:,} of {rows:,} leaves dropped")


if __name__ == "__main__":
    main()
