-- Log-line prefix grammar, as SQL macros (loaded once per staging database).
--
--   line := [outer timestamp] [rank prefix] [inner timestamp] body
--
-- The outer timestamp is what a collector (journald, Loki export, promtail, kubectl logs
-- --timestamps) or syslog wrote; the inner one is what the application printed. The outer one
-- wins because it usually carries a zone. Forms (../shared/spec/bundle.md):
--   RFC 3339 / ISO 8601 / journalctl short-iso / Python logging / NCCL 2.23+ [..] / slurmctld [..]
--   RFC 3164 and journalctl short-precise (no year), dmesg -T, Fabric Manager, glog (no year).
-- Zone-less forms take the attempt's timezone; year-less forms take the year that puts the
-- time nearest to the attempt (a "Dec 31" line in a January attempt belongs to the year before).

CREATE OR REPLACE MACRO lt_month(mon) AS
    list_position(['Jan','Feb','Mar','Apr','May','Jun','Jul','Aug','Sep','Oct','Nov','Dec'], mon);

-- seconds + fraction as DOUBLE, fraction given as the digits after the separator
CREATE OR REPLACE MACRO lt_secs(s, f) AS
    TRY_CAST(s AS DOUBLE) + CASE WHEN f = '' THEN 0 ELSE TRY_CAST('0.' || f AS DOUBLE) END;

-- A naive wall-clock time in zone `tz` -> naive UTC timestamp.
CREATE OR REPLACE MACRO lt_local_to_utc(ts, tz) AS
    CASE WHEN tz = 'UTC' THEN ts ELSE timezone('UTC', timezone(tz, ts)) END;

-- '+01:00' / '+0100' / 'Z' -> offset in minutes
CREATE OR REPLACE MACRO lt_offset_min(z) AS
    CASE WHEN z IN ('', 'Z') THEN 0
         ELSE (CASE WHEN z[1] = '-' THEN -1 ELSE 1 END)
              * (TRY_CAST(z[2:3] AS INTEGER) * 60 + TRY_CAST(right(replace(z, ':', ''), 2) AS INTEGER))
    END;

-- Build a timestamp; NULL instead of an error for impossible dates (Feb 30, hour 25 ...).
CREATE OR REPLACE MACRO lt_make(y, mo, d, h, mi, sec) AS
    try_strptime(printf('%04d-%02d-%02d %02d:%02d:%09.6f', y, mo, d, h, mi, sec), '%Y-%m-%d %H:%M:%S.%f');

-- Year-less: pick the year (ref-1, ref, ref+1) nearest to the reference time.
CREATE OR REPLACE MACRO lt_yearless(mo, d, h, mi, sec, ref) AS (
    SELECT arg_min(t, abs(epoch(t) - epoch(ref)))
    FROM (SELECT lt_make(year(ref) + k, mo, d, h, mi, sec) AS t FROM range(-1, 2) r(k)) c
    WHERE t IS NOT NULL
);

-- Outer timestamp forms. Each returns {len: prefix length incl. trailing blanks, ts: UTC or NULL}.
CREATE OR REPLACE MACRO lt_iso(s, tz) AS (
    WITH m AS (SELECT regexp_extract(s,
        '^(\[?(\d{4})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2}):(\d{2})(?:[.,](\d{1,9}))?(Z|[+-]\d{2}:?\d{2})?\]?(?:\s+|$))',
        ['all','y','mo','d','h','mi','s','f','z']) AS g)
    SELECT CASE WHEN g['all'] = '' THEN NULL ELSE {
        'len': length(g['all']),
        'ts': CASE WHEN g['z'] = ''
                   THEN lt_local_to_utc(lt_make(TRY_CAST(g['y'] AS INTEGER), TRY_CAST(g['mo'] AS INTEGER), TRY_CAST(g['d'] AS INTEGER), TRY_CAST(g['h'] AS INTEGER), TRY_CAST(g['mi'] AS INTEGER), lt_secs(g['s'], g['f'])), tz)
                   ELSE lt_make(TRY_CAST(g['y'] AS INTEGER), TRY_CAST(g['mo'] AS INTEGER), TRY_CAST(g['d'] AS INTEGER), TRY_CAST(g['h'] AS INTEGER), TRY_CAST(g['mi'] AS INTEGER), lt_secs(g['s'], g['f']))
                        - to_minutes(lt_offset_min(g['z'])) END} END
    FROM m
);

CREATE OR REPLACE MACRO lt_dmesg_t(s, tz) AS (
    WITH m AS (SELECT regexp_extract(s,
        '^(\[(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) ([A-Z][a-z]{2}) +(\d{1,2}) (\d{2}):(\d{2}):(\d{2}) (\d{4})\]\s*)',
        ['all','mon','d','h','mi','s','y']) AS g)
    SELECT CASE WHEN g['all'] = '' THEN NULL ELSE {
        'len': length(g['all']),
        'ts': lt_local_to_utc(lt_make(TRY_CAST(g['y'] AS INTEGER), lt_month(g['mon']), TRY_CAST(g['d'] AS INTEGER), TRY_CAST(g['h'] AS INTEGER), TRY_CAST(g['mi'] AS INTEGER), TRY_CAST(g['s'] AS DOUBLE)), tz)} END
    FROM m
);

