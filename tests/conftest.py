"""Shared fixtures. Ray tests share one fake two-node cluster (2 nodes x 8 logical GPUs)."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="session")
def ray_cluster():
    """A real multi-raylet Ray cluster on this machine, with node-rank labels; yields a Cluster."""
    import ray
    from ray.cluster_utils import Cluster as RayTestCluster

    from rlinf.scheduler import Cluster

    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    fake = RayTestCluster(
        initialize_head=True,
        head_node_args={"num_cpus": 2, "num_gpus": 8, "labels": {"rlinf.io/node-rank": "0"}},
    )
    fake.add_node(num_cpus=2, num_gpus=8, labels={"rlinf.io/node-rank": "1"})
    cluster = Cluster(num_nodes=2, address=fake.address)
    yield cluster
    ray.shutdown()
    fake.shutdown()
