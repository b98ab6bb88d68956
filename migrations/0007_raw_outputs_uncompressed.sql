-- Spilled tool outputs are stored out of line without compression, like message bodies
-- (migration 0006). A spill happens inside the request that cuts or evicts the result, and
-- pglz compressed the text at about 15 MB/s: 20% of PostgreSQL's CPU on bench/loadgen's
-- ~200 KB agent request (perf), and about half a second of a request's latency for an output
-- at the 8 MiB rawCapBytes cap. Uncompressed, the database spent 2.14-2.23 -> 1.93-2.0 ms of
-- CPU per request (two runs each). The disk this costs is bounded by rawCapBytes per result,
-- about twice the compressed size of code and logs. To trade back:
-- ALTER TABLE tool_raw_outputs ALTER COLUMN content SET STORAGE EXTENDED (new rows only).
ALTER TABLE tool_raw_outputs ALTER COLUMN content SET STORAGE EXTERNAL;
