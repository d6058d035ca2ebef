-- Runs in front of APPLY's body. KEYS: as APPLY, then the suite's import
-- ledger (a hash: the hex of each imported trial's digest -> 1) last. ARGV:
-- as APPLY. Every event the ledger holds is dropped and the rest recorded;
-- APPLY then counts what is left, in the same atomic call.
local ledger = table.remove(KEYS)
