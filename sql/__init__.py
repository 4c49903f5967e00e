"""The reviewed SQL of the catalog: `migrations/NNNN_name.sql`, applied in order by
`catalog.db.migrate`. This directory is the package `catalog.sql` once installed (pyproject.toml
maps it), so the runner reads the files through importlib.resources from a wheel as from the tree."""
