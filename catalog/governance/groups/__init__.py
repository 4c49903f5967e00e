"""Groups: the SCIM 2.0 subset, managed by the metastore admin."""
