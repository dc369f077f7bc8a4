"""``ipu.horovod.ipu_multi_replica_strategy``: IPUMultiReplicaStrategy, the older SDKs' name of
PopDistStrategy."""
from popdist_launcher.strategies.popdist_strategy import PopDistStrategy as IPUMultiReplicaStrategy

__all__ = ["IPUMultiReplicaStrategy"]
