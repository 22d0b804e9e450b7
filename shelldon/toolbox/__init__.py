"""The toolbox on disk, ``<home>/toolbox/``: live, staged and quarantined self-coded tools.

``toolbox`` (``Toolbox``) is its sole writer: stage, gate, promote, quarantine, retire,
restore. ``manifest`` reads the tool convention by AST and writes the live manifest from the
owner's approvals; ``gate``, ``gate_scan`` and ``gate_probe`` are the gate; ``policy`` says
when model-written code may run at all; ``diff`` shows what a replacement changes;
``archive`` and ``importer`` move live tools between devices; ``legacy`` moves a toolbox kept
in the workspace by older versions.
"""
