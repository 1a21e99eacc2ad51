package locationd

import (
	"errors"
	"flag"
	"slices"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/meshloc/meshloc/internal/cliutil"
	"github.com/meshloc/meshloc/internal/embedetcd"
)

func TestDefaultConfigValid(t *testing.T) {
	c := DefaultConfig()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if !c.Embedded() || c.HTTP != "127.0.0.1:7070" || c.ListenClient != "http://127.0.0.1:2379" ||
		c.ListenPeer != "http://127.0.0.1:2380" || c.DataDir != "./data/locationd" || c.Prefix != "/meshloc" || c.Cluster != "default" {
		t.Fatalf("defaults differ from docs/design.md §10: %+v", c)
	}
}

func TestValidate(t *testing.T) {
	for name, mutate := range map[string]func(*Config){
		"prefix without slash": func(c *Config) { c.Prefix = "meshloc" },
		"cluster with slash":   func(c *Config) { c.Cluster = "a/b" },
		"log level":            func(c *Config) { c.LogLevel = "loud" },
		"etcd log level":       func(c *Config) { c.EtcdLogLevel = "trace" },
		"http not host:port":   func(c *Config) { c.HTTP = "7070" },
		"zero request timeout": func(c *Config) { c.RequestTimeout = 0 },
		"negative shutdown":    func(c *Config) { c.ShutdownTimeout = -time.Second },
		"zero relocation":      func(c *Config) { c.RelocationTimeout = 0 },
		"huge relocation":      func(c *Config) { c.RelocationTimeout = time.Hour },
		"client not a URL":     func(c *Config) { c.ListenClient = "127.0.0.1:2379" },
		"peer not a URL":       func(c *Config) { c.ListenPeer = "" },
		"client = peer":        func(c *Config) { c.ListenPeer = c.ListenClient },
		"http = client":        func(c *Config) { c.HTTP = "127.0.0.1:2379" },
		"no data dir":          func(c *Config) { c.DataDir = "" },
		"endpoint not a URL":   func(c *Config) { c.EtcdEndpoints = []string{"10.0.0.1:2379"} },

		"tiny etcd quota":           func(c *Config) { c.EtcdQuotaBytes = 1 << 10 },
		"huge etcd quota":           func(c *Config) { c.EtcdQuotaBytes = 9 << 30 },
		"sub-second retention":      func(c *Config) { c.EtcdCompactionRetention = time.Millisecond },
		"negative retention":        func(c *Config) { c.EtcdCompactionRetention = -time.Minute },
		"retention of days":         func(c *Config) { c.EtcdCompactionRetention = 48 * time.Hour },
		"etcd quota with endpoints": func(c *Config) { c.EtcdEndpoints, c.EtcdQuotaBytes = []string{"http://10.0.0.1:2379"}, 1<<30 },
		"retention with endpoints": func(c *Config) {
			c.EtcdEndpoints, c.EtcdCompactionRetention = []string{"http://10.0.0.1:2379"}, time.Hour
		},

		"zero read timeout":             func(c *Config) { c.HTTPReadTimeout = 0 },
		"zero read header timeout":      func(c *Config) { c.HTTPReadHeaderTimeout = 0 },
		"header timeout above read":     func(c *Config) { c.HTTPReadHeaderTimeout = c.HTTPReadTimeout + time.Second },
		"write timeout = request":       func(c *Config) { c.HTTPWriteTimeout = c.RequestTimeout },
		"negative write timeout":        func(c *Config) { c.HTTPWriteTimeout = -time.Second },
		"zero idle timeout":             func(c *Config) { c.HTTPIdleTimeout = 0 },
		"tiny max header bytes":         func(c *Config) { c.HTTPMaxHeaderBytes = 100 },
		"huge max header bytes":         func(c *Config) { c.HTTPMaxHeaderBytes = 2 << 20 },
		"zero max connections":          func(c *Config) { c.HTTPMaxConnections = 0 },
		"too many max connections":      func(c *Config) { c.HTTPMaxConnections = 1<<20 + 1 },
		"request timeout above write's": func(c *Config) { c.RequestTimeout = time.Minute },

		"plaintext API on every interface":  func(c *Config) { c.HTTP = "0.0.0.0:7070" },
		"plaintext etcd on every interface": func(c *Config) { c.ListenClient = "http://0.0.0.0:2379" },
		"a certificate without its key":     func(c *Config) { c.CertFile, c.TrustedCAFile = "l1.crt", "ca.crt" },
		"TLS with an http:// client URL": func(c *Config) {
			c.CertFile, c.KeyFile, c.TrustedCAFile, c.EtcdCert, c.EtcdKey = "l1.crt", "l1.key", "ca.crt", "e.crt", "e.key"
		},
		"TLS without an etcd identity": func(c *Config) {
			c.CertFile, c.KeyFile, c.TrustedCAFile, c.ListenClient = "l1.crt", "l1.key", "ca.crt", "https://127.0.0.1:2379"
		},
		"setup-auth with the embedded etcd": func(c *Config) { c.EtcdSetupAuth = true },
		"peer TLS with endpoints": func(c *Config) {
			c.EtcdEndpoints = []string{"http://10.0.0.1:2379"}
			c.PeerCertFile, c.PeerKeyFile, c.PeerTrustedCAFile = "p.crt", "p.key", "ca.crt"
		},
	} {
		c := DefaultConfig()
		mutate(&c)
		if err := c.Validate(); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s: Validate = %v, want ErrInvalidConfig", name, err)
		}
	}
	// Secured, or --insecure, a non-loopback API is fine.
	for name, mutate := range map[string]func(*Config){
		"secured": func(c *Config) {
			c.HTTP, c.ListenClient = "0.0.0.0:7070", "https://0.0.0.0:2379"
			c.CertFile, c.KeyFile, c.TrustedCAFile, c.EtcdCert, c.EtcdKey = "l1.crt", "l1.key", "ca.crt", "e.crt", "e.key"
		},
		"insecure": func(c *Config) { c.HTTP, c.Insecure = "0.0.0.0:7070", true },
	} {
		c := DefaultConfig()
		mutate(&c)
		if err := c.Validate(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	// With endpoints, the embedded etcd's fields are not used, so not checked.
	c := DefaultConfig()
	c.EtcdEndpoints = []string{"http://10.0.0.1:2379", "https://10.0.0.2:2379"}
	c.DataDir, c.ListenPeer = "", ""
	if err := c.Validate(); err != nil || c.Embedded() {
		t.Errorf("endpoints: %v", err)
	}
}

// Precedence: flag, then LOCATIOND_<FLAG>, then default.
func TestFlagsAndEnv(t *testing.T) {
	c := DefaultConfig()
	gofs := flag.NewFlagSet("locationd", flag.ContinueOnError)
	c.AddFlags(gofs)
	fs := pflag.NewFlagSet("locationd", pflag.ContinueOnError)
	fs.AddGoFlagSet(gofs)
	if err := fs.Parse([]string{"--http", "127.0.0.1:9999", "--cluster=blue"}); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{
		"LOCATIOND_DATA_DIR":        "/var/lib/locationd",
		"LOCATIOND_HTTP":            "127.0.0.1:1", // the flag wins
		"LOCATIOND_ETCD_ENDPOINTS":  "http://a:2379, http://b:2379",
		"LOCATIOND_REQUEST_TIMEOUT": "2s",

		"LOCATIOND_HTTP_READ_HEADER_TIMEOUT": "1s",
		"LOCATIOND_HTTP_READ_TIMEOUT":        "3s",
		"LOCATIOND_HTTP_WRITE_TIMEOUT":       "4s",
		"LOCATIOND_HTTP_IDLE_TIMEOUT":        "5s",
		"LOCATIOND_HTTP_MAX_HEADER_BYTES":    "8192",
		"LOCATIOND_HTTP_MAX_CONNECTIONS":     "16",

		"LOCATIOND_ETCD_QUOTA_BYTES":          "268435456",
		"LOCATIOND_ETCD_COMPACTION_RETENTION": "5m",
		"LOCATIOND_ETCD_DEFRAG":               "false",
	}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	if err := cliutil.ApplyEnv(fs, EnvPrefix, lookup); err != nil {
		t.Fatal(err)
	}
	if c.HTTP != "127.0.0.1:9999" || c.Cluster != "blue" || c.DataDir != "/var/lib/locationd" ||
		!slices.Equal(c.EtcdEndpoints, []string{"http://a:2379", "http://b:2379"}) || c.RequestTimeout != 2*time.Second ||
		c.Prefix != "/meshloc" {
		t.Fatalf("config = %+v", c)
	}
	if c.HTTPReadHeaderTimeout != time.Second || c.HTTPReadTimeout != 3*time.Second || c.HTTPWriteTimeout != 4*time.Second ||
		c.HTTPIdleTimeout != 5*time.Second || c.HTTPMaxHeaderBytes != 8192 || c.HTTPMaxConnections != 16 {
		t.Fatalf("HTTP server config = %+v", c)
	}
	if c.EtcdQuotaBytes != 256<<20 || c.EtcdCompactionRetention != 5*time.Minute || c.EtcdDefrag {
		t.Fatalf("etcd size config = %d %s %v", c.EtcdQuotaBytes, c.EtcdCompactionRetention, c.EtcdDefrag)
	}
	c.EtcdQuotaBytes, c.EtcdCompactionRetention, c.EtcdDefrag = embedetcd.DefaultQuotaBytes, embedetcd.DefaultRetention, true // with the endpoints above
	if err := c.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	env["LOCATIOND_SHUTDOWN_TIMEOUT"] = "soon"
	if err := cliutil.ApplyEnv(fs, EnvPrefix, lookup); err == nil {
		t.Fatal("a bad environment value was accepted")
	}
}
