"""The utility stage: target utility against the attacker's advantage per mechanism setting (:mod:`.stage`)."""
