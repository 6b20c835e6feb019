-- Another session's transaction takes a transaction id and stays open: the database's xmin
-- horizon stays at it, so no dead row newer than it can be removed until it ends.
select txid_current()
