"""Reaching a device and trusting what it says: ``--device`` resolution, ``known_devices``
(pinned keys), the device's proof of identity, the nonce ledger, verification of a report,
this host's runs (list, fetch, cancel), device profiles and the qualify call."""
