"""Governance: the slices that change who may do what, each with its routes: `namespace`
(catalogs, schemas and memory stores, their owners and trust policies), `permissions` (grants),
`groups` and `principals` (SCIM). What they change is decided on by the access seam below them
(`catalog.access`), which every slice goes through."""
