package locationd

import (
	"errors"
	"flag"
	"testing"

	"github.com/rs/zerolog"
	"github.com/spf13/pflag"

	"github.com/meshloc/meshloc/internal/cliutil"
)

const threeMembers = "m1=http://127.0.0.1:12380,m2=http://127.0.0.1:22380,m3=http://127.0.0.1:32380"

// member2 is the config of m2 in threeMembers.
func member2() Config {
	c := DefaultConfig()
	c.MemberName = "m2"
	c.ListenClient = "http://127.0.0.1:22379"
	c.ListenPeer = "http://127.0.0.1:22380"
	c.InitialCluster = threeMembers
	return c
}

func TestClusterConfigValid(t *testing.T) {
	c := DefaultConfig()
	if c.MemberName != "default" || c.InitialCluster != "" || c.InitialClusterState != "new" || c.InitialClusterToken != "meshloc" {
		t.Fatalf("cluster defaults: %+v", c)
	}
	if ic, err := c.EtcdInitialCluster(); err != nil || ic != "default=http://127.0.0.1:2380" {
		t.Fatalf("single member: %q, %v", ic, err)
	}

	c = member2()
	c.InitialCluster = " m1=http://127.0.0.1:12380, m2=http://127.0.0.1:22380/ ,m3=https://127.0.0.1:32380"
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if ic, _ := c.EtcdInitialCluster(); ic != "m1=http://127.0.0.1:12380,m2=http://127.0.0.1:22380,m3=https://127.0.0.1:32380" {
		t.Fatalf("initial cluster not normalised: %q", ic)
	}
	c.InitialClusterState = "existing"
	c.InitialClusterToken = "blue"
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}

	// With endpoints, the cluster flags at their defaults (or unset) are fine.
	c = DefaultConfig()
	c.EtcdEndpoints = []string{"http://10.0.0.1:2379"}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	c.MemberName, c.InitialClusterState, c.InitialClusterToken = "", "", ""
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestClusterConfigInvalid(t *testing.T) {
	for name, tc := range map[string]struct {
		mutate func(*Config)
		flag   string
	}{
		"url without scheme":      {func(c *Config) { c.InitialCluster = "m1=127.0.0.1:12380,m2=http://127.0.0.1:22380" }, "--initial-cluster"},
		"url of another scheme":   {func(c *Config) { c.InitialCluster = "m1=ftp://127.0.0.1:12380,m2=http://127.0.0.1:22380" }, "--initial-cluster"},
		"url with a path":         {func(c *Config) { c.InitialCluster = "m1=http://127.0.0.1:12380/x,m2=http://127.0.0.1:22380" }, "--initial-cluster"},
		"element without url":     {func(c *Config) { c.InitialCluster = "m1,m2=http://127.0.0.1:22380" }, "--initial-cluster"},
		"element without name":    {func(c *Config) { c.InitialCluster = "=http://127.0.0.1:12380,m2=http://127.0.0.1:22380" }, "--initial-cluster"},
		"empty element":           {func(c *Config) { c.InitialCluster = "m2=http://127.0.0.1:22380,," }, "--initial-cluster"},
		"url given twice":         {func(c *Config) { c.InitialCluster = "m1=http://127.0.0.1:22380,m2=http://127.0.0.1:22380" }, "--initial-cluster"},
		"member url not the peer": {func(c *Config) { c.ListenPeer = "http://127.0.0.1:22381" }, "--initial-cluster"},
		"member with two urls":    {func(c *Config) { c.InitialCluster += ",m2=http://127.0.0.1:22381" }, "--initial-cluster"},
		"name not a member":       {func(c *Config) { c.MemberName = "m4" }, "--name"},
		"default name not member": {func(c *Config) { c.MemberName = DefaultMemberName }, "--name"},
		"empty name":              {func(c *Config) { c.MemberName = "" }, "--name"},
		"name with a comma":       {func(c *Config) { c.MemberName = "m2,m3" }, "--name"},
		"state":                   {func(c *Config) { c.InitialClusterState = "old" }, "--initial-cluster-state"},
		"state empty":             {func(c *Config) { c.InitialClusterState = "" }, "--initial-cluster-state"},
		"existing, no cluster":    {func(c *Config) { c.InitialCluster, c.InitialClusterState = "", "existing" }, "--initial-cluster-state"},
		"empty token":             {func(c *Config) { c.InitialClusterToken = "" }, "--initial-cluster-token"},

		// With --etcd-endpoints there is no embedded etcd to configure.
		"endpoints and name":    {func(c *Config) { c.EtcdEndpoints = []string{"http://a:2379"} }, "--name"},
		"endpoints and cluster": {func(c *Config) { c.EtcdEndpoints, c.MemberName = []string{"http://a:2379"}, "" }, "--initial-cluster"},
		"endpoints and state": {func(c *Config) {
			c.EtcdEndpoints, c.MemberName, c.InitialCluster, c.InitialClusterState = []string{"http://a:2379"}, "", "", "existing"
		}, "--initial-cluster-state"},
		"endpoints and token": {func(c *Config) {
			c.EtcdEndpoints, c.MemberName, c.InitialCluster, c.InitialClusterToken = []string{"http://a:2379"}, "", "", "blue"
		}, "--initial-cluster-token"},
	} {
		c := member2()
		tc.mutate(&c)
		err := c.Validate()
		var fe *FlagError
		if !errors.Is(err, ErrInvalidConfig) || !errors.As(err, &fe) || fe.Flag != tc.flag {
			t.Errorf("%s: Validate = %v, want a *FlagError for %s", name, err, tc.flag)
			continue
		}
		// Nothing is started: New refuses the config.
		if _, nerr := New(c, zerolog.Nop()); !errors.As(nerr, &fe) {
			t.Errorf("%s: New = %v, want the *FlagError", name, nerr)
		}
	}
}

func TestClusterFlagsAndEnv(t *testing.T) {
	c := DefaultConfig()
	gofs := flag.NewFlagSet("locationd", flag.ContinueOnError)
	c.AddFlags(gofs)
	fs := pflag.NewFlagSet("locationd", pflag.ContinueOnError)
	fs.AddGoFlagSet(gofs)
	if err := fs.Parse([]string{"--name", "m2", "--initial-cluster-state=existing", "--listen-peer", "http://127.0.0.1:22380"}); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{
		"LOCATIOND_INITIAL_CLUSTER":       threeMembers,
		"LOCATIOND_INITIAL_CLUSTER_TOKEN": "blue",
		"LOCATIOND_NAME":                  "m1", // the flag wins
	}
	if err := cliutil.ApplyEnv(fs, EnvPrefix, func(k string) (string, bool) { v, ok := env[k]; return v, ok }); err != nil {
		t.Fatal(err)
	}
	if c.MemberName != "m2" || c.InitialCluster != threeMembers || c.InitialClusterState != "existing" || c.InitialClusterToken != "blue" {
		t.Fatalf("config = %+v", c)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
}
