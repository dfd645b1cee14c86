"""Measuring the network: collective sweeps on torchrun ranks (:mod:`.sweep`), emulated clusters of network
namespaces with shaped links (:mod:`.emulate`), fitting environments to what was measured (:mod:`.fit`), and
reading nccl-tests output (:mod:`.nccl_tests`)."""
