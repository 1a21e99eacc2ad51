// Package postgres keeps durable objects' state in PostgreSQL (pgx): one
// row per object in meshloc.state, one per persisted reply in
// meshloc.replies, while the authority records and the reminder schedule
// stay in etcd. It follows the fencing rule of pkg/statestore: the row
// carries the fence of the owner that claimed it, a new owner raises it
// (Load) before it reads, and every write is conditional on the row still
// carrying the writer's fence and the version it last saw.
package postgres

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/meshloc/meshloc/pkg/authority"
	"github.com/meshloc/meshloc/pkg/statestore"
	"github.com/meshloc/meshloc/pkg/wire"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// MaxBytes is the largest change the store takes: a state of up to 64 MiB
// (relocation streams it node to node like any other).
const MaxBytes = 64 << 20

// DefaultMaxConns is the connections a node opens at most, unless its
// connection string says pool_max_conns.
const DefaultMaxConns = 32

// ErrSchema: the database's schema cannot be used by this node.
var ErrSchema = wire.Sentinel(pb.Code_CODE_CONFLICT, "postgres: schema")

// Store is the PostgreSQL state store.
type Store struct {
	pool *pgxpool.Pool
	auth *authority.Store // the reminder schedule, and the record a superseded writer is sent to
}

// Opener opens the store at dsn (a libpq connection string or URL:
// sslmode, sslrootcert, sslcert, sslkey, passfile and the PG* environment
// variables work as for psql) for a node.
func Opener(dsn string) statestore.Opener {
	return func(ctx context.Context, auth *authority.Store) (statestore.Store, error) {
		return Open(ctx, dsn, auth)
	}
}

// Open connects to dsn and migrates the schema.
func Open(ctx context.Context, dsn string, auth *authority.Store) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err) // pgx leaves the password out of its parse errors
	}
	if !strings.Contains(dsn, "pool_max_conns") {
		// pgx's default is the CPU count (at least 4): a node writes for
		// thousands of objects at once, each write one short statement.
		cfg.MaxConns = DefaultMaxConns
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: connect to %s: %w", cfg.ConnConfig.Host, err)
	}
	if err := migrate(ctx, pool); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres: migrate the schema at %s/%s: %w", cfg.ConnConfig.Host, cfg.ConnConfig.Database, err)
	}
	return &Store{pool: pool, auth: auth}, nil
}

// Name is "postgres".
func (s *Store) Name() string { return "postgres" }

// MaxBytes is MaxBytes.
func (s *Store) MaxBytes() int { return MaxBytes }

// Size is what req writes here: the state's bytes (not their base64 in
// Value), the rest of the value, and the reply.
func (s *Store) Size(req authority.PersistRequest) int {
	n := req.Size()
	if req.State != nil {
		n += len(req.State.State) - base64.StdEncoding.EncodedLen(len(req.State.State))
	}
	return n
}

// Close closes the connections.
func (s *Store) Close() error {
	s.pool.Close()
	return nil
}

// owner is how a row names its owner.
func owner(f authority.Fence) string { return fmt.Sprintf("%s@%d", f.Owner.ID, f.Owner.Generation) }

// unavailable wraps a database error: the caller may retry.
func unavailable(what string, err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("postgres: %s: %w", what, err)
	}
	return fmt.Errorf("%w: postgres: %s: %w", errUnavailable, what, err)
}

var errUnavailable = wire.Sentinel(pb.Code_CODE_UNAVAILABLE, "state store unavailable")
