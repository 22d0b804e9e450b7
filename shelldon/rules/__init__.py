"""The trusted rules, as plain decisions: what the arbiter does with each event, the owner's
commands, the turn's ceilings, what a RISKY call may be, repair, and the fixed replies. No
sqlite, no process, no socket: a test of a rule needs none of them."""
