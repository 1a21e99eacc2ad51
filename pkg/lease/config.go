package lease

import (
	"fmt"
	"time"

	"github.com/rs/zerolog"

	"github.com/meshloc/meshloc/pkg/keyspace"
)

// Default values. Durations left at zero in a Config are derived from its TTL
// (see each field), so that changing only TTL keeps a valid configuration.
const (
	DefaultTTL = 5 * time.Second
	// MinMargin is the smallest derived Margin.
	MinMargin = 100 * time.Millisecond
	// MaxDefaultRequestTimeout caps the derived RequestTimeout.
	MaxDefaultRequestTimeout = 2 * time.Second
)

// Config of a Keeper. Zero durations mean "the default"; negative ones are
// invalid. Validate checks the relations between the fields after the defaults
// are applied.
type Config struct {
	// OwnerID is the node name (required; keyspace.ValidateOwnerID). The key is
	// owners/<OwnerID>.
	OwnerID string
	// TTL asked of etcd for the lease (default 5 s; at least 1 s; rounded up to
	// whole seconds, etcd's unit). etcd may grant more (its minimum is about
	// 2 s with default election settings): the keeper always computes with the
	// TTL etcd returned, which is never less than this one.
	TTL time.Duration
	// Margin is subtracted from the deadline (default TTL/5, at least 100 ms):
	// it covers the rate difference between this clock and etcd's, and the time
	// between the deadline timer firing and in-flight work noticing Ctx. It is
	// also the width of the Unusable window before the deadline (see Status).
	Margin time.Duration
	// KeepAliveInterval between keep-alive sends (default TTL/3). Must be
	// > 0 and <= TTL/3, and KeepAliveInterval + 2·Margin < TTL, so that in the
	// steady state each confirmation arrives while the lease is still Valid.
	KeepAliveInterval time.Duration
	// RequestTimeout bounds each etcd call (default min(TTL/3, 2 s)). Must be
	// < TTL − Margin − KeepAliveInterval: a keep-alive that hangs for the whole
	// timeout must still leave room for a retry before the deadline.
	RequestTimeout time.Duration
	// AcquireWait: if owners/<OwnerID> exists at Start (e.g. a crashed
	// predecessor whose lease has not expired yet), wait up to this long for it
	// to disappear before refusing with ErrDuplicateOwner. Default 0: refuse at
	// once. A restarted node typically sets it to a little more than the TTL.
	AcquireWait time.Duration
	// Descriptor is the initial value of the owner key. Its OwnerID is filled
	// in; if set it must equal OwnerID.
	Descriptor Descriptor
	// Clock is the time source (default RealClock()).
	Clock Clock
	// Logger receives one line per lifecycle event and rate-limited warnings
	// (default: the zero Logger, which discards, like zerolog.Nop()).
	Logger zerolog.Logger
}

// DefaultConfig is the configuration of design.md §10 (--lease-ttl 5s) without
// an OwnerID. The derived durations are left at zero; WithDefaults shows the
// values they take.
func DefaultConfig() Config {
	return Config{TTL: DefaultTTL, Clock: RealClock(), Logger: zerolog.Nop()}
}

// WithDefaults returns c with every zero field replaced by its default.
func (c Config) WithDefaults() Config {
	if c.TTL == 0 {
		c.TTL = DefaultTTL
	}
	if c.Margin == 0 {
		c.Margin = max(c.TTL/5, MinMargin)
	}
	if c.KeepAliveInterval == 0 {
		c.KeepAliveInterval = c.TTL / 3
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = min(c.TTL/3, MaxDefaultRequestTimeout)
	}
	if c.Clock == nil {
		c.Clock = RealClock()
	}
	return c
}

func invalid(field, format string, args ...any) error {
	return &ConfigError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// Validate checks c, with the defaults applied, field by field and then the
// relations between fields. The error is a *ConfigError (errors.Is
// ErrInvalidConfig) naming the first field at fault.
func (c Config) Validate() error {
	c = c.WithDefaults()
	if err := keyspace.ValidateOwnerID(c.OwnerID); err != nil {
		return invalid("OwnerID", "%v", err)
	}
	if c.Descriptor.OwnerID != "" && c.Descriptor.OwnerID != c.OwnerID {
		return invalid("Descriptor.OwnerID", "%q differs from OwnerID %q", c.Descriptor.OwnerID, c.OwnerID)
	}
	if c.TTL < time.Second {
		return invalid("TTL", "%s is less than 1s (etcd counts lease TTLs in seconds)", c.TTL)
	}
	if c.Margin <= 0 {
		return invalid("Margin", "%s must be > 0", c.Margin)
	}
	if c.KeepAliveInterval <= 0 || c.KeepAliveInterval > c.TTL/3 {
		return invalid("KeepAliveInterval", "%s must be > 0 and <= TTL/3 (%s)", c.KeepAliveInterval, c.TTL/3)
	}
	if c.KeepAliveInterval+2*c.Margin >= c.TTL {
		return invalid("Margin", "KeepAliveInterval %s + 2 × Margin %s must be < TTL %s (otherwise the lease is Unusable before the next keep-alive is even sent)",
			c.KeepAliveInterval, c.Margin, c.TTL)
	}
	if c.RequestTimeout <= 0 {
		return invalid("RequestTimeout", "%s must be > 0", c.RequestTimeout)
	}
	if slack := c.TTL - c.Margin - c.KeepAliveInterval; c.RequestTimeout >= slack {
		return invalid("RequestTimeout", "%s must be < TTL − Margin − KeepAliveInterval (%s), so that a retry fits before the deadline", c.RequestTimeout, slack)
	}
	if c.AcquireWait < 0 {
		return invalid("AcquireWait", "%s must be >= 0", c.AcquireWait)
	}
	return nil
}
