"""deepspeed.utils' ZeRO-3 leaf modules for scripts ported with `import zoffload as deepspeed`.

A leaf module is fetched whole: its forward pre-hook fetches every parameter of its subtree and its children get no
hooks of their own, so what its forward does inside (a mixture-of-experts block routing tokens to a data-dependent
subset of experts, a module reading its children's weights without calling them) neither changes the fetch order
the engine prefetches along nor fetches a child twice. The cost: the whole subtree's working weights are in memory
for the leaf's forward and again for its backward. Flag leaves before zoffload.initialize() (stage 3 installs its
hooks there; a flag set afterwards is refused, RuntimeError). Outside stage 3 the flag changes nothing.

The config's zero_optimization.leaf_module (classes, names, name_suffixes) flags leaves too, at initialize()
(apply_leaf_module_config): by default the mixture-of-experts blocks of Mixtral, Qwen2-MoE and Qwen3-MoE, as in
DeepSpeed 0.19. Semantics as DeepSpeed's deepspeed/utils/z3_leaf_module.py (the flag is the attribute `_z3_leaf`
on the module, a parameter of a flagged subtree gets `ds_z3_leaf_module` at initialize()); the code is zoffload's
own.
Not thread-safe against a concurrent initialize() of the same model.
"""
import warnings

import torch

# DeepSpeed 0.19's zero_optimization.leaf_module defaults: these mixture-of-experts blocks are leaves unless the config
# says otherwise (deepspeed/runtime/zero/leaf_module_config.py)
DEFAULT_LEAF_MODULE_CLASSES = ("transformers.models.mixtral.modeling_mixtral.MixtralSparseMoeBlock",
                               "transformers.models.qwen2_moe.modeling_qwen2_moe.Qwen2MoeSparseMoeBlock",
                               "transformers.models.qwen3_moe.modeling_qwen3_moe.Qwen3MoeSparseMoeBlock")


def z3_leaf_module(module):
    """Whether @module (an nn.Module) is flagged as a ZeRO-3 leaf."""
    return bool(getattr(module, "_z3_leaf", False))


def z3_leaf_parameter(param):
    """Whether @param belongs to the subtree of a flagged leaf module (set by a stage-3 initialize())."""
    return hasattr(param, "ds_z3_leaf_module")


def get_z3_leaf_modules(model):
    """The flagged modules of @model, in model.modules() order."""
    return [m for m in model.modules() if z3_leaf_module(m)]


def _refuse_if_initialized(model, what):
    for n, p in model.named_parameters():
        ref = getattr(p, "_zo_ref", None)
        if ref is not None and getattr(ref, "engine", None) is not None:
            raise RuntimeError("zoffload.utils.%s: parameter '%s' already belongs to a ZeRO stage 3 engine; flag leaf "
                               "modules before zoffload.initialize(), which installs the fetch hooks" % (what, n))


def set_z3_leaf_module(model, flag):
    """Flag (@flag True) or unflag the single module @model. RuntimeError after a stage-3 initialize() of it."""
    _refuse_if_initialized(model, "set_z3_leaf_module")
    model._z3_leaf = bool(flag)


def _matches(module, classes):
    cls = type(module)
    for c in classes:
        if isinstance(c, type):
            if isinstance(module, c):
                return True
        elif c == cls.__name__ or c == "%s.%s" % (cls.__module__, cls.__qualname__):
            return True
    return False


def _flag_by_class(model, leaf_module_classes, flag, raise_if_not_found, what, check=True):
    if not isinstance(model, torch.nn.Module):
        raise TypeError("zoffload.utils.%s: model must be a torch.nn.Module, got %s" % (what, type(model).__name__))
    classes = list(leaf_module_classes)
    for c in classes:
        if not isinstance(c, (type, str)):
            raise TypeError("zoffload.utils.%s: leaf_module_classes must hold classes or class names (the class's "
                            "__name__ or module.qualname), got %r" % (what, c))
    if check:
        _refuse_if_initialized(model, what)
    found = [m for m in model.modules() if _matches(m, classes)]
    if not found and raise_if_not_found:
        names = sorted({type(m).__name__ for m in model.modules()})
        raise ValueError("zoffload.utils.%s: no module of %s in the model (its module classes: %s)"
                         % (what, [c if isinstance(c, str) else c.__name__ for c in classes], ", ".join(names)))
    for m in found:
        m._z3_leaf = bool(flag)
    return found


