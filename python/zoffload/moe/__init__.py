"""deepspeed.moe for scripts ported with `import zoffload as deepspeed`: zoffload has no mixture-of-experts layers;
moe.utils keeps the one helper such scripts call on models without them."""
from . import utils  # noqa: F401
