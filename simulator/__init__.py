"""meshcast's simulator: lower model x plan x hardware to ops, cost them, schedule the step."""
from simulator.calibration import DEFAULT as DEFAULT_CALIBRATION
from simulator.calibration import Calibration, load_calibration
from simulator.engine import PlanEvaluation, evaluate_plans, simulate
from simulator.plan import ParallelPlan, load_plan, plan_from_dict, resolve_plan
from simulator.result import Result

__all__ = ["PlanEvaluation", "evaluate_plans", "Calibration", "DEFAULT_CALIBRATION", "ParallelPlan", "Result", "load_calibration",
           "load_plan", "plan_from_dict", "resolve_plan", "simulate"]