CREATE OR REPLACE MACRO lt_fabricmanager(s, tz) AS (
    WITH m AS (SELECT regexp_extract(s,
        '^(\[([A-Z][a-z]{2}) +(\d{1,2}) (\d{4}) (\d{2}):(\d{2}):(\d{2})\]\s*)',
        ['all','mon','d','y','h','mi','s']) AS g)
    SELECT CASE WHEN g['all'] = '' THEN NULL ELSE {
        'len': length(g['all']),
        'ts': lt_local_to_utc(lt_make(TRY_CAST(g['y'] AS INTEGER), lt_month(g['mon']), TRY_CAST(g['d'] AS INTEGER), TRY_CAST(g['h'] AS INTEGER), TRY_CAST(g['mi'] AS INTEGER), TRY_CAST(g['s'] AS DOUBLE)), tz)} END
    FROM m
);

CREATE OR REPLACE MACRO lt_rfc3164(s, tz, ref) AS (
    WITH m AS (SELECT regexp_extract(s,
        '^(([A-Z][a-z]{2}) +(\d{1,2}) (\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?\s+)',
        ['all','mon','d','h','mi','s','f']) AS g)
    SELECT CASE WHEN g['all'] = '' OR lt_month(g['mon']) = 0 THEN NULL ELSE {
        'len': length(g['all']),
        'ts': lt_local_to_utc(lt_yearless(lt_month(g['mon']), TRY_CAST(g['d'] AS INTEGER), TRY_CAST(g['h'] AS INTEGER), TRY_CAST(g['mi'] AS INTEGER), lt_secs(g['s'], g['f']), ref), tz)} END
    FROM m
);

-- glog (PyTorch C++): [E1120 10:05:01.123456789 file.cpp:607] or E1120 10:05:01.123 12345 file.py:874]
CREATE OR REPLACE MACRO lt_glog(s, tz, ref) AS (
    WITH m AS (SELECT regexp_extract(s,
        '^(\[?[IWEF](\d{2})(\d{2}) (\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?\s)',
        ['all','mo','d','h','mi','s','f']) AS g)
    SELECT CASE WHEN g['all'] = '' THEN NULL ELSE {
        'len': 0,   -- the glog header stays in the body: its file:line is useful text
        'ts': lt_local_to_utc(lt_yearless(TRY_CAST(g['mo'] AS INTEGER), TRY_CAST(g['d'] AS INTEGER), TRY_CAST(g['h'] AS INTEGER), TRY_CAST(g['mi'] AS INTEGER), lt_secs(g['s'], g['f']), ref), tz)} END
    FROM m
);

CREATE OR REPLACE MACRO lt_any(s, tz, ref) AS
    coalesce(lt_iso(s, tz), lt_dmesg_t(s, tz), lt_fabricmanager(s, tz), lt_rfc3164(s, tz, ref), lt_glog(s, tz, ref));

-- Rank prefixes: [rank3]: / [default3]: (torchrun --tee) / "3: " (srun --label)
CREATE OR REPLACE MACRO lt_rank(s) AS (
    WITH m AS (SELECT regexp_extract(s,
        '^(\s*(?:\[(?:rank|default)(\d+)\]:|(\d{1,6}): ))',
        ['all','a','b']) AS g)
    SELECT CASE WHEN g['all'] = '' THEN NULL
                ELSE {'len': length(g['all']), 'rank': TRY_CAST(coalesce(nullif(g['a'], ''), g['b']) AS INTEGER)} END
    FROM m
);

-- The whole prefix grammar: {ts, rank, body}
CREATE OR REPLACE MACRO parse_log_line(line, tz, ref) AS (
    WITH o AS (SELECT lt_any(line, tz, ref) AS outer_ts),
         r AS (SELECT outer_ts, substr(line, coalesce(outer_ts['len'], 0) + 1) AS rest1 FROM o),
         k AS (SELECT outer_ts, rest1, lt_rank(rest1) AS rk FROM r),
         i AS (SELECT outer_ts, rk, substr(rest1, coalesce(rk['len'], 0) + 1) AS rest2 FROM k),
         j AS (SELECT outer_ts, rk, rest2, coalesce(lt_iso(rest2, tz), lt_glog(rest2, tz, ref)) AS inner_ts FROM i)
    SELECT {'ts': coalesce(outer_ts['ts'], inner_ts['ts']),
            'rank': rk['rank'],
            'body': substr(rest2, coalesce(inner_ts['len'], 0) + 1)}
    FROM j
);

CREATE OR REPLACE MACRO log_time(line, tz, ref) AS parse_log_line(line, tz, ref)['ts'];
