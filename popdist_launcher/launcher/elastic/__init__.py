"""Elastic jobs (--min-np, --max-np, --host-discovery-script): their options, the discovery
script, membership, and the two agents, Horovod's elastic protocol and elastic restarts."""
