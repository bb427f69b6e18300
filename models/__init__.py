"""Model catalog: decoder-only transformer specs (dense, GQA, MoE, MLA) and their loaders."""
from models.catalog import list_models, load_model
from models.params import active_params, layer_params, total_params
from models.schema import MLAConfig, ModelSpec, MoEConfig

__all__ = ["MLAConfig", "ModelSpec", "MoEConfig", "active_params", "layer_params", "list_models",
           "load_model", "total_params"]
