-- pgqueue.partition_limits_problem(concurrency, rate_limit, rate_period_seconds, burst, weight) -> why
-- these per-partition limits are refused, or null. Issue 28: the checks of set_partition_limits and
-- set_partition_limit, the bounds of pgqueue.set_limits (weight: 1 to 1000, or null).
create or replace function pgqueue.partition_limits_problem(p_concurrency integer, p_rate_limit integer,
                                                            p_rate_period_seconds double precision,
                                                            p_burst integer, p_weight integer)
returns text
language sql
immutable
set search_path = pg_catalog, pg_temp
as $$
    select case
        when p_concurrency is not null and p_concurrency < 1 then
            format('concurrency must be >= 1 (or null for no limit), got %s', p_concurrency)
        when (p_rate_limit is null) <> (p_rate_period_seconds is null) then
            'give both rate_limit and rate_period_seconds, or neither'
        when p_rate_limit is not null and (p_rate_limit < 1 or not (p_rate_period_seconds >= 0.001
                                                                   and p_rate_period_seconds <= 31536000)) then
            format('rate must be >= 1 per period of 0.001 to 31536000 seconds, got %s per %s',
                   p_rate_limit, p_rate_period_seconds)
        when p_burst is not null and p_rate_limit is null then
            format('burst %s needs a rate limit (it is the rate''s bucket capacity)', p_burst)
        when p_burst is not null and p_burst < 1 then
            format('burst must be >= 1 (or null for the rate per period), got %s', p_burst)
        when p_weight is not null and p_weight not between 1 and 1000 then
            format('weight must be from 1 to 1000 (or null for 1), got %s', p_weight)
    end
$$;

comment on function pgqueue.partition_limits_problem(integer, integer, double precision, integer, integer) is
    'pgqueue: why per-partition limits (concurrency, rate, burst, weight) are refused, or null.';
