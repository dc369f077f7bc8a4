"""The module that imports the IPU layer (imported after models.py)."""
from tensorflow.python import ipu


def configure():
    config = ipu.config.IPUConfig()
    config.auto_select_ipus = 1
    config.configure_ipu_system()
    return ipu.ipu_strategy.IPUStrategy()
