"""edgequal agent: runs on the device; never imports edgequal.host."""

__version__ = "0.1.0"
