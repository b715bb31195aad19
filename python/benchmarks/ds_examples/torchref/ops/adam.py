import torch


class DeepSpeedCPUAdam(torch.optim.Optimizer):
    """Holds DeepSpeedCPUAdam's hyper-parameters for the reference engine, which steps torch's Adam."""

    def __init__(self, model_params, lr=1e-3, bias_correction=True, betas=(0.9, 0.999), eps=1e-8,
                 weight_decay=0, amsgrad=False, adamw_mode=True, fp32_optimizer_states=True):
        super().__init__(model_params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                                            adamw_mode=adamw_mode))
