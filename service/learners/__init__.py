"""Online multiclass learners with bandit feedback, one algorithm per module.

Look learners up by name through :data:`service.learners.base.learners`; modules register
themselves when imported, and the registry imports every module of this package on first use.
"""

from service.learners.base import Decision, Learner, ParamError, learners, make_learner

__all__ = ["Decision", "Learner", "ParamError", "learners", "make_learner"]
