"""deepspeed.moe.utils' split_params_into_different_moe_groups_for_optimizer, for models without MoE layers."""


def split_params_into_different_moe_groups_for_optimizer(param_groups, max_group_size=178956971):
    """DeepSpeed's helper moves each group's expert parameters into groups of their own. zoffload has no MoE layers,
    so a model's groups come back unchanged, as a list of dicts (a dict or a tuple of dicts is taken as DeepSpeed
    takes it). A parameter DeepSpeed marks as an expert's (attribute `allreduce` False, set by deepspeed.moe's
    layers) raises NotImplementedError naming its group; anything else than dicts with "params" raises ValueError.
    @max_group_size is accepted and unused."""
    if isinstance(param_groups, dict):
        param_groups = [param_groups]
    elif isinstance(param_groups, tuple):
        param_groups = list(param_groups)
    if not isinstance(param_groups, list) or not all(isinstance(g, dict) and "params" in g for g in param_groups):
        raise ValueError("split_params_into_different_moe_groups_for_optimizer: param_groups must be a dict or a "
                         "list/tuple of dicts with \"params\", not %s" % type(param_groups).__name__)
    out = []
    for k, g in enumerate(param_groups):
        g = dict(g)
        g["params"] = list(g["params"])
        for p in g["params"]:
            if getattr(p, "allreduce", True) is False:
                raise NotImplementedError("split_params_into_different_moe_groups_for_optimizer: group %d (%s) holds "
                                          "an expert parameter (allreduce=False); zoffload has no MoE layers"
                                          % (k, g.get("name", "unnamed")))
        out.append(g)
    return out
