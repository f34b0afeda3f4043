-- The run_id of the server process that owns KEYS[1]'s slot (home.v1).
-- A script runs only where its key lives (on a cluster, a node that does not own the slot answers
-- MOVED and the client follows), so the answer names the master that keeps KEYS[1] now: a replica
-- promoted by a failover, or a restarted server, answers a different one.
-- KEYS[1] = a usage stream (nothing is read or written).
local info = redis.call('INFO', 'server')
return string.match(info, 'run_id:(%x+)') or ''
