-- pgqueue.progress(id, token, fraction, note) -> whether the report was stored
-- A running handler's progress (context.progress), fenced by its token: a stale holder's report
-- is refused. Stored on the job's row as {"fraction", "note", "attempt", "at"}; read it with
-- pgqueue.job_state. The fraction is null or from 0 to 1; the note null or JSON of at most 4096
-- bytes. The worker throttles the calls (about one a second per job).
-- From psql:  select pgqueue.progress('<job id>', <token>, 0.5, '{"rows": 5000}');
create or replace function pgqueue.progress(p_id uuid, p_token bigint, p_fraction double precision, p_note jsonb)
returns boolean
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
begin
    if p_fraction is not null and not (p_fraction >= 0 and p_fraction <= 1) then
        raise exception 'pgqueue.progress: the fraction must be null or a number from 0 to 1, got %', p_fraction
            using errcode = '22023';
    end if;
    if p_note is not null and octet_length(p_note::text) > 4096 then
        raise exception 'pgqueue.progress: the note must be at most 4096 bytes of JSON, got %', octet_length(p_note::text)
            using errcode = '22023';
    end if;
    update pgqueue.jobs j
    set progress = jsonb_build_object('fraction', p_fraction, 'note', p_note, 'attempt', j.attempts,
                                      'at', clock_timestamp())
    where j.id = p_id and j.token = p_token;
    return found;
end
$$;

comment on function pgqueue.progress(uuid, bigint, double precision, jsonb) is
    'pgqueue: store a running handler''s progress report on its job (fenced by its token).';
