"""The authorization policy: `model.conf`, the Casbin model `catalog.governance.engine` loads, and
README.md, the rules for people. This directory is the package `catalog.policies` once installed
(pyproject.toml maps it), read through importlib.resources from a wheel as from the tree."""
