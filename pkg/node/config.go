package node

import "github.com/meshloc/meshloc/pkg/node/config"

// Config of one meshnode: its settings, flags and validation live in
// pkg/node/config; the names here keep the embedding API in one package.
type Config = config.Config

// DefaultConfig returns every setting's default.
func DefaultConfig() Config { return config.Default() }

// ErrInvalidConfig: a Config field or a relation between fields is wrong.
var ErrInvalidConfig = config.ErrInvalidConfig

// EnvPrefix is the prefix of the environment mirror of every flag:
// MESHNODE_<FLAG>, e.g. MESHNODE_LEASE_TTL.
const EnvPrefix = config.EnvPrefix

// MaxClockSkew is how much later than this node's --relocation-timeout a
// PREPARE's deadline may lie (the source's clock may run ahead).
const MaxClockSkew = config.MaxClockSkew

// Bounds of --durable-max-bytes.
const (
	DefaultDurableMaxBytes = config.DefaultDurableMaxBytes
	MinDurableMaxBytes     = config.MinDurableMaxBytes
	MaxDurableMaxBytes     = config.MaxDurableMaxBytes
)
