"""A serving simulator for a GPU you do not have: the server's own in-flight scheduler policy
(engine.batching.policy) on a virtual clock, each step's duration predicted for the chosen GPU, GPU count, engine
class and batch composition (engine.simulate.steps), over the load generator's workloads; results in the load
generator's shape (points, knee) with an interval from the step times' intervals. SGLang's CPU simulator and Vidur
(Agrawal et al., MLSys 2024) do the same for their schedulers.

Modules: steps (step-time models and the one adapter over the calculator), clock (the virtual scheduler), sweep
(levels, three runs over the interval, the JSON), spec (SimulateSpec), solve (the inverse questions: the longest
context that fits, the most users at an SLO, the cheapest GPU type and count).
"""
