"""The multi-host lab on one Linux machine: netns.py builds "hosts" from network namespaces, netns_ssh is the
ssh stand-in MPI launchers reach them through (used by tests/cluster/ and scripts/bench/multihost.py)."""
