package config_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/meshloc/meshloc/pkg/node/config"
)

func TestConfigLeaseMargin(t *testing.T) {
	for _, c := range []struct {
		ttl, margin time.Duration
		bad         string
	}{
		{5 * time.Second, 0, ""},
		{5 * time.Second, 200 * time.Millisecond, ""},
		{5 * time.Second, -time.Millisecond, "--lease-margin"},
		{5 * time.Second, 2 * time.Second, "--lease-ttl/--lease-margin"},
	} {
		cfg := config.Default()
		cfg.Name, cfg.EtcdEndpoints, cfg.Listen = "n1", []string{"http://127.0.0.1:2379"}, "127.0.0.1:7100"
		cfg.LeaseTTL, cfg.LeaseMargin = c.ttl, c.margin
		err := cfg.Validate()
		switch {
		case c.bad == "" && err != nil:
			t.Errorf("ttl %v margin %v: %v", c.ttl, c.margin, err)
		case c.bad != "" && (!errors.Is(err, config.ErrInvalidConfig) || !strings.Contains(err.Error(), c.bad)):
			t.Errorf("ttl %v margin %v: %v, want ErrInvalidConfig naming %s", c.ttl, c.margin, err, c.bad)
		}
	}
}

// --advertise-http defaults to --http.
func TestConfigAdvertiseHTTP(t *testing.T) {
	cfg := config.Default()
	cfg.Name, cfg.EtcdEndpoints, cfg.Listen, cfg.HTTP = "n1", []string{"http://127.0.0.1:2379"}, "127.0.0.1:7100", "0.0.0.0:7101"
	if err := cfg.Validate(); err != nil || cfg.AdvertiseHTTP != "0.0.0.0:7101" {
		t.Fatalf("%v, advertise-http %q", err, cfg.AdvertiseHTTP)
	}
}

// Transport security: the TLS files go together; without them a node
// refuses a non-loopback --listen unless --insecure; etcd's flags go
// together.
func TestConfigTLS(t *testing.T) {
	for _, c := range []struct {
		name string
		f    func(*config.Config)
		bad  string
	}{
		{"loopback plaintext", func(*config.Config) {}, ""},
		{"all interfaces plaintext", func(c *config.Config) { c.Listen = "0.0.0.0:7100" }, "--listen"},
		{"empty host plaintext", func(c *config.Config) { c.Listen = ":7100" }, "--listen"},
		{"all interfaces --insecure", func(c *config.Config) { c.Listen, c.Insecure = "0.0.0.0:7100", true }, ""},
		{"all interfaces with TLS", func(c *config.Config) {
			c.Listen, c.CertFile, c.KeyFile, c.TrustedCAFile = "0.0.0.0:7100", "n1.crt", "n1.key", "ca.crt"
		}, ""},
		{"a certificate without its key", func(c *config.Config) { c.CertFile, c.TrustedCAFile = "n1.crt", "ca.crt" }, "--cert-file"},
		{"etcd cert without key", func(c *config.Config) { c.EtcdCert, c.EtcdCACert = "e.crt", "ca.crt" }, "--etcd-"},
		{"etcd user without password", func(c *config.Config) { c.EtcdUser = "u" }, "--etcd-"},
		{"etcd CA with a plaintext endpoint", func(c *config.Config) { c.EtcdCACert = "ca.crt" }, "--etcd-"},
	} {
		cfg := config.Default()
		cfg.Name, cfg.EtcdEndpoints = "n1", []string{"http://127.0.0.1:2379"}
		c.f(&cfg)
		err := cfg.Validate()
		switch {
		case c.bad == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.bad != "" && (!errors.Is(err, config.ErrInvalidConfig) || !strings.Contains(err.Error(), c.bad)):
			t.Errorf("%s: %v, want ErrInvalidConfig naming %s", c.name, err, c.bad)
		}
	}
}
