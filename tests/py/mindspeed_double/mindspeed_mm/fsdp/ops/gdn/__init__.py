"""Part of the MindSpeed-MM contract double (see tests/py/mindspeed_double/README.md)."""
