package lease

import (
	"errors"
	"testing"
	"time"
)

func TestConfigValidate(t *testing.T) {
	base := func(mut func(*Config)) Config {
		c := DefaultConfig()
		c.OwnerID = "n1"
		if mut != nil {
			mut(&c)
		}
		return c
	}
	s := time.Second
	for _, tc := range []struct {
		name  string
		cfg   Config
		field string // "" = valid
	}{
		{"defaults", base(nil), ""},
		{"only TTL changed: derived fields follow", base(func(c *Config) { c.TTL = 2 * s }), ""},
		{"zero config except owner", Config{OwnerID: "n1"}, ""},
		{"explicit valid relations", base(func(c *Config) {
			c.TTL, c.Margin, c.KeepAliveInterval, c.RequestTimeout, c.AcquireWait = 9*s, s, 3*s, 2*s, 10*s
		}), ""},
		{"missing owner id", base(func(c *Config) { c.OwnerID = "" }), "OwnerID"},
		{"owner id with a slash", base(func(c *Config) { c.OwnerID = "a/b" }), "OwnerID"},
		{"descriptor of another owner", base(func(c *Config) { c.Descriptor.OwnerID = "n2" }), "Descriptor.OwnerID"},
		{"TTL below one second", base(func(c *Config) { c.TTL = 500 * time.Millisecond }), "TTL"},
		{"negative TTL", base(func(c *Config) { c.TTL = -s }), "TTL"},
		{"negative margin", base(func(c *Config) { c.Margin = -s }), "Margin"},
		{"negative interval", base(func(c *Config) { c.KeepAliveInterval = -s }), "KeepAliveInterval"},
		{"interval above TTL/3", base(func(c *Config) { c.KeepAliveInterval = 2 * s }), "KeepAliveInterval"},
		{"interval exactly TTL/3 is fine", base(func(c *Config) { c.TTL, c.KeepAliveInterval = 6*s, 2*s }), ""},
		{"margin eats the TTL: interval + margin ≥ TTL", base(func(c *Config) { c.Margin = 4 * s }), "Margin"},
		{"margin leaves no valid window: interval + 2·margin ≥ TTL", base(func(c *Config) {
			c.KeepAliveInterval, c.Margin = s, 2*s
		}), "Margin"},
		{"negative request timeout", base(func(c *Config) { c.RequestTimeout = -s }), "RequestTimeout"},
		{"request timeout leaves no room for a retry", base(func(c *Config) {
			c.KeepAliveInterval, c.Margin, c.RequestTimeout = s, s, 3*s
		}), "RequestTimeout"},
		{"negative acquire wait", base(func(c *Config) { c.AcquireWait = -s }), "AcquireWait"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if tc.field == "" {
				if err != nil {
					t.Fatalf("Validate: %v, want nil", err)
				}
				return
			}
			var ce *ConfigError
			if !errors.Is(err, ErrInvalidConfig) || !errors.As(err, &ce) {
				t.Fatalf("Validate: %v, want a *ConfigError wrapping ErrInvalidConfig", err)
			}
			if ce.Field != tc.field {
				t.Fatalf("Validate blamed %s (%v), want %s", ce.Field, err, tc.field)
			}
		})
	}
}

func TestConfigWithDefaults(t *testing.T) {
	c := Config{OwnerID: "n1"}.WithDefaults()
	if c.TTL != 5*time.Second || c.Margin != time.Second || c.KeepAliveInterval != 5*time.Second/3 ||
		c.RequestTimeout != 5*time.Second/3 || c.Clock == nil {
		t.Fatalf("defaults: %+v", c)
	}
	if c := (Config{TTL: 30 * time.Second}).WithDefaults(); c.RequestTimeout != 2*time.Second {
		t.Fatalf("RequestTimeout for TTL 30s: %s, want the 2s cap", c.RequestTimeout)
	}
}
