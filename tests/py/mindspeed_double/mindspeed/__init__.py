"""Contract double of Ascend MindSpeed for CPU tests (see ../README.md). Not the real library."""

IS_CONTRACT_DOUBLE = True
