"""Batch AdaBoost.MH with discrete stumps and bandit-aided stump search (seed 003, ALGORITHMS.md §7).

The machinery of the served learner :mod:`service.learners.adaboost_mh`, which retrains from its
click log with it:

* :mod:`service.learners.stumps.mh`: weights, vectorised stump search, reweighting, the ensemble;
* :mod:`service.learners.stumps.bandits`: UCB1 and log-domain EXP3.P over the features, the reward;
* :mod:`service.learners.stumps.train`: the boosting loop.

Train/held-out splits and error curves of the seed-003 experiments live in :mod:`lab.boosting`.
"""
