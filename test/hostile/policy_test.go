package hostile_test

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshloc/meshloc/internal/chaos"
	"github.com/meshloc/meshloc/internal/freeport"
	"github.com/meshloc/meshloc/pkg/mtls"
)

// A secured cluster refuses a node started without its TLS flags, even
// with a valid etcd certificate: the cluster's security policy (etcd key
// security, written by locationd when it serves TLS) says every process
// serves mutual TLS, so the node exits at once with that reason and never
// registers (no owner key, nothing served to callers without a
// certificate).
func TestPlaintextNodeRefusedInSecuredCluster(t *testing.T) {
	c := cluster(t, 1, chaos.Config{TLS: true})
	before := etcdState(t, c, "owners/")
	e := c.EtcdAccess(mtls.EtcdNodeFile("n1"))
	var ports []string
	for range 2 {
		a, err := freeport.Addr()
		if err != nil {
			t.Fatal(err)
		}
		ports = append(ports, a)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "meshnode"), "--name", "n1",
		"--etcd-endpoints", strings.Join(c.EtcdEndpoints(), ","), "--etcd-cacert", e.CACert, "--etcd-cert", e.Cert, "--etcd-key", e.Key,
		"--listen", ports[0], "--http", ports[1])
	out, err := cmd.CombinedOutput()
	if err == nil || ctx.Err() != nil {
		t.Fatalf("a plaintext node in a secured cluster: %v (context %v)\n%s", err, ctx.Err(), out)
	}
	if !strings.Contains(string(out), "security policy") || !strings.Contains(string(out), "--cert-file") {
		t.Fatalf("the refusal does not say why:\n%s", out)
	}
	t.Logf("refused: %v", lastLine(string(out)))
	if after := etcdState(t, c, "owners/"); !equalState(before, after) {
		t.Fatalf("owner keys changed: %v", diffState(before, after))
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
