-- Effect rows, distinct (workflow, step) pairs among them, and pairs written more than once.
select count(*),
       count(distinct (seq, step)),
       (select count(*) from (select 1 from bench_effects group by seq, step having count(*) > 1) twice)
from bench_effects
