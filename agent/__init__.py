"""edgequal agent: runs on the device; never imports edgequal.host."""
