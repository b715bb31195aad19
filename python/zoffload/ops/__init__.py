"""deepspeed.ops for scripts ported with `import zoffload as deepspeed`: the optimizer classes they construct
before initialize(). zoffload compiles nothing at first use; the classes are zoffload's own."""
from . import adam  # noqa: F401
