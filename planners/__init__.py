"""meshcast's planners: search parallel plans with simulate() as the cost model.

``search`` (planners.search) runs a best-first branch and bound over the plan space
(planners.space) with bounds from the simulator's own pieces (planners.bounds); ``solve_chain``
and ``plan_heterogeneous`` (planners.ilp) decide layers per stage, recompute per stage and GPU
types per stage as integer programs; planners.report formats results (launch configs: simulator.frameworks.launch).
"""
from planners.search import Candidate, Objective, SearchResult, brute_force, search
from planners.space import Constraints, Shape, make_constraints

__all__ = ["Candidate", "Constraints", "Objective", "SearchResult", "Shape", "brute_force", "make_constraints",
           "search"]
