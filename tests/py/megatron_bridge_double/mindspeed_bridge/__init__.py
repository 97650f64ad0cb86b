"""MindSpeed-Bridge contract double (see ../README.md)."""
