-- Statements of a Citus deployment (docs/deploying/citus.md). Loaded by
-- core/storage/statements.py. A statement named citus_* reads Citus's catalog or calls a
-- function only Citus has: the broker sends it only to a database with the extension.

-- name: citus_version
-- The citus extension's version on this database; nothing on one PostgreSQL.
SELECT extversion FROM pg_extension WHERE extname = 'citus';

-- name: citus_distribute
-- Place every table and function of the schema (functions/90_distribution.sql); one row per
-- thing placed now.
SELECT placed FROM queen.distribute();

-- name: citus_log_distributed
-- Whether the log is distributed yet (queen.log_partitions, the anchor of the colocation).
SELECT EXISTS (SELECT 1 FROM pg_dist_partition
                WHERE logicalrelid = 'queen.log_partitions'::regclass AND partmethod = 'h');

-- name: citus_shard_ranges
-- The hash range of each shard of the log, by range, and the group (node) holding it
-- (core/storage/shards.py; a shard kept on several nodes: the first of its active ones).
SELECT s.shardminvalue::integer AS low, s.shardmaxvalue::integer AS high,
       (SELECT min(p.groupid) FROM pg_dist_placement p
         WHERE p.shardid = s.shardid AND p.shardstate = 1) AS node_group
  FROM pg_dist_shard s
 WHERE s.logicalrelid = 'queen.log_partitions'::regclass
 ORDER BY 1;

-- name: citus_local_group
-- The group of the node this connection is on, as the placements name it (0: the
-- coordinator); core/storage/placement.py matches the nodes of DATABASE_URL by it.
SELECT groupid FROM pg_dist_local_group;

-- name: citus_worker_nodes
-- The cluster's worker nodes (one per group, the active primary): where the wake-up
-- notifications are spread (core/engine/wake_nodes.py), and how the coordinator names them.
SELECT groupid AS node_group, nodename AS host, nodeport AS port
  FROM pg_dist_node
 WHERE groupid > 0 AND isactive AND noderole = 'primary'
 ORDER BY groupid;

-- name: citus_safe_time
-- stats_safe_time over every node of the cluster: the log's writes run on the workers, in
-- transactions the coordinator's pg_stat_activity does not list. citus_stat_activity lists
-- every node's backends; this statement's own, on every node, share its global pid.
-- (The nodes' clocks are taken to agree, as the writes' times are stamped by each node.)
SELECT least(clock_timestamp(),
             (SELECT min(a.xact_start) FROM citus_stat_activity a
               WHERE a.datname = current_database() AND a.global_pid <> citus_backend_gpid()
                 AND a.xact_start IS NOT NULL AND a.backend_type = 'client backend'));
