-- issue 26: jobs just enqueued in this transaction wait for their parents (children, parents,
-- on_parent_failure); returns how many parents are still open.
select pgqueue.add_dependencies(%s::uuid[], %s::uuid[], %s::text)
