"""What auditors read over HTTP (`auditors`: events, the chain's verification, lineage). The
recorder that appends every request's event is `catalog.recorder`, below every slice; lineage
is `catalog.lineage`."""
