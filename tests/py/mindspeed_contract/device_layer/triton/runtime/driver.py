"""The active driver as MindSpeed's ops/triton/utils.py reads it: the "npu" backend."""


class _Target:
    backend = "npu"
    arch = "Ascend910B"


class _Utils:
    @staticmethod
    def get_device_properties(device):
        return {"num_aicore": 24, "num_vectorcore": 48, "max_shared_mem": 196608}


class _Active:
    utils = _Utils()

    def get_current_target(self):
        return _Target()

    def get_current_device(self):
        return 0


active = _Active()
