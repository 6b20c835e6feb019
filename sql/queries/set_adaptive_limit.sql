-- issue 28: a queue's adaptive limit bounds (pgqueue.set_adaptive_limit; nulls: off).
select pgqueue.set_adaptive_limit(%s::text, %s::integer, %s::integer)
