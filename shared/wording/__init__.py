"""How values read to a person: an age at a glance, untrusted input quoted short."""
