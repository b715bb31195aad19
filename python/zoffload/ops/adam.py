"""deepspeed.ops.adam: DeepSpeedCPUAdam is zoffload.optim.CPUAdam (the same constructor arguments: lr,
bias_correction, betas, eps, weight_decay, amsgrad (refused), adamw_mode, fp32_optimizer_states). Passed to
zoffload.initialize() as the client optimizer, its hyper-parameters configure the engine's Adam, as DeepSpeed
takes them from its own instance; used alone it steps fp32 CPU tensors (see CPUAdam)."""
from ..optim import CPUAdam as DeepSpeedCPUAdam

__all__ = ["DeepSpeedCPUAdam"]
