-- Downgrade of pgqueue_0001: remove everything pgqueue installed (the pgqueue schema and its objects).
drop schema if exists pgqueue cascade;
