def set_z3_leaf_modules(model, leaf_module_classes):
    """The reference has no ZeRO-3 hooks: the flag changes nothing. Returns the modules whose class name matches."""
    found = [m for m in model.modules() if type(m).__name__ in leaf_module_classes]
    if not found:
        raise ValueError("no module of %s in the model" % (leaf_module_classes,))
    return found
