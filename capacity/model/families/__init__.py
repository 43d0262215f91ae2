"""The model families: one module per family, each defining a `FAMILY` (a `capacity.model.family.Family`).

No list to edit: `capacity.model.family.all_families` discovers the modules of this folder, so a new family is one new
file. `capacity.model.registry` picks the family of a config.
"""
