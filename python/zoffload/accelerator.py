"""deepspeed.accelerator for scripts ported with `import zoffload as deepspeed`: get_accelerator() answers for the
device torch computes on here, CUDA when torch sees a GPU, else the CPU (DeepSpeed picks its accelerator the same
way, or from DS_ACCELERATOR). The calls DeepSpeed's examples make (device_name, set_device, is_available,
communication_backend_name, ...); each is torch's own underneath."""
import torch


class Accelerator:
    """One device kind: "cuda" or "cpu". Thread-safe as torch's calls underneath are."""

    def __init__(self, name):
        self._name = name

    @property
    def cuda(self):
        return self._name == "cuda"

    def device_name(self, device_index=None):
        """"cuda" or "cpu"; with @device_index on CUDA "cuda:N" (as DeepSpeed's CUDA accelerator)."""
        return self._name if device_index is None or not self.cuda else "cuda:%d" % device_index

    def current_device(self):
        return torch.cuda.current_device() if self.cuda else 0

    def current_device_name(self):
        return "cuda:%d" % torch.cuda.current_device() if self.cuda else "cpu"

    def set_device(self, device_index):
        if self.cuda:
            torch.cuda.set_device(device_index)

    def device_count(self):
        return torch.cuda.device_count() if self.cuda else 1

    def is_available(self):
        return torch.cuda.is_available() if self.cuda else True

    def communication_backend_name(self):
        """torch.distributed's backend for this device: "nccl" on CUDA, "gloo" on the CPU (DeepSpeed's CPU
        accelerator names oneCCL, "ccl", which zoffload does not use)."""
        return "nccl" if self.cuda else "gloo"

    def synchronize(self, device_index=None):
        if self.cuda:
            torch.cuda.synchronize(device_index)

    def manual_seed(self, seed):
        torch.manual_seed(seed)

    def manual_seed_all(self, seed):
        torch.manual_seed(seed)

    def is_bf16_supported(self):
        return torch.cuda.is_bf16_supported() if self.cuda else True

    def is_fp16_supported(self):
        return self.cuda

    def empty_cache(self):
        if self.cuda:
            torch.cuda.empty_cache()

    def memory_allocated(self, device_index=None):
        return torch.cuda.memory_allocated(device_index) if self.cuda else 0

    def max_memory_allocated(self, device_index=None):
        return torch.cuda.max_memory_allocated(device_index) if self.cuda else 0

    def on_accelerator(self, tensor):
        return tensor.device.type == self._name

    def pin_memory(self, tensor, align_bytes=1):
        return tensor.pin_memory() if self.cuda else tensor


_accelerator = None


def get_accelerator():
    """The process's Accelerator, made at the first call (CUDA when torch.cuda.is_available(), else the CPU)."""
    global _accelerator
    if _accelerator is None:
        _accelerator = Accelerator("cuda" if torch.cuda.is_available() else "cpu")
    return _accelerator
