package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The schema (docs/operating/state-stores.md shows how to read it with
// psql). Every node migrates it at start, in one transaction under an
// advisory lock, so nodes starting together apply each step once; a
// database whose schema is newer than the node knows is refused.
var migrations = []string{
	// 1: the state of each durable object, and its persisted replies.
	`CREATE SEQUENCE meshloc.versions; -- every claim and write takes the next: versions only grow, rows deleted or not
	CREATE TABLE meshloc.state (
		object               text PRIMARY KEY,  -- actor/<type>/<id>
		object_generation    bigint NOT NULL,   -- the fence of the owner that last claimed or wrote the row
		authority_generation bigint NOT NULL,
		owner                text NOT NULL,     -- that owner, <id>@<generation> (informational)
		version              bigint NOT NULL,   -- new at every claim and write (meshloc.versions): what a write compares
		state                bytea,             -- the object's snapshot (NULL: nothing persisted)
		meta                 jsonb,             -- sequence, timers, outbox, reminders, reply table bounds
		updated_at           timestamptz NOT NULL DEFAULT now()
	);
	CREATE TABLE meshloc.replies (
		object text NOT NULL,   -- the object whose change this reply answers
		id     text NOT NULL,   -- the operation id, 32 hex digits (they sort by time)
		reply  jsonb NOT NULL,  -- {"code", "payload" (base64), "message"}
		PRIMARY KEY (object, id)
	);`,
	// 2: where the last write's eviction stopped, so that the next one
	// starts there instead of walking the deleted replies' index entries
	// (kept until VACUUM) from the object's first.
	`ALTER TABLE meshloc.state ADD COLUMN replies_from text NOT NULL DEFAULT ''; -- replies below it were deleted`,
}

// SchemaVersion is the schema version this code reads and writes.
var SchemaVersion = len(migrations)

// migrationLock is the advisory lock key under which nodes migrate.
const migrationLock = 0x6d6573686c6f63 // "meshloc"

// migrate brings the schema to SchemaVersion.
func migrate(ctx context.Context, pool *pgxpool.Pool) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(migrationLock)); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS meshloc;
			CREATE TABLE IF NOT EXISTS meshloc.schema_version (
				version    int PRIMARY KEY,
				applied_at timestamptz NOT NULL DEFAULT now()
			)`); err != nil {
			return err
		}
		var have int
		if err := tx.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM meshloc.schema_version`).Scan(&have); err != nil {
			return err
		}
		if have > SchemaVersion {
			return fmt.Errorf("%w: the database's meshloc schema is version %d, this node knows %d: upgrade the node", ErrSchema, have, SchemaVersion)
		}
		for v := have + 1; v <= SchemaVersion; v++ {
			if _, err := tx.Exec(ctx, migrations[v-1]); err != nil {
				return fmt.Errorf("schema version %d: %w", v, err)
			}
			if _, err := tx.Exec(ctx, `INSERT INTO meshloc.schema_version (version) VALUES ($1)`, v); err != nil {
				return err
			}
		}
		return nil
	})
}
