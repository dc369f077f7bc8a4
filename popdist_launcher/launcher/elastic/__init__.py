"""Elastic jobs (--min-np, --max-np, --host-discovery-script), below the agents that run them
(``launcher/agents/``): their options, the discovery script, membership, the failure policy, the
Horovod driver helper and the parts of a Horovod job (its link, hosts, workers and rounds)."""
