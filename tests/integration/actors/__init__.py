"""Integration tests of the actor substrate: the door, the in-process driver, let it crash."""
