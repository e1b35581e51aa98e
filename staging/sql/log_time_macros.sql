-- Log-line prefix grammar, as SQL macros (loaded once per staging database).
--
--   line := [envelope] [pdsh host] [syslog header] [outer timestamp] [CRI stream] [own timestamp]
--           [rank prefix]{0,2} [inner timestamp] body
--
--   envelope       Docker's json-file log line {"log": "...\n", "stream": ..., "time": ...}: the line is
--                  its `log`, decoded, and its `time` is the line's (a collector's time wins)
--   pdsh host      "node03: " that pdsh / clush put in front of everything a remote host printed
--   syslog header  RFC 5424 "<30>1 TS HOST APP PROCID MSGID [SD]", or what only classifies the
--                  line: an RFC 3164 priority "<30>", dmesg -x "kern  :err   : "
--   outer time     what a collector (journald, Loki export, promtail, kubectl logs --timestamps),
--                  syslog or the kernel wrote
--   CRI stream     "stdout F " / "stderr P " that the container runtime (CRI log format) writes
--                  after its time (a line it split in "P" records is joined at the scan:
--                  connectors/sql/scan_partial.sql)
--   own time       after an outer time, the time the line carried before a runtime or a collector
--                  (a CRI record, kubectl logs --timestamps) wrapped it: read as the bare line's
--                  outer time would be, so the rank prefix behind it is still found
--   rank prefix    what a launcher put in front of a process's output ([rank3]:, 3: ...)
--   inner time     what the application printed (ISO, glog; syslog's, ctime and UCX's when relayed)
--
-- The outer timestamp wins over the inner one because it usually carries a zone. Forms
-- (../shared/spec/bundle.md):
--   RFC 3339 / ISO 8601 / journalctl short-iso(-precise) / Python logging / NCCL 2.23+ [..] /
--   slurmctld [..] / dmesg --time-format=iso; journalctl short-full; RFC 5424;
--   RFC 3164 and journalctl short(-precise) (no year); dmesg -T and ctime; dmesg uptime (no wall
--   clock) and UCX's epoch seconds; Fabric Manager; glog and PyTorch c10 (no year); and, when
--   nothing else dates a line, the time in Slurm's "*** JOB .. CANCELLED AT <time> ***".
-- Zone-less forms take the attempt's timezone; year-less forms take the year that puts the
-- time nearest to the attempt (a "Dec 31" line in a January attempt belongs to the year before).
--
-- Each form is two macros: lt_<form>_re(s), its one regexp_extract, and lt_<form>_of(g), what the
-- groups mean as written (lt_pick: prefix length incl. trailing blanks, how the fields make a time,
-- the fields, the zone ('' = none)), read only where the line starts with the form: lt_found(g)
-- (lt_found_month(g) for a form that names its month: "Foo 20" is none). A form's
-- regex runs only behind a test of the one or two characters every line of that form has at a
-- fixed place (an ISO date's '-' at 5 or 6, a month name's blank at 4, a '[' ...), so a line is
-- tried against the few forms it can be, not all of them: a regex with groups builds its result
-- even when it fails. A form skipped so gives NULL groups, which lt_found reads as no match.
-- A place's first form is chosen by one CASE over the forms' lt_found, each THEN building its
-- pick for its own lines only: a coalesce of one CASE per form built a struct column per form over
-- every line, matched or not (~13% of the grammar's CPU over 127k lines: 427 -> 371 ms).
-- The grammar binds every regex result to a column before reading it (an expression under CASE is
-- not shared by the planner: read through a macro it would run once per group read), and turns
-- the chosen wall-clock time into UTC once (lt_zoned). Both together took the grammar from 5.5 to
-- 2.3 us a line (100k kernel lines, 2 threads). The guards build no string: a first character is
-- tested with one GLOB class, a later one with a LIKE pattern, never with substr(s, i, 1) (a
-- string per test, ~35 tests a line: with starts_with, ~25% of the grammar's CPU); and a stage that
-- cut nothing passes its string on as it is (lt_after), not as a substr copy of it.
--
-- What a statement calling the grammar costs before it reads a line is binding and setting up its
-- expressions, anew in every statement (prepared or not): a macro's argument is copied wherever
-- its body reads it, and each copy is bound. A line can carry a time at three places (outer, own,
-- inner) and in its text, but only one of them dates it: each place keeps its first form's fields
-- as written (lt_pick), the place that dates the line is chosen from them, and only its fields
-- become a time, once. Making a time at every place of every form (a year-less one expands
-- lt_make three times) cost a tiny attempt's statement ~10 ms more.
--
-- The grammar is one table macro, parse_log_lines(src, tz, ref), over a table or CTE `src` of
-- (k, line): every line's stages as one chain of projections, `k` (whatever the caller needs back
-- of the line) carried through. parse_log_line(line, tz, ref) is that macro over one line, a
-- correlated subquery: DuckDB runs it over many lines as a join of every line with its distinct
-- lines (a hash aggregate, a hash join and a delim join: ~10-30% of the grammar's time at 100k
-- lines), so a statement over many lines (parse_lines.sql) calls parse_log_lines instead.
-- tests/unit/test_grammar_same.py holds both to the grammar as it was before (one correlated
-- macro), line by line.
-- The stages are nested subqueries, not a WITH chain: DuckDB binds every CTE as a materialised
-- one and only its optimizer inlines them, so with the optimizer off (a tiny attempt's
-- statements, staging/database.py plainly) each of the 31 stages kept all its rows, regex groups
-- and picks included, until the statement ended: ~58 MiB over the ~2,900 lines of 1M lines on 64
-- hosts (the process' peak), ~21 MiB as subqueries, which also bind and run in ~30% less CPU.
-- Written FROM-first (DuckDB's `FROM (...) alias SELECT ...`) they still read in order: the macro
-- opens one `FROM (` per stage, and each stage's SELECT closes the subquery the next one reads,
-- named as its CTE was. Optimised (3,000 lines or more) the plan differs a little: inlining a CTE,
-- DuckDB splits its struct columns into their fields, not a subquery's (~3% more of this
-- statement's CPU at 100k lines, not seen in a kept line's whole cost: docs/benchmarks.md).

-- The guards, written out where they test (no macro builds their patterns: DuckDB would fold the
-- pieces anew at every bind, ~60 us a guard with the optimizer off):
--   whether the i-th character of s is c (false past its end): a LIKE pattern, s LIKE '____-%' for
--     the 5th, not substr(s, i, 1) = c, which builds a string for every line. '_' in LIKE is one
--     character, as substr counts.
--   whether s starts with one of the ASCII characters of a GLOB class, s GLOB '[IWEF]*': cheaper
--     than starts_with, or substr(s, 1, 1) IN (...). GLOB reads bytes, and a character outside
--     ASCII starts with none of theirs.

-- s after its first n characters: s itself when n = 0 (substr would copy it).
CREATE OR REPLACE MACRO lt_after(s, n) AS CASE WHEN n = 0 THEN s ELSE substr(s, n + 1) END;

-- ---- Times ----------------------------------------------------------------------------------------

CREATE OR REPLACE MACRO lt_month(mon) AS
    coalesce(list_position(['Jan','Feb','Mar','Apr','May','Jun','Jul','Aug','Sep','Oct','Nov','Dec'], mon), 0);

CREATE OR REPLACE MACRO lt_int(x) AS TRY_CAST(x AS INTEGER);

-- seconds + fraction as DOUBLE, fraction given as the digits after the separator. No clock writes
-- more than nanoseconds: a longer fraction is no time (NULL), never rounded into one.
CREATE OR REPLACE MACRO lt_secs(s, f) AS
    CASE WHEN length(coalesce(f, '')) > 9 THEN NULL
         ELSE TRY_CAST(s AS DOUBLE) + CASE WHEN coalesce(f, '') = '' THEN 0 ELSE TRY_CAST('0.' || f AS DOUBLE) END END;

-- A naive time written with zone `z` -> naive UTC. `z` is what the line printed: nothing (the
-- attempt's zone), Z/UTC/GMT, a numeric offset ('+01:00' / '+0100' / '+01': taken off, in minutes),
-- or an abbreviation such as CET or PST: that names the zone of the host that wrote the line, i.e.
-- the attempt's (abbreviations are ambiguous), whose wall-clock time goes to UTC.
CREATE OR REPLACE MACRO lt_zoned(ts, z, tz) AS
    CASE WHEN z IN ('Z', 'UTC', 'GMT', 'UT') THEN ts
         WHEN regexp_full_match(z, '[+-]\d{2}(?::?\d{2})?')
         THEN ts - to_minutes((CASE WHEN z[1] = '-' THEN -1 ELSE 1 END)
                              * (lt_int(z[2:3]) * 60 + coalesce(lt_int(nullif(replace(z, ':', '')[4:5], '')), 0)))
         WHEN tz = 'UTC' THEN ts
         ELSE timezone('UTC', timezone(tz, ts)) END;

-- Build a timestamp from the fields a stamp wrote. Fields that make no time (Feb 30, hour 25, a
-- second of 60, an over-long fraction) give '-infinity', never a time near it (make_timestamp
-- would read 11:59:60 as 12:00:00): outside any plausible range, so the line is quarantined
-- (staging/sql/normalize_lines.sql) and never takes its neighbours' time either. A second of 60 is
-- quarantined whatever the day: no leap second has been inserted since 2016-12-31, and a line of
-- one is better without a time than with the next second's. Each argument is read once: a macro's
-- argument is an expression (a regex group read), evaluated again wherever it is referenced.
CREATE OR REPLACE MACRO lt_make(y, mo, d, h, mi, sec) AS
    coalesce(try(make_timestamp(y, mo, d, h, mi, CASE WHEN sec < 60 THEN sec END)), TIMESTAMP '-infinity');

-- Year-less: the year (ref-1, ref or ref+1) that puts the time nearest to the reference. Both are
-- placed in one leap year (2000) to compare where in a year they fall: a time more than half a
-- year (182.625 days) later than the reference's is of the year before, more than half a year
-- earlier of the year after. Feb 29 is a time only in a leap year. The reference comes as its
-- year and its place in 2000 (lt_in_2000(ref)), worked out in a stage of their own.
CREATE OR REPLACE MACRO lt_in_2000(ref) AS
    lt_make(2000, month(ref), day(ref), hour(ref), minute(ref), second(ref) + microsecond(ref) % 1000000 / 1e6);
CREATE OR REPLACE MACRO lt_year_shift(at2000, ref2000) AS
    CASE WHEN epoch(at2000) - epoch(ref2000) > 15778800 THEN -1
         WHEN epoch(ref2000) - epoch(at2000) > 15778800 THEN 1
         ELSE 0 END;

-- What a form's groups say, as written: `form` is how they make a time ('date': year and all;
-- 'yearless'; 'epoch': seconds since 1970, UTC; NULL: none, a dmesg uptime), `mo` a month's number
-- or its name, `s` and `f` the seconds and their fraction's digits, `z` the zone. A form that
-- matched makes a time exactly when `form` is set (lt_make gives '-infinity', never NULL), so
-- which place dates a line is known before any time is made.
CREATE OR REPLACE MACRO lt_pick(len, form, y, mo, d, h, mi, s, f, z) AS
    {'len': len, 'form': form, 'y': y, 'mo': mo, 'd': d, 'h': h, 'mi': mi, 's': s, 'f': f, 'z': z};
-- Whether a form's groups matched (NULL groups, of a form whose guard failed: no); and for a form
-- that names its month, whether the name is one.
CREATE OR REPLACE MACRO lt_found(g) AS g['all'] <> '';
CREATE OR REPLACE MACRO lt_found_month(g) AS g['all'] <> '' AND lt_month(g['mon']) <> 0;
CREATE OR REPLACE MACRO lt_timed(p) AS p['form'] IS NOT NULL;

-- ---- Outer timestamp forms -----------------------------------------------------------------------

-- RFC 3339 / ISO 8601, bracketed or not (NCCL, slurmctld), with a '.' or ',' fraction (Python
-- logging, dmesg --time-format=iso), an optional zone, and the ':' TensorFlow's and absl's C++
-- logging put after it ("2026-11-20 10:00:01.123456: E file.cc:42] ").
CREATE OR REPLACE MACRO lt_iso_re(s) AS CASE WHEN s LIKE '____-%' OR s LIKE '_____-%' THEN regexp_extract(s,
    '^(\[?(\d{4})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2}):(\d{2})(?:[.,](\d+))?(Z|[+-]\d{2}:?\d{2})?\]?:?(?:\s+|$))',
    ['all','y','mo','d','h','mi','s','f','z']) END;
CREATE OR REPLACE MACRO lt_iso_of(g) AS
    lt_pick(length(g['all']), 'date', g['y'], g['mo'], g['d'], g['h'], g['mi'], g['s'], g['f'], g['z']);

-- journalctl -o short-full: "Fri 2026-11-20 10:05:01 UTC host ..." (the zone as an abbreviation);
-- its groups are ISO's, read by lt_iso_of
CREATE OR REPLACE MACRO lt_short_full_re(s) AS CASE WHEN s LIKE '___ %' THEN regexp_extract(s,
    '^((?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) (\d{4})-(\d{2})-(\d{2}) (\d{2}):(\d{2}):(\d{2})(?:\.(\d+))? ([A-Za-z]{1,6}|[+-]\d{2}(?::?\d{2})?)(?:\s+|$))',
    ['all','y','mo','d','h','mi','s','f','z']) END;

-- dmesg -T "[Fri Nov 20 10:05:01 2026]" (a one-digit day padded with a blank), and the same ctime
-- form unbracketed, as GPFS and other C daemons print it ("Mon Jun 25 16:11:16.123 2018: ").
CREATE OR REPLACE MACRO lt_ctime_re(s) AS CASE WHEN s LIKE '___ %' OR s LIKE '____ %' THEN regexp_extract(s,
    '^(\[?(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) ([A-Z][a-z]{2}) +(\d{1,2}) (\d{2}):(\d{2}):(\d{2})(?:\.(\d+))? (\d{4})\]?:?(?:\s+|$))',
    ['all','mon','d','h','mi','s','f','y']) END;
CREATE OR REPLACE MACRO lt_ctime_of(g) AS
    lt_pick(length(g['all']), 'date', g['y'], g['mon'], g['d'], g['h'], g['mi'], g['s'], g['f'], '');

-- Raw dmesg "[ 1234.567890] " (journalctl short-monotonic too): seconds since boot, no wall clock,
-- so no time of its own; the prefix is stripped so the body starts at the kernel's message, and it
-- is never a rank. A count of 10 digits or more cannot be an uptime (31 years): it is epoch
-- seconds, as UCX prints them ("[1638351161.447102] [host:pid:thread] ...").
CREATE OR REPLACE MACRO lt_uptime_re(s) AS CASE WHEN s GLOB '[[]*' THEN regexp_extract(s,
    '^(\[ *(\d{1,12})\.(\d{1,9})\](?:\s+|$))', ['all','s','f']) END;
CREATE OR REPLACE MACRO lt_uptime_of(g) AS
    lt_pick(length(g['all']), CASE WHEN length(g['s']) >= 10 THEN 'epoch' END,
            NULL, NULL, NULL, NULL, NULL, g['s'], g['f'], 'UTC');

-- NVIDIA Fabric Manager "[Nov 20 2026 10:05:01] "
CREATE OR REPLACE MACRO lt_fabricmanager_re(s) AS CASE WHEN s GLOB '[[]*' THEN regexp_extract(s,
    '^(\[([A-Z][a-z]{2}) +(\d{1,2}) (\d{4}) (\d{2}):(\d{2}):(\d{2})\]\s*)',
    ['all','mon','d','y','h','mi','s']) END;
CREATE OR REPLACE MACRO lt_fabricmanager_of(g) AS
    lt_pick(length(g['all']), 'date', g['y'], g['mon'], g['d'], g['h'], g['mi'], g['s'], NULL, '');

-- RFC 3164 and journalctl short / short-precise: "Nov 20 10:05:01[.123456] " (no year)
CREATE OR REPLACE MACRO lt_rfc3164_re(s) AS CASE WHEN s LIKE '___ %' THEN regexp_extract(s,
    '^(([A-Z][a-z]{2}) +(\d{1,2}) (\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?\s+)',
    ['all','mon','d','h','mi','s','f']) END;
CREATE OR REPLACE MACRO lt_rfc3164_of(g) AS
    lt_pick(length(g['all']), 'yearless', NULL, g['mon'], g['d'], g['h'], g['mi'], g['s'], g['f'], '');

-- glog and PyTorch c10: "[E1120 10:05:01.123456789 file.cpp:607]", "E1120 10:05:01.123 12345 file.py:874]",
-- "[W626 06:24:44.123]". Severity I/W/E/F, then month and day: glog pads the month ("E0626"),
-- c10 does not ("E626"); the day always has two digits, so three digits are MDD and four MMDD.
-- No year. The header stays in the body (len 0): its file:line is useful text.
CREATE OR REPLACE MACRO lt_glog_re(s) AS CASE WHEN s GLOB '[[IWEF]*' THEN regexp_extract(s,
    '^(\[?[IWEF](\d{1,2})(\d{2}) (\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?[\s\]])',
    ['all','mo','d','h','mi','s','f']) END;
CREATE OR REPLACE MACRO lt_glog_of(g) AS
    lt_pick(0, 'yearless', NULL, g['mo'], g['d'], g['h'], g['mi'], g['s'], g['f'], '');

-- mmengine / MMCV's logger: "12/20 10:05:01 - mmengine - INFO - " (month/day, no year)
CREATE OR REPLACE MACRO lt_mmdd_re(s) AS CASE WHEN s LIKE '__/%' THEN regexp_extract(s,
    '^((\d{2})/(\d{2}) (\d{2}):(\d{2}):(\d{2})\s+)', ['all','mo','d','h','mi','s']) END;
CREATE OR REPLACE MACRO lt_mmdd_of(g) AS
    lt_pick(length(g['all']), 'yearless', NULL, g['mo'], g['d'], g['h'], g['mi'], g['s'], NULL, '');

-- ---- Syslog headers ------------------------------------------------------------------------------

-- RFC 5424: "<PRI>1 TIMESTAMP HOSTNAME APP-NAME PROCID MSGID STRUCTURED-DATA MSG", each field "-"
-- when absent (NILVALUE); structured data is one or more [id name="value" ...] elements whose values
-- escape '"', '\' and ']' with a backslash; MSG may open with a BOM. The body keeps the RFC 3164
-- shape of the header ("host app[procid]: msg"), so rules read a syslog message the same whichever
-- RFC carried it; MSGID and structured data stay in the raw text.
CREATE OR REPLACE MACRO lt_rfc5424_re(s) AS CASE WHEN s GLOB '[<]*' THEN regexp_extract(s,
    '^(<\d{1,3}>1 (\S+) (\S+) (\S+) (\S+) \S+ (?:-|(?:\[[^\] "=]+(?: [^\] "=]+="(?:[^"\\]|\\.)*")*\])+)(?: \x{FEFF}?|$))',
    ['all','ts','host','app','pid']) END;
CREATE OR REPLACE MACRO lt_rfc5424_head(g) AS
    concat_ws(' ', nullif(g['host'], '-'),
              CASE WHEN g['app'] <> '-'
                   THEN g['app'] || CASE WHEN g['pid'] <> '-' THEN '[' || g['pid'] || ']' ELSE '' END || ':' END);

-- What only classifies the line, before its timestamp: an RFC 3164 priority "<30>", dmesg -x
-- "facility:level : " columns (each padded to its longest name).
CREATE OR REPLACE MACRO lt_class_re(s) AS CASE WHEN s GLOB '[<a-z]*' THEN regexp_extract(s,
    '^(<\d{1,3}>|(?:kern|user|mail|daemon|auth|syslog|lpr|news|uucp|cron|authpriv|ftp|local[0-7]) *:(?:emerg|alert|crit|err|warn|notice|info|debug) *: )') ELSE '' END;

-- ---- pdsh / clush: "host: " --------------------------------------------------------------------
-- A host name is lowercase letters, digits and '-', with at least one digit (node03, gb-r12-n04,
-- c5n111), optionally with its domain. So neither a time (10:05:01), a log level (ERROR:), a
-- program (srun:, slurmstepd:, kernel:), a Python exception (RuntimeError:) nor a logger
-- (torch.distributed.run:) is one; kernel device names (eth0:, ib0:, nvme0n1:, sda1:, dm-0:) are
-- excluded by their exact shapes (so srv01:, tapir3: and md-gpu7: remain hosts). Nothing is
-- recorded: the file already names its host.
CREATE OR REPLACE MACRO lt_pdsh_re(s) AS
    CASE WHEN s GLOB '[a-z]*' THEN regexp_extract(s, '^([a-z][a-z0-9-]*(?:\.[a-z0-9-]+)*): ', 1) ELSE '' END;
CREATE OR REPLACE MACRO lt_pdsh_len(h) AS
    CASE WHEN h <> '' AND regexp_matches(h, '\d')
              AND NOT regexp_full_match(h, '(?:(?:eth|ib|bond|hsn|wlan|virbr|docker|tun|tap|md|loop|nbd|sr|dm-)\d+|(?:ibp|ibs|en[opsx]|wlp)[0-9a-z]+|veth[0-9a-f]+|nvme\d+(?:n\d+(?:p\d+)?)?|(?:sd|vd|xvd|hd)[a-z]{1,2}\d*)')
         THEN length(h) + 2 ELSE 0 END;

-- ---- Rank prefixes -------------------------------------------------------------------------------
-- [rank3]: (PyTorch, the global rank) / [default3]: (torchrun --tee) / [host:3]: (torchrun with
-- host names) / [1,3]<stdout>: (Open MPI --tag-output: job, rank) / "3: ", " 3: " (srun --label) /
-- Ray's "(pid=2361, ip=10.0.2.15) ", "(RayTrainWorker pid=2361, ip=...) " (a worker's label, no rank).
-- {len, rank, global: whether it is PyTorch's global rank}
CREATE OR REPLACE MACRO lt_rank_re(s) AS CASE WHEN s GLOB E'[[( \t\n\f\r0-9]*' THEN regexp_extract(s,
    '^(\s*(?:\[(rank|default)(\d+)\]:|\[[A-Za-z0-9][A-Za-z0-9._-]*:(\d+)\]:|\[\d+,(\d+)\]<(?:stdout|stderr|stddiag)>:|(\d{1,6}): |\((?:[A-Za-z_][\w.]* )?pid=\d+(?:, ip=[0-9A-Fa-f.:]+)?\) ))',
    ['all','kw','a','b','c','d']) END;
CREATE OR REPLACE MACRO lt_rank_of(g) AS
    CASE WHEN coalesce(g['all'], '') = '' THEN NULL ELSE {
        'len': length(g['all']),
        'rank': lt_int(coalesce(nullif(g['a'], ''), nullif(g['b'], ''), nullif(g['c'], ''), g['d'])),
        'global': g['kw'] = 'rank'} END;

-- ---- Slurm's cancel notice carries its time in the message ("slurmstepd: error: *** JOB 123 ON
-- node03 CANCELLED AT 2026-11-20T10:05:01 DUE TO TIME LIMIT ***"), zone-less.
CREATE OR REPLACE MACRO lt_cancelled_at_re(body) AS
    CASE WHEN contains(body, ' CANCELLED AT ') THEN regexp_extract(body,
        '\*\*\* (?:JOB|STEP) \S+ ON \S+ CANCELLED AT (\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(?:\s|$)', 1) ELSE '' END;

-- ---- The whole grammar: {ts, rank, body} -------------------------------------------------------
-- (the stages as subqueries, FROM-first: one `FROM (` per stage, each closed by the stage's SELECT)
CREATE OR REPLACE MACRO parse_log_lines(src, tz, ref) AS TABLE
    FROM (FROM (FROM (FROM (FROM (FROM (FROM (FROM (FROM (FROM (FROM (FROM (FROM (FROM (FROM (FROM (
    FROM (FROM (FROM (FROM (FROM (FROM (FROM (FROM (FROM (FROM (FROM (FROM (FROM (FROM (FROM (
    FROM query_table(src) SELECT k, coalesce(line, '') AS raw, ref AS rf) e0
    -- Docker's json-file envelope: the line is its `log` (decoded), its `time` the line's
    SELECT k, rf, raw, CASE WHEN raw LIKE '{"log":%' AND json_valid(raw) THEN raw END AS env) e1
    SELECT k, rf,
           CASE WHEN env IS NULL THEN raw
                ELSE rtrim(coalesce(json_extract_string(env, '$.log'), ''), chr(10) || chr(13)) END AS s0,
           json_extract_string(env, '$.time') AS ev) p0
    -- pdsh host
    SELECT k, rf, ev, s0, lt_pdsh_re(s0) AS g_pdsh) p1
    SELECT k, rf, ev, lt_after(s0, lt_pdsh_len(g_pdsh)) AS s1) p2
    -- syslog header: RFC 5424's (its time, read below; the body keeps host and program), or a class
    SELECT k, rf, ev, s1, lt_rfc5424_re(s1) AS g5, lt_class_re(s1) AS cls) h1
    SELECT k, rf, ev, CASE WHEN g5['all'] <> '' THEN g5['ts'] END AS header_time,
           CASE WHEN g5['all'] <> '' THEN lt_rfc5424_head(g5) END AS head,
           lt_after(s1, CASE WHEN g5['all'] <> '' THEN length(g5['all']) ELSE length(cls) END) AS s2) h2
    -- outer timestamp: each form's groups, then the first form that matched
    SELECT k, rf, ev, header_time, head, s2, lt_iso_re(s2) AS g_iso, lt_short_full_re(s2) AS g_full,
           lt_ctime_re(s2) AS g_ctime, lt_uptime_re(s2) AS g_up, lt_fabricmanager_re(s2) AS g_fm,
           lt_rfc3164_re(s2) AS g_3164, lt_glog_re(s2) AS g_glog, lt_mmdd_re(s2) AS g_mmdd) o1
    SELECT k, rf, ev, header_time, head, s2,
           CASE WHEN lt_found(g_iso) THEN lt_iso_of(g_iso) WHEN lt_found(g_full) THEN lt_iso_of(g_full)
                WHEN lt_found_month(g_ctime) THEN lt_ctime_of(g_ctime)
                WHEN lt_found(g_up) THEN lt_uptime_of(g_up)
                WHEN lt_found_month(g_fm) THEN lt_fabricmanager_of(g_fm)
                WHEN lt_found_month(g_3164) THEN lt_rfc3164_of(g_3164)
                WHEN lt_found(g_glog) THEN lt_glog_of(g_glog) WHEN lt_found(g_mmdd) THEN lt_mmdd_of(g_mmdd) END AS o) o2
    SELECT k, rf, ev, header_time, head, o, lt_after(s2, coalesce(o['len'], 0)) AS s2b) o3
    -- the container runtime's stream and tag (CRI log format): "stdout F ", "stderr P "
    SELECT k, rf, ev, header_time, head, o,
           CASE WHEN s2b GLOB '[s]*' AND regexp_matches(s2b, '^std(?:out|err) [FP](?: |$)')
                THEN substr(s2b, 10) ELSE s2b END AS s3) o4
    -- the line's own time inside a runtime's or a collector's (a CRI record, kubectl logs
    -- --timestamps): what would be the outer time of the line bare, before its rank prefix
    SELECT k, rf, ev, header_time, head, o, s3, CASE WHEN lt_timed(o) THEN s3 END AS w3) m0
    SELECT k, rf, ev, header_time, head, o, s3, lt_iso_re(w3) AS g_miso, lt_glog_re(w3) AS g_mglog,
           lt_rfc3164_re(w3) AS g_m3164, lt_ctime_re(w3) AS g_mctime) m1
    SELECT k, rf, ev, header_time, head, o, s3,
           CASE WHEN lt_found(g_miso) THEN lt_iso_of(g_miso) WHEN lt_found(g_mglog) THEN lt_glog_of(g_mglog)
                WHEN lt_found_month(g_mctime) THEN lt_ctime_of(g_mctime)
                WHEN lt_found_month(g_m3164) THEN lt_rfc3164_of(g_m3164) END AS m) m2
    -- from here on only the prefix that dates the line is kept: the outer time, else the own
    -- (there is an own time only behind an outer one)
    SELECT k, rf, ev, header_time, head, CASE WHEN lt_timed(o) THEN o WHEN lt_timed(m) THEN m END AS om,
           CASE WHEN m IS NULL THEN s3 ELSE lt_after(s3, m['len']) END AS s3m) m3
    -- up to two rank prefixes: a launcher's label around a process's own (" 0: [rank0]: ...")
    SELECT k, rf, ev, header_time, head, om, s3m AS s3, lt_rank_re(s3m) AS g_r1) k0
    SELECT k, rf, ev, header_time, head, om, s3, lt_rank_of(g_r1) AS r1) k1
    SELECT k, rf, ev, header_time, head, om, r1, lt_after(s3, coalesce(r1['len'], 0)) AS s4) k2
    SELECT k, rf, ev, header_time, head, om, r1, s4, lt_rank_re(s4) AS g_r2) k3
    SELECT k, rf, ev, header_time, head, om, r1, s4, lt_rank_of(g_r2) AS r2) k4
    -- PyTorch's [rankN] is the global rank whatever launched it; otherwise the outermost label
    SELECT k, rf, ev, header_time, head, om,
           CASE WHEN r2['global'] THEN r2['rank'] ELSE coalesce(r1['rank'], r2['rank']) END AS rank,
           lt_after(s4, coalesce(r2['len'], 0)) AS s5) k5
    -- the application's own time, which may follow the rank prefix after a blank: ISO, glog, and
    -- the forms of lines a launcher relays (syslog's, ctime, UCX's epoch seconds)
    SELECT k, rf, ev, header_time, head, om, rank, s5,
           CASE WHEN s5 GLOB '[ ]*' OR s5 >= chr(128) THEN ltrim(s5) ELSE s5 END AS t5) i0
    SELECT k, rf, ev, header_time, head, om, rank, s5, t5, lt_iso_re(t5) AS g_iiso,
           lt_glog_re(t5) AS g_iglog, lt_rfc3164_re(t5) AS g_i3164, lt_ctime_re(t5) AS g_ictime,
           lt_uptime_re(t5) AS g_iup) i1
    SELECT k, rf, ev, header_time, head, om, rank, s5, t5,
           CASE WHEN lt_found(g_iiso) THEN lt_iso_of(g_iiso) WHEN lt_found(g_iglog) THEN lt_glog_of(g_iglog)
                WHEN lt_found_month(g_ictime) THEN lt_ctime_of(g_ictime)
                WHEN lt_found_month(g_i3164) THEN lt_rfc3164_of(g_i3164)
                WHEN lt_found(g_iup) THEN lt_uptime_of(g_iup) END AS i) i2
    SELECT k, rf, ev, header_time, head, rank, CASE WHEN lt_timed(om) THEN om WHEN lt_timed(i) THEN i END AS omi,
           CASE WHEN i IS NULL THEN s5 ELSE lt_after(t5, i['len']) END AS rest) i3
    -- times written in the text rather than in front of it, in RFC 3339: RFC 5424's header (which
    -- wins, it is the record's), else, when nothing else dated the line, a time its message states
    -- (and the envelope's time, read here: one RFC 3339 reading for all three)
    SELECT k, rf, ev, header_time, head, rank, omi, rest, lt_iso_re(
        CASE WHEN ev IS NOT NULL THEN ev
             WHEN header_time IS NOT NULL AND header_time <> '-' THEN header_time
             WHEN header_time IS NULL AND NOT lt_timed(omi) THEN lt_cancelled_at_re(rest)
             ELSE '' END) AS g_w) t0
    -- the place that dates the line: the envelope's time alone; RFC 5424's header before the
    -- prefixes; else the prefixes before the text
    SELECT k, rf, ev, header_time, head, rank, omi, rest, CASE WHEN lt_found(g_w) THEN lt_iso_of(g_w) END AS w) t1
    SELECT k, rf, head, rank, rest,
           CASE WHEN ev IS NOT NULL THEN w
                WHEN header_time IS NOT NULL THEN CASE WHEN lt_timed(w) THEN w ELSE omi END
                ELSE CASE WHEN lt_timed(omi) THEN omi ELSE w END END AS p) t2
    -- its fields, then its time. The reference is read from a column (rf): an expression of a
    -- constant is folded at every bind (lt_in_2000: ~0.6 ms with the optimizer off), one of a
    -- column is worked out for the year-less lines only.
    SELECT k, rf, head, rank, rest, p, lt_int(p['y']) AS y, coalesce(lt_int(p['mo']), lt_month(p['mo'])) AS mo,
           lt_int(p['d']) AS d, lt_int(p['h']) AS h, lt_int(p['mi']) AS mi, lt_secs(p['s'], p['f']) AS sec) c1
    SELECT k, rf, head, rank, rest, p, y, mo, d, h, mi, sec,
           CASE WHEN p['form'] = 'yearless' THEN lt_make(2000, mo, d, h, mi, sec) END AS at2000,
           CASE WHEN p['form'] = 'yearless' THEN lt_in_2000(rf) END AS r2000) c2
    SELECT k, head, rank, rest, p['z'] AS z,
           CASE p['form'] WHEN 'date' THEN lt_make(y, mo, d, h, mi, sec)
                          WHEN 'yearless' THEN lt_make(year(rf) + lt_year_shift(at2000, r2000), mo, d, h, mi, sec)
                          WHEN 'epoch' THEN try(make_timestamp(TRY_CAST(p['s'] AS BIGINT) * 1000000
                                                               + TRY_CAST(rpad(left(p['f'], 6), 6, '0') AS BIGINT)))
           END AS wall) c3
    SELECT k, {'ts': lt_zoned(wall, z, tz), 'rank': rank,
               'body': CASE WHEN coalesce(head, '') = '' THEN rest WHEN rest = '' THEN head ELSE head || ' ' || rest END}
           AS p;

-- One line's {ts, rank, body}: parse_log_lines over that line alone (a correlated subquery: over
-- many lines, a statement calls parse_log_lines over all of them instead, parse_lines.sql).
CREATE OR REPLACE MACRO parse_log_line(line, tz, ref) AS (
    WITH log_line AS (SELECT NULL AS k, line AS line) SELECT p FROM parse_log_lines(log_line, tz, ref)
);

CREATE OR REPLACE MACRO log_time(line, tz, ref) AS parse_log_line(line, tz, ref)['ts'];
