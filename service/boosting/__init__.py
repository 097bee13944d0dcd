"""Batch AdaBoost.MH with discrete stumps and bandit-aided stump search (seed 003, ALGORITHMS.md §7).

* :mod:`service.boosting.mh`: weights, vectorised stump search, reweighting, the stump ensemble;
* :mod:`service.boosting.bandits`: UCB1 and log-domain EXP3.P over the features, and the reward;
* :mod:`service.boosting.train`: the boosting loop;
* :mod:`service.boosting.experiment`: train/held-out splits and error curves (command, reproduction).
"""
