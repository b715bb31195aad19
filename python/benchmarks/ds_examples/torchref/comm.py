def get_rank():
    return 0