def set_z3_leaf_modules(model, leaf_module_classes, raise_if_not_found=True):
    """Flag every module of @model that is an instance of one of @leaf_module_classes (classes, or names: a class's
    __name__ or its "module.qualname") as a ZeRO-3 leaf. Returns the flagged modules. ValueError when none matches
    (unless @raise_if_not_found is False; the message lists the model's module classes), TypeError for an entry
    that is neither a class nor a string, RuntimeError after a stage-3 initialize() of the model."""
    return _flag_by_class(model, leaf_module_classes, True, raise_if_not_found, "set_z3_leaf_modules")


def unset_z3_leaf_modules(model, leaf_module_classes, raise_if_not_found=True):
    """set_z3_leaf_modules' inverse: the matching modules are unflagged. Same returns and errors."""
    return _flag_by_class(model, leaf_module_classes, False, raise_if_not_found, "unset_z3_leaf_modules")


def _flag_by_name(model, patterns, flag, raise_if_not_found, what, suffix, check=True):
    """The modules whose name (model.named_modules()) is one of @patterns, or with @suffix ends with one."""
    if check:
        _refuse_if_initialized(model, what)
    found, missing, seen = [], [], set()
    for pat in patterns:
        hits = [m for n, m in model.named_modules() if (n.endswith(pat) if suffix else n == pat)]
        if not hits:
            missing.append(pat)
        for m in hits:
            if id(m) not in seen:
                seen.add(id(m))
                found.append(m)
    if missing and raise_if_not_found:
        raise ValueError("zoffload.utils.%s: no module %s %s in the model" % (
            what, "whose name ends with" if suffix else "named", missing))
    for m in found:
        m._z3_leaf = bool(flag)
    return found, missing


def set_z3_leaf_modules_by_name(model, module_names, flag=True, raise_if_not_found=True):
    """Flag (or with @flag False unflag) the modules named in @module_names (names as model.named_modules() gives
    them). Returns (the modules found, the names not found). ValueError naming the missing ones unless
    @raise_if_not_found is False; RuntimeError after a stage-3 initialize() of the model."""
    return _flag_by_name(model, module_names, flag, raise_if_not_found, "set_z3_leaf_modules_by_name", False)


def set_z3_leaf_modules_by_suffix(model, module_name_suffixes, flag=True, raise_if_not_found=True):
    """set_z3_leaf_modules_by_name for every module whose name ends with one of @module_name_suffixes
    (e.g. "mlp" flags layers.0.mlp, layers.1.mlp, ...). Returns (the modules found, the suffixes nothing matched);
    the same errors."""
    return _flag_by_name(model, module_name_suffixes, flag, raise_if_not_found, "set_z3_leaf_modules_by_suffix",
                         True)


def apply_leaf_module_config(model, block):
    """Flag @model's leaves from the config's zero_optimization.leaf_module @block (a dict, None when absent or
    null), as DeepSpeed 0.19's engine does at initialize: "classes" (default DEFAULT_LEAF_MODULE_CLASSES, the
    mixture-of-experts blocks of Mixtral, Qwen2-MoE and Qwen3-MoE), "names" and "name_suffixes" (default none),
    each a string or a list of strings (the library's config parser checked the types). What a key the config gives
    did not match is warned about (UserWarning), not refused. Called by the stage-3 engine before it installs its
    hooks. Returns the flagged modules."""
    block = block or {}

    def listed(key, default):
        v = block.get(key, default)
        return [v] if isinstance(v, str) else list(v)
    classes = listed("classes", DEFAULT_LEAF_MODULE_CLASSES)
    names, suffixes = listed("names", ()), listed("name_suffixes", ())
    found = _flag_by_class(model, classes, True, False, "apply_leaf_module_config", check=False) if classes else []
    by_name, missing = _flag_by_name(model, names, True, False, "apply_leaf_module_config", False, check=False)
    by_suffix, unmatched = _flag_by_name(model, suffixes, True, False, "apply_leaf_module_config", True, check=False)
    if missing:
        warnings.warn("zoffload: zero_optimization.leaf_module.names: no module named %s in the model" % missing)
    if unmatched:
        warnings.warn("zoffload: zero_optimization.leaf_module.name_suffixes: no module name ends with %s"
                      % unmatched)
    out, seen = [], set()
    for m in found + by_name + by_suffix:
        if id(m) not in seen:
            seen.add(id(m))
            out.append(m)
    if not out and "classes" in block and classes:
        warnings.warn("zoffload: zero_optimization.leaf_module.classes: no module of %s in the model; hooks are "
                      "installed as usual" % classes)
    return out
